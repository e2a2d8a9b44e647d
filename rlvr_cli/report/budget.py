"""Runs compared at the same spent budget (`rlvr report A B --by …`): rollouts generated, tokens
generated or verifier seconds — discarded generations included, since they were paid for — or
steps. Each curve's x is what the run had spent after that step; the verdict reads every run at
the least budget any of them spent, so no run is judged on budget another never had."""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

from rlvr_cli.errors import RlvrError

#: `--by` → the metrics.jsonl total that measures it (None: the step count)
AXES: dict[str, str | None] = {
    "step": None,
    "rollouts": "total_rollouts",
    "tokens": "total_tokens",
    "verifier_seconds": "total_verifier_seconds",
}
LABELS = {
    "step": "steps done",
    "rollouts": "rollouts generated (discarded included)",
    "tokens": "tokens generated (discarded included)",
    "verifier_seconds": "verifier seconds (discarded included)",
}
WINDOW = 5  # train-reward rows averaged at the common budget when a run has no holdout


@dataclass(frozen=True)
class Standing:
    name: str
    spent: float  # the run's whole budget
    value: float | None  # its metric at the common budget
    at: float | None  # the budget where that value was measured


def spent_after(row: dict[str, Any], by: str) -> float | None:
    """What the run had spent once this row's step was done."""
    key = AXES[by]
    if key is None:
        return float(row["step"]) + 1
    value = row.get(key)
    return float(value) if isinstance(value, int | float) and math.isfinite(value) else None


def curve(rows: list[dict[str, Any]], key: str, by: str, start: dict[str, Any] | None) -> list[tuple[float, float]]:
    """(budget spent, value) of `key`; the holdout before training sits at 0."""
    out = []
    if start is not None and isinstance(start.get(key), int | float):
        out.append((0.0, float(start[key])))
    for row in rows:
        x, y = spent_after(row, by), row.get(key)
        if x is not None and isinstance(y, int | float) and math.isfinite(y):
            out.append((x, float(y)))
    return out


def check_axis(names: list[str], metrics: list[list[dict[str, Any]]], by: str) -> None:
    key = AXES[by]
    for name, rows in zip(names, metrics, strict=True):
        if key is not None and rows and not any(key in r for r in rows):
            raise RlvrError(
                f"run {name} has no {key} in its metrics.jsonl (written before rlvr measured it); "
                f"compare by {', '.join(a for a in AXES if a != by)}"
            )


def standings(
    names: list[str], metrics: list[list[dict[str, Any]]], starts: list[dict[str, Any] | None], by: str
) -> tuple[str, float, list[Standing]]:
    """The metric compared (holdout reward where every run has one, else train reward), the
    common budget, and each run's value there."""
    every = all(curve(m, "holdout_reward", by, s) for m, s in zip(metrics, starts, strict=True))
    key = "holdout_reward" if every else "reward_mean"
    totals = [max((spent_after(r, by) or 0.0 for r in m), default=0.0) for m in metrics]
    common = min(totals, default=0.0)
    out = []
    for name, rows, start, total in zip(names, metrics, starts, totals, strict=True):
        points = [(x, y) for x, y in curve(rows, key, by, start) if x <= common]
        if key == "reward_mean" and points:
            window = points[-WINDOW:]
            out.append(Standing(name, total, sum(y for _, y in window) / len(window), window[-1][0]))
        else:
            out.append(Standing(name, total, points[-1][1] if points else None, points[-1][0] if points else None))
    return key, common, out


def verdict(key: str, common: float, rows: list[Standing], by: str) -> str:
    """One sentence: which run got further at the same budget."""
    what = "holdout reward" if key == "holdout_reward" else f"train reward (mean of the last {WINDOW} steps)"
    known = [r for r in rows if r.value is not None]
    if len(known) < 2:
        return f"At {_amount(common, by)}, fewer than two runs have a {what} to compare."
    best = max(known, key=lambda r: r.value)  # type: ignore[arg-type, return-value]
    ties = [r for r in known if r.value == best.value]
    said = ", ".join(f"{r.name} {r.value:.3f}" for r in known)
    ahead = f"{' and '.join(r.name for r in ties)} tie for the lead" if len(ties) > 1 else f"{best.name} got further"
    return f"At {_amount(common, by)} (the least any run spent), {what}: {said}. {ahead}."


def _amount(value: float, by: str) -> str:
    if by == "verifier_seconds":
        return f"{value:,.1f} verifier seconds"
    return f"{value:,.0f} {LABELS[by].split(' (')[0]}"


def section(names: list[str], metrics: list[list[dict[str, Any]]], starts: list[dict[str, Any] | None], by: str) -> str:
    """The comparison page's verdict at equal budget, with each run's standing."""
    from rlvr_cli.report.html import _esc, _table

    key, common, standing = standings(names, metrics, starts, by)
    rows = [
        [_esc(r.name), f"{r.spent:,.6g}", "—" if r.value is None else f"{r.value:.3f}", f"{r.at or 0:,.6g}"]
        for r in standing
    ]
    return (
        f"<h2>At the same budget ({_esc(LABELS[by])})</h2>"
        f"<p class='verdict'>{_esc(verdict(key, common, standing, by))}</p>"
        + _table(["run", "spent in all", key, "measured at"], rows)
    )


def compute_fact(plan: dict[str, Any], metrics: list[dict[str, Any]]) -> str:
    """Model FLOPs of the steps and the MFU over all of them: what they did against the peak of
    the devices for their time (train/flops.py, train/calibration.py)."""
    done = [r for r in metrics if isinstance(r.get("step_tflop"), float) and r.get("step_seconds")]
    peak, processes = plan.get("peak_tflops"), plan.get("processes") or 1
    if not done or not isinstance(peak, float | int) or peak <= 0:
        return ""
    tflop, seconds = sum(r["step_tflop"] for r in done), sum(r["step_seconds"] for r in done)
    mfu = tflop / (seconds * float(peak) * int(processes))
    # runs since plan.json named its source divide by the best this machine has shown (train/calibration.py)
    measured = "the best measured on this machine" if plan.get("peak_source") else "measured"
    return (
        f"{tflop:,.2f} TFLOP of model FLOPs in {seconds:,.0f} s: MFU {mfu:.1%} of {float(peak):g} TFLOP/s "
        f"{measured} per device × {int(processes)}"
    )
