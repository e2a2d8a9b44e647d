"""Decode steps whose rows share a prompt read its keys and values once.

A GRPO group is one prompt answered by several rows. Fanned out row by row, every decode step
reads each row's own copy of the prompt's keys and values: for 8 rows of a 250-token prompt,
8 copies, most of what attention reads (measured: attention was 30 % of a bf16 decode at 31 M
parameters, 16 rows, and the prompt's keys 90 % of what it read). Here the prompt's keys and
values stay one copy per distinct prompt, and each step computes attention in two parts, as
cascade inference does:
- the prompt part: every query of a group's rows against its prompt's keys at once, one
  batched product per layer for all groups (rows padded to the largest group);
- the row part: each row's query against the tokens it generated (never padded);
and merges them exactly by their softmax maxima and sums. The result is attention over the
whole sequence, to float rounding (tests/engine/test_sampler.py compares the model's logits).
"""

from __future__ import annotations

from typing import Any

import torch

#: per layer, the bytes of prompt keys and values the rows' copies would add before sharing
#: pays: below, the extra operations of two-part attention cost more than the reads they save
#: (a 1 M-parameter model, 16 rows of 20-150-token prompts: 24-28 ms against 30-34 ms per 16 tokens;
#: 31 M parameters, 16 rows of 250-token prompts, 7 MB a layer: 1.90 -> 1.80 s fp32, 1.08 -> 0.96 s bf16)
SHARED_BYTES = 4 << 20


def pays(cache: Any, owner: torch.Tensor) -> bool:
    """Whether fanning these rows out over shared prompts is worth the two-part attention. Only
    over fp32 keys (a CPU's cache): its softmax is computed by hand, where a GPU's bf16 cache
    has a fused kernel that accumulates in fp32."""
    if cache.keys[0].dtype != torch.float32:
        return False
    G, kv, _, D = cache.keys[0].shape
    copies = (owner.numel() - G) * kv * cache.length * D * 2 * cache.keys[0].element_size()
    return copies >= SHARED_BYTES


def share(cache: Any, owner: torch.Tensor) -> None:
    """Turn a cache of distinct prompts `(G, kv, P + room, D)` into one whose `B = len(owner)`
    rows answer prompt `owner[b]`: the prompts' keys and values are kept as they are (views, no
    copy), each row gets slots for the tokens it will generate."""
    P = cache.length
    room = cache.mask.size(1) - P
    cache.prompt_keys = [k[:, :, :P] for k in cache.keys]
    cache.prompt_values = [v[:, :, :P] for v in cache.values]
    cache.prompt_mask = cache.mask[:, None, None, :P]  # (G, 1, 1, P): -inf on left padding
    B, kv, D = owner.numel(), cache.keys[0].size(1), cache.keys[0].size(3)
    cache.keys = [k.new_empty((B, kv, room, D)) for k in cache.keys]
    cache.values = [v.new_empty((B, kv, room, D)) for v in cache.values]
    cache.mask = cache.mask[owner][:, P:]
    cache.positions = cache.positions[owner]
    cache.prefix, cache.owner = P, owner
    index(cache)


def index(cache: Any) -> None:
    """Where each row's queries go in the padded `(G, S)` layout of the prompt part, and back."""
    owner = cache.owner
    G, B = cache.prompt_mask.size(0), owner.numel()
    counts = torch.bincount(owner, minlength=G)
    S = max(int(counts.max()), 1)
    order = torch.argsort(owner, stable=True)  # rows by their prompt
    first = counts.cumsum(0) - counts
    slot = owner[order] * S + (torch.arange(B, device=owner.device) - first[owner[order]])
    cache.slot_of_row = torch.empty_like(slot)
    cache.slot_of_row[order] = slot
    slots = torch.zeros(G * S, dtype=torch.long, device=owner.device)  # an empty slot repeats row 0: unused
    slots[slot] = order
    cache.slots, cache.group_rows = slots, S


def attend(q: torch.Tensor, cache: Any, layer: int, generated: int) -> torch.Tensor:
    """Attention of `q` `(B, H, D)` (one new token per row) over its prompt and the `generated`
    tokens of its own so far; `(B, H·D)`. In the keys' dtype (fp32 on a CPU, as
    engine/precision.py `attention` computes it), whatever autocast would do."""
    with torch.autocast(q.device.type, enabled=False):
        return _attend(q, cache, layer, generated)


def _attend(q: torch.Tensor, cache: Any, layer: int, generated: int) -> torch.Tensor:
    B, H, D = q.shape
    keys, values = cache.prompt_keys[layer], cache.prompt_values[layer]
    G, kv = keys.size(0), keys.size(1)
    per, S, scale = H // kv, cache.group_rows, D**-0.5
    q = q.to(keys.dtype)
    grouped = q[cache.slots].view(G, S, kv, per, D).transpose(1, 2).reshape(G, kv, S * per, D)
    scores = torch.matmul(grouped, keys.transpose(-1, -2)).mul_(scale).add_(cache.prompt_mask)
    top1 = scores.amax(-1, keepdim=True)
    weights = scores.sub_(top1).exp_()
    sum1 = weights.sum(-1, keepdim=True)
    out1 = torch.matmul(weights, values)  # (G, kv, S·per, D)

    def rows(x: torch.Tensor) -> torch.Tensor:  # (G, kv, S·per, n) → (B, kv, per, n)
        n = x.size(-1)
        return x.view(G, kv, S, per, n).transpose(1, 2).reshape(G * S, kv, per, n)[cache.slot_of_row]

    out1, top1, sum1 = rows(out1), rows(top1), rows(sum1)
    own_keys, own_values = cache.keys[layer][:, :, :generated], cache.values[layer][:, :, :generated]
    scores = torch.matmul(q.view(B, kv, per, D), own_keys.transpose(-1, -2)).mul_(scale)  # (B, kv, per, T)
    top2 = scores.amax(-1, keepdim=True)
    weights = scores.sub_(top2).exp_()
    sum2 = weights.sum(-1, keepdim=True)
    out2 = torch.matmul(weights, own_values)
    top = torch.maximum(top1, top2)
    a1, a2 = (top1 - top).exp_(), (top2 - top).exp_()
    out = (out1 * a1 + out2 * a2) / (sum1 * a1 + sum2 * a2)
    return out.reshape(B, H * D)
