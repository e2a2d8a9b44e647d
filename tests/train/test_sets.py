"""`reward.unit: set` (rollout/sets.py): a group's consecutive members, `set_size` at a time, are
judged together by `verify(task, responses)`; every member carries the set's verdict and reward,
the set is one unit of its group for advantages, sets are drawn by sampling even where greedy
decoding is asked, and the contract's rules (RLV206) keep sets whole."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.conftest import rlvr

CONTRACT = "experiment.rlvr.yaml"
# rewards a set for holding different answers; remembers every call it got (a list each time)
SET_VERIFIER = """
import json, os

def verify(task, responses):
    with open(os.environ["SETS_LOG"], "a") as log:
        log.write(json.dumps(responses) + "\\n")
    distinct = len(set(responses)) / len(responses)
    return {"status": "ok", "reward": distinct, "components": {"distinct": distinct}}
"""


def _experiment(root: Path, **reward: Any) -> Path:
    folder = root / "sets"
    made = rlvr("init", folder, "--template", "single-turn")
    assert made.code == 0, made.stderr
    (folder / "sets_verifier.py").write_text(SET_VERIFIER)
    data = yaml.safe_load((folder / CONTRACT).read_text())
    data["environment"]["verifier"] = "sets_verifier:verify"
    data["objective"]["reward"] |= {"unit": "set", "set_size": 2, "components": [{"name": "distinct", "weight": 1.0}]}
    data["objective"]["reward"] |= reward
    data["hyperparameters"] |= {"group_size": 4, "prompts_per_step": 2, "max_steps": 2, "micro_batch_sequences": 8}
    data["monitoring"]["holdout_every"] = 2
    gate = {"name": "holdout-distinct", "metric": "distinct", "split": "holdout", "min_delta": 0.0, "confidence": 0.9}
    data["acceptance"]["gates"] = [gate]
    data["checkpoint"]["every_steps"] = 2
    (folder / CONTRACT).write_text(yaml.safe_dump(data, sort_keys=False))
    return folder


@pytest.fixture(scope="module")
def trained(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path, Path]:
    import os

    root = tmp_path_factory.mktemp("sets")
    folder, log = _experiment(root), root / "calls.jsonl"
    os.environ["SETS_LOG"] = str(log)
    try:
        run = rlvr("train", folder / CONTRACT, "--run-dir", root / "run", timeout=600)
    finally:
        os.environ.pop("SETS_LOG")
    assert run.code == 0, run.stderr[-3000:]
    return folder, root / "run", log


def test_a_set_is_judged_together_and_every_member_carries_its_reward(trained: tuple[Path, Path, Path]) -> None:
    import pyarrow.parquet as pq

    _, run, log = trained
    calls = [json.loads(line) for line in log.read_text().splitlines()]
    assert calls and all(isinstance(c, list) and len(c) == 2 for c in calls)  # one call per set, its two answers
    rows = [r for f in sorted((run / "records").glob("*.parquet")) for r in pq.read_table(f).to_pylist()]
    assert len(rows) == 2 * 2 * 4  # steps × prompts × group
    sets: dict[tuple[int, int, int], list[dict[str, Any]]] = {}
    for row in rows:
        sets.setdefault((row["step"], row["group"], row["sample"] // 2), []).append(row)
    assert all(len(members) == 2 for members in sets.values())
    for members in sets.values():
        a, b = members
        assert a["reward"] == b["reward"] and a["advantage"] == b["advantage"]
        assert a["reward"] == (1.0 if a["response_text"] != b["response_text"] else 0.5)
    # the two sets of a group are each other's baseline: their advantages are opposite (or both 0)
    for (step, group, k), members in sets.items():
        if k == 0:
            other = sets[(step, group, 1)][0]
            assert members[0]["advantage"] == pytest.approx(-other["advantage"], abs=1e-6)


def test_holdout_sets_are_sampled_not_greedy(trained: tuple[Path, Path, Path]) -> None:
    _, run, log = trained
    metrics = [json.loads(line) for line in (run / "metrics.jsonl").read_text().splitlines()]
    assert any(m.get("holdout_reward") is not None for m in metrics)
    holdout = [json.loads(line) for line in log.read_text().splitlines()]
    assert len(holdout) > 2 * 2 * 2  # the training sets, then one whole set per holdout task


@pytest.mark.parametrize(
    ("reward", "hp", "where"),
    [
        ({"set_size": None}, {}, "objective.reward"),
        ({"set_size": 3}, {}, "hyperparameters.group_size"),  # 4 holds no whole set of 3
        ({"set_size": 4}, {}, "hyperparameters.group_size"),  # one set: no baseline
        ({"unit": "response"}, {}, "objective.reward.set_size"),  # set_size that changes nothing
    ],
)
def test_sets_are_refused_where_they_cannot_be_judged_whole(
    tmp_path: Path, reward: dict[str, Any], hp: dict[str, Any], where: str
) -> None:
    from rlvr_cli.contract.load import check_file

    folder = _experiment(tmp_path)
    data = yaml.safe_load((folder / CONTRACT).read_text())
    data["objective"]["reward"] |= reward
    data["objective"]["reward"] = {k: v for k, v in data["objective"]["reward"].items() if v is not None}
    (folder / CONTRACT).write_text(yaml.safe_dump(data, sort_keys=False))
    found = [(d.code, d.path) for d in check_file(folder / CONTRACT).diagnostics if d.severity == "error"]
    assert found == [("RLV206", where)]


def test_a_set_needs_its_own_verifier(tmp_path: Path) -> None:
    from rlvr_cli.contract.load import check_file

    folder = _experiment(tmp_path)
    assert not [d for d in check_file(folder / CONTRACT).diagnostics if d.severity == "error"]
    data = yaml.safe_load((folder / CONTRACT).read_text())
    data["environment"].pop("verifier")
    data["environment"]["answer_check"] = {"extract": "whole"}
    (folder / CONTRACT).write_text(yaml.safe_dump(data, sort_keys=False))
    found = [(d.code, d.path) for d in check_file(folder / CONTRACT).diagnostics if d.severity == "error"]
    assert ("RLV206", "environment.verifier") in found


def test_a_command_that_judges_one_response_at_a_time_refuses_a_set_verifier(tmp_path: Path) -> None:
    folder = _experiment(tmp_path)
    review = rlvr("tasks", "review", folder / CONTRACT, folder / "data" / "train.jsonl")
    assert review.code != 0 and "judges sets of responses together" in review.stderr
    assert "Traceback" not in review.stderr


# best of the set: a set passes when any member is the answer
BEST_OF = """
def verify(task, responses):
    right = float(any(r.strip() == task["answer"] for r in responses))
    return {"status": "ok", "reward": right, "components": {"right": right}}
"""
# reads only the first member: its reward depends on the order the members were sampled in
FIRST_ONLY = """
def verify(task, responses):
    right = float(responses[0].strip() == task["answer"])
    return {"status": "ok", "reward": right, "components": {"right": right}}
"""


def _set_audit(tmp_path: Path, verifier: str, candidates: list[dict[str, Any]] | None) -> Any:
    folder = _experiment(tmp_path)
    (folder / "sets_verifier.py").write_text(verifier)
    data = yaml.safe_load((folder / CONTRACT).read_text())
    data["objective"]["reward"]["components"] = [{"name": "right", "weight": 1.0}]
    data["acceptance"]["gates"][0]["metric"] = "right"
    data["length"]["max_response_tokens"] = 32  # room for the exploits (an enumeration of answers)
    (folder / CONTRACT).write_text(yaml.safe_dump(data, sort_keys=False))
    if candidates is not None:
        (folder / "audit").mkdir()
        (folder / "audit" / "candidates.yaml").write_text(yaml.safe_dump({"candidates": candidates}))
    return rlvr("audit", "verifier", folder / CONTRACT, "--tasks", "3", "--format", "json")


GOOD_SETS = [
    {"task": "add-3-2", "kind": "correct", "expected": "accept", "responses": ["5", "7"]},
    {"task": "add-3-2", "kind": "wrong", "expected": "reject", "responses": ["6", "7"]},
]


def test_the_audit_proves_a_set_verifier_on_sets_and_generated_arms(tmp_path: Path) -> None:
    audit = _set_audit(tmp_path, BEST_OF, GOOD_SETS)
    assert audit.code == 0, audit.stdout + audit.stderr
    report = json.loads(audit.stdout)
    outcomes = report["outcomes"]
    names = {o["name"].split("/", 1)[-1] for o in outcomes if o["name"]}
    assert {"set of empty responses", "set of wrong answers", "set of refusals", "set of exploits"} <= names
    assert all(len(o["transcript"]["responses"]) == 2 for o in outcomes)  # every candidate a whole set
    assert not report["findings"]


def test_a_set_verifier_fooled_by_a_generated_set_fails_its_audit(tmp_path: Path) -> None:
    distinct_only = SET_VERIFIER.replace('os.environ["SETS_LOG"]', "os.devnull").replace("distinct", "right")
    audit = _set_audit(tmp_path, distinct_only, [{**c, "expected": "accept"} for c in GOOD_SETS])
    assert audit.code == 1, audit.stdout + audit.stderr
    false = [o for o in json.loads(audit.stdout)["outcomes"] if o["expected"] == "reject" and o["got"] == "accept"]
    assert any(o["name"].endswith("/set of wrong answers") for o in false)  # different, none right: best reward


def test_a_set_verifier_that_reads_positions_is_a_finding(tmp_path: Path) -> None:
    audit = _set_audit(tmp_path, FIRST_ONLY, GOOD_SETS)
    assert audit.code == 1, audit.stdout + audit.stderr
    findings = json.loads(audit.stdout)["findings"]
    assert any("depends on the order of its members" in f and "add-3-2" in f for f in findings), findings


@pytest.mark.parametrize(
    ("candidates", "said"),
    [
        (None, "no candidate set expected to be accepted"),
        ([{"task": "add-3-2", "kind": "correct", "expected": "accept", "response": "5"}], "give `responses:`"),
        ([{"task": "add-3-2", "kind": "correct", "expected": "accept", "responses": ["5"]}], "holds 1 responses"),
    ],
)
def test_a_set_control_group_must_be_sets_with_a_known_good_one(
    tmp_path: Path, candidates: list[dict[str, Any]] | None, said: str
) -> None:
    audit = _set_audit(tmp_path, BEST_OF, candidates)
    assert audit.code == 3 and said in audit.stderr, audit.stderr  # the audit could not run
    assert "Traceback" not in audit.stderr
