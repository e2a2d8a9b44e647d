"""`objective.rejection` (verl's rollout rejection sampling): before the advantages, the tokens or
answers whose engine/trainer divergence is out of bounds leave the loss mask — they are not
trained and do not count in the aggregation, as verl removes them from its response mask."""

from __future__ import annotations

import math
from typing import Any

import torch

from rlvr_cli.env.sample import Sample
from rlvr_cli.train import distributed as dist
from rlvr_cli.train.importance import sampled_logprobs

SAFETY_BOUND = 20.0  # |log ρ| is bounded first, as verl does


def keep_mask(old: torch.Tensor, engine: torch.Tensor, mask: torch.Tensor, criteria: list[Any]) -> torch.Tensor:
    """`(B, T)` 1 where every criterion keeps the trained token, 0 elsewhere (and off the mask)."""
    m = mask.to(old.dtype)
    log_rho = torch.clamp(engine - old, -SAFETY_BOUND, SAFETY_BOUND)  # log π_engine − log π_old
    per_token = {"k1": log_rho, "k2": 0.5 * log_rho**2, "k3": torch.exp(-log_rho) - 1.0 + log_rho}
    keep = mask.bool()
    for c in criteria:
        value = per_token[c.estimator]
        if c.over == "sequence_sum":
            value = (value * m).sum(dim=1, keepdim=True)
        elif c.over == "sequence_mean":
            value = (value * m).sum(dim=1, keepdim=True) / (m.sum(dim=1, keepdim=True) + 1e-8)
        elif c.over == "sequence_max":
            value = value.masked_fill(~mask.bool(), -math.inf).amax(dim=1, keepdim=True)
        within = (value >= math.log(c.low)) & (value <= math.log(c.high)) if c.estimator == "k1" else value <= c.high
        keep = keep & within.expand_as(keep)
    return keep.to(old.dtype)


def reject(
    setup: Any, samples: list[Sample], fwd: Any, old: torch.Tensor | None
) -> tuple[torch.Tensor | None, dict[str, float]]:
    """Applies the contract's rejection to `fwd`'s loss mask and each sample's, and returns π_old
    (computed here when nothing computed it yet: the comparison needs it before the update) and
    `rejected_share`, the share of the step's trained tokens rejected (every process's)."""
    criteria = setup.contract.objective.rejection
    if not criteria:
        return old, {}
    mask = fwd.batch.response_mask
    if old is None:  # every process runs it (a sharded policy's forwards are collective), samples or not
        old = fwd.logprobs(setup.policy, setup.contract.hyperparameters.sampling.temperature)
    engine = sampled_logprobs(samples, mask).to(old.device, old.dtype)
    keep = keep_mask(old, engine, mask, criteria)
    fwd.batch.response_mask = mask * keep.to(mask.dtype)
    for row, sample in enumerate(samples):
        kept = [int(m and k) for m, k in zip(sample.mask, keep[row, : len(sample.mask)].tolist(), strict=True)]
        if kept != sample.mask:  # recorded as trained no more; the engine-mismatch metrics still see every token
            sample.sampled, sample.mask = sample.mask, kept
    before, after = dist.total(float(mask.sum())), dist.total(float(fwd.batch.response_mask.sum()))
    return old, {"rejected_share": (before - after) / max(before, 1.0)}
