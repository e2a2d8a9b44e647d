"""Pause/abort rules: a rule fires when its condition holds on `window` consecutive
evaluations of its metric. A step that does not produce the metric (holdout metrics between
holdout evaluations) is not an evaluation and neither extends nor breaks the streak."""

from __future__ import annotations

import math
import operator
import re
from dataclasses import dataclass, field
from typing import Any

from rlvr_cli.contract.models import Contract

_OPS = {">": operator.gt, "<": operator.lt, ">=": operator.ge, "<=": operator.le}
_WHEN = re.compile(r"^\s*(>=|<=|>|<)\s*(\S+)\s*$")


def holds(when: str, value: Any) -> bool:
    """`"> x"`, `"< x"`, `">= x"`, `"<= x"` or `"nonfinite"` on one value (None is nonfinite)."""
    finite = isinstance(value, (int, float)) and math.isfinite(value)
    if when.strip() == "nonfinite":
        return not finite
    match = _WHEN.match(when)
    if match is None:
        raise ValueError(f"bad condition {when!r}")
    return finite and _OPS[match.group(1)](value, float(match.group(2)))


@dataclass
class RuleState:
    rule: Any
    values: list[Any] = field(default_factory=list)


class Monitor:
    def __init__(self, contract: Contract) -> None:
        self.states = [RuleState(r) for r in contract.monitoring.rules]

    def observe(self, row: dict[str, Any]) -> dict[str, Any] | None:
        """Feed one metrics row; the first rule that fires (abort before pause), or None."""
        fired = []
        for state in self.states:
            rule = state.rule
            if rule.metric not in row:
                continue
            value = row[rule.metric]
            state.values = [*state.values, value][-(rule.window or 1) :] if holds(rule.when, value) else []
            if len(state.values) >= (rule.window or 1):
                fired.append(
                    {
                        "name": rule.name,
                        "metric": rule.metric,
                        "when": rule.when,
                        "window": rule.window,
                        "action": rule.action,
                        "owner": rule.owner,
                        "values": state.values,
                        "step": row.get("step"),
                    }
                )
        fired.sort(key=lambda f: f["action"] != "abort")
        return fired[0] if fired else None

    def acknowledge(self, name: str) -> None:
        for state in self.states:
            if state.rule.name == name:
                state.values = []

    def state(self) -> list[list[Any]]:
        return [s.values for s in self.states]

    def restore(self, values: list[list[Any]]) -> None:
        for state, v in zip(self.states, values, strict=False):
            state.values = list(v)
