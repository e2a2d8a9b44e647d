"""The GRPO-family objective, one small function per term, as docs/contract.md writes it.

advantages → ratio → clipped surrogate (asymmetric, optional dual clip) → + β·KL (loss
placement) − entropy bonus → aggregation over the optimizer batch. Shapes: B sequences,
T response tokens; `mask` is the loss mask (1 on trained tokens).
"""

from __future__ import annotations

import functools
import math
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import torch

from rlvr_cli.train.advantages import (  # noqa: F401  (the objective's names, as docs/contract.md says)
    ADVANTAGE_BASELINES,
    ADVANTAGE_SCALES,
    STD_KINDS,
    group_advantages,
    group_outcomes,
    hinted_advantages,
    uniform_groups,
)
from rlvr_cli.train.kl_term import (  # noqa: F401  (the objective's names, as docs/contract.md says)
    KL_ESTIMATORS,
    KL_PLACEMENTS,
    kl_estimate,
    kl_in_loss,
    kl_weighted,
    kl_with_gradient,
    sequence_kl,
)

if TYPE_CHECKING:
    from rlvr_cli.contract.models import Objective
    from rlvr_cli.contract.off_policy import Correction


# ── per-token terms ───────────────────────────────────────────────────────────────────


def ratio(logp: torch.Tensor, old_logp: torch.Tensor) -> torch.Tensor:
    """π_θ / π_old per token, from log-probs `(B, T)`."""
    return torch.exp(logp - old_logp)


def importance_ratio(logp: torch.Tensor, old_logp: torch.Tensor, mask: torch.Tensor, level: str) -> torch.Tensor:
    """The ratio `(B, T)` the clip acts on. `token`: π_θ / π_old per token. `sequence` (GSPO,
    Zheng et al. 2025, https://arxiv.org/abs/2507.18071): one ratio per answer, s = exp(mean over
    its trained tokens of log π_θ − log π_old), in GSPO's token form exp(log π_θ − sg[log π_θ] +
    sg[log s]): every token carries the value s, the gradient s·∇log π_θ(token) — summed over
    the answer's tokens, s's own gradient times its length, as every aggregation weighs an
    answer's tokens alike (TRL's broadcast form and verl's `gspo` give the same loss and gradient).
    `sequence_sum` (TRL's RLOOTrainer): s = exp(sum over its trained tokens of log π_θ − log
    π_old), the answer's likelihood ratio, on every token with the gradient ∇s itself (TRL's
    per-answer loss, which an aggregation that averages each answer's tokens reproduces)."""
    if level == "token":
        return ratio(logp, old_logp)
    m = mask.to(logp.dtype)
    if level == "sequence_sum":
        return torch.exp(((logp - old_logp) * m).sum(dim=1))[:, None].expand_as(logp)  # (B, T)
    if level != "sequence":
        raise ValueError(f"unknown ratio level {level!r}")
    log_s = ((logp - old_logp) * m).sum(dim=1) / m.sum(dim=1).clamp(min=1.0)  # (B,)
    return torch.exp(logp - logp.detach() + log_s.detach()[:, None])  # (B, T)


LOG_WEIGHT_BOUND = 20.0  # |log w| is bounded at 20 before exp (as verl does), so no weight overflows


def correction_weights(
    old_logp: torch.Tensor, engine_logp: torch.Tensor, mask: torch.Tensor, correction: Correction | None
) -> torch.Tensor | None:
    """Importance weights `(B, T)` on each token's loss for samples the engine drew: w = π_old /
    π_engine per token, or one per answer, the product over its trained tokens (sequence level);
    `tis` truncates at `cap` (Yao et al. 2025, "Your efficient RL framework secretly brings you
    off-policy RL training"), `mis` keeps w inside [low, high] and masks the rest to 0
    (IcePop/slime). No gradient flows through w; None without a correction."""
    if correction is None or correction.kind == "none":
        return None
    m = mask.to(old_logp.dtype)
    log_w = (old_logp - engine_logp).detach() * m  # (B, T)
    if correction.level == "sequence":
        log_w = log_w.sum(dim=1, keepdim=True).expand_as(log_w)
    w = torch.exp(log_w.clamp(-LOG_WEIGHT_BOUND, LOG_WEIGHT_BOUND))
    if correction.kind == "tis":
        w = w.clamp(max=correction.cap)
    elif correction.kind == "mis":
        w = torch.where((w >= correction.low) & (w <= correction.high), w, torch.zeros_like(w))
    else:
        raise ValueError(f"unknown correction {correction.kind!r}")
    return w * m


def clipped_surrogate(
    ratio_: torch.Tensor, adv: torch.Tensor, low: float, high: float, dual: float | None = None
) -> tuple[torch.Tensor, torch.Tensor]:
    """PPO's pessimistic clipped loss per token, and where clipping was active.

    ℓ = max(-A·r, -A·clip(r, 1-low, 1+high)); with dual clip c, for A < 0 the loss is
    further bounded by -A·c (Ye et al. 2020, https://arxiv.org/abs/1912.09729).
    """
    adv = adv[:, None]  # (B, 1)
    unclipped = -adv * ratio_  # (B, T)
    clipped = -adv * torch.clamp(ratio_, 1.0 - low, 1.0 + high)  # (B, T)
    loss = torch.maximum(unclipped, clipped)
    was_clipped = clipped > unclipped
    if dual is not None:
        bound = -adv * dual  # (B, 1)
        dual_loss = torch.minimum(loss, bound)
        was_clipped = was_clipped | ((adv < 0) & (loss > bound))
        loss = torch.where(adv < 0, dual_loss, loss)
    return loss, was_clipped


def surrogate(
    ratio_: torch.Tensor, logp: torch.Tensor, adv: torch.Tensor, clip: Any
) -> tuple[torch.Tensor, torch.Tensor]:
    """The policy term per token `(B, T)` and where the clip acted, as `objective.clip.kind` says:
    PPO's (`clipped_surrogate`); CISPO's (Chen et al. 2025, MiniMax-M1,
    https://arxiv.org/abs/2506.13585): ℓ = −sg(clip(r, 1−low, 1+high))·A·log π_θ — the clipped
    ratio only weighs each token's log-likelihood gradient, which no token loses (TRL's, verl's and
    NeMo RL's cispo); SAPO's (Gao et al. 2025, https://arxiv.org/abs/2511.20347):
    ℓ = −A·σ(τ(r − 1))·4/τ, τ by the sign of A (`soft_gate`); or VESPO's: ℓ = −sg(φ(w))·A·log π_θ
    (`gamma_weight`, w the answer's likelihood ratio) — where nothing is clipped."""
    kind = getattr(clip, "kind", None)
    if kind == "vespo":
        return -gamma_weight(ratio_, adv, clip.gamma)[:, None] * adv[:, None] * logp, torch.zeros_like(
            ratio_, dtype=torch.bool
        )
    if kind == "sapo":
        return -soft_gate(ratio_, adv, clip.temperature) * adv[:, None], torch.zeros_like(ratio_, dtype=torch.bool)
    if kind != "cispo":
        return clipped_surrogate(ratio_, adv, clip.low, clip.high, clip.dual)
    weight = torch.clamp(ratio_.detach(), 1.0 - clip.low, 1.0 + clip.high)  # (B, T)
    return -weight * adv[:, None] * logp, weight != ratio_.detach()


def gamma_weight(ratio_: torch.Tensor, adv: torch.Tensor, gamma: Any) -> torch.Tensor:
    """VESPO's weight `(B,)`, no gradient: φ(w) = e^λ · w^k · e^(−λw) of each answer's likelihood
    ratio w (the `sequence_sum` ratio, every token of the answer carrying it), log w bounded to
    [log 1e-8, 20] first; k, λ from `gamma.positive` where A ≥ 0, `gamma.negative` elsewhere
    (TRL's `get_gamma_weights`; a non-finite φ counts as 0)."""
    log_w = torch.log(ratio_.detach()[:, 0]).clamp(math.log(1e-8), 20.0)  # (B,)
    positive = adv >= 0
    k = torch.where(positive, gamma.positive.shape, gamma.negative.shape).to(log_w.dtype)
    rate = torch.where(positive, gamma.positive.rate, gamma.negative.rate).to(log_w.dtype)
    phi = torch.exp(rate + k * log_w - rate * torch.exp(log_w))
    return phi.nan_to_num(nan=0.0, posinf=0.0, neginf=0.0)


def soft_gate(ratio_: torch.Tensor, adv: torch.Tensor, temperature: Any) -> torch.Tensor:
    """SAPO's gate f(r) = σ(τ(r − 1))·4/τ `(B, T)`, τ = temperature.positive where A > 0 and
    temperature.negative elsewhere (TRL's and verl's `advantages > 0`). f(1) = 2/τ and f'(1) = 1:
    on-policy its gradient is the policy gradient's; off-policy f' = 4σ(1 − σ) fades the token's
    gradient smoothly instead of cutting it at a clip edge."""
    tau = torch.where(adv > 0, temperature.positive, temperature.negative).to(ratio_.dtype)[:, None]  # (B, 1)
    return torch.sigmoid(tau * (ratio_ - 1.0)) * 4.0 / tau


# ── aggregation ───────────────────────────────────────────────────────────────────────


def token_mean(masked: torch.Tensor, mask: torch.Tensor, tokens: float, sequences: float, _: int) -> torch.Tensor:
    """Σ token losses / trained tokens of the optimizer batch: every token weighs the same, so long
    answers weigh more. DAPO (Yu et al. 2025, https://arxiv.org/abs/2503.14476, "token-level
    policy gradient loss"); TRL's `loss_type="dapo"`, verl's `loss_agg_mode: token-mean`."""
    return masked.sum() / max(tokens, 1.0)


def seq_mean_token_mean(
    masked: torch.Tensor, mask: torch.Tensor, tokens: float, sequences: float, _: int
) -> torch.Tensor:
    """Mean over answers of each answer's mean token loss: every answer weighs the same. The
    original GRPO (Shao et al. 2024, DeepSeekMath, https://arxiv.org/abs/2402.03300, eq. 3)."""
    per_seq = masked.sum(dim=1) / mask.sum(dim=1).clamp(min=1.0)  # (B,)
    return per_seq.sum() / max(sequences, 1.0)


def seq_mean_token_sum(
    masked: torch.Tensor, mask: torch.Tensor, tokens: float, sequences: float, _: int
) -> torch.Tensor:
    """Mean over answers of each answer's summed token loss (verl's `seq-mean-token-sum`)."""
    return masked.sum() / max(sequences, 1.0)


def constant_norm(
    masked: torch.Tensor, mask: torch.Tensor, tokens: float, sequences: float, max_response_tokens: int
) -> torch.Tensor:
    """Σ token losses / (answers × max_response_tokens): a normaliser that does not depend on
    how long the answers are. Dr. GRPO (Liu et al. 2025, "Understanding R1-Zero-Like Training",
    https://arxiv.org/abs/2503.20783); TRL's `loss_type="dr_grpo"`."""
    return masked.sum() / (max(sequences, 1.0) * max_response_tokens)


AGGREGATIONS = {f.__name__: f for f in (token_mean, seq_mean_token_mean, seq_mean_token_sum, constant_norm)}


def aggregate(
    per_token: torch.Tensor,
    mask: torch.Tensor,
    how: str,
    *,
    max_response_tokens: int,
    total_tokens: float | None = None,
    total_sequences: float | None = None,
) -> torch.Tensor:
    """Masked per-token losses `(B, T)` → one number, dividing by optimizer-batch totals.

    `total_tokens` / `total_sequences` are the counts of the whole optimizer batch (every
    micro-batch, every rank); by default this batch's own. Summing the results of the
    micro-batches then gives the loss of the whole batch, whatever the accumulation.
    """
    if how not in AGGREGATIONS:
        raise ValueError(f"unknown aggregation {how!r}")
    mask = mask.to(per_token.dtype)
    tokens = float(mask.sum() if total_tokens is None else total_tokens)
    sequences = float(mask.shape[0] if total_sequences is None else total_sequences)
    masked = per_token * mask  # (B, T)
    return AGGREGATIONS[how](masked, mask, tokens, sequences, max_response_tokens)


# ── the loss ──────────────────────────────────────────────────────────────────────────


@dataclass
class LossStats:
    """What one call measured, as sums over its trained tokens so micro-batches add up."""

    tokens: float
    clipped: float
    ratio_max: float
    kl_sum: float
    entropy_sum: float
    pg_loss: float
    weight_sum: float = 0.0  # the importance weights on the trained tokens (objective.correction)
    weight_cut: float = 0.0  # trained tokens whose weight the correction truncated or masked
    masked: float = 0.0  # trained tokens of answers the off-policy mask dropped

    @classmethod
    def empty(cls) -> LossStats:
        """Nothing measured: the identity of `add` (a rank with no samples this step)."""
        return cls(0.0, 0.0, 1.0, 0.0, 0.0, 0.0)

    def add(self, other: LossStats) -> LossStats:
        return LossStats(
            self.tokens + other.tokens,
            self.clipped + other.clipped,
            max(self.ratio_max, other.ratio_max),
            self.kl_sum + other.kl_sum,
            self.entropy_sum + other.entropy_sum,
            self.pg_loss + other.pg_loss,
            self.weight_sum + other.weight_sum,
            self.weight_cut + other.weight_cut,
            self.masked + other.masked,
        )


def policy_loss(
    logp: torch.Tensor,
    old_logp: torch.Tensor,
    ref_logp: torch.Tensor | None,
    advantages: torch.Tensor,
    mask: torch.Tensor,
    objective: Objective,
    *,
    max_response_tokens: int,
    total_tokens: float | None = None,
    total_sequences: float | None = None,
    entropy: torch.Tensor | None = None,
    engine_logp: torch.Tensor | None = None,
    token_keep: torch.Tensor | None = None,
) -> tuple[torch.Tensor, LossStats]:
    """The contract's loss for one (micro-)batch: `logp`, `old_logp`, `ref_logp`, `mask`,
    `entropy`, `engine_logp` (what the sampling engine reported) are `(B, T)`, `advantages`
    `(B,)`. The ratio is per token or per answer (`objective.ratio.level`); the correction's
    weights, the off-policy mask and `token_keep` (the entropy mask's `(B, T)` 0/1) multiply the
    policy term of each token (not the KL or entropy terms: TRL and verl place them the same way).
    KL enters the loss only with `kl.placement: loss` (with `reward` it was subtracted from the
    rewards before advantages: train/update.py `rewards_with_kl`)."""
    kl = objective.kl

    agg = functools.partial(  # every term is aggregated the same way
        aggregate, mask=mask, how=objective.aggregation, max_response_tokens=max_response_tokens,
        total_tokens=total_tokens, total_sequences=total_sequences,
    )  # fmt: skip

    level = objective.ratio.level if objective.ratio is not None else "token"
    r = importance_ratio(logp, old_logp, mask, level)  # (B, T)
    per_token, was_clipped = surrogate(r, logp, advantages, objective.clip)
    weights = None if engine_logp is None else correction_weights(old_logp, engine_logp, mask, objective.correction)
    keep = off_policy_keep(logp, old_logp, engine_logp, advantages, mask, getattr(objective, "off_policy_mask", None))
    loss = pg_loss = agg(_times(per_token, weights, keep, token_keep))
    m = mask.to(logp.dtype)
    kl_sum = entropy_sum = 0.0
    if ref_logp is not None:  # measured whenever a reference is given; in the loss only with a penalty
        kl_tok = kl_estimate(logp, ref_logp, kl.estimator or "k3")  # (B, T)
        kl_sum = float((kl_tok.detach() * m).sum())
        if kl.coef > 0 and kl.placement == "loss":
            loss = loss + kl.coef * agg(kl_in_loss(kl_tok, kl, logp, old_logp, ref_logp, mask, level))
    if entropy is not None:
        entropy_sum = float((entropy.detach() * m).sum())
        if objective.entropy_coef > 0:
            loss = loss - objective.entropy_coef * agg(entropy)
    trained = mask.bool()
    stats = LossStats(
        tokens=float(m.sum()),
        clipped=float((was_clipped & trained).sum()),
        ratio_max=float(r.detach()[trained].max()) if trained.any() else 1.0,
        kl_sum=kl_sum,
        entropy_sum=entropy_sum,
        pg_loss=float(pg_loss.detach()),
        **_weight_stats(weights, old_logp, engine_logp, mask, objective.correction),
        masked=0.0 if keep is None else float(((1 - keep) * m).sum()),
    )
    return loss, stats


def _times(per_token: torch.Tensor, *factors: torch.Tensor | None) -> torch.Tensor:
    """The policy term per token × each factor given (the correction's weights, the mask)."""
    for factor in factors:
        per_token = per_token if factor is None else per_token * factor
    return per_token


def off_policy_keep(
    logp: torch.Tensor,
    old_logp: torch.Tensor,
    engine_logp: torch.Tensor | None,
    adv: torch.Tensor,
    mask: torch.Tensor,
    off_policy_mask: Any,
) -> torch.Tensor | None:
    """`objective.off_policy_mask` (DeepSeek-V3.2's off-policy sequence masking): `(B, 1)` 0 for an
    answer with A < 0 whose mean over its trained tokens of log π_x − log π_θ (π_θ detached; π_x the
    engine's or the old log-probs, as `against` says) exceeds the threshold, 1 elsewhere — TRL's
    `get_off_policy_mask`; None without the key."""
    if off_policy_mask is None:
        return None
    if off_policy_mask.against == "engine" and engine_logp is None:
        raise ValueError("off_policy_mask against engine needs the engine's log-probs")
    drawn = engine_logp if off_policy_mask.against == "engine" else old_logp
    m = mask.to(logp.dtype)
    drift = ((drawn - logp.detach()) * m).sum(dim=1) / m.sum(dim=1).clamp(min=1.0)  # (B,)
    return ((adv >= 0) | (drift <= off_policy_mask.threshold)).to(logp.dtype)[:, None]


def _weight_stats(
    weights: torch.Tensor | None,
    old_logp: torch.Tensor,
    engine_logp: torch.Tensor | None,
    mask: torch.Tensor,
    correction: Correction | None,
) -> dict[str, float]:
    """The weights' sum over the trained tokens (1 each without a correction), and how many the
    correction cut: truncated (tis) or masked (mis)."""
    trained = mask.bool()
    if weights is None or engine_logp is None or correction is None:
        return {"weight_sum": float(trained.sum()), "weight_cut": 0.0}
    if correction.kind == "mis":
        cut = trained & (weights == 0)
    else:
        raw = correction_weights(old_logp, engine_logp, mask, correction.model_copy(update={"cap": math.inf}))
        assert raw is not None
        cut = trained & (raw > weights)
    return {"weight_sum": float((weights * mask.to(weights.dtype)).sum()), "weight_cut": float(cut.sum())}
