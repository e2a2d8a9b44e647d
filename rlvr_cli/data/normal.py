"""What two prompts may differ in and still be one prompt: the normalisations a contract
declares in `data.dedup.normalize`, and the text of a task that the checks compare."""

from __future__ import annotations

import re
import unicodedata
from collections import Counter
from collections.abc import Callable, Iterator, Sequence
from typing import Any

_NUMBER = re.compile(r"(?<![\w.])[-+]?\d{1,3}(?:,\d{3})+(?:\.\d+)?(?![\w,])|(?<![\w.,])[-+]?\d+\.\d+(?![\w.])")


NUMBERS = re.compile(r"\d+(?:[.,]\d+)*")  # the numbers a text states, as they are written


def numbers(text: str) -> Counter[str]:
    """The numbers a prompt states, as a multiset: part of which problem it is."""
    return Counter(NUMBERS.findall(text))


def _number(match: re.Match[str]) -> str:
    """`1,000.50` → `1000.5`; `2.0` → `2`; `007` is left alone (an id, not a number)."""
    text = match.group(0).replace(",", "")
    if "." in text:
        text = text.rstrip("0").rstrip(".")
    return text


def _whitespace(text: str) -> str:
    return " ".join(text.split())


STEPS: dict[str, Callable[[str], str]] = {
    "nfkc": lambda text: unicodedata.normalize("NFKC", text),
    "case": str.casefold,
    "numbers": lambda text: _NUMBER.sub(_number, text),
    "whitespace": _whitespace,
}


def normalizer(steps: Sequence[str]) -> Callable[[str], str]:
    """One function applying the declared steps in a fixed order (NFKC first: it can create
    spaces and digits the others then see)."""
    chosen = [STEPS[name] for name in STEPS if name in steps]

    def normalize(text: str) -> str:
        for step in chosen:
            text = step(text)
        return text

    return normalize


def prompt_text(prompt: Any) -> str:
    """A prompt as one string: a chat prompt is its messages, `role: content` per line."""
    if isinstance(prompt, str):
        return prompt
    lines = []
    for message in prompt if isinstance(prompt, list) else []:
        if isinstance(message, dict):
            content = message.get("content")
            lines.append(f"{message.get('role')}: {content if isinstance(content, str) else ''}")
    return "\n".join(lines)


def strings(value: Any) -> Iterator[str]:
    """Every string inside a JSON value (the text a secret or a PII scan reads)."""
    if isinstance(value, str):
        yield value
    elif isinstance(value, dict):
        for item in value.values():
            yield from strings(item)
    elif isinstance(value, list):
        for item in value:
            yield from strings(item)
