"""`objective.entropy_mask`: the policy loss of an optimizer step trains only its highest-entropy
tokens (Wang et al. 2025, "Beyond the 80/20 rule: high-entropy minority tokens drive effective
RL for LLM reasoning", https://arxiv.org/abs/2506.01939; TRL's top_entropy_quantile). The
threshold is the (1 − top)-quantile of the entropies of every trained token of the step's
batch — all its micro-batches, all processes — under the weights the step starts from, so it does
not depend on how the batch is cut for memory."""

from __future__ import annotations

import torch

from rlvr_cli.train import distributed as dist
from rlvr_cli.train.forward_pass import Forward
from rlvr_cli.train.setup import Setup


def quantile(values: torch.Tensor, q: float) -> torch.Tensor:
    """torch.quantile's linear interpolation in float32 (the same number, bit for bit: the mask
    compares entropies with it), without its limit on the input's size."""
    ordered = torch.sort(values.flatten().float()).values
    rank = torch.tensor(q, dtype=torch.float32) * (len(ordered) - 1)
    below, above = rank.floor(), rank.ceil()
    return torch.lerp(ordered[below.long()], ordered[above.long()], rank - below)


def entropy_keep(setup: Setup, fwd: Forward) -> list[torch.Tensor] | None:
    """For each micro-batch of `fwd` (one optimizer step's share on this process), `(b, T)` 1 on
    the trained tokens the entropy mask keeps, 0 elsewhere; None without the key. One forward
    without gradient over the step's micro-batches, and one gather."""
    top = setup.contract.objective.entropy_mask
    if top is None:
        return None
    entropies = fwd.entropies(setup.policy, setup.contract.hyperparameters.sampling.temperature)
    return keep_top(entropies, [fwd.batch.response_mask[part] for part in fwd.parts], top.top)


def keep_top(entropies: list[torch.Tensor], masks: list[torch.Tensor], top: float) -> list[torch.Tensor]:
    """`(b, T)` 1 where a trained token's entropy is at or above the (1 − top)-quantile of every
    trained token's in `entropies` (each `(b, T)`, beside its loss mask) on every process."""
    trained = [m.bool() for m in masks]
    mine = [e.float()[m] for e, m in zip(entropies, trained, strict=True)]
    local = torch.cat(mine).cpu() if mine else torch.zeros(0)
    every = torch.cat([torch.as_tensor(x) for x in dist.gather(local.tolist())]) if dist.active() else local
    if not len(every):
        return [torch.zeros_like(m, dtype=torch.float32) for m in trained]
    threshold = quantile(every, 1.0 - top)
    return [((e.float() >= threshold) & m).float() for e, m in zip(entropies, trained, strict=True)]
