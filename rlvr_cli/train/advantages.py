"""Advantages: how the rewards of a group become each sample's advantage, as docs/contract.md
writes it (`objective.advantage`: baseline, scale, std, epsilon, whiten) — and the group outcomes the
metrics count. train/objective.py re-exports these names."""

from __future__ import annotations

from typing import TYPE_CHECKING

import torch

if TYPE_CHECKING:
    from rlvr_cli.contract.models import Objective


def group_advantages(
    rewards: torch.Tensor, group_size: int, objective: Objective, tokens: torch.Tensor | None = None
) -> torch.Tensor:
    """Group-relative advantages for rewards `(N,)` ordered group by group.

    A = r - the mean of its group (`group_mean`) or of the group's other rewards
    (`leave_one_out`, RLOO: n/(n-1) times the former), divided by the std of the group
    (`group_std`), of every reward in the batch (`batch_std`), of the group's other rewards
    (`leave_one_out_std`: not divided where that std is 0), or by nothing (`none`); `epsilon`
    is added to the std. A NaN reward marks an excluded sample: it is left out of means and
    stds and gets A = 0. A group whose rewards are all equal gets exactly zero: epsilon
    creates no signal. Then `whiten`, where the contract says it: `whitened`. `tokens` `(N,)`:
    each sample's trained tokens, which `whiten.over: batch_tokens` weighs it by.
    """
    return whitened(_centered(rewards, group_size, objective), rewards, objective, tokens)


def whitened(
    advantages: torch.Tensor, rewards: torch.Tensor, objective: Objective, tokens: torch.Tensor | None = None
) -> torch.Tensor:
    """`objective.advantage.whiten` over the batch `(N,)`: over every non-excluded sample (NaN
    reward: excluded, kept at 0), each counted once (`over: batch`, TRL RLOOTrainer's
    normalize_advantages) or once per trained token (`batch_tokens`, REINFORCE++ with baseline:
    `tokens` `(N,)` required), A ← (A − their mean) / their std, epsilon entering as
    `epsilon_use` says: std + ε (TRL), √(variance + ε) (verl), √max(variance, ε) (NeMo RL)."""
    w = getattr(objective.advantage, "whiten", None)  # an advantage section written before the key: none
    if w is None:
        return advantages
    valid = ~torch.isnan(rewards)
    weight = valid.double()
    if w.over == "batch_tokens":
        if tokens is None:
            raise ValueError("whiten.over: batch_tokens needs each sample's trained tokens")
        weight = torch.where(valid, tokens.double(), torch.zeros_like(weight))
    a, total = advantages.double(), weight.sum()
    centered = torch.where(valid, a - (weight * a).sum() / total.clamp(min=1), torch.zeros_like(a))
    variance = (weight * centered.pow(2)).sum() / (total - STD_KINDS[w.std]).clamp(min=1)
    use = getattr(w, "epsilon_use", "add_to_std")
    if use == "add_to_std":
        scaled = centered / (variance.sqrt() + w.epsilon)
    elif use == "add_to_variance":
        scaled = centered * torch.rsqrt(variance + w.epsilon)
    elif use == "variance_floor":
        scaled = centered * torch.rsqrt(variance.clamp(min=w.epsilon))
    else:
        raise ValueError(f"unknown whiten.epsilon_use {use!r}")
    return scaled.to(advantages.dtype)


def _centered(rewards: torch.Tensor, group_size: int, objective: Objective) -> torch.Tensor:
    """`group_advantages` before `whiten`."""
    adv = objective.advantage
    if rewards.ndim != 1 or rewards.numel() % group_size:
        raise ValueError(f"rewards must be (N,) with N a multiple of group_size={group_size}")
    groups = rewards.double().view(-1, group_size)  # (G, K)
    valid = ~torch.isnan(groups)  # (G, K)
    filled = torch.where(valid, groups, torch.zeros_like(groups))
    count = valid.sum(dim=1, keepdim=True).clamp(min=1)  # (G, 1)
    mean = filled.sum(dim=1, keepdim=True) / count  # (G, 1)
    centered = torch.where(valid, groups - mean, torch.zeros_like(groups))  # (G, K)
    uniform = uniform_groups(groups)  # (G,)
    centered[uniform] = 0.0
    if adv.baseline == "leave_one_out":  # r − (S − r)/(n − 1) = n/(n − 1)·(r − mean)
        centered = centered * count / (count - 1).clamp(min=1)
    elif adv.baseline != "group_mean":
        raise ValueError(f"unknown advantage baseline {adv.baseline!r}")
    if adv.scale == "leave_one_out_std":
        std = _others_std(groups, valid, adv.std)  # (G, K)
        centered = torch.where(std > 0, centered / (std + adv.epsilon), centered)
    elif adv.scale == "group_std":
        centered = centered / (_std(centered, valid, adv.std, dim=1) + adv.epsilon)
    elif adv.scale == "batch_std":
        batch_centered = torch.where(valid, groups - _masked_mean(groups, valid), torch.zeros_like(groups))
        centered = centered / (_std(batch_centered.view(1, -1), valid.view(1, -1), adv.std, dim=1) + adv.epsilon)
    elif adv.scale != "none":
        raise ValueError(f"unknown advantage scale {adv.scale!r}")
    return centered.view(-1).to(rewards.dtype)  # (N,)


def hinted_advantages(
    rewards: torch.Tensor,
    hinted: torch.Tensor,
    group_size: int,
    objective: Objective,
    subgroup: bool,
    tokens: torch.Tensor | None = None,
) -> torch.Tensor:
    """Advantages `(N,)` for rewards ordered group by group, with `hinted` `(N,)` bool (the
    samples shown a hint, `data.hints`): with `subgroup` (`hints.advantage: subgroup`), hinted
    and unhinted samples are each compared only with their own kind — the other kind is left
    out as an excluded sample is; otherwise the whole group, as `group_advantages` (`tokens`: its)."""
    if not subgroup or not bool(hinted.any()):
        return group_advantages(rewards, group_size, objective, tokens)
    nan = torch.full_like(rewards, float("nan"))
    with_hint = _centered(torch.where(hinted, rewards, nan), group_size, objective)
    without = _centered(torch.where(hinted, nan, rewards), group_size, objective)
    return whitened(torch.where(hinted, with_hint, without), rewards, objective, tokens)  # over the whole batch


def _masked_mean(values: torch.Tensor, valid: torch.Tensor) -> torch.Tensor:
    return torch.where(valid, values, torch.zeros_like(values)).sum() / valid.sum().clamp(min=1)


def _std(centered: torch.Tensor, valid: torch.Tensor, kind: str | None, dim: int) -> torch.Tensor:
    """Population (÷n) or sample (÷(n-1)) std of already-centered values, NaN-free."""
    n = valid.sum(dim=dim, keepdim=True)
    if kind is not None and kind not in STD_KINDS:
        raise ValueError(f"unknown std {kind!r}")
    denom = (n - STD_KINDS.get(kind or "population", 0)).clamp(min=1)
    return (centered.pow(2).sum(dim=dim, keepdim=True) / denom).sqrt()


def _others_std(groups: torch.Tensor, valid: torch.Tensor, kind: str | None) -> torch.Tensor:
    """`(G, K)`: for each reward, the population or sample std of the other valid rewards of
    its group around their own mean; 0 where there are too few of them to have one."""
    k = groups.shape[1]
    others = valid[:, None, :] & ~torch.eye(k, dtype=torch.bool)[None]  # (G, K, K): row i, the rewards j ≠ i
    values = torch.where(others, groups[:, None, :], torch.zeros_like(groups)[:, None, :])
    m = others.sum(dim=2)  # (G, K)
    mean = values.sum(dim=2) / m.clamp(min=1)
    squares = torch.where(others, values - mean[..., None], torch.zeros_like(values)).pow(2).sum(dim=2)
    denom = m - STD_KINDS.get(kind or "population", 0)
    return torch.where(valid & (denom > 0), squares / denom.clamp(min=1), torch.zeros_like(squares)).sqrt()


#: `objective.advantage.std` → what the squared deviations' sum is divided by: n − this
STD_KINDS = {"population": 0, "sample": 1}
#: `objective.advantage.scale`: what the centered rewards are divided by (`group_advantages`)
ADVANTAGE_SCALES = ("group_std", "batch_std", "leave_one_out_std", "none")
#: `objective.advantage.baseline`: what is subtracted from each reward (`group_advantages`)
ADVANTAGE_BASELINES = ("group_mean", "leave_one_out")


def uniform_groups(groups: torch.Tensor) -> torch.Tensor:
    """`(G,)` True where every valid reward of the group is equal (zero-std groups)."""
    valid = ~torch.isnan(groups)
    high = torch.where(valid, groups, torch.full_like(groups, -torch.inf)).amax(dim=1)
    low = torch.where(valid, groups, torch.full_like(groups, torch.inf)).amin(dim=1)
    return (high == low) | (valid.sum(dim=1) <= 1)


def group_outcomes(rewards: torch.Tensor, group_size: int, best: float) -> dict[str, int]:
    """Count zero-std groups, split into `all_correct` (every sample earned `best`, the
    highest reward the components allow), `all_wrong` (every sample earned ≤ 0) and other
    uniform groups. Saturation and under-exploration need different fixes."""
    groups = rewards.double().view(-1, group_size)
    uniform = uniform_groups(groups)
    valid = ~torch.isnan(groups)
    value = torch.where(valid, groups, torch.zeros_like(groups)).sum(dim=1) / valid.sum(dim=1).clamp(min=1)
    all_correct = int((uniform & (value >= best)).sum())
    all_wrong = int((uniform & (value <= 0)).sum())
    return {
        "groups": groups.shape[0],
        "zero_std": int(uniform.sum()),
        "all_correct": all_correct,
        "all_wrong": all_wrong,
    }
