"""The contract's keys for samples that did not come from the trainer's own forward: which
log-probs divide the ratio, at which level the ratio is taken (GSPO), and the importance
correction for the engine/trainer mismatch (TIS, MIS). train/objective.py computes them."""

from collections.abc import Iterator
from typing import Any, Literal

from pydantic import Field

from rlvr_cli.contract import clip_section, rejection_section
from rlvr_cli.contract.sections import Section


class Ratio(Section):
    """π_θ / π_old: of which log-probs, per token or per answer."""

    level: Literal["token", "sequence", "sequence_sum"] = Field(
        description="token: one ratio per token (PPO, GRPO); sequence: one per answer, exp of the mean over its "
        "tokens of log π_θ − log π_old (GSPO, Zheng et al. 2025; TRL importance_sampling_level: sequence, "
        "verl policy_loss.loss_mode: gspo); sequence_sum: one per answer, exp of the sum over its tokens, the "
        "whole answer's likelihood ratio π_θ(y)/π_old(y) (TRL's RLOOTrainer)."
    )
    denominator: Literal["trainer_recomputed", "engine"] = Field(
        description="π_old: trainer_recomputed, the trainer's own log-probs under the weights at the start of the "
        "update (samples drawn by older weights or another engine are then corrected only by `correction`); "
        "engine, the log-probs the sampling engine reported when it drew each token (TRL/verl without a "
        "recomputed old policy)."
    )


class Correction(Section):
    """Weights w = π_old / π_engine on each token's loss, so samples drawn by the engine (another
    kernel, precision or older weights) count as the trainer's policy would draw them."""

    kind: Literal["none", "tis", "mis"] = Field(
        description="none; tis: truncated importance sampling, min(w, cap) (TRL vllm_importance_sampling_mode "
        "*_truncate, verl rollout_is with a threshold); mis: masked importance sampling, w where low ≤ w ≤ high "
        "and 0 elsewhere (TRL *_mask, verl rollout_is_threshold 'low_high', slime/IcePop)."
    )
    level: Literal["token", "sequence"] | None = Field(
        None,
        description="token: w per token; sequence: one w per answer, the product of its tokens' w (TRL "
        "sequence_*, verl rollout_is: sequence). Required unless kind is none.",
    )
    cap: float | None = Field(None, gt=0, description="tis: the largest weight. Required by tis, read by tis only.")
    low: float | None = Field(None, ge=0, description="mis: weights below it mask their tokens (answers) out.")
    high: float | None = Field(None, gt=0, description="mis: weights above it mask their tokens (answers) out.")


class OffPolicyMask(Section):
    """DeepSeek-V3.2's off-policy sequence masking (OPSM): an answer with a negative advantage whose
    policy has drifted too far from the one that drew it trains nothing."""

    threshold: float = Field(
        ge=0,
        description="δ ≥ 0: an answer with A < 0 whose mean over its trained tokens of log π_x − log π_θ (π_θ the "
        "current policy, no gradient) exceeds δ contributes no policy loss; its tokens still count in the "
        "aggregation (TRL off_policy_mask_threshold).",
    )
    against: Literal["engine", "old"] = Field(
        description="π_x: engine, the log-probs the sampling engine reported (TRL with vLLM); old, the ratio's "
        "denominator π_old (TRL without vLLM: exactly π_θ on a batch's first optimizer step, so the mask then acts "
        "only from the second)."
    )


def findings(objective: Any, hyperparameters: Any) -> Iterator[tuple[tuple[str, ...], str]]:
    """(path, message) of each RLV003 the off-policy keys make: keys the kind does not read,
    keys it needs, and a ratio the run cannot leave unsaid."""
    ratio, correction = objective.ratio, objective.correction
    yield from clip_section.findings(objective.clip, ratio)
    yield from rejection_section.findings(objective)
    mask, steps = objective.off_policy_mask, hyperparameters.updates_per_batch * hyperparameters.mini_batches
    if mask is not None and mask.against == "old" and steps == 1 and (ratio is None or ratio.denominator != "engine"):
        yield (
            ("objective", "off_policy_mask", "against"),
            "old: π_old is the policy of the batch's only optimizer step, so no answer would ever be masked (use "
            "engine, or several optimizer steps on a batch)",
        )
    where = ("objective", "correction")
    if correction is not None:
        reads = {"none": (), "tis": ("level", "cap"), "mis": ("level", "low", "high")}[correction.kind]
        for key in ("level", "cap", "low", "high"):
            given = getattr(correction, key) is not None
            if given and key not in reads:
                yield (*where, key), f"{correction.kind} does not read {key}"
            elif not given and key in reads:
                yield (*where,), f"missing required key '{key}' (required when kind is {correction.kind})"
        low, high = correction.low, correction.high
        if correction.kind == "mis" and low is not None and high is not None and low >= high:
            yield (*where, "low"), f"low ({correction.low}) must be below high ({correction.high})"
        if correction.kind != "none" and (ratio is None or ratio.denominator == "engine"):
            yield (
                (*where, "kind"),
                (
                    "weighs the trainer's log-probs against the engine's: needs ratio.denominator trainer_recomputed "
                    "(with engine the ratio itself already divides by the engine's log-probs)"
                ),
            )
    if ratio is None:
        if hyperparameters.sample_ahead:
            yield (
                ("objective",),
                (
                    "missing required key 'ratio' (required when hyperparameters.sample_ahead is true: samples drawn "
                    "by older weights need the contract to say which log-probs divide the ratio)"
                ),
            )
        elif hyperparameters.sampling.engine in ("vllm", "sglang"):
            yield (
                ("objective",),
                (
                    f"missing required key 'ratio' (required when sampling.engine is {hyperparameters.sampling.engine}:"
                    " the engine's log-probs are not the trainer's; say which divide the ratio)"
                ),
            )
