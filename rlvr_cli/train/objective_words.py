"""The plan's words for the objective's trust region and the samples the trainer did not draw:
`objective.clip`, `ratio`, `correction`, `rejection`, `off_policy_mask` (train/run_plan.py)."""

from __future__ import annotations

from typing import Any


def clip_words(clip: Any) -> str:
    """`objective.clip` in words: PPO's range, CISPO's clipped weight, VESPO's or SAPO's gate."""
    if clip.kind == "cispo":
        return f"CISPO: each token's −A·log π weighted by sg(its ratio clipped to [1 - {clip.low}, 1 + {clip.high}])"
    if clip.kind == "vespo" and clip.gamma is not None:
        g = clip.gamma
        return (
            "VESPO: no clip, each token's −A·log π weighted by sg(φ(w)) of its answer's likelihood ratio w, "
            f"φ(w) = e^λ·w^k·e^(−λw), k = {g.positive.shape}, λ = {g.positive.rate} (A ≥ 0); k = {g.negative.shape}, "
            f"λ = {g.negative.rate}"
        )
    if clip.kind == "sapo" and clip.temperature is not None:
        tau = clip.temperature
        return (
            f"SAPO: no clip, each token's −A·ρ softly gated, σ(τ(ρ − 1))·4/τ, τ = {tau.positive} (A > 0), "
            f"{tau.negative}"
        )
    dual = f", dual clip c = {clip.dual} for negative advantages" if clip.dual else ""
    return f"ratio clipped to [1 - {clip.low}, 1 + {clip.high}]{dual}"


def off_policy_words(o: Any) -> list[str]:
    """The ratio's level and denominator, and the importance correction, in words."""
    ratio, correction = o.ratio, o.correction
    if ratio is None:
        words = "ratio per token over the trainer's own log-probs (samples drawn ahead: the engine's)"
    else:
        level = {
            "token": "per token",
            "sequence": "per answer, exp(mean over its tokens of log π/π_old) (GSPO)",
            "sequence_sum": "per answer, exp(sum over its tokens of log π/π_old): the answer's likelihood ratio",
        }[ratio.level]
        over = {
            "trainer_recomputed": "the trainer's log-probs under the weights the update starts from",
            "engine": "the log-probs the sampling engine reported",
        }[ratio.denominator]
        words = f"ratio {level}, over {over}"
    mask = o.off_policy_mask
    rejecting = [
        "rejected before the update (verl's rollout rejection sampling), log ρ = log π_engine − log π_old: "
        + "; ".join(rejection_words(c) for c in o.rejection)
    ] if o.rejection else []  # fmt: skip
    masking = [*rejecting] if mask is None else [
        *rejecting,
        f"off-policy sequence masking: an answer with A < 0 whose mean log π_{mask.against} − log π_θ exceeds "
        f"{mask.threshold} trains no policy loss"
    ]  # fmt: skip
    if correction is None or correction.kind == "none":
        return [words, "no importance correction for the engine's log-probs", *masking]
    w = "w = π_old/π_engine per token" if correction.level == "token" else "w = Π over each answer of π_old/π_engine"
    if correction.kind == "tis":
        how = f"truncated importance sampling: each token's loss × min(w, {correction.cap}), {w}"
    else:
        how = f"masked importance sampling: each token's loss × w, 0 outside [{correction.low}, {correction.high}], {w}"
    return [words, how, *masking]


def rejection_words(c: Any) -> str:
    value = {"k1": "log ρ", "k2": "½(log ρ)²", "k3": "exp(−log ρ) − 1 + log ρ"}[c.estimator]
    over = {"token": "a token whose", "sequence_sum": "an answer whose summed", "sequence_mean": "an answer whose mean",
            "sequence_max": "an answer whose largest"}[c.over]  # fmt: skip
    bounds = f"outside [log {c.low}, log {c.high}]" if c.estimator == "k1" else f"above {c.high}"
    return f"{over} {value} is {bounds}"
