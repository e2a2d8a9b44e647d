"""Steps per second with each tracker on vs off, on the generation-bound shape.

The single-turn template (`rlvr init`: the tiny arithmetic policy, 8 prompts × 8 samples,
≤ 8 new tokens a step, holdout every 10 steps), `rlvr train` as a user runs it, in alternating
order (off, tensorboard, mlflow, wandb, trackio, all four, off, …) so drift in the machine's
speed falls on every arm alike. Measured: the sum of the run's own `step_seconds` over every
step (a tracker's import and opening run on its thread while the first steps train: on 2 cores
they compete with them) and over the steps after the first 20 (steady state: a row per step),
and the whole process for reference. Usage:

    .venv/bin/python benchmarks/trackers_overhead.py [--steps 60] [--repeat 3]
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

ARMS = {
    "off": None,
    "tensorboard": "[tensorboard]",
    "mlflow": "[mlflow]",
    "wandb": "[wandb]",
    "trackio": "[trackio]",
    "all four": "[tensorboard, mlflow, wandb, trackio]",
}


STEADY = 20  # steps after which every tracker has imported and opened (the start-up is over)


def train(folder: Path, trackers: str | None, steps: int, run: Path) -> tuple[float, float, float]:
    contract = folder / "experiment.rlvr.yaml"
    text = (folder / "base.rlvr.yaml").read_text()
    if trackers:
        text = text.replace("  holdout_every: 10\n", f"  holdout_every: 10\n  trackers: {trackers}\n")
    contract.write_text(text)
    start = time.perf_counter()
    cmd = [sys.executable, "-m", "rlvr_cli", "train", str(contract), "--run-dir", str(run), "--max-steps", str(steps)]
    done = subprocess.run(cmd, capture_output=True, text=True)
    wall = time.perf_counter() - start
    assert done.returncode == 0, done.stderr[-2000:]
    assert "stopped:" not in done.stderr, done.stderr[-2000:]
    rows = [json.loads(line) for line in (run / "metrics.jsonl").read_text().splitlines()]
    return sum(r["step_seconds"] for r in rows), sum(r["step_seconds"] for r in rows[STEADY:]), wall


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--steps", type=int, default=60)
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--arms", default=",".join(ARMS), help="which arms, comma-separated (off is always run)")
    args = parser.parse_args()
    arms = {a: ARMS[a] for a in ARMS if a == "off" or a in args.arms.split(",")}
    with tempfile.TemporaryDirectory() as tmp:
        folder = Path(tmp) / "arith"
        subprocess.run([sys.executable, "-m", "rlvr_cli", "init", str(folder)], check=True, capture_output=True)
        (folder / "experiment.rlvr.yaml").rename(folder / "base.rlvr.yaml")
        every: dict[str, list[float]] = {arm: [] for arm in arms}
        steady: dict[str, list[float]] = {arm: [] for arm in arms}
        walls: dict[str, list[float]] = {arm: [] for arm in arms}
        for r in range(args.repeat):
            for arm, trackers in arms.items():
                s, t, w = train(folder, trackers, args.steps, Path(tmp) / f"run-{r}-{arm.replace(' ', '-')}")
                every[arm].append(s)
                steady[arm].append(t)
                walls[arm].append(w)
                print(f"  {arm:12s} pass {r + 1}: steps {s:6.2f} s, after {STEADY}: {t:6.2f} s", file=sys.stderr)
    base, base_steady = statistics.median(every["off"]), statistics.median(steady["off"])
    print(f"{args.steps} steps, median of {args.repeat} alternating passes")
    print(f"| trackers | steps/s | Σ step_seconds | vs off | steps {STEADY + 1}+ | vs off | whole process |")
    print("|---|---|---|---|---|---|---|")
    for arm in arms:
        s, t, w = (statistics.median(x[arm]) for x in (every, steady, walls))
        print(
            f"| {arm} | {args.steps / s:.2f} | {s:.2f} s | {100 * (s / base - 1):+.1f} % | {t:.2f} s | "
            f"{100 * (t / base_steady - 1):+.1f} % | {w:.1f} s |"
        )


if __name__ == "__main__":
    main()
