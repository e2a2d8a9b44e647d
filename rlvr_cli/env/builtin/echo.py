"""Digit echo: answer with the digit the prompt names. A task a tiny model learns on a CPU in a
minute, with a holdout it can only pass by generalising: the holdout and sealed splits phrase
the request with verbs that never occur in training (`print 7`, `show 7` vs `echo 7`).

Every row carries its verb as `composition`, so `data.holdout_design` can say which phrasings
are held out and `rlvr validate --deep` checks it.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from rlvr_cli.env.verdict import Verdict

SPLITS = {"train": ("echo", "say", "copy", "repeat"), "holdout": ("print", "write"), "sealed_eval": ("show",)}


def verify(task: dict[str, Any], response: str) -> Verdict:
    """`correct`: 1 when the response opens with the right digit; `format`: 1 when it opens with
    a digit at all. Only the first character is read: the answer is one digit."""
    text = response.strip()
    if not text or not text[0].isdigit():
        return Verdict("format_error", 0.0, {"correct": 0.0, "format": 0.0}, "response does not start with a digit")
    correct = float(text[0] == str(task["answer"]))
    return Verdict("ok", correct, {"correct": correct, "format": 1.0})


def verify_ending(task: dict[str, Any], response: str) -> Verdict:
    """The answer and its end, for answers of up to two tokens: `correct` when the response
    opens with the right digit, `format` when it opens with a digit, `stopped` when it is the
    right digit and nothing else — the policy ended it with the stop token. `stopped` rewards the
    end only on a right answer: a bonus for stopping after any digit makes every stopping sample's
    digit look good, and the policy collapses onto one digit before it learns the mapping."""
    text = response.strip()
    if not text or not text[0].isdigit():
        return Verdict("format_error", 0.0, {"correct": 0.0, "format": 0.0, "stopped": 0.0}, "no digit first")
    correct = float(text[0] == str(task["answer"]))
    stopped = float(text == str(task["answer"]))
    return Verdict("ok", correct, {"correct": correct, "format": 1.0, "stopped": stopped})


def tasks(verbs: tuple[str, ...]) -> list[dict[str, Any]]:
    return [
        {
            "id": f"{verb}-{d}",
            "prompt": f"{verb} {d}",
            "answer": str(d),
            "domain": "echo",
            "difficulty": "easy",
            "composition": verb,
        }
        for verb in verbs
        for d in range(10)
    ]


def write_splits(folder: Path) -> dict[str, Path]:
    folder.mkdir(parents=True, exist_ok=True)
    paths = {}
    for name, verbs in SPLITS.items():
        paths[name] = folder / f"{name}.jsonl"
        paths[name].write_text("".join(json.dumps(r) + "\n" for r in tasks(verbs)), encoding="utf-8")
    every = tuple(v for verbs in SPLITS.values() for v in verbs)
    paths["all"] = folder / "all.jsonl"
    paths["all"].write_text("".join(json.dumps(r) + "\n" for r in tasks(every)), encoding="utf-8")
    return paths


if __name__ == "__main__":
    import sys

    for name, path in write_splits(Path(sys.argv[1])).items():
        print(f"{name}: {path}")
