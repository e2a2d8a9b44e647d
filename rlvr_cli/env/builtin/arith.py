"""Single-digit arithmetic: a verifiable toy task a tiny model can learn on a CPU in minutes.

Prompts are `a+b=` with a one-digit sum; the answer is the number that opens the response.
"""

from __future__ import annotations

import json
import random
from pathlib import Path
from typing import Any

from rlvr_cli.env.verdict import Verdict


def verify(task: dict[str, Any], response: str) -> Verdict:
    """`correct`: 1 when the response opens with the right number; `format`: 1 when it opens
    with a number at all (a dense signal a tiny random model finds first)."""
    text = response.strip()
    digits = ""
    for char in text:
        if not char.isdigit():
            break
        digits += char
    if not digits:
        return Verdict("format_error", 0.0, {"correct": 0.0, "format": 0.0}, "response does not start with a number")
    correct = float(int(digits) == int(task["answer"]))
    return Verdict("ok", correct, {"correct": correct, "format": 1.0})


def tasks() -> list[dict[str, Any]]:
    """Every a+b with a one-digit sum, tagged by whether an operand is zero."""
    rows = []
    for a in range(10):
        for b in range(10 - a):
            difficulty = "trivial" if 0 in (a, b) else "easy"
            rows.append(
                {
                    "id": f"add-{a}-{b}",
                    "prompt": f"{a}+{b}=",
                    "answer": str(a + b),
                    "domain": "add",
                    "difficulty": difficulty,
                }
            )
    return rows


def write_splits(folder: Path, seed: int = 0) -> dict[str, Path]:
    """Shuffle the tasks with `seed` and write train/holdout/sealed_eval JSONL files."""
    rows = tasks()
    random.Random(seed).shuffle(rows)
    parts = {"train": rows[:35], "holdout": rows[35:45], "sealed_eval": rows[45:]}
    folder.mkdir(parents=True, exist_ok=True)
    paths = {}
    for name, part in parts.items():
        path = folder / f"{name}.jsonl"
        path.write_text("".join(json.dumps(r) + "\n" for r in part), encoding="utf-8")
        paths[name] = path
    all_path = folder / "all.jsonl"
    all_path.write_text("".join(json.dumps(r) + "\n" for r in tasks()), encoding="utf-8")
    paths["all"] = all_path
    return paths
