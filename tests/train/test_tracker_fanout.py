"""The tracker fan-out in process, on the real tracker packages: what the contract may say, a
tracker that falls behind, files sent after training, and resume bookkeeping."""

from __future__ import annotations

import json
import os
import signal
import socket
from pathlib import Path

import pytest
import yaml

from rlvr_cli.contract.load import check_file
from rlvr_cli.contract.operations import Tracker
from rlvr_cli.store.run import RunFolder, Status
from rlvr_cli.trackers import fanout
from rlvr_cli.trackers.fanout import Trackers, publish
from tests.conftest import EXAMPLES
from tests.train import trackers_read as read

BASE = EXAMPLES / "coverage" / "every-key.rlvr.yaml"


def with_trackers(tmp_path: Path, trackers: object) -> list[tuple[str, str, str]]:
    data = yaml.safe_load(BASE.read_text())
    data["monitoring"]["trackers"] = trackers
    path = tmp_path / "c.rlvr.yaml"
    path.write_text(yaml.safe_dump(data, sort_keys=False))
    return [(d.code, d.path, d.message) for d in check_file(path).diagnostics if d.severity == "error"]


@pytest.mark.parametrize(
    ("trackers", "message"),
    [
        (["tensorboard", "tb"], "expected 'tensorboard', 'mlflow', 'wandb' or 'trackio', got string 'tb'"),
        ([{"kind": "tensorboard", "project": "x"}], "tensorboard does not read project"),
        ([{"kind": "trackio", "mode": "online"}], "trackio does not read mode"),
        ([{"kind": "wandb", "uri": "http://h"}], "wandb does not read uri"),
        ([{"kind": "mlflow", "uri": "http://h", "dir": "m"}], "mlflow writes to uri or to dir, not both"),
        (["wandb", {"kind": "wandb", "mode": "online"}], "wandb listed more than once"),
        ([{"kind": "wandb", "mode": "off"}], "expected 'offline' or 'online', got string 'off'"),
    ],
)
def test_a_tracker_key_nothing_reads_is_refused(tmp_path: Path, trackers: object, message: str) -> None:
    errors = with_trackers(tmp_path, trackers)
    assert [(code, msg) for code, _, msg in errors] == [("RLV003", message)]
    assert errors[0][1].startswith("monitoring.trackers")


def test_every_form_the_docs_show_is_valid(tmp_path: Path) -> None:
    assert with_trackers(tmp_path, ["tensorboard", "mlflow", "wandb", "trackio"]) == []
    options = [
        {"kind": "mlflow", "uri": "http://mlflow:5000", "project": "math-rl"},
        {"kind": "wandb", "mode": "online"},
    ]
    assert with_trackers(tmp_path, options) == []


def dead_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def test_a_tracker_that_falls_behind_is_dropped_and_said_once(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(fanout, "BACKLOG", 3)
    monkeypatch.setenv("MLFLOW_HTTP_REQUEST_MAX_RETRIES", "0")
    slow = Tracker(kind="mlflow", uri=f"http://127.0.0.1:{dead_port()}")  # a server that is not there
    trackers = Trackers.start([slow], tmp_path, "demo", {"a": 1}, 1, resume=False)
    for step in range(1, 11):  # the loop does not wait for it
        trackers.log(step, {"step": step - 1, "reward_mean": step / 10, "kl": None})
    behind = "fell 3 events behind the run; dropped"
    assert trackers.news() == [f"tracker mlflow stopped: {behind}; the run goes on, its own files complete"]
    assert trackers.news() == []  # once
    assert trackers.close(timeout=60) == []
    assert trackers.states() == {"mlflow": f"failed: {behind}"}


def test_files_written_after_training_reach_the_same_tracker_run(tmp_path: Path) -> None:
    RunFolder(tmp_path).write_status(Status("finished", step=2))
    both = [Tracker(kind="tensorboard"), Tracker(kind="mlflow")]  # trackio reads its folder once per process
    trackers = Trackers.start(both, tmp_path, "demo", {"a": 1}, 1, resume=False)
    trackers.log(1, {"reward_mean": 0.5})
    trackers.log(2, {"reward_mean": 0.75})
    assert trackers.close() == []
    report = tmp_path / "report.html"
    report.write_text("<html>the report</html>")
    assert publish(tmp_path, [report]) == []
    _, texts = read.tensorboard(tmp_path / "trackers" / "tensorboard")
    assert "the report" in texts["files/report.html"]
    state = json.loads((tmp_path / "trackers" / "mlflow.json").read_text())
    series, params, (run, artifacts) = read.mlflow(state)
    assert series == {"reward_mean": {1: 0.5, 2: 0.75}} and params["a"] == "1"  # the same run, its params kept
    assert "report.html" in artifacts and run.info.status == "FINISHED"
    kept = json.loads((tmp_path / "trackers" / "tensorboard.json").read_text())
    assert kept["run_id"] == state["run_id"] and kept["logged_through"] == 2


def test_a_run_without_trackers_publishes_nothing(tmp_path: Path) -> None:
    RunFolder(tmp_path).write_status(Status("finished", step=2))
    assert publish(tmp_path, [tmp_path / "status.json"]) == []
    assert not (tmp_path / "trackers").exists()


def test_each_tracker_opening_has_a_process_of_its_own(tmp_path: Path) -> None:
    """trackio reads its folder once per process: two runs' trackio stores from one interpreter
    (a library user training twice) each get their own, in their own tracker process."""
    for name in ("first", "second"):
        run = tmp_path / name
        trackers = Trackers.start([Tracker(kind="trackio")], run, name, {"a": 1}, 1, resume=False)
        trackers.log(1, {"reward_mean": 0.5})
        assert trackers.workers[0].proc is not None and trackers.workers[0].proc.pid != os.getpid()
        assert trackers.close() == []
        assert trackers.states() == {"trackio": "closed (through step 1)"}
        assert sorted(p.name for p in (run / "trackers" / "trackio").glob("*.db")) == [f"{name}.db"]


def test_a_tracker_whose_process_dies_is_dropped_and_said_once(tmp_path: Path) -> None:
    trackers = Trackers.start([Tracker(kind="tensorboard")], tmp_path, "demo", {}, 1, resume=False)
    trackers.log(1, {"reward_mean": 0.5})
    proc = trackers.workers[0].proc
    assert proc is not None
    proc.send_signal(signal.SIGKILL)
    proc.wait(30)
    trackers.log(2, {"reward_mean": 0.75})  # the loop goes on, and reads that its answers ended
    [said] = trackers.news()
    assert said.startswith("tracker tensorboard stopped: its process ended (exit code -9); see ")
    assert said.endswith("tensorboard.log; the run goes on, its own files complete")
    assert trackers.close() == [] and trackers.news() == []
    assert trackers.states()["tensorboard"].startswith("failed: its process ended")
