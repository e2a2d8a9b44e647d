"""`final/` of a sharded policy (FSDP2), written one weight at a time: every process gathers the
next weight (`DTensor.full_tensor`, a collective per tensor) and the main process writes its
bytes straight into the file it belongs to, so no process ever holds more than one whole weight
beside its shards — with 8 processes and a 70B policy, the main process holds one embedding
table, not 140 GB, and a sharded CPU run's memory stays under its training steps' peak. The
file's header (names, dtypes, shapes, offsets) is known before any gather, from the sharded
tensors' global shapes. The folder is what `save_pretrained` writes for
a large model: `model.safetensors`, or `model-0000k-of-0000n.safetensors` files and
`model.safetensors.index.json` mapping each weight to its file (transformers and vLLM load
either), with config.json and generation_config.json beside them."""

from __future__ import annotations

import functools
import json
import math
import struct
from collections.abc import Callable
from pathlib import Path
from typing import Any, BinaryIO, NamedTuple

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


class Piece(NamedTuple):
    """One weight of `final/`: what the file's header says of it, and how to gather it whole."""

    dtype: torch.dtype
    shape: tuple[int, ...]
    get: Callable[[], torch.Tensor]

    @property
    def size(self) -> int:
        return math.prod(self.shape) * self.dtype.itemsize


Pieces = dict[str, Piece]


def model_pieces(model: Any) -> Pieces:
    """The model's weights as `save_pretrained` writes them (a tied head left out)."""
    state = {name: t for name, t in model.state_dict().items() if name not in tied_names(model)}
    return {name: Piece(t.dtype, tuple(t.shape), lambda t=t: whole(t)) for name, t in state.items()}


def merged_pieces(model: Any) -> Pieces:
    """The weights of a policy with LoRA adapter layers, under the names of the model without
    them, each adapted layer's weight merged (base + scale·B·A, computed on the gathered tensors):
    `final/merged/` of a sharded adapter run (engine/adapted.py `merged_state` for a whole one)."""
    adapted = {name: m for name, m in model.named_modules() if hasattr(m, "lora_A") and hasattr(m, "base_layer")}
    out: Pieces = {}
    for name, piece in model_pieces(model).items():
        if ".lora_" in name:
            continue
        owner, _, leaf = name.rpartition(".")
        layer = owner.removesuffix(".base_layer")
        if owner.endswith(".base_layer") and layer in adapted:
            name = f"{layer}.{leaf}"
            if leaf == "weight":
                piece = piece._replace(get=functools.partial(_merge, adapted[layer], piece.get))
        out[name] = piece
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
    pieces = model_pieces(model) if pieces is None else pieces
    files = plan_files({name: piece.size for name, piece in pieces.items()})
    names = (
        ["model.safetensors"]
        if len(files) == 1
        else [f"model-{i:05d}-of-{len(files):05d}.safetensors" for i in range(1, len(files) + 1)]
    )
    failed: list[BaseException] = []  # the main process's first write error, raised after every gather
    if main:
        try:
            final.mkdir(parents=True, exist_ok=True)
        except OSError as exc:
            failed.append(exc)
    for filename, group in zip(names, files, strict=True):
        out = _open(final / filename, {name: pieces[name] for name in group}, failed) if main else None
        for name in group:
            tensor = pieces[name].get()
            if out is not None and not failed:
                _write_tensor(out, name, pieces[name], tensor, failed)
            del tensor
        if out is not None:
            try:
                out.close()  # flushes the last bytes: a full disk can show here
            except OSError as exc:
                failed.append(exc)
    if failed:
        raise failed[0]
    if main:
        _describe(model, final, names, files, sum(piece.size for piece in pieces.values()))


# safetensors' names of the dtypes a checkpoint holds
_DTYPES = {
    torch.float64: "F64",
    torch.float32: "F32",
    torch.float16: "F16",
    torch.bfloat16: "BF16",
    torch.int64: "I64",
    torch.int32: "I32",
    torch.int16: "I16",
    torch.int8: "I8",
    torch.uint8: "U8",
    torch.bool: "BOOL",
    torch.float8_e4m3fn: "F8_E4M3",
    torch.float8_e5m2: "F8_E5M2",
}


def safetensors_header(pieces: Pieces) -> bytes:
    """The file's header as safetensors writes it: its length (8 bytes, little-endian), then JSON
    naming each tensor's dtype, shape and byte range, padded with spaces to 8 bytes. The tensors'
    bytes follow in the order given, each right after the one before."""
    header: dict[str, Any] = {"__metadata__": {"format": "pt"}}
    offset = 0
    for name, piece in pieces.items():
        if piece.dtype not in _DTYPES:
            raise ValueError(f"{name}: a weight of dtype {piece.dtype} has no safetensors name")
        header[name] = {
            "dtype": _DTYPES[piece.dtype],
            "shape": list(piece.shape),
            "data_offsets": [offset, offset + piece.size],
        }
        offset += piece.size
    text = json.dumps(header, separators=(",", ":")).encode()
    text += b" " * (-len(text) % 8)
    return struct.pack("<Q", len(text)) + text


def _open(path: Path, pieces: Pieces, failed: list[BaseException]) -> BinaryIO | None:
    """The file, opened with its header written; None (and the error kept) where that fails."""
    if failed:
        return None
    try:
        header = safetensors_header(pieces)
        out = path.open("wb")
        out.write(header)
    except Exception as exc:  # a dtype safetensors cannot name, the disk
        failed.append(exc)
        return None
    return out


def _write_tensor(out: BinaryIO, name: str, piece: Piece, tensor: torch.Tensor, failed: list[BaseException]) -> None:
    """The weight's bytes appended to the file (no copy beyond moving it to the CPU); an error kept."""
    try:
        if tensor.dtype != piece.dtype or tuple(tensor.shape) != piece.shape:
            said = f"{piece.dtype}{list(piece.shape)}"
            raise RuntimeError(f"{name}: gathered as {tensor.dtype}{list(tensor.shape)}, its header says {said}")
        flat = tensor.detach().to("cpu").contiguous().reshape(-1)
        out.write(memoryview(flat.view(torch.uint8).numpy()))
    except Exception as exc:
        failed.append(exc.with_traceback(None))  # its frames would hold the gathered weight


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
