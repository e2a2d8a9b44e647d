"""Unit-test verdicts per second (`environment.unit_tests`): the same runner and the same test
cases, once inside the bubblewrap sandbox and once in a plain subprocess (no namespaces, no
limits: what a naive runner pays), on the code template's tasks and reference solutions — half of
them correct, half broken. Sequential (one verifier worker) and with one worker per core.

    .venv/bin/python benchmarks/sandbox_verdicts.py [--rounds 5] [--workers 2]
"""

from __future__ import annotations

import argparse
import json
import os
import time
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
TASKS = ROOT / "templates" / "code" / "data" / "all.jsonl"


def items(rounds: int) -> list[tuple[dict, str]]:
    tasks = [json.loads(line) for line in TASKS.read_text().splitlines()]
    out = []
    for r in range(rounds):
        for i, task in enumerate(tasks):
            code = task["solution"] if (i + r) % 2 == 0 else "raise SystemExit(1)\n"
            out.append((task, code))
    return out


def verdict(item: tuple[dict, str], plain: bool) -> float:
    from rlvr_cli.env.builtin.unit_tests import judge_case, parse_tests
    from rlvr_cli.env.sandbox import Limits, run

    task, code = item
    sent, expected = parse_tests(task["tests"])
    outcome = run({**sent, "code": code}, Limits(case_timeout_s=2.0, memory_mb=256, processes=8), 20.0, plain=plain)
    passed = [judge_case(sent["mode"], outcome.cases.get(i), want) is None for i, want in enumerate(expected)]
    return sum(passed) / len(passed)


def rate(work: list[tuple[dict, str]], plain: bool, workers: int) -> tuple[float, float]:
    start = time.perf_counter()
    if workers == 1:
        scores = [verdict(item, plain) for item in work]
    else:
        with ProcessPoolExecutor(workers) as pool:
            scores = list(pool.map(verdict, work, [plain] * len(work)))
    return len(work) / (time.perf_counter() - start), sum(scores)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--workers", type=int, default=os.cpu_count() or 1)
    args = parser.parse_args()
    from rlvr_cli.env.sandbox import problem

    if problem():
        raise SystemExit(problem())
    work = items(args.rounds)
    cases = sum(len(t["tests"]["cases"]) for t, _ in work)
    print(f"{len(work)} verdicts, {cases} test cases")
    for workers in sorted({1, args.workers}):
        plain, plain_score = rate(work, True, workers)
        boxed, boxed_score = rate(work, False, workers)
        assert plain_score == boxed_score, (plain_score, boxed_score)  # the same verdicts either way
        print(
            f"workers {workers}: plain subprocess {plain:.1f} verdicts/s, sandbox {boxed:.1f} verdicts/s, "
            f"sandbox costs {plain / boxed:.2f}x"
        )


if __name__ == "__main__":
    main()
