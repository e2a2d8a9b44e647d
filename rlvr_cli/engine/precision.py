"""Mixed precision: weights in one dtype (the optimizer's fp32 master copy), matrix products in a
narrower one, through PyTorch's autocast.

The weight cache is off (`cache_enabled=False`): autocast would otherwise keep the bf16 copy
of each weight it cast until the outermost autocast region ends, and a forward after an
optimizer step inside that region would read the weights of before the step. Autocast state
is per thread, so every caller that runs a model (the update, the rollout engine, a sampling
thread) enters it itself.
"""

from __future__ import annotations

from contextlib import AbstractContextManager, nullcontext
from typing import Any

import torch
import torch.nn.functional as F

DTYPES = {"fp32": torch.float32, "bf16": torch.bfloat16, "fp16": torch.float16}


def autocast(compute: torch.dtype | None, device_type: str) -> AbstractContextManager[Any]:
    """Matrix products in `compute` (None: in the weights' own dtype)."""
    if compute is None:
        return nullcontext()
    return torch.autocast(device_type, dtype=compute, cache_enabled=False)


def device_type(model: Any) -> str:
    return next(model.parameters()).device.type


def attention(
    q: torch.Tensor,
    keys: torch.Tensor,
    values: torch.Tensor,
    mask: torch.Tensor | None,
    gqa: bool,
    causal: bool = False,
) -> torch.Tensor:
    """`scaled_dot_product_attention` (`mask`, or causal where `mask` is None and `causal`), on a
    CPU in fp32 whatever the compute dtype (its result in the queries' dtype outside autocast, so
    pure bf16 stays bf16 after it). PyTorch's CPU attention kernels run bf16 slower than fp32 (2
    threads: one query per row, 16 rows × 8 heads × 300 keys, 3.1 against 0.5 ms; a training
    backward, 16 against 10 ms), so bf16 there would cost time and precision both; on a GPU the
    kernel autocast picks runs as it is."""
    if gqa and not kernel_maps_heads(q, mask):
        keys, values, gqa = _repeat_heads(keys, q.shape[-3]), _repeat_heads(values, q.shape[-3]), False
    mixed = torch.is_autocast_enabled("cpu")
    kw = {"attn_mask": mask, "is_causal": causal and mask is None, "enable_gqa": gqa}
    if q.device.type != "cpu" or (q.dtype == keys.dtype == values.dtype == torch.float32 and not mixed):
        return F.scaled_dot_product_attention(q, keys, values, **kw)
    if mask is not None and mask.dtype != torch.bool:
        kw["attn_mask"] = mask.float()
    with torch.autocast("cpu", enabled=False):
        out = F.scaled_dot_product_attention(q.float(), keys.float(), values.float(), **kw)
    return out if mixed else out.to(q.dtype)


def kernel_maps_heads(q: torch.Tensor, mask: torch.Tensor | None) -> bool:
    """Whether the attention kernel itself maps each query head to its key head (`enable_gqa`). On
    a CPU always. On a GPU only flash attention does (PyTorch's note on `enable_gqa`), and only
    without a mask, in 16 bits, for heads of at most 256: otherwise the call would fall to the
    math kernel, which materialises every score (rows × heads × queries × keys, in fp32) and
    keeps them for the backward. There the key and value heads are repeated instead, as
    transformers does, and the memory-efficient kernel takes the call."""
    if q.device.type == "cpu":
        return True
    half = q.dtype in (torch.float16, torch.bfloat16) or _autocast_on(q.device.type)
    return mask is None and half and q.shape[-1] <= 256


def _autocast_on(device_type: str) -> bool:
    try:
        return torch.is_autocast_enabled(device_type)
    except RuntimeError:  # a device type autocast does not know
        return False


def _repeat_heads(x: torch.Tensor, heads: int) -> torch.Tensor:
    """`(..., kv, S, D)` → `(..., heads, S, D)`: query head h reads key head h // (heads / kv)."""
    return x.repeat_interleave(heads // x.shape[-3], dim=-3)
