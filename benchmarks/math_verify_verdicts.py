"""Verdicts per second of the built-in answer check (`environment.answer_check`, math-verify),
in process and through the verifier worker the trainer uses, on generated responses: a third
correct in another form, a third wrong, a third without a boxed answer.

    .venv/bin/python benchmarks/math_verify_verdicts.py [--n 2000]
"""

from __future__ import annotations

import argparse
import random
import tempfile
import time
from fractions import Fraction
from pathlib import Path


def cases(n: int) -> list[tuple[dict, str]]:
    rng = random.Random(0)
    out = []
    for i in range(n):
        value = Fraction(rng.randint(1, 99), rng.randint(1, 12))
        gold = f"\\frac{{{value.numerator}}}{{{value.denominator}}}" if value.denominator > 1 else str(value.numerator)
        kind = i % 3
        if kind == 0:  # right, written another way
            shown = f"{value.numerator * 2}/{value.denominator * 2}"
            response = f"Adding them up gives \\boxed{{{shown}}}."
        elif kind == 1:  # wrong
            response = f"So the result is \\boxed{{{value.numerator + 1}/{value.denominator}}}."
        else:  # no boxed answer
            response = f"I think it is {float(value):.3f} or so."
        out.append(({"id": i, "answer": gold}, response))
    return out


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--n", type=int, default=2000)
    args = parser.parse_args()
    from rlvr_cli.env.builtin.answer import AnswerCheck
    from rlvr_cli.env.verifier_pool import ANSWER_CHECK, VerifierPool

    items = cases(args.n)
    check = AnswerCheck("last_boxed")
    start = time.perf_counter()
    verdicts = [check(task, response) for task, response in items]
    in_process = args.n / (time.perf_counter() - start)
    correct = sum(v.components.get("correct", 0) for v in verdicts)
    options = {"extract": "last_boxed", "answer_field": "answer", "timeout_s": 5.0}
    with VerifierPool(ANSWER_CHECK, Path(tempfile.mkdtemp()), 30.0, None, options) as pool:
        pool.verify_many(items[:10])  # warm-up: sympy's first parse
        start = time.perf_counter()
        pool.verify_many(items)
        worker = args.n / (time.perf_counter() - start)
    print(f"{args.n} responses, {correct:.0f} correct (expected {len(range(0, args.n, 3))})")
    print(f"| path | verdicts/s |\n|---|---|\n| in process | {in_process:,.0f} |\n| verifier worker | {worker:,.0f} |")


if __name__ == "__main__":
    main()
