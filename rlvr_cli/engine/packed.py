"""The update forward with packing: several (prompt + response) sequences share one row, with
a block-diagonal causal mask and position ids restarting at 0 for each, so none attends to
another and each sees exactly what it would see alone. Packing saves the compute that padding
every sequence to the longest one wastes when lengths vary.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import torch

from rlvr_cli.chat.pack import PackedRow, pack


@dataclass
class PackedBatch:
    """Sequences packed into rows, and where each one's response tokens sit."""

    packs: list[PackedRow]
    where: list[tuple[int, int, int]]  # per sequence: (row, first response position, response length)
    response_width: int  # T: the widest response, the width of the (B, T) outputs
    response_mask: torch.Tensor  # (B, T) the loss mask, as the padded batch has it

    @classmethod
    def of(
        cls,
        prompts: list[list[int]],
        responses: list[list[int]],
        masks: list[list[int]],
        pad_id: int,
        width: int | None = None,
        one_per_row: bool = False,
    ) -> PackedBatch:
        """Pack sequences first-fit, longest first; `one_per_row` keeps each alone in its row,
        which is the padded batch with the padding on the right."""
        lengths = [len(p) + len(r) for p, r in zip(prompts, responses, strict=True)]
        order = sorted(range(len(lengths)), key=lambda j: -lengths[j])  # first fit, longest first
        episodes = [(list(prompts[j]) + list(responses[j]), [1] * lengths[j]) for j in order]
        packs = (
            [row for e in episodes for row in pack([e], max(lengths), pad_id=pad_id)]
            if one_per_row
            else pack(episodes, max(lengths), pad_id=pad_id)  # rows as long as the longest sequence
        )
        start_of: dict[int, tuple[int, int]] = {}
        for row, p in enumerate(packs):
            for start, _ in p.bounds:
                start_of[order[row if one_per_row else p.episode[start]]] = (row, start)
        where = [(start_of[j][0], start_of[j][1] + len(prompts[j]), len(responses[j])) for j in range(len(prompts))]
        width = width or max(1, max(len(r) for r in responses))
        loss = torch.tensor([list(m) + [0] * (width - len(m)) for m in masks], dtype=torch.long)  # (B, T)
        return cls(packs, where, width, loss)

    def tensors(self, device: torch.device) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        ids = torch.tensor([p.input_ids for p in self.packs], device=device)  # (R, C)
        positions = torch.tensor([p.position_ids for p in self.packs], device=device)  # (R, C)
        mask = torch.cat([p.attention_mask() for p in self.packs]).to(device)  # (R, 1, C, C) additive
        return ids, positions, mask


def packed_logprobs(
    model: Any, packed: PackedBatch, temperature: float, with_entropy: bool = False
) -> tuple[torch.Tensor, torch.Tensor | None]:
    """Log-probs `(B, T)` of every sequence's response tokens (and their entropy), computed in
    packed rows; the same numbers `forward.token_logprobs` gives on the padded batch."""
    device = next(model.parameters()).device
    ids, positions, mask = packed.tensors(device)
    logits = model(input_ids=ids, position_ids=positions, attention_mask=mask.to(model.dtype), use_cache=False).logits
    logits = logits.float()  # (R, C, V)
    if temperature > 0 and temperature != 1.0:
        logits = logits / temperature
    T = packed.response_width
    rows = torch.tensor([w[0] for w in packed.where], device=device)  # (B,)
    starts = torch.tensor([w[1] for w in packed.where], device=device)  # (B,)
    offsets = torch.arange(T, device=device)  # (T,)
    target_pos = (starts[:, None] + offsets[None, :]).clamp(max=ids.shape[1] - 1)  # (B, T) response token slots
    predict_pos = (target_pos - 1).clamp(min=0)  # (B, T) position t - 1 predicts token t
    logp_all = torch.log_softmax(logits[rows[:, None], predict_pos], dim=-1)  # (B, T, V)
    targets = ids[rows[:, None], target_pos]  # (B, T)
    logp = logp_all.gather(-1, targets.unsqueeze(-1)).squeeze(-1)  # (B, T)
    valid = offsets[None, :] < torch.tensor([w[2] for w in packed.where], device=device)[:, None]  # (B, T)
    logp = torch.where(valid, logp, torch.zeros_like(logp))
    entropy = None
    if with_entropy:
        entropy = -(logp_all.exp() * logp_all).sum(dim=-1)  # (B, T)
        entropy = torch.where(valid, entropy, torch.zeros_like(entropy))
    return logp, entropy
