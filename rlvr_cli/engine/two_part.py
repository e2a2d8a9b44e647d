"""The update's responses attending to their shared prompt and to themselves, on a CPU, in two
parts merged exactly: no response holds a copy of its prompt's keys and values.

Attention over (prompt + response) splits by keys. Each part gives its output and the
log-sum-exp of its scores, and the whole is their weighted sum (weights exp(lse_part − lse)).
- The prompt part: every response token of a group against its prompt's real keys, one call
  a group, the heads that share a key head folded into its rows (no repeated keys, no padding,
  no mask: a response token sees the whole prompt).
- The own part: each response's tokens causally over its own, one call for all rows.
The backward of each part is the flash-attention backward given the whole output and the whole
log-sum-exp, which is exact for a subset of the keys (the softmax's normaliser is the whole's):
its query gradients add up, its key and value gradients are the part's own.

Against one padded call over copies of the prompt (engine/shared.py's way elsewhere), with 8
prompts of 110-300 tokens × 8 responses of 20-64 tokens, 8 heads of 64, a layer's forward and
backward: 109 -> 75 ms (fp32, best of 8), and 8 copies of each prompt's keys and values fewer.
Through PyTorch's own CPU flash-attention kernels (`available` says whether this build has them).
"""

from __future__ import annotations

from typing import Any

import torch

_ops = torch.ops.aten


def available() -> bool:
    return hasattr(_ops, "_scaled_dot_product_flash_attention_for_cpu") and hasattr(
        _ops, "_scaled_dot_product_flash_attention_for_cpu_backward"
    )


def _fold(x: torch.Tensor, kv: int) -> torch.Tensor:  # (n, H, D) → (1, kv, per·n, D)
    n, H, D = x.shape
    return x.view(n, kv, H // kv, D).permute(1, 2, 0, 3).reshape(1, kv, -1, D)


def _unfold(x: torch.Tensor, n: int) -> torch.Tensor:  # (1, kv, per·n, ...) → (n, H, ...)
    kv, rest = x.size(1), x.shape[3:]
    return x.view(kv, -1, n, *rest).permute(2, 0, 1, *range(3, 3 + len(rest))).reshape(n, -1, *rest)


class Rows:
    """Where a micro-batch's response tokens are: `real` `(n,)` in the `(B, T)` rectangle, and each
    group's tokens `groups[g]` `(n_g,)` in the flattened `(n,)` order; the prompts' spans."""

    def __init__(self, real: torch.Tensor, owner: torch.Tensor, B: int, T: int, lengths: list[int]) -> None:
        self.real, self.B, self.T, self.lengths = real, B, T, lengths
        group = owner.index_select(0, torch.div(real, T, rounding_mode="floor"))
        self.groups = [(group == g).nonzero().squeeze(1) for g in range(len(lengths))]

    def rows(self, x: torch.Tensor) -> torch.Tensor:  # (n, ...) → (B, T, ...), padding zero
        return x.new_zeros(self.B * self.T, *x.shape[1:]).index_copy(0, self.real, x).unflatten(0, (self.B, self.T))

    def flat(self, x: torch.Tensor) -> torch.Tensor:  # (B, T, ...) → (n, ...)
        return x.flatten(0, 1).index_select(0, self.real)


def _prompt_parts(split: Rows, pk: torch.Tensor, pv: torch.Tensor):
    """Each group's prompt keys and values `(1, kv, L, D)`."""
    start = 0
    for g, n in enumerate(split.lengths):
        keys, values = (t[start : start + n].transpose(0, 1)[None] for t in (pk, pv))  # (1, kv, L, D)
        start += n
        yield g, keys, values


class TwoPart(torch.autograd.Function):
    @staticmethod
    def forward(ctx: Any, q, k, v, pk, pv, split: Rows, scale: float):  # type: ignore[override]
        n, H, D = q.shape
        kv = k.size(1)
        out1, lse1 = q.new_empty(n, H, D), q.new_empty(n, H)
        for g, keys, values in _prompt_parts(split, pk, pv):
            at = split.groups[g]
            if not at.numel():  # no response of this group has a token
                continue
            o, lse = _ops._scaled_dot_product_flash_attention_for_cpu(
                _fold(q.index_select(0, at), kv), keys, values, scale=scale
            )
            out1.index_copy_(0, at, _unfold(o, at.numel()))
            lse1.index_copy_(0, at, _unfold(lse[..., None], at.numel())[..., 0])
        qr, kr, vr = _own(split, q, k, v, H // kv)
        o, lse = _ops._scaled_dot_product_flash_attention_for_cpu(qr, kr, vr, is_causal=True, scale=scale)
        out2, lse2 = split.flat(o.transpose(1, 2)), split.flat(lse.transpose(1, 2))
        whole = torch.logaddexp(lse1, lse2)
        out = out1.mul_((lse1 - whole).exp_()[..., None]).add_(out2 * (lse2 - whole).exp_()[..., None])
        ctx.save_for_backward(q, k, v, pk, pv, out, whole)
        ctx.split, ctx.scale = split, scale
        return out

    @staticmethod
    def backward(ctx: Any, grad: torch.Tensor):  # type: ignore[override]
        q, k, v, pk, pv, out, whole = ctx.saved_tensors
        split, scale = ctx.split, ctx.scale
        H, kv = q.size(1), k.size(1)
        grad = grad.contiguous()
        dq, dpk, dpv = torch.zeros_like(q), torch.zeros_like(pk), torch.zeros_like(pv)
        start = 0
        for g, keys, values in _prompt_parts(split, pk, pv):
            at, m = split.groups[g], split.groups[g].numel()
            L = split.lengths[g]
            if not m:
                start += L
                continue
            a, b, c = _ops._scaled_dot_product_flash_attention_for_cpu_backward(
                _fold(grad.index_select(0, at), kv),
                _fold(q.index_select(0, at), kv),
                keys,
                values,
                _fold(out.index_select(0, at), kv),
                _fold(whole.index_select(0, at)[..., None], kv)[..., 0],
                0.0,
                False,
                scale=scale,
            )
            dq.index_add_(0, at, _unfold(a, m))
            dpk[start : start + L] = b[0].transpose(0, 1)
            dpv[start : start + L] = c[0].transpose(0, 1)
            start += L
        per = H // kv
        qr, kr, vr = _own(split, q, k, v, per)
        a, b, c = _ops._scaled_dot_product_flash_attention_for_cpu_backward(
            split.rows(grad).transpose(1, 2),
            qr,
            kr,
            vr,
            split.rows(out).transpose(1, 2),
            split.rows(whole).transpose(1, 2).contiguous(),
            0.0,
            True,
            scale=scale,
        )
        dq += split.flat(a.transpose(1, 2))
        dk = split.flat(b.unflatten(1, (kv, per)).sum(2).transpose(1, 2))
        dv = split.flat(c.unflatten(1, (kv, per)).sum(2).transpose(1, 2))
        return dq, dk, dv, dpk, dpv, None, None


def _own(split: Rows, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, per: int):
    """Each response's queries, keys and values as rows `(B, H, T, D)`, the keys' heads repeated."""
    rows = (split.rows(t).transpose(1, 2) for t in (q, k, v))
    qr, kr, vr = rows
    return qr, kr.repeat_interleave(per, dim=1), vr.repeat_interleave(per, dim=1)


def attend(split: Rows, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, pk: torch.Tensor, pv: torch.Tensor):
    """Response queries `q` `(n, H, D)` over their prompt's keys `pk`/`pv` `(m, kv, D)` and their
    own `k`/`v` `(n, kv, D)`: `(n, H, D)` in fp32."""
    q, k, v, pk, pv = (t.float() for t in (q, k, v, pk, pv))
    with torch.autocast("cpu", enabled=False):
        return TwoPart.apply(q, k, v, pk, pv, split, q.size(-1) ** -0.5)
