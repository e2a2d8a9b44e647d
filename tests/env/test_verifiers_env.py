"""A taskset written for the published `verifiers` package (v1) as rlvr tasks and verifier:
`rlvr import verifiers` writes its tasks and says the components with verifiers' weights, and
`environment.verifier: rlvr_cli.env.verifiers_env:verify` judges through the task's own rewards —
`rlvr validate --deep`, `rlvr audit verifier` and two `rlvr train` steps on it; a reward that
raises is a verifier error, never a 0."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from tests.conftest import copy_experiment, edit, rlvr

PACKAGE = Path(__file__).with_name("vf")
CONTRACT = "experiment.rlvr.yaml"
ENV = {**os.environ, "PYTHONPATH": str(PACKAGE)}  # the taskset installed, as `vf-init` packages are
pytest.importorskip("verifiers.v1", reason="the verifiers package comes with rlvr-cli[verifiers]")


@pytest.fixture
def exp(single_turn: Path, tmp_path: Path) -> Path:
    folder = copy_experiment(single_turn, tmp_path / "exp")
    out = folder / "data" / "verifiers.jsonl"
    done = rlvr("import", "verifiers", "sums:SumTaskset", "--out", out, "--config", '{"count": 30}', env=ENV)
    assert done.code == 0, done.stderr
    assert "objective.reward.components: [{name: brief, weight: 0.2}, {name: correct, weight: 1}]" in done.stdout
    rows = [json.loads(line) for line in out.read_text().splitlines()]
    assert rows[7]["id"] == "sum-7" and rows[7]["prompt"] == [{"role": "user", "content": "2+1="}]
    assert rows[7]["answer"] == "3" and rows[7]["verifiers"]["taskset"] == "sums:SumTaskset"
    for name, part in (("train", rows[:20]), ("holdout", rows[20:25]), ("sealed_eval", rows[25:])):
        (folder / "data" / f"{name}.jsonl").write_text("".join(json.dumps(r) + "\n" for r in part))
    edit(folder, "verifier: verifier:verify", "verifier: rlvr_cli.env.verifiers_env:verify")
    edit(
        folder,
        "[{name: correct, weight: 1.0}, {name: format, weight: 0.2}]",
        "[{name: correct, weight: 1.0}, {name: brief, weight: 0.2}]",
    )
    edit(folder, "max_steps: 200", "max_steps: 2")
    return folder


def test_a_verifiers_taskset_is_audited_and_trained_on(exp: Path) -> None:
    assert rlvr("validate", "--deep", exp / CONTRACT, env=ENV).code == 0
    audit = rlvr("audit", "verifier", exp / CONTRACT, "--format", "json", timeout=600, env=ENV)
    assert audit.code == 0, audit.stdout[-3000:] + audit.stderr[-2000:]
    report = json.loads(audit.stdout)
    assert report["disagreements"] == 0 and len(report["outcomes"]) >= 20  # right and wrong answers per task
    run = exp / "run"
    trained = rlvr("train", exp / CONTRACT, "--run-dir", run, timeout=900, env=ENV)
    assert trained.code == 0, trained.stderr[-3000:]
    steps = [json.loads(line) for line in (run / "metrics.jsonl").read_text().splitlines()]
    assert [m["verifier_error_rate"] for m in steps] == [0.0, 0.0]


def test_a_reward_that_raises_is_a_verifier_error() -> None:
    import sys

    sys.path.insert(0, str(PACKAGE))
    try:
        from rlvr_cli.env.verifiers_env import rows, verify

        found, _ = rows("sums:SumTaskset", {"count": 3, "broken": True})
        broken, sound = found[0], found[1]
        failed = verify(broken, "1")
        assert failed.status == "verifier_error" and "the reward's own bug" in (failed.detail or "")
        judged = verify(sound, "1")
        assert judged.status == "ok" and judged.components == {"correct": 1.0, "brief": 1.0} and judged.reward == 1.2
        assert verify(sound, "2 is my answer").components == {"correct": 0.0, "brief": 0.0}
        assert verify({"id": "x", "prompt": "1+1="}, "2").status == "verifier_error"  # not an imported task
    finally:
        sys.path.remove(str(PACKAGE))


def test_import_refuses_bad_input(tmp_path: Path) -> None:
    out = tmp_path / "tasks.jsonl"
    for args, said in (
        (["nocolon"], "module:Class"),
        (["sums:SumTaskset", "--config", "[1]"], "JSON object"),
        (["sums:Nothing"], "cannot load the verifiers taskset"),
        (["sums:SumData"], "not a verifiers.v1 Taskset"),
        (["sums:SumTaskset", "--config", '{"count": "many"}'], "could not load its tasks"),
        (["sums:SumTaskset", "--config", '{"task": {"judges": [{"id": "reference"}]}}'], "judges (reference)"),
    ):
        done = rlvr("import", "verifiers", *args, "--out", out, env=ENV)
        assert done.code in (1, 2) and said in done.stderr and "Traceback" not in done.stderr, (args, done.stderr)
        assert not out.exists()
