"""Mixed precision: weights in one dtype (the optimizer's fp32 master copy), matrix products in a
narrower one, through PyTorch's autocast.

The weight cache is off (`cache_enabled=False`): autocast would otherwise keep the bf16 copy
of each weight it cast until the outermost autocast region ends, and a forward after an
optimizer step inside that region would read the weights of before the step. Autocast state
is per thread, so every caller that runs a model (the update, the rollout engine, a sampling
thread) enters it itself.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import AbstractContextManager, contextmanager, nullcontext
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


def _projections() -> tuple[type, ...]:
    """The modules whose weight is a matrix product's operand: torch's Linear, and GPT-2's Conv1D."""
    try:
        from transformers.pytorch_utils import Conv1D
    except ImportError:
        return (torch.nn.Linear,)
    return (torch.nn.Linear, Conv1D)


@contextmanager
def weights_cast_for_call(model: Any, compute: torch.dtype | None) -> Iterator[None]:
    """One sampling call through the model's own forward in mixed precision: each projection's
    weight held wider than `compute` is cast once for the call and given back at its end, where
    autocast (its weight cache off) would cast every weight again at every decode step. A weight
    another kind of module also reads (an output head tied to the input table) stays as it is."""
    if compute is None:
        yield
        return
    kinds = _projections()
    shared = {id(p) for m in model.modules() if not isinstance(m, kinds) for p in m.parameters(recurse=False)}
    held: list[tuple[torch.nn.Parameter, torch.Tensor]] = []
    with torch.no_grad():
        for module in (m for m in model.modules() if isinstance(m, kinds)):
            w = module.weight
            if w.is_floating_point() and w.element_size() > compute.itemsize and id(w) not in shared:
                held.append((w, w.data))
                w.data = w.data.to(compute)
    try:
        yield
    finally:
        for w, data in held:
            w.data = data


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
