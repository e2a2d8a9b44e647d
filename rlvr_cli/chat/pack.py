"""Packing episodes into one row without letting them see each other.

Each pack carries per-episode position ids (restarting at 0), a block-diagonal causal
attention mask (an episode attends only to its own earlier tokens), and a loss mask with
the first token of every episode switched off: in a packed row that token would be
"predicted" from the previous episode's last token.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass


@dataclass
class PackedRow:
    """One row of the update batch: several episodes side by side, none attending to another."""

    input_ids: list[int]
    position_ids: list[int]
    loss_mask: list[int]
    episode: list[int]  # which episode each token belongs to (-1: padding)
    bounds: list[tuple[int, int]]  # (start, end) of each episode in the row

    def attention_mask(self, dtype=None):
        """(1, 1, T, T) additive mask: 0 where a token may attend, the dtype's minimum elsewhere."""
        import torch

        dtype = dtype or torch.float32
        episode = torch.tensor(self.episode)  # (T,)
        same = episode[:, None] == episode[None, :]  # (T, T)
        causal = torch.ones(len(self.episode), len(self.episode), dtype=torch.bool).tril()
        allowed = same & causal & (episode[:, None] >= 0)
        allowed |= torch.eye(len(self.episode), dtype=torch.bool)  # padding rows attend to themselves
        mask = torch.zeros(allowed.shape, dtype=dtype).masked_fill(~allowed, torch.finfo(dtype).min)
        return mask[None, None]  # (1, 1, T, T)


def pack(episodes: Sequence[tuple[Sequence[int], Sequence[int]]], max_tokens: int, pad_id: int = 0) -> list[PackedRow]:
    """Greedy first-fit packing of (ids, loss_mask) episodes into rows of `max_tokens`."""
    packs: list[PackedRow] = []
    for index, (ids, mask) in enumerate(episodes):
        if len(ids) != len(mask):
            raise ValueError(f"episode {index}: {len(ids)} ids but {len(mask)} mask values")
        if len(ids) > max_tokens:
            raise ValueError(f"episode {index} has {len(ids)} tokens, more than a pack holds ({max_tokens})")
        target = next((p for p in packs if len(p.input_ids) + len(ids) <= max_tokens), None)
        if target is None:
            target = PackedRow([], [], [], [], [])
            packs.append(target)
        start = len(target.input_ids)
        target.input_ids.extend(ids)
        target.position_ids.extend(range(len(ids)))
        target.loss_mask.extend([0, *mask[1:]])
        target.episode.extend([index] * len(ids))
        target.bounds.append((start, start + len(ids)))
    for p in packs:  # pad every row to the same length so they stack into one batch
        missing = max_tokens - len(p.input_ids)
        p.input_ids.extend([pad_id] * missing)
        p.position_ids.extend([0] * missing)
        p.loss_mask.extend([0] * missing)
        p.episode.extend([-1] * missing)
    return packs
