"""Pause/abort rules: a rule fires when its condition holds on `window` consecutive
evaluations of its metric. A step that does not produce the metric (holdout metrics between
holdout evaluations) is not an evaluation and neither extends nor breaks the streak."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from rlvr_cli.contract.models import Contract, Rule
from rlvr_cli.store.run import FiredRule


@dataclass
class RuleState:
    rule: Rule
    values: list[Any] = field(default_factory=list)


class Monitor:
    def __init__(self, contract: Contract) -> None:
        self.states = [RuleState(r) for r in contract.monitoring.rules]

    def observe(self, row: dict[str, Any]) -> FiredRule | None:
        """Feed one metrics row; the first rule that fires (abort before pause), or None."""
        fired = []
        for state in self.states:
            rule, window = state.rule, state.rule.window or 1
            if rule.metric not in row:
                continue
            value = row[rule.metric]
            state.values = [*state.values, value][-window:] if rule.condition.holds(value) else []
            if len(state.values) >= window:
                fired.append(
                    FiredRule(
                        rule.name,
                        rule.metric,
                        rule.when,
                        rule.window,
                        rule.action,
                        rule.owner,
                        state.values,
                        row["step"],
                    )
                )
        fired.sort(key=lambda f: f.action != "abort")
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
