"""`objective.rejection`: tokens or answers whose sampling engine and trainer disagree too much are
not trained — verl's rollout rejection sampling (`rollout_correction.rollout_rs`), a hard trust
region on the engine/trainer mismatch. train/rejection.py computes it."""

from collections.abc import Iterator
from typing import Any, Literal

from pydantic import Field

from rlvr_cli.contract.sections import Section


class Rejection(Section):
    """One criterion: a divergence between π_engine and π_old, per token or per answer, and its bounds."""

    estimator: Literal["k1", "k2", "k3"] = Field(
        description="Of log ρ = log π_engine − log π_old per token: k1, log ρ itself, bounded as a ratio (low, "
        "high); k2, ½(log ρ)²; k3, exp(−log ρ) − 1 + log ρ (k2 and k3: high only). |log ρ| is bounded at 20 first."
    )
    over: Literal["token", "sequence_sum", "sequence_mean", "sequence_max"] = Field(
        description="token: each token is kept or not; sequence_sum, sequence_mean, sequence_max: the answer's sum, "
        "mean or largest value over its trained tokens keeps or drops all of them (sequence_max: k2, k3 only)."
    )
    low: float | None = Field(
        None, gt=0, description="k1: exp(value) below it is rejected (a ratio, > 0). Required by k1, read by it only."
    )
    high: float = Field(gt=0, description="Above it (k1: exp(value), a ratio) the token or answer is rejected.")


def findings(objective: Any) -> Iterator[tuple[tuple[str, ...], str]]:
    """(path, message) of each RLV003 of `objective.rejection`."""
    criteria = objective.rejection
    if criteria is None:
        return
    if not criteria:
        yield ("objective", "rejection"), "an empty list rejects nothing: drop the key"
    ratio = objective.ratio
    if criteria and ratio is None:
        yield (
            ("objective", "rejection"),
            "compares the engine's log-probs with the trainer's π_old: write objective.ratio with denominator "
            "trainer_recomputed",
        )
    elif criteria and ratio.denominator != "trainer_recomputed":
        yield (
            ("objective", "rejection"),
            "compares the engine's log-probs with the trainer's π_old: needs ratio.denominator trainer_recomputed "
            "(with engine, π_old is the engine's own and nothing would ever be rejected)",
        )
    for i, c in enumerate(criteria):
        where = ("objective", "rejection", i)
        if c.estimator == "k1" and c.low is None:
            yield where, "missing required key 'low' (required when estimator is k1)"
        if c.estimator != "k1" and c.low is not None:
            yield (*where, "low"), f"{c.estimator} is ≥ 0: only k1 has a lower bound"
        if c.estimator == "k1" and c.over == "sequence_max":
            yield (*where, "over"), "sequence_max takes k2 or k3 (a largest log-ratio bounds nothing below)"
        if c.low is not None and c.low > c.high:
            yield (*where, "low"), f"low ({c.low}) is above high ({c.high})"
