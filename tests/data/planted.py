"""Task data for the data-check tests: clean splits of distinct word problems, and plants —
each a known kind of leak, duplicate or secret — at known lines."""

from __future__ import annotations

import json
import random
from pathlib import Path
from typing import Any

NOUNS = "farmer baker sailor miner painter tailor pilot doctor teacher student driver singer".split()  # noqa: SIM905
THINGS = "apples coins stamps marbles books shells pencils tickets cards bottles rocks feathers".split()  # noqa: SIM905
VERBS = ["buys", "finds", "sells", "trades", "loses", "collects", "receives", "borrows", "gives", "packs"]
PLACES = ["market", "harbor", "library", "garden", "station", "bakery", "museum", "village", "forest", "bridge"]


def problem(rng: random.Random) -> tuple[str, str]:
    """A word problem of ~25 words, and its answer."""
    a, b = rng.randint(10, 99), rng.randint(2, 60)
    who, what, where = rng.choice(NOUNS), rng.choice(THINGS), rng.choice(PLACES)
    verb, second = rng.sample(VERBS, 2)
    adj = rng.choice(["small", "large", "blue", "red", "old", "new", "quiet", "busy"])
    text = (
        f"A {adj} {who} at the {where} has {a} {what}. "
        f"On Monday the {who} {verb} {b} more {what} and then {second} a few near the {rng.choice(PLACES)}. "
        f"How many {what} did the {who} have after Monday, before the {second.rstrip('s')}ing?"
    )
    return text, str(a + b)


def clean_rows(n: int, seed: int, prefix: str) -> list[dict[str, Any]]:
    rng = random.Random(seed)
    rows, seen = [], set()
    while len(rows) < n:
        text, answer = problem(rng)
        if text in seen:
            continue
        seen.add(text)
        rows.append({"id": f"{prefix}-{len(rows)}", "prompt": text, "answer": answer})
    return rows


def write(path: Path, rows: list[dict[str, Any]]) -> None:
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))


def read(path: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


def shuffle_and_reword(text: str) -> str:
    """A paraphrase-level copy of the same problem: two neighbouring words swapped and one
    phrase reworded, every number kept (Jaccard similarity ~0.82 over 5-character shingles)."""
    words = text.split()
    words[12], words[13] = words[13], words[12]
    return " ".join(words).replace(" a few ", " some ", 1)


def shuffle_and_renumber(text: str) -> str:
    """Not a copy: two neighbouring words swapped and a number changed — another problem from
    the same template (its answer differs), as close in text as a reworded copy."""
    words = text.split()
    for i in (12,):
        words[i], words[i + 1] = words[i + 1], words[i]
    out = " ".join(words)
    for digit in "0123456789":
        if digit in out:
            return out.replace(digit, str((int(digit) + 1) % 10), 1)
    return out
