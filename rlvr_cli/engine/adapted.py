"""A policy with LoRA adapter layers (peft, injected in place), as the engines read it: the
weight each adapted layer computes with (base + scale·B·A), and the whole model's weights merged
under their original names, for an engine that holds its own copy (vLLM)."""

from __future__ import annotations

import weakref
from typing import Any

import torch

_BYTES: weakref.WeakKeyDictionary[Any, int] = weakref.WeakKeyDictionary()


def is_adapted(model: Any) -> bool:
    """Whether any layer of the model carries a LoRA adapter."""
    return any(hasattr(m, "lora_A") and hasattr(m, "base_layer") for m in model.modules())


def weight_bytes(model: Any) -> int:
    """The bytes of the model's parameters (their shapes and dtypes never change: counted once)."""
    if model not in _BYTES:
        _BYTES[model] = sum(p.numel() * p.element_size() for p in model.parameters())
    return _BYTES[model]


def _delta(module: Any, name: str) -> torch.Tensor:
    """scale·B·A of one adapter, in the base weight's layout: plain LoRA computed here (peft's
    get_delta_weight costs ~2 ms a layer on CPU in checks and copies); other variants through peft."""
    if getattr(module, "use_dora", {}).get(name) or type(module.lora_A[name]) is not torch.nn.Linear:
        return module.get_delta_weight(name)
    delta = (module.lora_B[name].weight @ module.lora_A[name].weight) * module.scaling[name]
    return delta.t() if getattr(module, "fan_in_fan_out", False) else delta


def effective_weight(module: Any) -> torch.Tensor:
    """The weight a linear layer computes with: its own, or for an adapted layer its base weight
    plus the active adapters' updates (none while the adapter is switched off or merged)."""
    base = getattr(module, "base_layer", None)
    if base is None or not hasattr(module, "lora_A"):
        return module.weight
    weight = base.weight
    if getattr(module, "disable_adapters", False) or getattr(module, "merged", False):
        return weight
    for name in module.active_adapters:
        if name in module.lora_A:
            weight = weight + _delta(module, name).to(weight.dtype)
    return weight


def merged_state(model: Any) -> dict[str, torch.Tensor]:
    """The model's weights under the names the unadapted model has, each adapted layer's weight
    merged (`x.base_layer.weight` → `x.weight`), the adapters' own tensors left out."""
    out: dict[str, torch.Tensor] = {}
    adapted = {name: m for name, m in model.named_modules() if hasattr(m, "lora_A") and hasattr(m, "base_layer")}
    with torch.no_grad():
        for name, tensor in model.state_dict().items():
            if ".lora_" in name:
                continue
            owner, _, leaf = name.rpartition(".")
            layer = owner.removesuffix(".base_layer")
            if owner.endswith(".base_layer") and layer in adapted:
                out[f"{layer}.{leaf}"] = effective_weight(adapted[layer]) if leaf == "weight" else tensor
            else:
                out[name] = tensor
    return out
