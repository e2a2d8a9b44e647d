"""vLLM as the rollout engine, where a GPU and the `vllm` extra are present: its samples
carry the log-probs the trainer's forward gives, stop where the contract says, and take new
weights in memory. Elsewhere these tests are reported as not run, with the reason."""

from __future__ import annotations

import importlib.util

import pytest
import torch

from rlvr_cli.engine.forward import make_batch, token_logprobs
from rlvr_cli.engine.types import SamplingParams

NO_GPU = not torch.cuda.is_available()
NO_VLLM = importlib.util.find_spec("vllm") is None
pytestmark = [
    pytest.mark.skipif(NO_GPU, reason="needs a CUDA GPU (vLLM samples on one)"),
    pytest.mark.skipif(NO_VLLM, reason="needs the vllm extra: pip install 'rlvr-cli[vllm]'"),
]


@pytest.fixture(scope="module")
def policy(tmp_path_factory: pytest.TempPathFactory):  # type: ignore[no-untyped-def]
    from transformers import AutoModelForCausalLM

    from rlvr_cli.toy.tiny import ARITHMETIC, build_tiny

    folder = tmp_path_factory.mktemp("vllm") / "model"
    build_tiny(folder, "chatml", alphabet=ARITHMETIC, hidden=128, layers=2)
    return AutoModelForCausalLM.from_pretrained(folder, torch_dtype=torch.float32).cuda().eval()


@pytest.fixture(scope="module")
def engine(policy):  # type: ignore[no-untyped-def]
    """One engine for the module, as a run holds one (starting vLLM takes seconds)."""
    from rlvr_cli.engine.vllm_engine import VllmEngine

    return VllmEngine(policy)


def test_vllm_samples_with_the_trainers_log_probs_and_stops(policy, engine) -> None:  # type: ignore[no-untyped-def]
    prompts = [[5, 6, 7, 8], [9, 10, 11]]
    params = SamplingParams(12, 0.8, 1.0, 0, (3,), 0)
    out = engine.sample(prompts, params, seed=1)
    assert len(out) == 2 and all(g.finish in ("stop", "length") for g in out)
    for g in out:
        assert all(t not in params.stop_ids for t in g.response_ids[:-1])
    batch = make_batch(prompts, [g.response_ids for g in out], [g.mask for g in out], 0).to(torch.device("cuda"))
    with torch.no_grad():
        trained, _ = token_logprobs(policy, batch, 0.8)
    for row, g in enumerate(out):
        assert torch.allclose(torch.tensor(g.logprobs), trained[row, : len(g.logprobs)].cpu(), atol=1e-2)


def test_vllm_takes_new_weights_in_memory(policy, engine) -> None:  # type: ignore[no-untyped-def]
    params = SamplingParams(8, 0.0, 1.0, 0, (3,), 0)
    before = engine.sample([[5, 6, 7]], params, seed=0)[0].response_ids
    with torch.no_grad():
        policy.lm_head.weight.mul_(-1.0)  # a different greedy answer
    engine.load_weights(policy)
    after = engine.sample([[5, 6, 7]], params, seed=0)[0].response_ids
    with torch.no_grad():
        policy.lm_head.weight.mul_(-1.0)
    assert before != after


@pytest.fixture(scope="module")
def vllm_server(policy):  # type: ignore[no-untyped-def]
    """`vllm serve` on the policy's folder, as docs/scale.md says to start it."""
    import os
    import socket
    import subprocess
    import sys
    import time

    import httpx

    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    env = {**os.environ, "VLLM_SERVER_DEV_MODE": "1"}
    command = [sys.executable, "-m", "vllm.entrypoints.openai.api_server", "--model", policy.name_or_path]
    command += ["--served-model-name", "tiny", "--port", str(port), "--logprobs-mode", "processed_logprobs"]
    command += ["--enforce-eager", "--gpu-memory-utilization", "0.3", "--dtype", "float32"]
    proc = subprocess.Popen(command, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    deadline = time.monotonic() + 300
    while True:
        try:
            httpx.get(f"http://127.0.0.1:{port}/v1/models", timeout=2).raise_for_status()
            break
        except httpx.HTTPError:
            if proc.poll() is not None or time.monotonic() > deadline:
                proc.kill()
                pytest.fail(f"vllm serve did not start: {proc.stderr.read()[-3000:]}")
            time.sleep(1)
    yield f"http://127.0.0.1:{port}"
    proc.terminate()
    proc.wait(timeout=60)


def test_vllm_serve_samples_with_the_trainers_log_probs_and_takes_each_steps_weights(  # type: ignore[no-untyped-def]
    policy, vllm_server, tmp_path
) -> None:
    from types import SimpleNamespace

    from rlvr_cli.engine.engines import PolicyEngine

    settings = {"url": vllm_server, "model": "tiny", "timeout_s": 120.0, "concurrency": 64, "retries": 2}
    engine = PolicyEngine.of("vllm", policy, server=SimpleNamespace(weights_dir=None, **settings), weights=tmp_path)
    engine.sync(policy, 0)
    prompts, params = [[5, 6, 7, 8], [5, 6, 7, 8], [9, 10, 11]], SamplingParams(12, 0.8, 1.0, 0, (3,), 0)
    out = engine.sample(prompts, params, seed=1, revision=0)
    batch = make_batch(prompts, [g.response_ids for g in out], [g.mask for g in out], 0).to(torch.device("cuda"))
    with torch.no_grad():
        trained, _ = token_logprobs(policy, batch, 0.8)
    for row, g in enumerate(out):
        assert torch.allclose(torch.tensor(g.logprobs), trained[row, : len(g.logprobs)].cpu(), atol=1e-2)
    greedy = SamplingParams(8, 0.0, 1.0, 0, (3,), 0)
    before = engine.sample([[5, 6, 7]], greedy, seed=0, revision=0)[0].response_ids
    with torch.no_grad():
        policy.lm_head.weight.mul_(-1.0)  # an optimizer step that changes the greedy answer
    engine.sync(policy, 1)
    after = engine.sample([[5, 6, 7]], greedy, seed=0, revision=1)[0].response_ids
    with torch.no_grad():
        policy.lm_head.weight.mul_(-1.0)
    engine.sync(policy, 2)
    assert before != after
