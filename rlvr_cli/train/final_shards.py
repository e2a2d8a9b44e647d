"""`final/` of a sharded policy (FSDP2), written one piece at a time: every process gathers the
weights of the next file (`DTensor.full_tensor`, a collective per tensor) and the main process
writes them, so no process ever holds the whole model — with 8 processes and a 70B policy, the
main process holds one file's ~2 GiB, not 140 GB. The folder is what `save_pretrained` writes for
a large model: `model.safetensors`, or `model-0000k-of-0000n.safetensors` files and
`model.safetensors.index.json` mapping each weight to its file (transformers and vLLM load
either), with config.json and generation_config.json beside them."""

from __future__ import annotations

import functools
import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch

from rlvr_cli.files import disk_errors

FILE_BYTES = 2 << 30  # weights per file, at most (a single larger tensor gets a file of its own)
INDEX = "model.safetensors.index.json"


def tied_names(model: Any) -> set[str]:
    """The weights a tied model saves under another name (its output head: the input table)."""
    if not getattr(model.config, "tie_word_embeddings", False):
        return set()
    tied = getattr(model, "_tied_weights_keys", None) or {}
    return set(tied) if isinstance(tied, dict | list) else set()


def plan_files(sizes: dict[str, int], limit: int | None = None) -> list[list[str]]:
    """The weights' names, in order, cut into files of at most `limit` bytes each (FILE_BYTES)."""
    limit = FILE_BYTES if limit is None else limit
    files: list[list[str]] = [[]]
    used = 0
    for name, size in sizes.items():
        if files[-1] and used + size > limit:
            files.append([])
            used = 0
        files[-1].append(name)
        used += size
    return files


def whole(tensor: torch.Tensor) -> torch.Tensor:
    """A sharded tensor gathered whole on every process (a collective); a plain one as it is."""
    tensor = tensor.detach()
    return tensor.full_tensor() if hasattr(tensor, "full_tensor") else tensor


Pieces = dict[str, tuple[int, Callable[[], torch.Tensor]]]  # name → (bytes, gathers it whole)


def model_pieces(model: Any) -> Pieces:
    """The model's weights as `save_pretrained` writes them (a tied head left out)."""
    state = {name: t for name, t in model.state_dict().items() if name not in tied_names(model)}
    return {name: (t.numel() * t.element_size(), lambda t=t: whole(t)) for name, t in state.items()}


def merged_pieces(model: Any) -> Pieces:
    """The weights of a policy with LoRA adapter layers, under the names of the model without
    them, each adapted layer's weight merged (base + scale·B·A, computed on the gathered tensors):
    `final/merged/` of a sharded adapter run (engine/adapted.py `merged_state` for a whole one)."""
    adapted = {name: m for name, m in model.named_modules() if hasattr(m, "lora_A") and hasattr(m, "base_layer")}
    out: Pieces = {}
    for name, (size, get) in model_pieces(model).items():
        if ".lora_" in name:
            continue
        owner, _, leaf = name.rpartition(".")
        layer = owner.removesuffix(".base_layer")
        if owner.endswith(".base_layer") and layer in adapted:
            name = f"{layer}.{leaf}"
            if leaf == "weight":
                get = functools.partial(_merge, adapted[layer], get)
        out[name] = (size, get)
    return out


def _merge(module: Any, base: Callable[[], torch.Tensor]) -> torch.Tensor:
    weight = base()
    for name in module.active_adapters:
        if name in module.lora_A:
            delta = (whole(module.lora_B[name].weight) @ whole(module.lora_A[name].weight)) * module.scaling[name]
            weight = weight + (delta.t() if getattr(module, "fan_in_fan_out", False) else delta).to(weight.dtype)
    return weight


def save_adapter_sharded(peft_model: Any, final: Path, main: bool) -> None:
    """`final/` of a sharded adapter run: the adapter's tensors gathered (small), written by the main
    process in peft's format; every process calls it."""
    from rlvr_cli.train import lora

    state = peft_model.state_dict()
    gathered = {name: whole(state[name]).to("cpu") for name in lora.saved_names(peft_model)}
    if main:
        with disk_errors(final):
            lora.save(peft_model, final, gathered)


def save_final_sharded(model: Any, final: Path, main: bool, pieces: Pieces | None = None) -> None:
    """Every process calls this (the gathers are collectives); only `main` writes. A write error
    on the main process is raised after every gather, so the other processes are never left
    waiting in one. `pieces`: what to write (`model_pieces`, the default, or `merged_pieces`)."""
    from safetensors.torch import save_file

    pieces = model_pieces(model) if pieces is None else pieces
    files = plan_files({name: size for name, (size, _) in pieces.items()})
    names = (
        ["model.safetensors"]
        if len(files) == 1
        else [f"model-{i:05d}-of-{len(files):05d}.safetensors" for i in range(1, len(files) + 1)]
    )
    failed: BaseException | None = None
    if main:
        final.mkdir(parents=True, exist_ok=True)
    for filename, group in zip(names, files, strict=True):
        file: dict[str, torch.Tensor] = {}
        for name in group:
            tensor = pieces[name][1]()
            if main:
                file[name] = tensor.to("cpu").contiguous()
        if main and failed is None:
            try:
                with disk_errors(final):
                    save_file(file, str(final / filename), metadata={"format": "pt"})
            except Exception as exc:  # raised below, once every process has gathered every weight
                failed = exc
        del file
    if failed is not None:
        raise failed
    if main:
        _describe(model, final, names, files, sum(size for size, _ in pieces.values()))


def _describe(model: Any, final: Path, names: list[str], files: list[list[str]], total: int) -> None:
    with disk_errors(final):
        if len(files) > 1:
            index = {
                "metadata": {"total_size": total},
                "weight_map": {name: filename for filename, group in zip(names, files, strict=True) for name in group},
            }
            (final / INDEX).write_text(json.dumps(index, indent=2) + "\n")
        model.config.save_pretrained(final)
        if getattr(model, "generation_config", None) is not None and model.can_generate():
            model.generation_config.save_pretrained(final)
