"""Rules on the acceptance keys beyond the contract's own splits: latency gates and their
measurement, cost metrics."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

from rlvr_cli.contract.diagnostics import Finding, error
from rlvr_cli.contract.models import Contract
from rlvr_cli.contract.release_keys import LATENCY_METRICS
from rlvr_cli.contract.rules import rule


@rule
def rlv003_latency(c: Contract, _: Path) -> Iterator[Finding]:
    a = c.acceptance
    timed = [i for i, g in enumerate(a.gates) if g.metric in LATENCY_METRICS]
    timed_in_suites = any(g.metric in LATENCY_METRICS for s in a.suites or [] for g in s.gates)
    if (timed or timed_in_suites) and a.latency is None:
        yield error(
            "RLV003",
            ("acceptance",),
            "missing required key 'latency' (required when a gate measures ttft_s, tpot_s or latency_s: "
            "the concurrency it is measured under)",
        )
    if a.latency is not None and not (timed or timed_in_suites):
        yield error("RLV003", ("acceptance", "latency"), "is read only by gates on ttft_s, tpot_s or latency_s")
    if timed and c.environment.kind != "single_turn":
        yield error(
            "RLV010",
            ("acceptance", "gates", timed[0], "metric"),
            "latency gates time single-turn prompts; tool_use episodes are not timed yet",
        )
