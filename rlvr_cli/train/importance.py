"""Samples the trainer did not draw itself: which log-probs divide the ratio
(`objective.ratio.denominator`), the engine's log-probs the importance correction weighs the
trainer's against (`objective.correction`), and what the correction did to a step."""

from __future__ import annotations

from typing import TYPE_CHECKING

import torch

from rlvr_cli.env.sample import Sample

if TYPE_CHECKING:
    from rlvr_cli.contract.models import Contract
    from rlvr_cli.train.setup import Setup
    from rlvr_cli.train.state import TrainState
    from rlvr_cli.train.update import Forward


def ratio_denominator(
    setup: Setup, state: TrainState, trained: list[Sample], fwd: Forward, old: torch.Tensor | None
) -> torch.Tensor | None:
    """The old log-probs of the ratio (`objective.ratio.denominator`): `engine`, those each sample
    was drawn with; `trainer_recomputed`, `old` (None: the first pass's own, under the weights the
    update starts from). Unsaid: the trainer's, except for samples drawn ahead by weights that
    have moved since (train/overlap.py), whose engine log-probs divide."""
    ratio = setup.contract.objective.ratio
    engine = ratio is not None and ratio.denominator == "engine"
    if engine or (ratio is None and any(s.revision < state.optimizer_steps for s in trained)):
        return sampled_logprobs(trained, fwd.batch.response_mask).to(setup.device)
    return old


def engine_logprobs(setup: Setup, trained: list[Sample], fwd: Forward) -> torch.Tensor | None:
    """`(B, T)` the sampling engine's log-probs, which the importance correction weighs the
    trainer's against and the off-policy mask may measure the drift from (None where neither does)."""
    o = setup.contract.objective
    if not (o.corrects or (o.off_policy_mask is not None and o.off_policy_mask.against == "engine")):
        return None
    return sampled_logprobs(trained, fwd.batch.response_mask).to(setup.device)


def sampled_logprobs(samples: list[Sample], mask: torch.Tensor) -> torch.Tensor:
    """`(B, T)` the log-probs each sample was drawn with (the ratio's denominator when the
    weights have moved since: train/overlap.py)."""
    old = torch.zeros(mask.shape, dtype=torch.float32)
    for row, sample in enumerate(samples):
        old[row, : len(sample.sampling_logp)] = torch.tensor(sample.sampling_logp, dtype=torch.float32)
    return old


def correction_metrics(contract: Contract, weight_sum: float, weight_cut: float, tokens: float) -> dict[str, float]:
    """`is_weight_mean` and `is_cut_share` of a step (nothing without a correction)."""
    if not contract.objective.corrects:
        return {}
    return {"is_weight_mean": weight_sum / tokens, "is_cut_share": weight_cut / tokens}
