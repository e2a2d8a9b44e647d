"""The lean decoder's KV cache (engine/fused.py): plain tensors per layer, allocated once."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import torch

from rlvr_cli.engine import cascade


@dataclass
class Cache:
    """Keys and values per layer `(B, kv_heads, capacity, head_dim)`, allocated once, the
    first `length` slots filled; an additive mask `(B, capacity)`: 0 for real tokens, -inf
    for left padding and empty slots."""

    keys: list[torch.Tensor]
    values: list[torch.Tensor]
    mask: torch.Tensor
    positions: torch.Tensor  # (B,) the position of each row's last token
    length: int
    cos: torch.Tensor  # (positions, D) rotation tables up to the cache's capacity
    sin: torch.Tensor  # sign folded in: x·cos + swap_halves(x)·sin is the rotation
    # once a shared prompt fans out (engine/cascade.py): the rows' own slots start after `prefix`
    # prompt tokens kept once per distinct prompt; `owner` is the prompt each row answers
    prefix: int = 0
    owner: Any = None
    prompt_keys: Any = None
    prompt_values: Any = None
    prompt_mask: Any = None
    slots: Any = None
    slot_of_row: Any = None
    group_rows: int = 0

    def select(self, rows: torch.Tensor) -> None:
        """Keep (or repeat) these rows: finished rows leave; a shared prompt fans out, its keys
        and values kept once (engine/cascade.py)."""
        if not self.prefix and rows.numel() > self.mask.size(0) and cascade.pays(self, rows):
            cascade.share(self, rows)
            return
        self.keys = [k[rows] for k in self.keys]
        self.values = [v[rows] for v in self.values]
        self.mask, self.positions = self.mask[rows], self.positions[rows]
        if self.prefix:
            self.owner = self.owner[rows]
            cascade.index(self)
