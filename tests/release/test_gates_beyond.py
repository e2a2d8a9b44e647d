"""Gates beyond the contract's own splits, through `rlvr gate`: a retention suite (another
contract's evaluation) catches a candidate that improved its own task and lost what its starting
policy could do; cost and latency gates pass and fail as their thresholds say."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from rlvr_cli.contract.load import check_file
from tests.conftest import copy_experiment, edit, rlvr

CONTRACT = "experiment.rlvr.yaml"
VERIFIERS = "    - {name: verifier-errors, metric: error_rate, split: holdout, max: 0.05}"
PREVIOUS = '''"""A capability the starting policy has: answering as it did before training (`before`)."""

from rlvr_cli.env import Verdict


def verify(task: dict, response: str) -> Verdict:
    same = float(response.strip() == task.get("before"))
    return Verdict("ok", same, {"correct": same, "format": 1.0})
'''
GATES = (
    VERIFIERS
    + """
    - {name: own-format, metric: format, split: holdout, min_delta: 0.0}
    - {name: cheap, metric: tokens_per_task, split: holdout, max: 100}
    - {name: too-cheap, metric: tokens_per_task, split: holdout, max: 0.5}
    - {name: verify-time, metric: verifier_seconds, split: holdout, max: 10}
    - {name: first-token, metric: ttft_s, split: holdout, max: 1000}
    - {name: per-token, metric: tpot_s, split: holdout, max: 1000}
    - {name: to-the-end, metric: latency_s, split: holdout, max: 1.0e-9}
  latency: {concurrency: 4, repeats: 2}
  suites:
    - name: previous
      contract: ../previous/experiment.rlvr.yaml
      gates: [{name: kept, metric: correct, split: holdout, max_drop: 0.0, confidence: 0.9, critical: true}]"""
)


def previous_task(single_turn: Path, target: Path) -> Path:
    """The same prompts, rewarded for the answer the starting policy gives (recorded greedily)."""
    from rlvr_cli.contract.load import load
    from rlvr_cli.release.drill import record

    folder = copy_experiment(single_turn, target)
    (folder / "verifier.py").write_text(PREVIOUS)
    holdout = folder / "data" / "holdout.jsonl"
    rows = [json.loads(line) for line in holdout.read_text().splitlines()]
    said = {r["task"]: r["text"].strip() for r in record(load(folder / CONTRACT), folder, folder / "model", len(rows))}
    holdout.write_text("".join(json.dumps({**row, "before": said[row["id"]]}) + "\n" for row in rows))
    return folder


@pytest.mark.slow
def test_retention_cost_and_latency_gates(single_turn: Path, tmp_path: Path) -> None:
    previous_task(single_turn, tmp_path / "previous")
    folder = copy_experiment(single_turn, tmp_path / "exp", [("min: 0.3, confidence", "min: 0.0, confidence")])
    edit(folder, VERIFIERS, GATES)
    assert rlvr("validate", folder / CONTRACT).code == 0
    run = folder / "runs" / "c"
    trained = rlvr("train", folder / CONTRACT, "--max-steps", "8", "--run-dir", run, timeout=600)
    assert trained.code == 0, trained.stderr[-2000:]
    done = rlvr("gate", folder / CONTRACT, "--candidate", run, timeout=900)
    assert done.code == 1, done.stdout + done.stderr
    verdict = json.loads((run / "gate" / "verdict.json").read_text())
    outcome = {g["name"]: g for g in verdict["gates"]}
    assert outcome["own-format"]["overall"]["delta"][0] > 0  # it improved its own task
    assert not outcome["previous/kept"]["overall"]["passed"]  # and lost the previous one
    assert outcome["previous/kept"]["critical"] and verdict["release"] == "fail"
    for name, passed in (("cheap", True), ("too-cheap", False), ("verify-time", True)):
        assert outcome[name]["overall"]["passed"] is passed, name
    assert outcome["first-token"]["overall"]["passed"] and outcome["per-token"]["overall"]["passed"]
    assert not outcome["to-the-end"]["overall"]["passed"]
    assert 0 < outcome["first-token"]["overall"]["candidate"][0] < 1000
    # answers of a token or two: the time after the first is within the timings' noise, never below zero
    assert 0 <= outcome["per-token"]["overall"]["candidate"][0] < 1000


def test_latency_keys_are_required_together(single_turn: Path, tmp_path: Path) -> None:
    folder = copy_experiment(single_turn, tmp_path / "exp")
    timed = VERIFIERS + "\n    - {name: first-token, metric: ttft_s, split: holdout, max: 1}"
    edit(folder, VERIFIERS, timed)
    codes = [(d.code, d.message) for d in check_file(folder / CONTRACT).diagnostics]
    assert any(c == "RLV003" and "missing required key 'latency'" in m for c, m in codes), codes
    edit(folder, timed, VERIFIERS + "\n  latency: {concurrency: 4}")
    codes = [(d.code, d.message) for d in check_file(folder / CONTRACT).diagnostics]
    assert any(c == "RLV003" and "read only by gates on ttft_s" in m for c, m in codes), codes
    edit(folder, VERIFIERS + "\n  latency: {concurrency: 4}", timed + "\n  latency: {concurrency: 4}")
    assert check_file(folder / CONTRACT).valid
