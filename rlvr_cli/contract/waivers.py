"""Waivers: a finding the owner accepts becomes a visible `waived[...]` line; a waiver that has
expired (RLV004) or waives nothing or a structural code (RLV005) is itself reported."""

from __future__ import annotations

import datetime as dt
from typing import TYPE_CHECKING, Any

from rlvr_cli.contract.diagnostics import UNWAIVABLE, Finding, error, warning

if TYPE_CHECKING:
    from rlvr_cli.contract.load import CheckResult


def apply_waivers(result: CheckResult, *, today: str | None = None) -> None:
    """Turn waived diagnostics into visible 'waived' lines; report stale waivers."""
    contract = result.contract
    if contract is None or not contract.waivers:
        return
    day = dt.date.fromisoformat(today) if today else dt.date.today()
    for i, waiver in enumerate(contract.waivers):
        finding = _apply_one(result, i, waiver, day)
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
    matched = [d for d in result.diagnostics if d.code == waiver.rule and d.severity != "waived"]
    for diag in matched:
        diag.waiver = {"reason": waiver.reason, "expires": waiver.expires, "severity": diag.severity}
        diag.severity = "waived"
    if not matched:
        return warning("RLV005", (*where, "rule"), f"waiver for {waiver.rule} matches no diagnostic")
    return None


def active(contract: Any, today: dt.date | None = None) -> dict[str, str]:
    """Rule code → reason, for every waiver of the contract that has not expired (a later
    stage's findings, such as the data check's, are waived with these)."""
    day = today or dt.date.today()
    found = {}
    for waiver in contract.waivers or []:
        try:
            expired = waiver.expires is not None and dt.date.fromisoformat(waiver.expires) < day
        except ValueError:
            expired = True
        if not expired and waiver.rule not in UNWAIVABLE:
            found[waiver.rule] = waiver.reason
    return found
