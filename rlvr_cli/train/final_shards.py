"""`final/` of a sharded policy (FSDP2), written one piece at a time: every process gathers the
weights of the next file (`DTensor.full_tensor`, a collective per tensor) and the main process
writes them, so no process ever holds the whole model — with 8 processes and a 70B policy, the
main process holds one file's ~2 GiB, not 140 GB. The folder is what `save_pretrained` writes for
a large model: `model.safetensors`, or `model-0000k-of-0000n.safetensors` files and
`model.safetensors.index.json` mapping each weight to its file (transformers and vLLM load
either), with config.json and generation_config.json beside them."""

from __future__ import annotations

import json
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


def save_final_sharded(model: Any, final: Path, main: bool) -> None:
    """Every process calls this (the gathers are collectives); only `main` writes. A write error
    on the main process is raised after every gather, so the other processes are never left
    waiting in one."""
    from safetensors.torch import save_file

    state = {name: t for name, t in model.state_dict().items() if name not in tied_names(model)}
    files = plan_files({name: t.numel() * t.element_size() for name, t in state.items()})
    names = (
        ["model.safetensors"]
        if len(files) == 1
        else [f"model-{i:05d}-of-{len(files):05d}.safetensors" for i in range(1, len(files) + 1)]
    )
    failed: BaseException | None = None
    if main:
        final.mkdir(parents=True, exist_ok=True)
    for filename, group in zip(names, files, strict=True):
        whole: dict[str, torch.Tensor] = {}
        for name in group:
            tensor = state[name].detach()
            tensor = tensor.full_tensor() if hasattr(tensor, "full_tensor") else tensor
            if main:
                whole[name] = tensor.to("cpu").contiguous()
        if main and failed is None:
            try:
                with disk_errors(final):
                    save_file(whole, str(final / filename), metadata={"format": "pt"})
            except Exception as exc:  # raised below, once every process has gathered every weight
                failed = exc
        del whole
    if failed is not None:
        raise failed
    if main:
        _describe(model, final, names, files, state)


def _describe(model: Any, final: Path, names: list[str], files: list[list[str]], state: dict[str, Any]) -> None:
    with disk_errors(final):
        if len(files) > 1:
            index = {
                "metadata": {"total_size": sum(t.numel() * t.element_size() for t in state.values())},
                "weight_map": {name: filename for filename, group in zip(names, files, strict=True) for name in group},
            }
            (final / INDEX).write_text(json.dumps(index, indent=2) + "\n")
        model.config.save_pretrained(final)
        if getattr(model, "generation_config", None) is not None and model.can_generate():
            model.generation_config.save_pretrained(final)
