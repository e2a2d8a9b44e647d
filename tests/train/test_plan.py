"""`rlvr plan`: a readable table for a 7B-class config, and a CPU estimate checked against a
measured peak."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from tests.conftest import ROOT, rlvr

SEVEN_B = ROOT / "contracts" / "grpo-7b-plan.rlvr.yaml"

MEASURE = """
import json, os, resource, sys
from pathlib import Path
import torch, transformers  # the interpreter and libraries are the baseline, not the estimate
from rlvr_cli.contract.load import load
from rlvr_cli.train.memory_estimate import estimate, load_shape


def rss():
    return int(open("/proc/self/statm").read().split()[1]) * os.sysconf("SC_PAGE_SIZE")


def main():
    from rlvr_cli.rollout.rollouts import open_rollout
    from rlvr_cli.train.faults import Fault
    from rlvr_cli.train.loop import train_step
    from rlvr_cli.train.setup import build
    from rlvr_cli.train.state import TrainState

    path = Path(sys.argv[1])
    contract = load(path)
    base = rss()
    setup = build(contract, path.resolve().parent, Fault.none())
    state = TrainState.fresh(len(setup.train_tasks), contract.hyperparameters.seed)
    with open_rollout(contract, path.resolve().parent, setup.renderer, setup.engine) as rollout:
        for _ in range(3):
            train_step(setup, state, rollout)
            state.step += 1
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024
    terms = estimate(contract, load_shape(contract, path.resolve().parent))
    print(json.dumps({"measured": peak - base, "estimate": sum(terms.values())}))


if __name__ == "__main__":
    main()
"""


def test_plan_for_a_7b_class_config() -> None:
    fits = rlvr("plan", SEVEN_B, "--gpus", "8", "--gpu-memory", "80")
    assert fits.code == 0, fits.stderr
    assert "6,738.42 M parameters" in fits.stdout and "fits in 80 GiB per device" in fits.stdout
    for term in ("policy parameters", "gradients", "optimizer state", "reference", "rollout KV cache", "activations"):
        assert term in fits.stdout
    assert "8 device(s), fsdp2, activation checkpointing" in fits.stdout and "rollout weights" in fits.stdout
    single = rlvr("plan", SEVEN_B, "--gpu-memory", "80")
    assert single.code == 1 and "does NOT fit" in single.stdout and "dominates" in single.stdout
    assert rlvr("plan", ROOT / "contracts" / "nope.rlvr.yaml").code == 2


def test_the_plan_counts_a_steps_model_flops_as_the_trainer_does(tmp_path: Path) -> None:
    """Full weights, one pass: the update is 3 forwards of what sampling runs once, the
    reference one; an adapter's update is cheaper (no weight gradients for the frozen base);
    without KL no reference runs."""
    import re

    def terms(contract: Path) -> dict[str, float]:
        line = rlvr("plan", contract).stdout.splitlines()[-1]
        assert line.startswith("compute per step, at most (prompts of 1024 and responses of 4096 tokens): "), line
        return {k: float(v.replace(",", "")) for k, v in re.findall(r"(sampling|update|reference) ([\d,.]+)", line)}

    full = terms(SEVEN_B)
    assert full["update"] == pytest.approx(3 * full["sampling"], rel=1e-3)
    assert full["reference"] == full["sampling"]
    text = SEVEN_B.read_text()
    shutil.copytree(SEVEN_B.parent / "llama-7b", tmp_path / "llama-7b")  # plan reads only its config.json
    adapter, no_kl = tmp_path / "adapter.rlvr.yaml", tmp_path / "no-kl.rlvr.yaml"
    lora = "{kind: lora, rank: 16, alpha: 32, dropout: 0.0, target_modules: all-linear, bias: none, init: default}"
    sharded = "  parallel: {strategy: fsdp2, activation_checkpointing: true}\n"  # an adapter runs with ddp
    adapter.write_text(text.replace(sharded, f"  adapter: {lora}\n"))
    with_adapter = terms(adapter)
    assert with_adapter["sampling"] == full["sampling"]
    assert 2 * full["sampling"] < with_adapter["update"] < 2.1 * full["sampling"]
    kl = "kl: {coef: 0.01, estimator: k3, placement: loss}"
    assert kl in text
    no_kl.write_text(text.replace(kl, "kl: {coef: 0.0}"))
    assert terms(no_kl)["reference"] == 0


def test_the_plan_divides_memory_only_where_the_trainer_shards(tmp_path: Path) -> None:
    """Data parallel keeps a whole copy of the weights, gradients and optimizer state on every GPU:
    the same 7B contract without fsdp2 does not fit 8 × 80 GiB, and the plan names what does."""
    ddp = tmp_path / "ddp.rlvr.yaml"
    text = SEVEN_B.read_text()
    line = "  parallel: {strategy: fsdp2, activation_checkpointing: true}\n"
    assert line in text
    ddp.write_text(text.replace(line, ""))
    shutil.copytree(SEVEN_B.parent / "llama-7b", tmp_path / "llama-7b")  # plan reads only its config.json
    plan = rlvr("plan", ddp, "--gpus", "8", "--gpu-memory", "80")
    assert plan.code == 1 and "8 device(s), ddp" in plan.stdout and "does NOT fit" in plan.stdout, plan.stdout
    assert "fits with parallel.strategy: fsdp2" in plan.stdout and "activation_checkpointing: true" in plan.stdout


@pytest.mark.slow
def test_cpu_estimate_is_within_25_percent_of_the_measured_peak(tmp_path: Path) -> None:
    from rlvr_cli.toy.tiny import ARITHMETIC, build_tiny

    shutil.copytree(ROOT / "contracts" / "arith", tmp_path / "arith", ignore=shutil.ignore_patterns("model"))
    build_tiny(tmp_path / "arith" / "model", "chatml", alphabet=ARITHMETIC, hidden=512, layers=6)
    shutil.copyfile(ROOT / "contracts" / "grpo-cpu.rlvr.yaml", tmp_path / "grpo-cpu.rlvr.yaml")
    (tmp_path / "measure.py").write_text(MEASURE)
    proc = subprocess.run(
        [sys.executable, str(tmp_path / "measure.py"), str(tmp_path / "grpo-cpu.rlvr.yaml"), str(tmp_path / "run")],
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert proc.returncode == 0, proc.stderr[-2000:]
    result = json.loads(proc.stdout.strip().splitlines()[-1])
    ratio = result["estimate"] / result["measured"]
    assert 0.75 <= ratio <= 1.25, result


def test_train_refuses_a_plan_that_does_not_fit_the_devices_with_the_change_that_fits(
    single_turn: Path, tmp_path: Path
) -> None:
    """`--device-memory` stands in on CPU for the memory CUDA reports on a GPU."""
    run = tmp_path / "run"
    small = rlvr("train", single_turn / "experiment.rlvr.yaml", "--run-dir", run, "--device-memory", "0.01")
    assert small.code == 1 and "the plan needs" in small.stderr and "than the 10.2 MiB" in small.stderr, small.stderr
    assert "fits with precision: bf16" in small.stderr or "no single change" in small.stderr, small.stderr
    assert not run.exists()  # refused before anything was written
    plan = rlvr("plan", single_turn / "experiment.rlvr.yaml", "--gpu-memory", "0.01")
    needs = small.stderr.split("the plan needs ")[1].split(" per device")[0]
    assert plan.code == 1 and f"total {needs}".split()[-2] in plan.stdout  # the same total as `rlvr plan`


def test_a_served_engine_samples_on_devices_of_its_own(tmp_path: Path) -> None:
    """With `sampling.server` the rollout KV cache and the engine's weights are the server's: the
    trainer's plan leaves them out (the same contract sampling in process counts them)."""
    served = tmp_path / "served.rlvr.yaml"
    text = SEVEN_B.read_text()
    sampling = "  sampling: {temperature: 1.0, top_p: 1.0, top_k: 0}\n"
    assert sampling in text and "  aggregation:" in text
    server = "engine: vllm, server: {url: 'http://127.0.0.1:8000', model: policy}"
    text = text.replace(sampling, sampling.replace("top_k: 0}", f"top_k: 0, {server}}}"))
    served.write_text(text.replace("  aggregation:", "  ratio: {level: token, denominator: engine}\n  aggregation:", 1))
    shutil.copytree(SEVEN_B.parent / "llama-7b", tmp_path / "llama-7b")
    plan = rlvr("plan", served, "--gpus", "8", "--gpu-memory", "80")
    assert plan.code == 0, plan.stdout + plan.stderr
    assert "rollout KV cache" not in plan.stdout and "rollout weights" not in plan.stdout
    assert "policy parameters" in plan.stdout and "activations" in plan.stdout
