"""Pause/abort rules, atomic checkpoints and exact resume."""

from __future__ import annotations

import json
import os
import random
import shutil
import subprocess
import time
from pathlib import Path

import pytest
import torch
from safetensors.torch import load_file

from tests.conftest import QUICK_STEPS, copy_experiment, edit, kill_rlvr, rlvr, spawn_rlvr

pytestmark = pytest.mark.slow  # every test here trains: make test runs them, make test-fast does not

CONTRACT = "experiment.rlvr.yaml"


@pytest.fixture(scope="module")
def scaffold(single_turn: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    edits = [*QUICK_STEPS, ("holdout_every: 10", "holdout_every: 3")]
    return copy_experiment(single_turn, tmp_path_factory.mktemp("resume") / "arith", edits)


@pytest.fixture
def experiment(scaffold: Path, tmp_path: Path) -> Path:
    return copy_experiment(scaffold, tmp_path / "exp")


def weights(folder: Path) -> dict[str, torch.Tensor]:
    return load_file(folder / "model.safetensors")


def records(run: Path) -> list[dict]:
    import pyarrow.parquet as pq

    manifest = json.loads((run / "records" / "manifest.json").read_text())
    rows = []
    for shard in manifest["shards"]:
        rows += pq.read_table(run / "records" / shard["file"]).to_pylist()
    for row in rows:
        row.pop("verify_seconds")  # a timing, not content
    return sorted(rows, key=lambda r: (r["step"], r["round"], r["group"], r["sample"]))


def status(run: Path) -> dict:
    return json.loads((run / "status.json").read_text())


def test_nan_loss_aborts_with_a_checkpoint_from_before_the_poison(experiment: Path, tmp_path: Path) -> None:
    poisoned = tmp_path / "poisoned"
    env = {**os.environ, "RLVR_FAULT": "nan_loss@3"}
    run = rlvr("train", experiment / CONTRACT, "--run-dir", poisoned, "--max-steps", "8", env=env, timeout=300)
    assert run.code == 5, run.stderr[-2000:]
    state = status(poisoned)
    assert state["state"] == "aborted" and state["rule"]["name"] == "nan-guard" and state["rule"]["step"] == 3
    assert "nonfinite_count > 0" in state["reason"] and "owner oncall" in state["reason"]
    clean = tmp_path / "clean"
    assert rlvr("train", experiment / CONTRACT, "--run-dir", clean, "--max-steps", "3", timeout=300).code == 0
    saved = weights(poisoned / "checkpoints" / "step-4" / "model")
    reference = weights(clean / "final")
    assert all(torch.isfinite(t).all() for t in saved.values())
    assert all(torch.equal(saved[k], reference[k]) for k in reference)  # the poisoned step changed nothing
    refused = rlvr("train", experiment / CONTRACT, "--run-dir", poisoned, "--resume")
    assert refused.code == 1 and "--force" in refused.stderr


def test_entropy_rule_pauses_and_resume_continues(experiment: Path, tmp_path: Path) -> None:
    edit(
        experiment,
        '{name: entropy-collapse, metric: entropy, when: "< 0.01", window: 10',
        '{name: entropy-collapse, metric: entropy, when: "< 100", window: 2',
    )
    run_dir = tmp_path / "run"
    paused = rlvr("train", experiment / CONTRACT, "--run-dir", run_dir, "--max-steps", "6", timeout=300)
    assert paused.code == 4, paused.stderr[-2000:]
    assert status(run_dir)["state"] == "paused" and status(run_dir)["step"] == 2
    shown = rlvr("status", run_dir)
    assert shown.code == 0 and "entropy-collapse" in shown.stdout and "--resume" in shown.stdout
    resumed = rlvr("train", experiment / CONTRACT, "--run-dir", run_dir, "--max-steps", "3", "--resume", timeout=300)
    assert resumed.code == 0, resumed.stderr[-2000:]
    assert "resuming from checkpoint step-2" in resumed.stderr
    assert status(run_dir)["state"] == "finished" and status(run_dir)["step"] == 3


def test_resume_refuses_a_changed_experiment_by_its_keys_and_goes_on_when_only_how_it_is_computed_changed(
    experiment: Path, tmp_path: Path
) -> None:
    """A changed value (the learning rate) refuses the resume, naming the key, before it writes
    anything; a smaller micro-batch (the advice for a plan that does not fit), a new description,
    a comment and the default `parallel` section written out resume, say so where it changes how
    the numbers are computed, and end where a straight run ends to float tolerance."""
    straight, run_dir = tmp_path / "straight", tmp_path / "run"
    assert rlvr("train", experiment / CONTRACT, "--run-dir", straight, "--max-steps", "3", timeout=300).code == 0
    assert rlvr("train", experiment / CONTRACT, "--run-dir", run_dir, "--max-steps", "2", timeout=300).code == 0
    before = (run_dir / "metrics.jsonl").read_text()
    edit(experiment, "lr: 3.0e-3", "lr: 1.0e-3")
    run = rlvr("train", experiment / CONTRACT, "--run-dir", run_dir, "--max-steps", "3", "--resume")
    assert run.code == 1 and "the contract changed since checkpoint step-2" in run.stderr, run.stderr
    assert "hyperparameters.optimizer.lr: 0.003 → 0.001" in run.stderr, run.stderr
    assert (run_dir / "metrics.jsonl").read_text() == before and status(run_dir)["step"] == 2
    edit(experiment, "lr: 1.0e-3", "lr: 3.0e-3")
    edit(experiment, "micro_batch_sequences: 8", "micro_batch_sequences: 4")
    edit(
        experiment, "  precision: fp32\n", "  precision: fp32\n  parallel: {strategy: ddp}\n"
    )  # the default, written out
    text = (experiment / CONTRACT).read_text()
    assert text.startswith("# ") and "\ndescription: " in text
    head, _, rest = text.partition("\ndescription: ")
    (experiment / CONTRACT).write_text(f"{head}\n# rewritten\ndescription: Reworded.\n{rest.split(chr(10), 1)[1]}")
    run = rlvr("train", experiment / CONTRACT, "--run-dir", run_dir, "--max-steps", "3", "--resume", timeout=300)
    assert run.code == 0, run.stderr[-2000:]
    assert "resuming with hyperparameters.micro_batch_sequences: 8 → 4: the same experiment" in run.stderr, run.stderr
    said = run.stderr.split("resuming from")[0]
    assert "description" not in said and "parallel" not in said  # words, and what was already so: not said
    a, b = weights(straight / "final"), weights(run_dir / "final")
    for key in a:
        torch.testing.assert_close(a[key], b[key], atol=1e-5, rtol=1e-4)


def test_stop_and_resume_is_bit_identical_to_a_straight_run(experiment: Path, tmp_path: Path) -> None:
    straight, split = tmp_path / "straight", tmp_path / "split"
    assert rlvr("train", experiment / CONTRACT, "--run-dir", straight, "--max-steps", "6", timeout=300).code == 0
    assert rlvr("train", experiment / CONTRACT, "--run-dir", split, "--max-steps", "4", timeout=300).code == 0
    again = rlvr("train", experiment / CONTRACT, "--run-dir", split, "--max-steps", "6", "--resume", timeout=300)
    assert again.code == 0, again.stderr[-2000:]
    a, b = weights(straight / "final"), weights(split / "final")
    assert a.keys() == b.keys() and all(torch.equal(a[k], b[k]) for k in a)
    assert records(straight) == records(split)
    lines = lambda run: [json.loads(x) for x in (run / "metrics.jsonl").read_text().splitlines()]  # noqa: E731
    keep = ("reward_mean", "loss", "kl", "entropy", "grad_norm", "holdout_reward")
    assert [{k: r.get(k) for k in keep} for r in lines(straight)] == [{k: r.get(k) for k in keep} for r in lines(split)]


def test_keep_last_never_removes_the_newest_checkpoint(experiment: Path, tmp_path: Path) -> None:
    run_dir = tmp_path / "run"
    assert rlvr("train", experiment / CONTRACT, "--run-dir", run_dir, "--max-steps", "5", timeout=300).code == 0
    names = sorted(p.name for p in (run_dir / "checkpoints").iterdir())
    assert names == ["step-4", "step-5"]  # keep_last: 2


def test_sigkill_at_random_moments_never_leaves_a_partial_checkpoint(experiment: Path, tmp_path: Path) -> None:
    """Kill the trainer with SIGKILL over and over (checkpoints every step, so many kills land
    inside a checkpoint write); every resume must find a complete, checksum-valid checkpoint
    and every record the manifest listed before the kill must still be listed after."""
    from rlvr_cli.store.run import complete_checkpoints
    from rlvr_cli.train.checkpoint import verify

    run_dir = tmp_path / "run"
    rng = random.Random(1234)
    command = [
        "train",
        str(experiment / CONTRACT),
        "--run-dir",
        str(run_dir),
        "--max-steps",
        "400",
    ]
    listed: list[dict] = []
    kills = 0
    for attempt in range(8):
        resume = ["--resume"] if complete_checkpoints(run_dir / "checkpoints") else []
        if not resume and run_dir.exists():
            shutil.rmtree(run_dir)
        proc = spawn_rlvr(*command, *resume, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
        deadline = time.monotonic() + 120
        while not complete_checkpoints(run_dir / "checkpoints") and proc.poll() is None and time.monotonic() < deadline:
            time.sleep(0.05)
        time.sleep(rng.uniform(0.0, 1.5))
        if proc.poll() is not None:
            raise AssertionError(f"attempt {attempt}: trainer exited {proc.returncode}: {proc.stderr.read()[-2000:]}")
        kill_rlvr(proc)
        kills += 1
        found = complete_checkpoints(run_dir / "checkpoints")
        assert found, "no complete checkpoint after a kill"
        verify(found[-1][1])  # checksums of the newest one hold
        assert not any(
            p.name.startswith("step-") and not (p / "COMPLETE").is_file() for p in (run_dir / "checkpoints").iterdir()
        )
        manifest = json.loads((run_dir / "records" / "manifest.json").read_text())["shards"]
        assert manifest[: len(listed)] == listed, "a listed record shard was lost or rewritten"
        for shard in manifest:
            assert (run_dir / "records" / shard["file"]).is_file()
        listed = manifest
    assert kills == 8
    shown = rlvr("status", run_dir)  # the trainer was killed: status must not claim it is running
    assert "killed or crashed" in shown.stdout and "--auto" in shown.stdout
    newest = complete_checkpoints(run_dir / "checkpoints")[-1][0]
    command[-1] = str(newest + 2)
    finish = rlvr(*command, "--auto", timeout=300)
    assert finish.code == 0, finish.stderr[-2000:]
    assert status(run_dir)["state"] == "finished" and status(run_dir)["step"] == newest + 2
    # the killed-and-resumed run equals one that never stopped: weights, records (each once), metrics
    straight = tmp_path / "straight"
    done = rlvr("train", experiment / CONTRACT, "--run-dir", straight, "--max-steps", str(newest + 2), timeout=300)
    assert done.code == 0, done.stderr[-2000:]
    a, b = weights(straight / "final"), weights(run_dir / "final")
    assert a.keys() == b.keys() and all(torch.equal(a[k], b[k]) for k in a)
    assert records(run_dir) == records(straight)
    lines = [json.loads(x)["step"] for x in (run_dir / "metrics.jsonl").read_text().splitlines()]
    assert lines == list(range(newest + 2))


def test_a_kill_while_an_old_checkpoint_is_pruned_never_leaves_a_step_folder_without_its_files(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Pruning unpublishes a step folder (renamed aside) before deleting it: a kill halfway
    through the deletion (here after its marker went first) leaves a `.removed` folder, which
    the next prune clears, never a `step-<N>/` missing some of its files."""
    import rlvr_cli.train.checkpoint as checkpoint
    from rlvr_cli.store.run import MARKER, RunFolder, complete_checkpoints

    run = RunFolder(tmp_path / "run")
    for step in (1, 2, 3):
        folder = run.checkpoints / f"step-{step}"
        folder.mkdir(parents=True)
        (folder / "state.pt").write_bytes(b"x")
        (folder / MARKER).write_text("{}")
    real = checkpoint.shutil.rmtree

    def killed(path: Path, ignore_errors: bool = False) -> None:
        if (Path(path) / MARKER).exists():  # the first checkpoint deleted: killed halfway
            (Path(path) / MARKER).unlink()  # the deletion got this far
            raise KeyboardInterrupt
        real(path, ignore_errors=ignore_errors)

    monkeypatch.setattr(checkpoint.shutil, "rmtree", killed)
    with pytest.raises(KeyboardInterrupt):
        checkpoint.prune(run, keep_last=1)
    steps = [p.name for p in run.checkpoints.iterdir() if p.name.startswith("step-")]
    assert all((run.checkpoints / name / MARKER).is_file() for name in steps)
    monkeypatch.setattr(checkpoint.shutil, "rmtree", real)
    checkpoint.prune(run, keep_last=1)
    assert sorted(p.name for p in run.checkpoints.iterdir()) == ["step-3"]
    assert [s for s, _ in complete_checkpoints(run.checkpoints)] == [3]
