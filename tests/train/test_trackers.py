"""monitoring.trackers: TensorBoard, MLflow, W&B (offline) and trackio hold what the run wrote,
read back with each tracker's own reader; a failing tracker never stops the run; resume adds no
step twice."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import time
from pathlib import Path

import pytest

from tests.conftest import copy_experiment, edit, load_factor, rlvr, spawn_rlvr
from tests.train import trackers_read as read

pytestmark = pytest.mark.slow  # every test here trains: make test runs them, make test-fast does not

CONTRACT = "experiment.rlvr.yaml"
#: measured again when a step is redone after a resume
TIMINGS = (
    "time_",
    "step_seconds",
    "elapsed_s",
    "tokens_per_s",
    "mfu",
    "verifier_seconds",
    "total_verifier_seconds",
    "memory_",
)
ALL = "[tensorboard, mlflow, wandb, trackio]"


@pytest.fixture
def experiment(single_turn: Path, tmp_path: Path) -> Path:
    edits = [
        ("prompts_per_step: 8", "prompts_per_step: 4"),
        ("micro_batch_sequences: 16", "micro_batch_sequences: 8"),
        ("every_steps: 20", "every_steps: 3"),
        ("holdout_every: 10", "holdout_every: 2"),
    ]
    return copy_experiment(single_turn, tmp_path / "exp", edits)


def with_trackers(experiment: Path, trackers: str) -> None:
    edit(experiment, "  holdout_every: 2\n", f"  holdout_every: 2\n  trackers: {trackers}\n")


def mlflow_state(run: Path) -> dict:
    os.environ.setdefault("MLFLOW_ALLOW_FILE_STORE", "true")
    return json.loads((run / "trackers" / "mlflow.json").read_text())


def lasting(series: read.Series) -> read.Series:
    return {k: v for k, v in series.items() if not k.startswith(TIMINGS)}


def interrupted_after(experiment: Path, run: Path, rows: int, max_steps: int) -> None:
    """Train until metrics.jsonl has `rows` rows, then SIGTERM: the run pauses at its last checkpoint."""
    cmd = ["train", experiment / CONTRACT, "--run-dir", run, "--max-steps", str(max_steps)]
    proc = spawn_rlvr(*cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    deadline = time.monotonic() + 240 * load_factor()
    metrics = run / "metrics.jsonl"
    while time.monotonic() < deadline and proc.poll() is None:
        if metrics.is_file() and len(metrics.read_text().splitlines()) >= rows:
            break
        time.sleep(0.05)
    proc.send_signal(signal.SIGTERM)
    _, err = proc.communicate(timeout=120 * load_factor())
    assert proc.returncode != 0, err.decode()[-2000:]
    assert json.loads((run / "status.json").read_text())["state"] == "paused", err.decode()[-2000:]


def test_every_tracker_holds_the_run_and_a_resume_logs_no_step_twice(experiment: Path, tmp_path: Path) -> None:
    with_trackers(experiment, ALL)
    assert rlvr("lock", experiment / CONTRACT).code == 0
    run = tmp_path / "run"
    interrupted_after(experiment, run, rows=5, max_steps=8)  # checkpoint at 3 (and 6): steps 4, 5… are redone
    done = rlvr("train", experiment / CONTRACT, "--run-dir", run, "--max-steps", "8", "--resume", timeout=300)
    assert done.code == 0, done.stderr[-2000:]
    assert "stopped:" not in done.stderr  # no tracker failed
    status = json.loads((run / "status.json").read_text())
    assert status["trackers"] == {k: "closed (through step 8)" for k in ("tensorboard", "mlflow", "wandb", "trackio")}
    want = read.expected(run)
    assert set(want["holdout_reward"]) == {0, 2, 4, 6, 8} and set(want["loss"]) == set(range(1, 9))
    assert all(0 < v < 1 for v in want["mfu"].values()) and all(v > 0 for v in want["step_tflop"].values())
    by_difficulty = {k for k in want if k.startswith("holdout_by/difficulty=")}  # the holdout per segment
    assert by_difficulty and all(set(want[k]) == {0, 2, 4, 6, 8} for k in by_difficulty)

    # TensorBoard (float32 scalars): the redone steps replace the interrupted ones (purge)
    tb, texts = read.tensorboard(run / "trackers" / "tensorboard")
    assert tb == read.expected(run, float32=True)
    assert {"files/experiment.rlvr.yaml", "files/experiment.lock.json", "files/plan.json"} <= set(texts)
    assert "objective.advantage.std: sample" in texts["files/config"]

    # MLflow: one run across the resume, every step once, the contract as params, files as artifacts
    state = mlflow_state(run)
    series, params, (ml_run, artifacts) = read.mlflow(state)
    assert lasting(series) == {k.replace("=", ":"): v for k, v in lasting(want).items()}
    assert set(series) == {k.replace("=", ":") for k in want}
    assert params["objective.advantage.std"] == "sample" and params["hyperparameters.group_size"] == "8"
    assert {"experiment.rlvr.yaml", "experiment.lock.json", "plan.json"} <= artifacts
    assert ml_run.info.status == "FINISHED"

    # W&B offline: two offline folders (one per invocation), one run id, every step once
    wandb_runs = sorted((run / "trackers" / "wandb" / "wandb").glob("offline-run-*"))
    assert len(wandb_runs) == 2 and len({p.name.rsplit("-", 1)[1] for p in wandb_runs}) == 1
    series, records = read.wandb(run / "trackers" / "wandb")
    assert lasting(series) == lasting(want) and set(series) == set(want)
    assert any(r.get("objective.advantage.std") == "sample" for r in records)

    # trackio: one run, every step once, the contract as config
    series, config = read.trackio(run / "trackers" / "trackio", "arith", state["run_id"])
    assert lasting(series) == lasting(want) and set(series) == set(want)
    assert config["objective.advantage.std"] == "sample"

    # the report and the gate's verdict reach the same tracker runs
    assert rlvr("report", run, timeout=300).code == 0
    gate = rlvr("gate", experiment / CONTRACT, "--candidate", run, timeout=300)
    assert gate.code in (0, 1), gate.stderr[-2000:]
    _, _, (_, artifacts) = read.mlflow(state)
    assert {"report.html", "verdict.json"} <= artifacts
    _, texts = read.tensorboard(run / "trackers" / "tensorboard")
    assert {"files/report.html", "files/verdict.json"} <= set(texts)
    assert sorted(p.name for p in (run / "trackers" / "trackio").glob("*.db")) == ["arith.db"]  # one project
    assert all(p.name.endswith("-" + state["run_id"]) for p in wandb_runs)  # W&B's run id is rlvr's


def test_a_failing_tracker_is_said_once_and_the_run_completes(experiment: Path, tmp_path: Path) -> None:
    import socket

    with socket.socket() as s:  # a port nothing listens on: the MLflow server is down
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    with_trackers(experiment, f'[tensorboard, wandb, {{kind: mlflow, uri: "http://127.0.0.1:{port}"}}]')
    shadow = tmp_path / "shadow" / "wandb"  # wandb "not installed": importing it fails
    shadow.mkdir(parents=True)
    (shadow / "__init__.py").write_text("raise ModuleNotFoundError(\"No module named 'wandb'\", name='wandb')\n")
    env = {**os.environ, "PYTHONPATH": f"{shadow.parent}{os.pathsep}{os.environ.get('PYTHONPATH', '')}"}
    run = tmp_path / "run"
    done = rlvr("train", experiment / CONTRACT, "--run-dir", run, "--max-steps", "4", env=env, timeout=300)
    assert done.code == 0, done.stderr[-2000:]
    status = json.loads((run / "status.json").read_text())
    assert status["state"] == "finished"
    assert status["trackers"]["tensorboard"] == "closed (through step 4)"
    assert status["trackers"]["wandb"] == "failed: wandb is not installed (pip install 'rlvr-cli[wandb]')"
    assert status["trackers"]["mlflow"].startswith("failed: ")
    said = done.stdout + done.stderr
    assert said.count("tracker wandb stopped") == 1 and said.count("tracker mlflow stopped") == 1
    shown = rlvr("status", run).stdout
    assert "trackers:   tensorboard closed (through step 4); wandb failed: wandb is not installed" in shown
    rows = [json.loads(line) for line in (run / "metrics.jsonl").read_text().splitlines()]
    assert [r["step"] for r in rows] == [0, 1, 2, 3]  # the run's own files are complete
    tb, _ = read.tensorboard(run / "trackers" / "tensorboard")
    assert tb == read.expected(run, float32=True)
