"""Sharded checkpoints: each process writes its own shard of the weights and optimizer state with
`torch.distributed.checkpoint` (DCP), into the checkpoint's `.tmp` folder, before the main
process writes the rest, the `COMPLETE` marker (every file's sha256, shards included) and
publishes the folder with one rename, as for any checkpoint (train/checkpoint.py). Nothing is
gathered on one process, so a model whose state does not fit one process still checkpoints.

DCP reshards on load: the checkpoint of N processes loads into M, each reading the pieces of
its own shard. Its metadata file is a pickle; it is read with an unpickler that builds only
DCP's own metadata classes and torch's dtypes and sizes, so a checkpoint from elsewhere runs
no code (tensors are read with `weights_only=True` by DCP itself).
"""

from __future__ import annotations

import io
import pickle
from pathlib import Path
from typing import Any

import torch

from rlvr_cli.errors import RlvrError

FOLDER = "shards"
_SAFE_MODULES = ("torch.distributed.checkpoint.metadata", "torch.distributed.checkpoint.filesystem")
_SAFE_GLOBALS = {
    ("torch", "Size"),
    ("torch", "float32"),
    ("torch", "bfloat16"),
    ("torch", "float16"),
    ("torch", "int64"),
    ("torch", "int32"),
    ("torch", "uint8"),
    ("torch", "bool"),
    ("torch", "float64"),
    ("torch", "strided"),
    ("torch.serialization", "_get_layout"),  # a layout by its name (torch.strided)
    ("pathlib", "PosixPath"),  # where the shards were written (storage_meta.checkpoint_id)
    ("pathlib", "PurePosixPath"),
    ("collections", "OrderedDict"),
    ("builtins", "set"),
    ("builtins", "frozenset"),
    ("builtins", "slice"),
}


class _MetadataUnpickler(pickle.Unpickler):
    def find_class(self, module: str, name: str) -> Any:
        if module in _SAFE_MODULES or (module, name) in _SAFE_GLOBALS:
            return super().find_class(module, name)
        raise pickle.UnpicklingError(f"{module}.{name} is not part of a checkpoint's metadata")


def _reader(folder: Path) -> Any:
    from torch.distributed.checkpoint import FileSystemReader
    from torch.distributed.checkpoint.metadata import StorageMeta

    class SafeReader(FileSystemReader):
        def read_metadata(self, *args: Any, **kwargs: Any) -> Any:
            path = Path(self._get_metadata_path(kwargs.get("rank")))
            try:
                metadata = _MetadataUnpickler(io.BytesIO(path.read_bytes())).load()
            except (OSError, pickle.UnpicklingError, EOFError, AttributeError, ValueError) as exc:
                raise RlvrError(f"checkpoint {folder.parent.name}: its shard metadata is not DCP's ({exc})") from None
            if getattr(metadata, "storage_meta", None) is None:
                metadata.storage_meta = StorageMeta()
            metadata.storage_meta.load_id = self.load_id
            return metadata

    return SafeReader(str(folder))


def _options() -> Any:
    """Frozen weights (an adapter's base) are never written: they are the policy's, unchanged.
    Not strict on load, as the model's own state then lacks them; DCP itself refuses a
    checkpoint that lacks a tensor this run saves, or holds it in another shape."""
    from torch.distributed.checkpoint.state_dict import StateDictOptions

    return StateDictOptions(ignore_frozen_params=True, strict=False)


def _state(policy: Any, optimizer: torch.optim.Optimizer, parts: set[str]) -> dict[str, Any]:
    from torch.distributed.checkpoint.state_dict import get_state_dict

    model, optim = get_state_dict(policy, optimizer, options=_options())
    # a frozen weight tied to another (an adapter's base with a tied head) escapes DCP's own filter
    frozen = {name for name, p in policy.named_parameters(remove_duplicate=False) if not p.requires_grad}
    model = {name: tensor for name, tensor in model.items() if name not in frozen}
    return {k: v for k, v in (("model", model), ("optimizer", optim)) if k in parts}


def save(policy: Any, optimizer: torch.optim.Optimizer, tmp: Path, parts: set[str]) -> None:
    """This process's shard of the weights and optimizer state into `tmp/shards` (every process
    calls it, with the same `tmp`)."""
    import torch.distributed.checkpoint as dcp

    state = _state(policy, optimizer, parts)
    if state:
        dcp.save(state, storage_writer=dcp.FileSystemWriter(str(tmp / FOLDER), sync_files=True))


def load(policy: Any, optimizer: torch.optim.Optimizer, path: Path, parts: set[str]) -> None:
    """This process's shard of the checkpoint's weights and optimizer state, whatever number of
    processes wrote it; refused when it holds NaN or infinity."""
    import torch.distributed.checkpoint as dcp
    from torch.distributed.checkpoint.state_dict import set_state_dict

    state = _state(policy, optimizer, parts)
    try:
        dcp.load(state, storage_reader=_reader(path / FOLDER))
    except RlvrError:
        raise
    except Exception as exc:  # another model's shards, a damaged file: never a crash
        first = str(exc).strip().splitlines()[-1][:300] if str(exc).strip() else type(exc).__name__
        raise RlvrError(f"checkpoint {path.name}: its shards do not fit this run ({first})") from None
    _refuse_nonfinite(state, path.name)
    set_state_dict(
        policy,
        optimizer,
        model_state_dict=state.get("model", {}),
        optim_state_dict=state.get("optimizer", {}),
        options=_options(),
    )


def into_shards(
    policy: Any,
    optimizer: torch.optim.Optimizer,
    weights: dict[str, Any] | None,
    native: dict[str, Any] | None,
    name: str,
) -> None:
    """A checkpoint of whole weights (one process, or ddp) into a sharded policy: the main process
    holds the weights (`weights`; None elsewhere), every process the optimizer's own state dict
    (`native`, None when the checkpoint kept none), and every process keeps its shard of each
    tensor, which the main process sends one at a time. The optimizer state is matched to the
    parameters by their order, which the same contract makes the same."""
    from torch.distributed.checkpoint.state_dict import (
        StateDictOptions,
        set_model_state_dict,
        set_optimizer_state_dict,
    )

    from rlvr_cli.train import distributed as dist

    main = weights is not None
    optim, problem = {}, None
    try:  # on the main process, before any collective: a refusal stops every process
        optim = _by_name(policy, optimizer, native, name) if main and native else {}
    except RlvrError as exc:
        problem = str(exc)
    except (ValueError, KeyError, TypeError, AttributeError) as exc:  # a state dict from elsewhere
        problem = f"checkpoint {name}: its optimizer state does not fit this run ({type(exc).__name__}: {exc})"
    problems = [p for p in dist.gather(problem) if p]
    if problems:
        raise RlvrError(problems[0])
    options = StateDictOptions(full_state_dict=True, broadcast_from_rank0=True, strict=False, ignore_frozen_params=True)
    try:
        set_model_state_dict(policy, weights or {}, options=options)
        if native:
            set_optimizer_state_dict(policy, optimizer, optim, options=options)
    except (ValueError, KeyError, RuntimeError) as exc:
        raise RlvrError(f"checkpoint {name}: its weights do not load into this run's shards ({exc})") from None


def _by_name(policy: Any, optimizer: torch.optim.Optimizer, native: dict[str, Any], name: str) -> dict[str, Any]:
    """The optimizer's own state dict (parameters numbered in the order of its groups) with each
    number replaced by the name of the parameter it stands for, as DCP names them."""
    names = {id(p): key for key, p in policy.named_parameters()}
    order = [names[id(p)] for group in optimizer.param_groups for p in group["params"]]
    groups = native.get("param_groups") or []
    numbers = [i for group in groups for i in group.get("params", [])]
    if len(groups) != len(optimizer.param_groups) or len(numbers) != len(order):
        raise RlvrError(
            f"checkpoint {name}: its optimizer state holds {len(numbers)} parameters in {len(groups)} groups, "
            f"this run's optimizer {len(order)} in {len(optimizer.param_groups)}"
        )
    named = dict(zip(numbers, order, strict=True))
    return {
        "state": {named[i]: moments for i, moments in native.get("state", {}).items() if i in named},
        "param_groups": [{**group, "params": [named[i] for i in group["params"]]} for group in groups],
    }


def _refuse_nonfinite(state: dict[str, Any], name: str) -> None:
    def tensors(node: Any, where: str) -> Any:
        if isinstance(node, dict):
            for key, value in node.items():
                yield from tensors(value, f"{where}.{key}" if where else str(key))
        elif isinstance(node, torch.Tensor):
            yield where, node.to_local() if hasattr(node, "to_local") else node

    from rlvr_cli.train import distributed as dist

    bad = [w for w, t in tensors(state, "") if t.is_floating_point() and not bool(torch.isfinite(t).all())]
    if dist.total(float(len(bad))):  # every process refuses, not only the one holding the bad shard
        where = f"{bad[0]} holds" if bad else "another process's shard holds"
        raise RlvrError(f"checkpoint {name}: {where} NaN or infinity; it is not resumed")


def present(path: Path) -> bool:
    return (path / FOLDER / ".metadata").is_file()
