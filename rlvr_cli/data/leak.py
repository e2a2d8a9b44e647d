"""Answer leakage: a split's answer appearing verbatim in another split's prompt or hint,
beside every number its own prompt gives (an answer alone is often another task's input: a
date, a sum).

Answers (normalised as the prompts are, and at least `min_chars` long) are indexed by their
first characters; a text is looked up only where an answer can start — at a word's first
character or at a punctuation mark — so a prompt costs a few dictionary lookups, not one per
character.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from typing import Any

from rlvr_cli.data.findings import Place
from rlvr_cli.data.normal import NUMBERS

_STARTS = re.compile(r"(?<!\w)\w|[^\w\s]")


class AnswerIndex:
    def __init__(self, min_chars: int) -> None:
        self.min_chars = min_chars
        self.key = min(min_chars, 8)
        self.by_key: dict[str, list[tuple[str, Place]]] = {}
        self.seen: set[tuple[str, str, frozenset[str]]] = set()

    def __len__(self) -> int:
        return len(self.seen)

    def add(self, answer: str, place: Place, given: frozenset[str] = frozenset()) -> None:
        """An answer, with the numbers its own prompt gives (`given`)."""
        if len(answer) < self.min_chars or (answer, place.split, given) in self.seen:
            return  # one answer twice in a split is indexed once per question's numbers
        self.seen.add((answer, place.split, given))
        self.by_key.setdefault(answer[: self.key], []).append((answer, place, given))

    def find(self, text: str, split: str) -> Iterator[tuple[str, Place]]:
        """Answers of other splits that `text` (of `split`) contains together with every number
        their own prompt gives, each once: a date or a sum that is one task's answer and another
        task's input is not a leak; the question's numbers beside its answer are."""
        if not self.by_key or len(text) < self.min_chars:
            return
        reported: set[str] = set()
        stated: set[str] | None = None
        for match in _STARTS.finditer(text):
            i = match.start()
            for answer, place, given in self.by_key.get(text[i : i + self.key], ()):
                if place.split != split and answer not in reported and text.startswith(answer, i):
                    stated = set(NUMBERS.findall(text)) if stated is None else stated
                    if given <= stated:
                        reported.add(answer)
                        yield answer, place


def answers(row: dict[str, Any], fields: list[str]) -> Iterator[str]:
    """The row's answer values as text (a number is its decimal form; lists give each item)."""
    for name in fields:
        value = row.get(name)
        items = value if isinstance(value, list) else [value]
        for item in items:
            if isinstance(item, (str, int, float)) and not isinstance(item, bool):
                yield str(item)
