"""Rules on what a run measures beside its rewards: reference responses on holdout steps."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

from rlvr_cli.contract.diagnostics import Finding, error
from rlvr_cli.contract.models import Contract
from rlvr_cli.contract.rules import rule


@rule
def rlv605_reference_answers(c: Contract, _: Path) -> Iterator[Finding]:
    m = c.monitoring
    if m.reference_answers is None:
        return
    where = ("monitoring", "reference_answers")
    if m.holdout_every is None:
        yield error("RLV605", where, "reference_answers are scored on holdout steps; this run has none (holdout_every)")
    if c.environment.kind != "single_turn":
        yield error(
            "RLV605",
            where,
            f"reference_answers score one response per task; {c.environment.kind} episodes have several turns",
        )
