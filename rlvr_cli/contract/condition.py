"""A monitoring rule's `when`: parsed once, where the contract is loaded, then evaluated.

Grammar: `> x`, `< x`, `>= x`, `<= x` (x a decimal number) or `nonfinite`. A value that is
missing, NaN or infinite never satisfies a comparison and always satisfies `nonfinite`.
"""

from __future__ import annotations

import math
import operator
import re
from dataclasses import dataclass
from typing import Any

#: the grammar, also the JSON Schema's `pattern` for `monitoring.rules[].when`
PATTERN = r"^\s*(nonfinite|(>=|<=|>|<)\s*[-+]?(\d+(\.\d*)?|\.\d+)([eE][-+]?\d+)?)\s*$"
_PARTS = re.compile(r"^\s*(>=|<=|>|<)\s*(\S+)\s*$")
_OPS = {">": operator.gt, "<": operator.lt, ">=": operator.ge, "<=": operator.le}


@dataclass(frozen=True)
class Condition:
    op: str  # one of > < >= <=, or "nonfinite"
    threshold: float | None  # None for nonfinite

    @classmethod
    def parse(cls, when: str) -> Condition:
        if when.strip() == "nonfinite":
            return cls("nonfinite", None)
        match = _PARTS.match(when)
        if match is None or re.match(PATTERN, when) is None:
            raise ValueError(f'bad condition {when!r}: expected "> x", "< x", ">= x", "<= x" or "nonfinite"')
        return cls(match.group(1), float(match.group(2)))

    def holds(self, value: Any) -> bool:
        finite = isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)
        if self.op == "nonfinite":
            return not finite
        return finite and _OPS[self.op](value, self.threshold)

    def __str__(self) -> str:
        return "nonfinite" if self.threshold is None else f"{self.op} {self.threshold:g}"
