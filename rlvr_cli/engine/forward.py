"""The log-probs of any response under a causal LM, and the padded batch they are computed on.

`token_logprobs` is the one forward used everywhere: at rollout time (under no_grad) for the
old log-probs and the reference, and in the update (with grad). Same code, same dtype, same
micro-batch shapes, so the importance ratio is exactly 1 at the first update.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import torch


@dataclass
class Batch:
    """Left-padded prompts and right-padded responses, as tensors for one forward."""

    input_ids: torch.Tensor  # (B, P + T)
    attention_mask: torch.Tensor  # (B, P + T)
    prompt_width: int  # P
    response_mask: torch.Tensor  # (B, T) loss mask over the response slots
    # `distinct_prompts`, found once: a forward asks for it several times (a batch is never changed)
    distinct: tuple[torch.Tensor, torch.Tensor] | None = field(default=None, repr=False, compare=False)

    @property
    def response_ids(self) -> torch.Tensor:
        return self.input_ids[:, self.prompt_width :]  # (B, T)

    def to(self, device: torch.device) -> Batch:
        return Batch(
            self.input_ids.to(device), self.attention_mask.to(device), self.prompt_width, self.response_mask.to(device)
        )


def make_batch(
    prompts: list[list[int]],
    responses: list[list[int]],
    masks: list[list[int]],
    pad_id: int,
    width: int | None = None,
    response_width: int | None = None,
) -> Batch:
    """Pack prompts (left padding) and responses (right padding) into one rectangle."""
    P = width or max(len(p) for p in prompts)
    T = response_width or max(1, max(len(r) for r in responses))
    rows, attention, losses = [], [], []
    for p, r, m in zip(prompts, responses, masks, strict=True):
        pad_left, pad_right = P - len(p), T - len(r)
        rows.append([pad_id] * pad_left + list(p) + list(r) + [pad_id] * pad_right)
        attention.append([0] * pad_left + [1] * (len(p) + len(r)) + [0] * pad_right)
        losses.append(list(m) + [0] * (T - len(m)))
    ids = torch.tensor(rows, dtype=torch.long)  # (B, P + T)
    attn = torch.tensor(attention, dtype=torch.long)  # (B, P + T)
    loss = torch.tensor(losses, dtype=torch.long)  # (B, T)
    return Batch(ids, attn, P, loss)


def distinct_prompts(batch: Batch) -> tuple[torch.Tensor, torch.Tensor]:
    """The distinct prompts of a batch in order of first appearance: each one's first row
    `(G,)`, and which of them each row holds `(B,)` — what a GRPO group's rows share. With no
    prompt repeated, both are `arange(B)`."""
    if batch.distinct is None:
        batch.distinct = _distinct_prompts(batch)
    return batch.distinct


def _distinct_prompts(batch: Batch) -> tuple[torch.Tensor, torch.Tensor]:
    P = batch.prompt_width
    keyed = torch.where(batch.attention_mask[:, :P].bool(), batch.input_ids[:, :P], -1)
    _, key = torch.unique(keyed, dim=0, return_inverse=True)  # ids in sorted order of the prompts
    rows = torch.arange(keyed.size(0), device=key.device)
    first = torch.full((int(key.max()) + 1,), keyed.size(0), dtype=torch.long, device=key.device)
    first = first.scatter_reduce(0, key, rows, reduce="amin")
    order = torch.argsort(first)  # renumber by first appearance
    rank = torch.empty_like(order)
    rank[order] = torch.arange(len(order), device=key.device)
    return first[order], rank[key]


def token_logprobs(
    model: Any, batch: Batch, temperature: float, with_entropy: bool = False
) -> tuple[torch.Tensor, torch.Tensor | None]:
    """Log-probs `(B, T)` of the response tokens under softmax(logits / temperature), the
    distribution they were sampled from, and optionally the per-token entropy `(B, T)`."""
    position_ids = (batch.attention_mask.cumsum(dim=1) - 1).clamp(min=0)  # (B, P + T)
    out = model(
        input_ids=batch.input_ids, attention_mask=batch.attention_mask, position_ids=position_ids, use_cache=False
    )
    P = batch.prompt_width
    logits = out.logits[:, P - 1 : -1].float()  # (B, T, V): position t predicts token t + 1
    if temperature > 0 and temperature != 1.0:
        logits = logits / temperature
    logp_all = torch.log_softmax(logits, dim=-1)  # (B, T, V)
    logp = logp_all.gather(-1, batch.response_ids.unsqueeze(-1)).squeeze(-1)  # (B, T)
    entropy = None
    if with_entropy:
        entropy = -(logp_all.exp() * logp_all).sum(dim=-1)  # (B, T)
    return logp, entropy
