"""A served engine (`sampling.server`) against the stand-in that speaks vLLM's and SGLang's HTTP
APIs over a tiny local model: its samples carry the log-probs the trainer's forward gives, new
weights reach it after an optimizer step, and every way a server can fail or lie stops with a
clear error, never a traceback or a silently wrong rollout."""

from __future__ import annotations

import time
from pathlib import Path
from types import SimpleNamespace

import pytest
import torch

from rlvr_cli.engine.engines import PolicyEngine
from rlvr_cli.engine.forward import make_batch, token_logprobs
from rlvr_cli.engine.types import EngineFailed, SamplingParams
from tests.engine.standin import Running, StandIn

PARAMS = SamplingParams(10, 1.0, 1.0, 0, (3,), 0)
PROMPTS = [[5, 6, 7, 8], [5, 6, 7, 8], [9, 10, 11], [12, 13]]


def _server(url: str, model: str, **settings) -> SimpleNamespace:  # type: ignore[no-untyped-def]
    base = {"url": url, "model": model, "weights_dir": None, "timeout_s": 20.0, "concurrency": 16, "retries": 0}
    return SimpleNamespace(**(base | settings))


@pytest.fixture(scope="module")
def folder(tmp_path_factory: pytest.TempPathFactory) -> Path:
    from rlvr_cli.toy.tiny import ARITHMETIC, build_tiny

    return build_tiny(tmp_path_factory.mktemp("served") / "model", "chatml", alphabet=ARITHMETIC, hidden=32)


@pytest.fixture
def policy(folder: Path):  # type: ignore[no-untyped-def]
    from transformers import AutoModelForCausalLM

    return AutoModelForCausalLM.from_pretrained(folder).eval().requires_grad_(False)


@pytest.fixture(params=["vllm", "sglang"])
def served(request, folder: Path):  # type: ignore[no-untyped-def]
    name = "tiny-policy" if request.param == "vllm" else str(folder)
    running = Running(StandIn(folder, name, request.param))
    yield request.param, running, name
    running.stop()


def _engine(served, policy, tmp_path: Path, **settings) -> PolicyEngine:  # type: ignore[no-untyped-def]
    api, running, name = served
    return PolicyEngine.of(api, policy, server=_server(running.url, name, **settings), weights=tmp_path / "w")


def _trainer_logprobs(policy, prompts, gens) -> list[torch.Tensor]:  # type: ignore[no-untyped-def]
    batch = make_batch(prompts, [g.response_ids for g in gens], [g.mask for g in gens], 0)
    with torch.no_grad():
        logps, _ = token_logprobs(policy, batch, PARAMS.temperature)
    return [logps[row, : len(g.logprobs)] for row, g in enumerate(gens)]


def test_a_served_engine_samples_with_the_trainers_log_probs_and_stops(served, policy, tmp_path) -> None:  # type: ignore[no-untyped-def]
    engine = _engine(served, policy, tmp_path)
    gens = engine.sample(PROMPTS, PARAMS, seed=7, revision=0)
    assert len(gens) == len(PROMPTS)
    for g, trainer in zip(gens, _trainer_logprobs(policy, PROMPTS, gens), strict=True):
        assert 1 <= len(g.response_ids) <= PARAMS.max_new_tokens and len(g.logprobs) == len(g.response_ids)
        assert all(t not in PARAMS.stop_ids for t in g.response_ids[:-1])
        assert (g.finish == "stop") == (g.response_ids[-1] in PARAMS.stop_ids)
        assert torch.allclose(torch.tensor(g.logprobs), trainer, atol=1e-5)
    assert "server at http://127.0.0.1" in engine.describe() and "weights handed over by files" in engine.describe()


def test_the_weights_of_an_optimizer_step_reach_the_server(served, policy, tmp_path) -> None:  # type: ignore[no-untyped-def]
    engine = _engine(served, policy, tmp_path)
    engine.sync(policy, 0)
    with torch.no_grad():
        for p in policy.parameters():
            p.add_(torch.randn_like(p) * 0.05)  # an optimizer step
    engine.sync(policy, 1)
    gens = engine.sample(PROMPTS, PARAMS, seed=3, revision=1)
    for g, trainer in zip(gens, _trainer_logprobs(policy, PROMPTS, gens), strict=True):
        assert torch.allclose(torch.tensor(g.logprobs), trainer, atol=1e-5)  # the new weights sampled them
    standin = served[1].standin
    assert len(standin.loads) == 2 and Path(standin.loads[-1]).parent == (tmp_path / "w").resolve()
    assert [p.name for p in (tmp_path / "w").iterdir()] == [Path(standin.loads[-1]).name]  # the older folder went
    engine.sync(policy, 1)  # the same revision again: not handed over twice
    assert len(standin.loads) == 2
    assert engine.handover()["time_engine_weights_s"] > 0 and engine.handover()["time_engine_weights_s"] == 0


@pytest.mark.parametrize(
    ("fault", "said"),
    [
        ("http_500", "answered HTTP 500"),
        ("unavailable", "answered HTTP 503, 2 attempts (server.retries)"),
        ("short_logprobs", "tokens with"),
        ("extra_tokens", "were asked for"),
        ("past_stop", "past the stop token 3"),
        ("bad_token", "outside the policy's"),
        ("not_json", "not JSON"),
    ],
)
def test_a_server_that_fails_or_lies_stops_sampling_with_what_it_said(  # type: ignore[no-untyped-def]
    served, policy, tmp_path, fault: str, said: str
) -> None:
    api, running, _ = served
    engine = _engine(served, policy, tmp_path, retries=1)
    engine.sync(policy, 0)
    running.standin.fault = fault
    with pytest.raises(EngineFailed) as caught:
        engine.sample(PROMPTS, PARAMS, seed=1, revision=0)
    assert said in str(caught.value) and f"the {api} server at {running.url}" in str(caught.value)


def test_a_server_answering_for_another_model_is_refused(served, policy, tmp_path) -> None:  # type: ignore[no-untyped-def]
    api, running, _ = served
    engine = _engine(served, policy, tmp_path)
    engine.sync(policy, 0)
    if api == "vllm":  # each completion names its model
        running.standin.fault = "wrong_model"
        with pytest.raises(EngineFailed, match="answered as model 'another-model', not tiny-policy"):
            engine.sample(PROMPTS, PARAMS, seed=1, revision=0)
    else:  # SGLang names the weights it holds: another model's are refused when the engine connects
        running.standin.path = "/models/another"
        with pytest.raises(EngineFailed, match=r"serves /models/another, not .*model \(server.model\)"):
            _engine(served, policy, tmp_path / "again")


def test_a_server_that_hangs_stops_after_its_timeout(served, policy, tmp_path) -> None:  # type: ignore[no-untyped-def]
    engine = _engine(served, policy, tmp_path, timeout_s=1.0)
    engine.sync(policy, 0)
    served[1].standin.fault = "hang"
    started = time.monotonic()
    with pytest.raises(EngineFailed, match=r"did not answer within 1 s \(server.timeout_s\)"):
        engine.sample(PROMPTS[:1], PARAMS, seed=1, revision=0)
    assert time.monotonic() - started < 10


def test_a_server_that_refuses_the_weights_stops_the_handover(served, policy, tmp_path) -> None:  # type: ignore[no-untyped-def]
    engine = _engine(served, policy, tmp_path)
    served[1].standin.fault = "load_fails"
    with pytest.raises(EngineFailed, match="shapes do not match"):
        engine.sync(policy, 0)
    assert list((tmp_path / "w").iterdir()) == []  # the folder it refused is not left behind


def test_no_server_or_another_model_is_refused_before_the_first_request(folder, policy, tmp_path) -> None:  # type: ignore[no-untyped-def]
    import socket

    with socket.socket() as sock:  # a port nothing listens on
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    with pytest.raises(EngineFailed, match=r"could not be reached \(ConnectError.*3 attempts \(server.retries\)"):
        PolicyEngine.of("vllm", policy, server=_server(f"http://127.0.0.1:{port}", "tiny", retries=2))
    running = Running(StandIn(folder, "tiny-policy", "vllm", dev_mode=False))
    try:
        with pytest.raises(EngineFailed, match=r"serves tiny-policy, not Qwen/Qwen2\.5-0\.5B"):
            PolicyEngine.of("vllm", policy, server=_server(running.url, "Qwen/Qwen2.5-0.5B"))
        engine = PolicyEngine.of("vllm", policy, server=_server(running.url, "tiny-policy"), weights=tmp_path / "w")
        with pytest.raises(EngineFailed, match="VLLM_SERVER_DEV_MODE=1"):  # no route to hand it the weights
            engine.sync(policy, 0)
    finally:
        running.stop()


def _diagnostics(tmp_path: Path, sampling: dict, ahead: bool = False, ratio: bool = True, lag: int = 2) -> list[tuple]:
    import yaml

    from rlvr_cli.contract.load import check_file
    from tests.conftest import EXAMPLES

    data = yaml.safe_load((EXAMPLES / "coverage" / "every-key.rlvr.yaml").read_text())
    data["hyperparameters"]["sampling"] = {"temperature": 1.0, "top_p": 1.0, "top_k": 0, **sampling}
    data["hyperparameters"]["sample_ahead"] = ahead
    data["hyperparameters"]["parallel"] = {"strategy": "ddp"}
    data["hyperparameters"]["max_policy_lag"] = lag  # updates_per_batch: 2, so lag 2 leaves one step ahead
    data["objective"].pop("correction", None)
    data["objective"]["ratio"] = {"level": "token", "denominator": "engine"} if ratio else None
    if not ratio:
        data["objective"].pop("ratio")
    path = tmp_path / "c.rlvr.yaml"
    path.write_text(yaml.safe_dump(data, sort_keys=False))
    return [(d.code, d.path, d.message) for d in check_file(path).diagnostics if d.severity == "error"]


SERVER = {"url": "http://127.0.0.1:8000", "model": "policy"}


def test_the_serving_keys_are_refused_where_they_would_change_nothing(tmp_path: Path) -> None:
    assert _diagnostics(tmp_path, {"engine": "vllm", "server": SERVER}) == []
    assert _diagnostics(tmp_path, {"engine": "sglang", "server": SERVER}) == []
    [(code, path, message)] = _diagnostics(tmp_path, {"engine": "lean", "server": SERVER})
    assert (code, path) == ("RLV003", "hyperparameters.sampling.server") and "would never be asked" in message
    [(code, path, message)] = _diagnostics(tmp_path, {"engine": "sglang"})
    assert (code, path) == ("RLV003", "hyperparameters.sampling") and "missing required key 'server'" in message
    assert _diagnostics(tmp_path, {"engine": "vllm", "server": SERVER}, ahead=True) == []  # one step ahead
    [(code, path, message)] = _diagnostics(tmp_path, {"engine": "vllm", "server": SERVER}, ahead=True, lag=3)
    assert (code, path) == ("RLV010", "hyperparameters.max_policy_lag") and "one step ahead at most" in message
    assert "lower max_policy_lag to 2" in message
    [(code, path, message)] = _diagnostics(tmp_path, {"engine": "sglang", "server": SERVER}, ratio=False)
    assert (code, path) == ("RLV003", "objective") and "required when sampling.engine is sglang" in message
    [(code, path, _)] = _diagnostics(tmp_path, {"engine": "vllm", "server": {**SERVER, "url": "127.0.0.1:8000"}})
    assert (code, path) == ("RLV003", "hyperparameters.sampling.server.url")  # (a value out of range)
