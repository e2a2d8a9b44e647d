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

DTYPES = {"fp32": torch.float32, "bf16": torch.bfloat16, "fp16": torch.float16}


def autocast(compute: torch.dtype | None, device_type: str) -> AbstractContextManager[Any]:
    """Matrix products in `compute` (None: in the weights' own dtype)."""
    if compute is None:
        return nullcontext()
    return torch.autocast(device_type, dtype=compute, cache_enabled=False)


def device_type(model: Any) -> str:
    return next(model.parameters()).device.type
