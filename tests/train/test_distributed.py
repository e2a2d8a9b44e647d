"""torchrun on CPU (gloo): 2 processes × B/2 prompts equal 1 process × B prompts."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import torch
from safetensors.torch import load_file

from tests.conftest import copy_experiment, rlvr

CONTRACT = "experiment.rlvr.yaml"


@pytest.fixture(scope="module")
def scaffold(single_turn: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    return copy_experiment(
        single_turn, tmp_path_factory.mktemp("dist") / "arith", [("every_steps: 20", "every_steps: 2")]
    )


def torchrun(nproc: int, contract: Path, run_dir: Path, *extra: str) -> subprocess.CompletedProcess:
    command = [
        sys.executable,
        "-m",
        "torch.distributed.run",
        "--standalone",
        f"--nproc_per_node={nproc}",
        "-m",
        "rlvr_cli",
        "train",
        str(contract),
        "--run-dir",
        str(run_dir),
        *extra,
    ]
    return subprocess.run(
        command, capture_output=True, text=True, timeout=600, env={**os.environ, "OMP_NUM_THREADS": "1"}
    )


def metrics(run: Path) -> list[dict]:
    return [json.loads(line) for line in (run / "metrics.jsonl").read_text().splitlines()]


@pytest.mark.slow
@pytest.mark.parametrize("aggregation", ["seq_mean_token_mean", "token_mean"])
def test_two_processes_equal_one(scaffold: Path, tmp_path: Path, aggregation: str) -> None:
    folder = tmp_path / "exp"
    shutil.copytree(scaffold, folder)
    contract = folder / CONTRACT
    contract.write_text(contract.read_text().replace("aggregation: seq_mean_token_mean", f"aggregation: {aggregation}"))
    one, two = tmp_path / "one", tmp_path / "two"
    first = torchrun(1, contract, one, "--max-steps", "3")
    assert first.returncode == 0, first.stderr[-3000:]
    second = torchrun(2, contract, two, "--max-steps", "3")
    assert second.returncode == 0, second.stderr[-3000:]
    a, b = load_file(one / "final" / "model.safetensors"), load_file(two / "final" / "model.safetensors")
    for key in a:
        torch.testing.assert_close(a[key], b[key], atol=1e-5, rtol=1e-4)
    for x, y in zip(metrics(one), metrics(two), strict=True):
        assert x["reward_mean"] == y["reward_mean"]
        assert x["loss"] == pytest.approx(y["loss"], abs=1e-6)
        assert x["grad_norm"] == pytest.approx(y["grad_norm"], rel=1e-5)
    plan = json.loads((two / "plan.json").read_text())
    assert plan["processes"] == 2
    manifest = json.loads((two / "records" / "manifest.json").read_text())
    assert sum(s["rows"] for s in manifest["shards"]) == 3 * 64  # one manifest, every rank's samples


@pytest.mark.slow
def test_nproc_launcher_and_world_size_on_resume(scaffold: Path, tmp_path: Path) -> None:
    run_dir = tmp_path / "run"
    launch = ("train", scaffold / CONTRACT, "--nproc", "2", "--run-dir", run_dir, "--auto")
    launched = rlvr(*launch, "--max-steps", "2", timeout=600)  # --auto on a new folder: every rank starts
    assert launched.code == 0 and "starting from step 0" in launched.stderr, launched.stderr[-3000:]
    again = rlvr(*launch, "--max-steps", "4", timeout=600)  # the same command again: every rank resumes
    assert again.code == 0 and "resuming from checkpoint step-2" in again.stderr, again.stderr[-3000:]
    assert json.loads((run_dir / "status.json").read_text())["state"] == "finished"
    single = rlvr("train", scaffold / CONTRACT, "--run-dir", run_dir, "--max-steps", "6", "--resume", timeout=600)
    assert single.code == 1 and "written by 2 process(es)" in single.stderr


def _rank_gradient(rank: int, world: int, port: int, global_counts: bool, out: str) -> None:
    import torch.distributed as tdist

    from rlvr_cli.train import distributed
    from rlvr_cli.train.objective import policy_loss
    from tests.train.test_objective import objective

    os.environ.update({"MASTER_ADDR": "127.0.0.1", "MASTER_PORT": str(port)})
    tdist.init_process_group("gloo", rank=rank, world_size=world)
    torch.manual_seed(0)
    base, mask, adv = torch.randn(8, 5), (torch.rand(8, 5) > 0.5).int(), torch.randn(8)
    mask[:, 0] = 1
    mask[4:, 1:] = 0  # rank 1's half holds far fewer tokens: local means weigh them differently
    rows = torch.arange(8).chunk(world)[rank]
    logp = base[rows].clone().requires_grad_(True)
    totals = (
        {"total_tokens": distributed.total(float(mask[rows].sum())), "total_sequences": 8.0} if global_counts else {}
    )
    loss, _ = policy_loss(logp, base[rows], None, adv[rows], mask[rows], objective(), max_response_tokens=5, **totals)
    loss.backward()
    grads = [None] * world
    tdist.all_gather_object(grads, logp.grad)
    if rank == 0:
        torch.save(torch.cat(grads), out)
    tdist.destroy_process_group()


def _gradient(world: int, global_counts: bool, tmp_path: Path) -> torch.Tensor:
    import torch.multiprocessing as mp

    from rlvr_cli.env.agent import free_port

    out = str(tmp_path / f"g-{world}-{global_counts}.pt")
    mp.spawn(_rank_gradient, args=(world, free_port(), global_counts, out), nprocs=world, join=True)
    return torch.load(out)


@pytest.mark.slow
def test_per_rank_local_token_means_would_differ(tmp_path: Path) -> None:
    """The equivalence above can fail: dividing by each rank's own token count is the wrong way."""
    single = _gradient(1, True, tmp_path)
    assert torch.allclose(_gradient(2, True, tmp_path), single, atol=1e-7)
    assert not torch.allclose(_gradient(2, False, tmp_path) / 2, single, atol=1e-4)
