"""The KL term towards the frozen reference: the per-token estimate (k1, k2, k3), its gradient
(`objective.kl.gradient`), what multiplies it (`objective.kl.weight`) and the per-answer sum
for `kl.placement: reward`. train/objective.py adds it to the loss."""

from __future__ import annotations

from typing import Any

import torch


def kl_estimate(logp: torch.Tensor, ref_logp: torch.Tensor, estimator: str) -> torch.Tensor:
    """Per-token estimate of KL(π_θ ‖ π_ref) from samples of π_θ (Schulman, "Approximating KL
    divergence", http://joschu.net/blog/kl-approx.html): k1 = log r, k2 = ½(log r)², k3 =
    (1/r) - 1 + log r, with r = π_θ/π_ref."""
    if estimator not in KL_ESTIMATORS:
        raise ValueError(f"unknown KL estimator {estimator!r}")
    return KL_ESTIMATORS[estimator](logp - ref_logp)  # (B, T)


#: `objective.kl.estimator` → the per-token estimate from log r = log π_θ − log π_ref
KL_ESTIMATORS = {
    "k1": lambda log_r: log_r,
    "k2": lambda log_r: 0.5 * log_r.pow(2),
    "k3": lambda log_r: torch.exp(-log_r) - 1.0 + log_r,
}
#: `objective.kl.placement`: where β·KL enters (train/update.py `rewards_with_kl`, `policy_loss`)
KL_PLACEMENTS = ("loss", "reward")


def kl_in_loss(
    kl_tok: torch.Tensor,
    kl: Any,
    logp: torch.Tensor,
    old_logp: torch.Tensor,
    ref_logp: torch.Tensor,
    mask: torch.Tensor,
    level: str,
) -> torch.Tensor:
    """Each token's KL as the loss takes it `(B, T)`: with the gradient `kl.gradient` names, then
    multiplied by `kl.weight`."""
    kl_tok = kl_with_gradient(kl_tok, logp, ref_logp, getattr(kl, "gradient", None))
    return kl_weighted(kl_tok, getattr(kl, "weight", None), logp, old_logp, mask, level)


def kl_with_gradient(
    kl_tok: torch.Tensor, logp: torch.Tensor, ref_logp: torch.Tensor, gradient: str | None
) -> torch.Tensor:
    """`objective.kl.gradient` on the per-token KL `(B, T)`: the estimator's own gradient (absent,
    `estimator`), or k2's with the estimator's value — k2 − sg(k2) + sg(KL), straight-through
    (verl's `k1+`, `k3+`): for samples of π_θ, k2's gradient (log r)·∇log π_θ is the KL's in
    expectation, where k1's and k3's are not."""
    if gradient in (None, "estimator"):
        return kl_tok
    if gradient != "k2":
        raise ValueError(f"unknown kl.gradient {gradient!r}")
    k2 = KL_ESTIMATORS["k2"](logp - ref_logp)
    return k2 - k2.detach() + kl_tok.detach()


def kl_weighted(
    kl_tok: torch.Tensor,
    weight: str | None,
    logp: torch.Tensor,
    old_logp: torch.Tensor,
    mask: torch.Tensor,
    level: str,
) -> torch.Tensor:
    """`objective.kl.weight` on the per-token KL `(B, T)`: none; × `ratio`, the objective's
    π_θ/π_old at its level with its gradient (per answer: exp of the mean or sum of its trained
    tokens' log-ratios, broadcast — TRL's use_bias_correction_kl, whose gradient reaches every
    token of the answer); × exp(log π_θ − sg(log π_θ)) (`score_function`: value 1, gradient
    KL·∇log π_θ added)."""
    if weight in (None, "none"):
        return kl_tok
    if weight == "ratio":
        if level == "token":
            return kl_tok * torch.exp(logp - old_logp)
        m = mask.to(logp.dtype)
        log_s = ((logp - old_logp) * m).sum(dim=1)  # (B,)
        if level == "sequence":
            log_s = log_s / m.sum(dim=1).clamp(min=1.0)
        return kl_tok * torch.exp(log_s)[:, None]
    if weight == "score_function":
        return kl_tok * torch.exp(logp - logp.detach())
    raise ValueError(f"unknown kl.weight {weight!r}")


def sequence_kl(logp: torch.Tensor, ref_logp: torch.Tensor, mask: torch.Tensor, estimator: str) -> torch.Tensor:
    """`(B,)` summed per-token KL of each response, for `kl.placement: reward`."""
    return (kl_estimate(logp, ref_logp, estimator) * mask.to(logp.dtype)).sum(dim=1)
