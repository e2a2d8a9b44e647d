"""The GPU paths of training at scale, for the day a GPU is present: reported as not run, with the
reason, on CPU machines. Their CPU counterparts (gloo, autocast on CPU, fp16 on CPU) are in
test_precision.py and test_distributed.py."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from tests.conftest import QUICK_STEPS, copy_experiment, rlvr

CONTRACT = "experiment.rlvr.yaml"
GPU = pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")
TWO_GPUS = pytest.mark.skipif(torch.cuda.device_count() < 2, reason="needs 2 CUDA GPUs (NCCL)")


def _weights(folder: Path) -> dict:
    from safetensors.torch import load_file

    return {k: v for f in sorted(folder.glob("*.safetensors")) for k, v in load_file(f).items()}


@GPU
@pytest.mark.slow
@pytest.mark.parametrize("precision", ["bf16", "fp16"])
def test_mixed_precision_on_a_gpu_resumes_exactly_with_its_cuda_rng(
    single_turn: Path, tmp_path: Path, precision: str
) -> None:
    edits = [*QUICK_STEPS, ("precision: fp32", f"precision: {precision}")]
    experiment = copy_experiment(single_turn, tmp_path / "exp", edits)
    run, straight = experiment / "run", experiment / "straight"
    assert rlvr("train", experiment / CONTRACT, "--run-dir", run, "--max-steps", "2", timeout=600).code == 0
    state = torch.load(run / "checkpoints" / "step-2" / "state.pt", weights_only=True)
    assert "cuda" in state["rng"]
    assert rlvr("train", experiment / CONTRACT, "--run-dir", run, "--max-steps", "3", "--resume", timeout=600).code == 0
    assert rlvr("train", experiment / CONTRACT, "--run-dir", straight, "--max-steps", "3", timeout=600).code == 0
    a, b = _weights(run / "final"), _weights(straight / "final")
    assert all(torch.equal(a[k], b[k]) for k in a)


def _torchrun(n: int, contract: Path, run: Path, *extra: str) -> None:
    command = [sys.executable, "-m", "torch.distributed.run", "--standalone", f"--nproc_per_node={n}"]
    command += ["-m", "rlvr_cli", "train", str(contract), "--run-dir", str(run), *extra]
    done = subprocess.run(command, capture_output=True, text=True, timeout=900)
    assert done.returncode == 0, done.stderr[-3000:]


@GPU
@pytest.mark.slow
def test_torchrun_on_one_gpu_trains_and_resumes_exactly(single_turn: Path, tmp_path: Path) -> None:
    """Under torchrun on a GPU, rlvr's counts over processes are CPU tensors (gloo) and the
    gradients and FSDP2's gathers CUDA ones (NCCL): a process group of NCCL alone refuses the first."""
    section = "  precision: bf16\n  parallel: {strategy: fsdp2}\n"
    edits = [("  precision: fp32\n", section), ("every_steps: 20", "every_steps: 2")]
    experiment = copy_experiment(single_turn, tmp_path / "exp", edits)
    _torchrun(1, experiment / CONTRACT, tmp_path / "straight", "--max-steps", "3")
    _torchrun(1, experiment / CONTRACT, tmp_path / "resumed", "--max-steps", "2")
    _torchrun(1, experiment / CONTRACT, tmp_path / "resumed", "--max-steps", "3", "--resume")
    a, b = _weights(tmp_path / "straight" / "final"), _weights(tmp_path / "resumed" / "final")
    assert a.keys() == b.keys() and all(torch.equal(a[k], b[k]) for k in a)


LORA = (
    "  adapter: {kind: lora, rank: 4, alpha: 8, dropout: 0.0, target_modules: all-linear, bias: none, init: default}\n"
)


@TWO_GPUS
@pytest.mark.slow
@pytest.mark.parametrize("adapter", ["", LORA], ids=["full", "lora"])
def test_fsdp2_on_two_gpus_trains_what_one_trains(single_turn: Path, tmp_path: Path, adapter: str) -> None:
    parallel = f"  precision: fp32\n  parallel: {{strategy: fsdp2}}\n{adapter}"
    experiment = copy_experiment(single_turn, tmp_path / "exp", [("  precision: fp32\n", parallel)])
    for n in (1, 2):
        _torchrun(n, experiment / CONTRACT, tmp_path / f"run-{n}", "--max-steps", "3")
    a, b = _weights(tmp_path / "run-1" / "final"), _weights(tmp_path / "run-2" / "final")
    for key in a:
        torch.testing.assert_close(a[key], b[key], atol=1e-4, rtol=1e-3)  # NCCL sums in another order


@TWO_GPUS
@pytest.mark.slow
def test_a_one_gpu_run_resumes_sharded_on_two_gpus(single_turn: Path, tmp_path: Path) -> None:
    """The main GPU sends each whole tensor of a ddp checkpoint over NCCL, and each GPU keeps its shard."""
    whole = copy_experiment(single_turn, tmp_path / "whole", [("every_steps: 20", "every_steps: 2")])
    parallel = "  precision: fp32\n  parallel: {strategy: fsdp2}\n"
    sharded = copy_experiment(whole, tmp_path / "sharded", [("  precision: fp32\n", parallel)])
    _torchrun(1, whole / CONTRACT, tmp_path / "straight", "--max-steps", "3")
    _torchrun(1, whole / CONTRACT, tmp_path / "moved", "--max-steps", "2")
    _torchrun(2, sharded / CONTRACT, tmp_path / "moved", "--max-steps", "3", "--resume")
    a, b = _weights(tmp_path / "straight" / "final"), _weights(tmp_path / "moved" / "final")
    for key in a:
        torch.testing.assert_close(a[key], b[key], atol=1e-4, rtol=1e-3)


@GPU
@pytest.mark.slow
def test_a_half_billion_parameter_policy_trains_a_few_steps_in_bf16(single_turn: Path, tmp_path: Path) -> None:
    from rlvr_cli.toy.tiny import ARITHMETIC, build_tiny

    experiment = copy_experiment(single_turn, tmp_path / "exp", [("precision: fp32", "precision: bf16")])
    config = json.loads((experiment / "model" / "config.json").read_text())
    build_tiny(experiment / "model", alphabet=ARITHMETIC, hidden=1536, layers=22, seed=1)  # ≈ 0.52 B parameters
    assert json.loads((experiment / "model" / "config.json").read_text())["vocab_size"] == config["vocab_size"]
    done = rlvr("train", experiment / CONTRACT, "--run-dir", experiment / "run", "--max-steps", "3", timeout=900)
    assert done.code == 0, done.stderr[-3000:]
    rows = [json.loads(line) for line in (experiment / "run" / "metrics.jsonl").read_text().splitlines()]
    assert len(rows) == 3 and all(r["nonfinite_count"] == 0 for r in rows)
    # CUDA's allocated peak: at least the fp32 weights, gradients and AdamW state (16 bytes a
    # parameter, ≈ 7.7 GiB), and never falling (the count is the process's, not restarted)
    peaks = [r["memory_peak_gib"] for r in rows]
    assert peaks[0] > 7 and peaks == sorted(peaks) and peaks[-1] < 78, peaks
    saved = sum(os.path.getsize(f) for f in (experiment / "run" / "final").glob("*.safetensors"))
    assert saved > 1.9e9  # ≈ 0.52 B fp32 master weights
    # mfu against the GPU's bf16 peak, calibrated and cached under the GPU's name (train/calibration.py)
    plan = json.loads((experiment / "run" / "plan.json").read_text())
    assert 50 < plan["peak_tflops"] < 5000, plan["peak_tflops"]  # a data-centre GPU's dense bf16
    assert all(0 < r["mfu"] < 1 for r in rows), [r["mfu"] for r in rows]
    cache = json.loads((Path(os.environ["RLVR_CACHE_DIR"]) / "peaks.json").read_text())
    assert any(k.startswith("cuda|") and k.endswith("|bfloat16") for k in cache), sorted(cache)
