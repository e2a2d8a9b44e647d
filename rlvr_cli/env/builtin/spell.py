"""Spell a code: answer with the three digits the prompt names (`spell 472` → `472`). Too
hard for a tiny model from scratch — three digits in a row by chance is one in ~125,000 —
so the example trains with hints: the task's `hint` holds the code's first two digits,
given as the start of the response (`data.hints.placement: response_prefix`), and a hinted
sample needs only the last digit. Hinted groups hold correct answers to learn from while
unhinted ones are all wrong; the hinted share falls to none as training goes on.
"""

from __future__ import annotations

import json
import random
from pathlib import Path
from typing import Any

from rlvr_cli.env.verdict import Verdict

SPLITS = {"train": 64, "holdout": 16, "sealed_eval": 16}


def verify(task: dict[str, Any], response: str) -> Verdict:
    """`correct`: 1 when the response's opening digits are exactly the code; `format`: 1 when
    it opens with three digits."""
    text = response.strip()
    digits = text[: len(text) - len(text.lstrip("0123456789"))]
    if len(digits) < 3:
        return Verdict("format_error", 0.0, {"correct": 0.0, "format": 0.0}, "no three-digit code at the start")
    correct = float(digits == str(task["answer"]))
    return Verdict("ok", correct, {"correct": correct, "format": 1.0})


def tasks(seed: int = 0) -> dict[str, list[dict[str, Any]]]:
    rng = random.Random(seed)
    codes = rng.sample(range(100, 1000), sum(SPLITS.values()))
    out, start = {}, 0
    for name, n in SPLITS.items():
        out[name] = [
            {"id": f"spell-{c}", "prompt": f"spell {c}", "answer": str(c), "hint": str(c)[:2], "domain": "spell"}
            for c in codes[start : start + n]
        ]
        start += n
    for row in out["sealed_eval"]:
        del row["hint"]  # sealed_eval is hint-free (data.hints.leak_check)
    return out


def write_splits(folder: Path) -> dict[str, Path]:
    folder.mkdir(parents=True, exist_ok=True)
    paths, every = {}, []
    for name, rows in tasks().items():
        paths[name] = folder / f"{name}.jsonl"
        paths[name].write_text("".join(json.dumps(r) + "\n" for r in rows), encoding="utf-8")
        every += rows
    paths["all"] = folder / "all.jsonl"
    paths["all"].write_text("".join(json.dumps(r) + "\n" for r in every), encoding="utf-8")
    return paths


if __name__ == "__main__":
    import sys

    for name, path in write_splits(Path(sys.argv[1])).items():
        print(f"{name}: {path}")
