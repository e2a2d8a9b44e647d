"""The tool-use example that learns, through the real CLI: `rlvr init --template lookup` builds
and warm-starts the tiny model, `rlvr train` runs episodes against the `lookup` server, and
the records show the tool-call rate rising and the final answers becoming correct; the gate
(greedy episodes on boxes never trained on) passes and the report is written."""

from __future__ import annotations

import json
from pathlib import Path

import pyarrow.parquet as pq
import pytest

from tests.conftest import rlvr


def episodes_by_step(run_dir: Path) -> dict[int, list[dict]]:
    """Training episodes of each step: did the episode call the tool, was it correct."""
    steps: dict[int, list[dict]] = {}
    for shard in sorted((run_dir / "records").glob("*.parquet")):
        for row in pq.read_table(shard, columns=["step", "transcript", "components"]).to_pylist():
            transcript = row["transcript"]
            transcript = json.loads(transcript) if isinstance(transcript, str) else transcript
            components = row["components"]
            components = json.loads(components) if isinstance(components, str) else components
            steps.setdefault(row["step"], []).append({"called": transcript["calls"] > 0, **components})
    return steps


def rate(steps: dict[int, list[dict]], which: range, key: str) -> float:
    rows = [e for s in which for e in steps[s]]
    return sum(float(e[key]) for e in rows) / len(rows)


@pytest.mark.slow
def test_lookup_template_learns_to_call_the_tool_and_answer(tmp_path: Path) -> None:
    folder, run_dir = tmp_path / "lookup", tmp_path / "run"
    made = rlvr("init", folder, "--template", "lookup", timeout=300)
    assert made.code == 0, made.stderr
    contract = folder / "experiment.rlvr.yaml"
    assert rlvr("validate", "--deep", "--strict", contract).code == 0
    done = rlvr("train", contract, "--run-dir", run_dir, "--max-steps", "30", timeout=600)
    assert done.code == 0, done.stderr[-2000:]

    steps = episodes_by_step(run_dir)
    first, last = range(0, 5), range(25, 30)
    called = rate(steps, first, "called"), rate(steps, last, "called")
    correct = rate(steps, first, "correct"), rate(steps, last, "correct")
    assert called[0] <= 0.8 and called[1] >= called[0] + 0.15, called
    assert correct[0] <= 0.75 and correct[1] >= correct[0] + 0.15 and correct[1] >= 0.8, correct
    # the reward is the server's: no episode is correct without having looked
    assert all(e["looked"] == 1.0 for s in steps.values() for e in s if e["correct"] == 1.0)

    rollouts = rlvr("audit", "rollouts", run_dir)
    assert rollouts.code == 0 and "calls per episode" in rollouts.stdout, rollouts.stdout
    gate = rlvr("gate", contract, "--candidate", run_dir, timeout=300)
    verdict = json.loads((run_dir / "gate" / "verdict.json").read_text())
    assert gate.code == 0 and verdict["release"] == "pass", gate.stdout
    correct_gate = next(g for g in verdict["gates"] if g["name"] == "holdout-correct")
    assert correct_gate["overall"]["candidate"][1] >= 0.5  # the lower bound on boxes never trained on
    report = rlvr("report", run_dir, "--out", tmp_path / "report.html")
    assert report.code == 0 and "holdout/correct" in (tmp_path / "report.html").read_text()
