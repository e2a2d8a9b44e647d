"""Waivers: a finding the owner accepts becomes a visible `waived[...]` line; a waiver that has
expired (RLV004) or waives nothing or a structural code (RLV005) is itself reported."""

from __future__ import annotations

import datetime as dt
import re
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from rlvr_cli.contract.diagnostics import UNWAIVABLE, Finding, error, warning

if TYPE_CHECKING:
    from rlvr_cli.contract.load import CheckResult


#: codes only the data check reports (`rlvr data check`, `rlvr validate --deep`, training's own
#: check): without it, a waiver of one of them cannot be judged stale
DATA_CHECK = frozenset(f"RLV{n}" for n in (405, 407, 408, 409, 410, 411, 412, 413, 414, 415))
#: codes only `rlvr data check --profile FILE` reports: a waiver of one is never judged stale by validate
PROFILE_CHECK = frozenset(f"RLV{n}" for n in (416, 417))


def apply_waivers(result: CheckResult, *, today: str | None = None, data_checked: bool = True) -> None:
    """Turn waived diagnostics into visible 'waived' lines; report stale waivers (a data-check
    code's only when the data was checked)."""
    contract = result.contract
    if contract is None or not contract.waivers:
        return
    day = dt.date.fromisoformat(today) if today else dt.date.today()
    for i, waiver in enumerate(contract.waivers):
        finding = _apply_one(result, i, waiver, day)
        stale = finding is not None and finding.code == "RLV005"
        if stale and (waiver.rule in PROFILE_CHECK or (waiver.rule in DATA_CHECK and not data_checked)):
            continue
        if finding is not None:
            result.add(finding)


def _apply_one(result: CheckResult, i: int, waiver: Any, day: dt.date) -> Finding | None:
    where = ("waivers", i)
    if waiver.rule in UNWAIVABLE:
        return warning("RLV005", (*where, "rule"), f"{waiver.rule} is structural and cannot be waived")
    if waiver.expires is not None:
        try:
            expires = dt.date.fromisoformat(waiver.expires)
        except ValueError:
            return error("RLV003", (*where, "expires"), f"'{waiver.expires}' is not a real date")
        if expires < day:
            return warning(
                "RLV004",
                (*where, "expires"),
                f"waiver for {waiver.rule} expired on {waiver.expires}; it no longer waives",
            )
    scope = Scope.of(waiver)
    matched = [
        d
        for d in result.diagnostics
        if d.severity != "waived" and scope.covers(d.code, f"{d.path}: {d.message}", d.tasks)
    ]
    for diag in matched:
        diag.waiver = {"reason": waiver.reason, "expires": waiver.expires, "severity": diag.severity}
        diag.severity = "waived"
    if not matched:
        return warning("RLV005", (*where, "rule"), f"waiver for {scope.name()} matches no diagnostic")
    return None


@dataclass(frozen=True)
class Scope:
    """What one waiver waives: every finding of its code, or only those about its `tasks` and
    those whose text its `match` finds."""

    rule: str
    reason: str
    tasks: frozenset[str] | None = None
    match: re.Pattern[str] | None = None

    @classmethod
    def of(cls, waiver: Any) -> Scope:
        tasks = frozenset(map(str, waiver.tasks)) if waiver.tasks else None
        return cls(waiver.rule, waiver.reason, tasks, re.compile(waiver.match) if waiver.match else None)

    def covers(self, code: str, text: str, tasks: tuple[str, ...] = ()) -> bool:
        if code != self.rule:
            return False
        if self.tasks is not None and not (tasks and set(tasks) <= self.tasks):
            return False
        return self.match is None or self.match.search(text) is not None

    def name(self) -> str:
        scoped = [f"tasks {sorted(self.tasks)}"] if self.tasks else []
        scoped += [f"match {self.match.pattern!r}"] if self.match else []
        return f"{self.rule} ({', '.join(scoped)})" if scoped else self.rule


def active(contract: Any, today: dt.date | None = None) -> list[Scope]:
    """Every waiver of the contract that has not expired (a later stage's findings, such as
    the data check's, are waived with these)."""
    day = today or dt.date.today()
    found = []
    for waiver in contract.waivers or []:
        try:
            expired = waiver.expires is not None and dt.date.fromisoformat(waiver.expires) < day
        except ValueError:
            expired = True
        if not expired and waiver.rule not in UNWAIVABLE:
            found.append(Scope.of(waiver))
    return found
