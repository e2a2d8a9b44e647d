"""`rlvr tasks review` through the CLI on the shipped code template: tasks with planted defects
— a wrong reference solution, tests no mutant fails and a trivial program passes, an answer
leaked in the statement, a copy of a train task, malformed tests — are each found at their row
(exit 1), and a sound task has no finding. On a single-turn contract, a reference answer its
verifier cannot read, and a copy of a split's task."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from rlvr_cli.env.sandbox import problem
from tests.conftest import copy_experiment, rlvr

PLANTED = Path(__file__).with_name("planted_tasks.jsonl")


@pytest.fixture(scope="module")
def code(tmp_path_factory: pytest.TempPathFactory) -> Path:
    folder = tmp_path_factory.mktemp("review") / "code"
    assert rlvr("init", folder, "--template", "code", "--no-model").code == 0
    return folder


@pytest.mark.skipif(problem() is not None, reason=f"needs a working bubblewrap: {problem()}")
def test_every_planted_defect_is_found_at_its_row(code: Path) -> None:
    done = rlvr("tasks", "review", code, PLANTED, "--format", "json", timeout=300)
    assert done.code == 1, done.stderr
    report = json.loads(done.stdout)
    found = {(f["task"], f["code"]) for f in report["findings"]}
    for planted in [
        ("gen-wrong-reference", "reference_fails"),
        ("gen-weak-tests", "no_discrimination"),
        ("gen-weak-tests", "trivial_passes"),
        ("gen-leak", "leaked_answer"),
        ("gen-copy", "duplicate"),
        ("gen-malformed", "unjudgeable"),
    ]:
        assert planted in found, planted
    assert not [f for f in report["findings"] if f["task"] == "gen-good"]  # a sound task: nothing
    lines = {f["task"]: f["line"] for f in report["findings"]}
    assert lines["gen-weak-tests"] == 3 and lines["gen-malformed"] == 6
    text = rlvr("tasks", "review", code, PLANTED, timeout=300).stdout
    assert "planted_tasks.jsonl:3: error [no_discrimination] task gen-weak-tests" in text


@pytest.mark.skipif(problem() is not None, reason=f"needs a working bubblewrap: {problem()}")
def test_sound_tasks_pass_the_review(code: Path, tmp_path: Path) -> None:
    sound = tmp_path / "sound.jsonl"
    sound.write_text(PLANTED.read_text().splitlines()[0] + "\n")
    done = rlvr("tasks", "review", code, sound, timeout=300)
    assert done.code == 0 and "0 error(s)" in done.stdout, done.stdout + done.stderr


def test_a_wrong_reference_answer_on_a_single_turn_contract(single_turn: Path, tmp_path: Path) -> None:
    exp = copy_experiment(single_turn, tmp_path / "exp")
    rows = [
        {"id": "new-1", "prompt": "12+30=", "answer": "42"},
        {"id": "new-2", "prompt": "40+11=", "answer": "fifty-one"},  # the verifier cannot read it
    ]
    tasks = tmp_path / "new.jsonl"
    tasks.write_text("".join(json.dumps(r) + "\n" for r in rows))
    done = rlvr("tasks", "review", exp, tasks, "--format", "json", timeout=300)
    assert done.code == 1
    found = {(f["task"], f["code"]) for f in json.loads(done.stdout)["findings"]}
    assert found == {("new-2", "reference_fails")}, found
    rows.append({"id": "new-3", "prompt": "2+3=", "answer": "5"})  # the train split's own task
    tasks.write_text("".join(json.dumps(r) + "\n" for r in rows))
    again = json.loads(rlvr("tasks", "review", exp, tasks, "--format", "json", timeout=300).stdout)
    assert ("new-3", "duplicate") in {(f["task"], f["code"]) for f in again["findings"]}
    (tmp_path / "bad.jsonl").write_text("{not json\n")
    bad = rlvr("tasks", "review", exp, tmp_path / "bad.jsonl")
    assert bad.code == 1 and "bad.jsonl:1" in bad.stderr and "Traceback" not in bad.stderr
