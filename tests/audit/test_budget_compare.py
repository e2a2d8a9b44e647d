"""`rlvr report A B C --by …`: the shipped GRPO, DAPO and Dr. GRPO contracts compared at the same
spent budget, discarded generations included; the verdict checked against metrics.jsonl."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from tests.conftest import ROOT, built_once, rlvr

pytestmark = pytest.mark.slow  # trains three runs: make test runs it, make test-fast does not

OBJECTIVES = ("grpo-cpu", "dapo-cpu", "dr-grpo-cpu")
TOTAL = {"rollouts": "total_rollouts", "tokens": "total_tokens", "verifier_seconds": "total_verifier_seconds"}


@pytest.fixture(scope="module")
def three_runs(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    def build(folder: Path) -> None:
        from rlvr_cli.toy.tiny import ARITHMETIC, build_tiny

        shutil.copytree(ROOT / "contracts" / "arith", folder / "arith", ignore=shutil.ignore_patterns("model"))
        build_tiny(folder / "arith" / "model", "chatml", alphabet=ARITHMETIC)
        for name in OBJECTIVES:
            shutil.copyfile(ROOT / "contracts" / f"{name}.rlvr.yaml", folder / f"{name}.rlvr.yaml")
            done = rlvr("train", folder / f"{name}.rlvr.yaml", "--run-dir", folder / "runs" / name, "--max-steps", "10")
            assert done.code == 0, done.stderr[-2000:]

    folder = built_once(tmp_path_factory, "three-objectives", build)
    return {name: folder / "runs" / name for name in OBJECTIVES}


def rows(run: Path) -> list[dict]:
    return [json.loads(line) for line in (run / "metrics.jsonl").read_text().splitlines()]


def expected_verdict(runs: dict[str, Path], by: str) -> tuple[float, dict[str, float]]:
    """The common budget and each run's holdout reward there, computed from the files alone."""
    spent = {n: rows(r)[-1][TOTAL[by]] for n, r in runs.items()}
    common = min(spent.values())
    values = {}
    for name, run in runs.items():
        points = [(0.0, json.loads((run / "holdout-start.json").read_text())["holdout_reward"])]
        points += [(r[TOTAL[by]], r["holdout_reward"]) for r in rows(run) if r.get("holdout_reward") is not None]
        values[name] = [v for x, v in points if x <= common][-1]
    return common, values


@pytest.mark.parametrize("by", ["rollouts", "tokens", "verifier_seconds"])
def test_the_three_objectives_are_read_at_the_least_budget_any_spent(
    three_runs: dict[str, Path], tmp_path: Path, by: str
) -> None:
    dapo, grpo = rows(three_runs["dapo-cpu"]), rows(three_runs["grpo-cpu"])
    assert dapo[-1]["total_rollouts"] > grpo[-1]["total_rollouts"] == 10 * 64  # dynamic sampling pays for discards
    assert sum(r["tokens_discarded"] for r in dapo) > 0
    assert all(r["total_verifier_seconds"] >= r["verifier_seconds"] > 0 for r in grpo)
    out = tmp_path / "compare.html"
    done = rlvr("report", *three_runs.values(), "--by", by, "--out", out)
    assert done.code == 0, done.stderr
    page = out.read_text()
    common, values = expected_verdict(three_runs, by)
    said = ", ".join(f"{name} {value:.3f}" for name, value in values.items())
    amount = f"{common:,.1f} verifier seconds" if by == "verifier_seconds" else f"{common:,.0f} {by} generated"
    assert f"At {amount} (the least any run spent), holdout reward: {said}" in page
    best = max(values.values())
    leaders = [n for n, v in values.items() if v == best]
    ahead = f"{leaders[0]} got further." if len(leaders) == 1 else f"{' and '.join(leaders)} tie for the lead."
    assert f"{said}. {ahead}" in page
    assert "discarded included" in page


def test_by_step_is_the_default_and_a_bad_axis_or_a_single_run_is_refused(
    three_runs: dict[str, Path], tmp_path: Path
) -> None:
    out = tmp_path / "compare.html"
    assert rlvr("report", *three_runs.values(), "--out", out).code == 0
    assert "At 10 steps done (the least any run spent)" in out.read_text()
    wrong = rlvr("report", *three_runs.values(), "--by", "dollars", "--out", out)
    assert wrong.code == 2 and "choose step, rollouts, tokens, verifier_seconds" in wrong.stderr
    single = rlvr("report", three_runs["grpo-cpu"], "--by", "rollouts")
    assert single.code == 2 and "give two or more run folders" in single.stderr
