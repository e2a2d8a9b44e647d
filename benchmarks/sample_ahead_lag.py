"""Steps per second on-policy vs sampling 1 or 2 steps ahead (`sample_ahead`, `max_policy_lag`).

The single-turn template (`rlvr init`: the tiny arithmetic policy, 8 prompts × 8 samples, ≤ 8 new
tokens a step), `rlvr train` as a user runs it, arms alternating (lag 0, 1, 2, 0, …) so drift in
the machine's speed falls on every arm alike; with a lag the ratio is over the engine's
log-probs (`objective.ratio`). Measured: the sum of the run's own `step_seconds`, the time steps
waited for samples drawn ahead, and the whole process. Usage:

    .venv/bin/python benchmarks/sample_ahead_lag.py [--steps 100] [--repeat 3]
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

RATIO = "  ratio: {level: token, denominator: engine}\n"


def contract(base: str, lag: int) -> str:
    if not lag:
        return base
    text = base.replace("max_policy_lag: 0", f"max_policy_lag: {lag}\n  sample_ahead: true")
    return text.replace("  aggregation: ", RATIO + "  aggregation: ")


def train(folder: Path, lag: int, steps: int, run: Path) -> tuple[float, float, float, float]:
    path = folder / "experiment.rlvr.yaml"
    path.write_text(contract((folder / "base.rlvr.yaml").read_text(), lag))
    start = time.perf_counter()
    cmd = [sys.executable, "-m", "rlvr_cli", "train", str(path), "--run-dir", str(run), "--max-steps", str(steps)]
    done = subprocess.run(cmd, capture_output=True, text=True)
    wall = time.perf_counter() - start
    assert done.returncode == 0, done.stderr[-2000:]
    rows = [json.loads(line) for line in (run / "metrics.jsonl").read_text().splitlines()]
    assert [r["policy_lag"] for r in rows[: lag + 2]] == [min(s, lag) for s in range(lag + 2)], rows[:3]
    waited = sum(r.get("time_wait_rollouts_s", 0.0) for r in rows)
    return sum(r["step_seconds"] for r in rows), waited, sum(r["time_update_s"] for r in rows), wall


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--steps", type=int, default=100)
    parser.add_argument("--repeat", type=int, default=3)
    args = parser.parse_args()
    lags = (0, 1, 2)
    found: dict[int, list[tuple[float, float, float, float]]] = {lag: [] for lag in lags}
    with tempfile.TemporaryDirectory() as tmp:
        folder = Path(tmp) / "arith"
        subprocess.run([sys.executable, "-m", "rlvr_cli", "init", str(folder)], check=True, capture_output=True)
        (folder / "experiment.rlvr.yaml").rename(folder / "base.rlvr.yaml")
        for r in range(args.repeat):
            for lag in lags:
                found[lag].append(train(folder, lag, args.steps, Path(tmp) / f"run-{r}-{lag}"))
                s, w, u, t = found[lag][-1]
                print(
                    f"  lag {lag} pass {r + 1}: steps {s:6.2f} s, waited {w:5.2f} s, update {u:5.2f} s", file=sys.stderr
                )
    print(f"{args.steps} steps, median of {args.repeat} alternating passes")
    print("| max_policy_lag | steps/s | Σ step_seconds | waited for samples | Σ time_update_s | whole process |")
    print("|---|---|---|---|---|---|")
    for lag in lags:
        s, w, u, t = (statistics.median(x[i] for x in found[lag]) for i in range(4))
        print(f"| {lag} | {args.steps / s:.2f} | {s:.2f} s | {w:.2f} s | {u:.2f} s | {t:.1f} s |")


if __name__ == "__main__":
    main()
