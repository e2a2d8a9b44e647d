"""Per-layer signals, every `monitoring.layer_stats_every` steps: the RMS of the residual stream
entering each decoder layer over the first optimizer pass (`layer_activation_rms/<i>`, read where
the layer's first norm takes it) and the norm of each layer's gradient before clipping
(`layer_grad_norm/<i>`, over every process's shard under FSDP2).

Bounded cost: on a measured step, one reduction per layer per micro-batch in the forward and
one per parameter after the backward; on other steps nothing is attached.
"""

from __future__ import annotations

import contextlib
import math
from collections.abc import Iterator
from typing import Any

import torch

from rlvr_cli.train import distributed as dist

NORMS = ("input_layernorm", "ln_1", "attention_norm")  # a layer's first norm, by family (Llama, GPT-2, …)
_UNSEEN = [False]  # inside `unseen()`: forwards of no sample (a sharded process's empty rounds)


@contextlib.contextmanager
def unseen() -> Iterator[None]:
    """Forwards the activation RMS leaves out: a process with fewer micro-batches than the
    busiest runs empty ones to keep its collectives in step (train/sharding.py `Lockstep`)."""
    _UNSEEN[0] = True
    try:
        yield
    finally:
        _UNSEEN[0] = False


def decoder_layers(model: Any) -> list[torch.nn.Module]:
    """The decoder layers, in order: the classes the model names in `_no_split_modules` (FSDP2's
    sharded layers are subclasses of them)."""
    base = model.get_base_model() if hasattr(model, "get_base_model") else model
    classes = set(getattr(base, "_no_split_modules", None) or ())
    return [m for m in base.modules() if any(c.__name__ in classes for c in type(m).__mro__)]  # FSDP2 subclasses


class LayerWatch:
    def __init__(self, model: Any) -> None:
        self.layers = decoder_layers(model)
        self.squares = [0.0] * len(self.layers)
        self.counts = [0] * len(self.layers)
        self.handles: list[Any] = []

    def __enter__(self) -> LayerWatch:
        for i, layer in enumerate(self.layers):
            norm = next(
                (getattr(layer, n) for n in NORMS if isinstance(getattr(layer, n, None), torch.nn.Module)), None
            )
            if norm is not None:  # every forward of the layer, the shared-prompt one included, reads its input here
                self.handles.append(norm.register_forward_pre_hook(self._pre_hook(i)))
            else:
                self.handles.append(layer.register_forward_pre_hook(self._pre_hook(i)))
        return self

    def __exit__(self, *_: Any) -> None:
        for handle in self.handles:
            handle.remove()
        self.handles = []

    def _pre_hook(self, i: int) -> Any:
        def hook(_module: Any, inputs: Any) -> None:
            hidden = inputs[0] if isinstance(inputs, tuple) and inputs else None
            if isinstance(hidden, torch.Tensor) and not _UNSEEN[0]:
                with torch.no_grad():
                    self.squares[i] += float(hidden.detach().float().pow(2).sum())
                    self.counts[i] += hidden.numel()

        return hook

    def metrics(self) -> dict[str, float]:
        """The activations seen, and the gradients as they are now (call before clipping)."""
        out: dict[str, float] = {}
        for i, layer in enumerate(self.layers):
            squares, count = dist.total(self.squares[i]), dist.total(float(self.counts[i]))
            out[f"layer_activation_rms/{i}"] = math.sqrt(squares / count) if count else math.nan
            out[f"layer_grad_norm/{i}"] = math.sqrt(_grad_squares(layer))
        return out


def _grad_squares(layer: torch.nn.Module) -> float:
    """Σ grad² of a layer's trained parameters, over every process's shard when sharded."""
    local, sharded = 0.0, False
    for p in layer.parameters():
        if p.requires_grad and p.grad is not None:
            grad = p.grad
            if hasattr(grad, "to_local"):  # an FSDP2 shard: this process holds a slice
                grad, sharded = grad.to_local(), True
            local += float(grad.detach().float().pow(2).sum())
    return dist.total(local) if sharded else local
