"""Atomic checkpoints and exact resume.

A checkpoint is written into `checkpoints/.step-<N>.tmp/`, every file fsynced, a `COMPLETE`
marker holding each file's sha256 written last, and the folder renamed to `step-<N>/`. A
folder named `step-<N>` therefore always holds a complete checkpoint; a crash leaves at most
a `.tmp` folder, removed on the next start. Resume verifies the checksums and refuses a
checkpoint whose contract differs from the one given.
"""

from __future__ import annotations

import hashlib
import json
import os
import random
import re
import shutil
from pathlib import Path
from typing import Any

import torch

from rlvr_cli.errors import RlvrError

MARKER = "COMPLETE"
_STEP = re.compile(r"^step-(\d+)$")


def _sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with path.open("rb") as fh:
        while chunk := fh.read(1 << 20):
            digest.update(chunk)
    return digest.hexdigest()


def _fsync_tree(folder: Path) -> None:
    for path in sorted(folder.rglob("*")):
        if path.is_file():
            with path.open("rb") as fh:
                os.fsync(fh.fileno())
    for path in [*sorted(p for p in folder.rglob("*") if p.is_dir()), folder]:
        fd = os.open(path, os.O_RDONLY)
        try:
            os.fsync(fd)
        finally:
            os.close(fd)


def rng_state() -> dict[str, Any]:
    state: dict[str, Any] = {"python": random.getstate(), "torch": torch.get_rng_state()}
    try:
        import numpy as np

        state["numpy"] = np.random.get_state()
    except ImportError:  # pragma: no cover
        pass
    return state


def set_rng_state(state: dict[str, Any]) -> None:
    random.setstate(state["python"])
    torch.set_rng_state(state["torch"])
    if "numpy" in state:
        import numpy as np

        np.random.set_state(state["numpy"])


def save_checkpoint(trainer: Any, run_dir: Path, contract: Any, contract_path: Path) -> Path:
    """Write the trainer's whole state at its current step; returns the published folder."""
    from rlvr_cli.train.plan import contract_hash

    root = run_dir / "checkpoints"
    root.mkdir(parents=True, exist_ok=True)
    final = root / f"step-{trainer.step}"
    if final.is_dir() and (final / MARKER).is_file():
        return final
    tmp = root / f".step-{trainer.step}.tmp"
    shutil.rmtree(tmp, ignore_errors=True)
    tmp.mkdir()
    trainer.policy.save_pretrained(tmp / "model")  # safetensors, loadable by transformers
    torch.save(
        {"optimizer": trainer.optimizer.state_dict(), "scheduler": trainer.scheduler.state_dict(), "rng": rng_state()},
        tmp / "state.pt",
    )
    state = {
        "step": trainer.step,
        "optimizer_steps": trainer.optimizer_steps,
        "totals": trainer.totals,
        "sampler": trainer.sampler.state(),
        "records_cursor": trainer.records.cursor,
        "records_last_step": trainer.records.last_step,
        "holdout_history": trainer.holdout_history,
        "monitor": trainer.monitor_state,
        "contract_sha256": contract_hash(contract_path),
        "reference": contract.artifacts.reference.model_dump(by_alias=True) if contract.artifacts.reference else None,
        "verifier": contract.artifacts.verifier.model_dump(),
        "lock_sha256": _lock_hash(contract, contract_path),
        "world_size": trainer.world,
    }
    (tmp / "trainer.json").write_text(json.dumps(state, indent=1, default=str), encoding="utf-8")
    sums = {p.relative_to(tmp).as_posix(): _sha256(p) for p in sorted(tmp.rglob("*")) if p.is_file()}
    (tmp / MARKER).write_text(json.dumps({"files": sums}, indent=1), encoding="utf-8")
    _fsync_tree(tmp)
    os.replace(tmp, final)
    _fsync_tree(root)
    prune(root, contract.checkpoint.keep_last)
    return final


def _lock_hash(contract: Any, contract_path: Path) -> str | None:
    from rlvr_cli.contract.lock import lock_path

    path = lock_path(contract, contract_path)
    return _sha256(path) if path.is_file() else None


def complete_checkpoints(root: Path) -> list[tuple[int, Path]]:
    found = []
    if root.is_dir():
        for path in root.iterdir():
            match = _STEP.match(path.name)
            if match and (path / MARKER).is_file():
                found.append((int(match.group(1)), path))
    return sorted(found)


def clear_interrupted(root: Path) -> None:
    """Remove `.tmp` folders a crash left mid-write; they were never published."""
    for path in root.glob(".step-*.tmp"):
        shutil.rmtree(path, ignore_errors=True)


def prune(root: Path, keep_last: int) -> None:
    """Keep the newest `keep_last` complete checkpoints (never fewer than one); drop leftovers."""
    clear_interrupted(root)
    found = complete_checkpoints(root)
    for _, path in found[: max(0, len(found) - max(keep_last, 1))]:
        shutil.rmtree(path, ignore_errors=True)


def verify(path: Path) -> None:
    marker = json.loads((path / MARKER).read_text(encoding="utf-8"))
    for name, expected in marker["files"].items():
        file = path / name
        if not file.is_file() or _sha256(file) != expected:
            raise RlvrError(f"checkpoint {path.name}: {name} does not match its checksum")


def load_latest(trainer: Any, run_dir: Path, contract: Any, contract_path: Path) -> int:
    """Restore the newest complete checkpoint into `trainer`; returns its step."""
    from safetensors.torch import load_file

    from rlvr_cli.train.plan import contract_hash

    root = run_dir / "checkpoints"
    clear_interrupted(root)
    found = complete_checkpoints(root)
    if not found:
        raise RlvrError(f"{run_dir} has no complete checkpoint to resume from")
    step, path = found[-1]
    verify(path)
    state = json.loads((path / "trainer.json").read_text(encoding="utf-8"))
    if state["contract_sha256"] != contract_hash(contract_path):
        raise RlvrError(
            f"the contract changed since checkpoint {path.name}; resume refuses a different "
            "experiment (start a new run with --run-dir)"
        )
    if state.get("world_size", 1) != trainer.world:
        raise RlvrError(
            f"checkpoint {path.name} was written by {state.get('world_size', 1)} process(es); resume it "
            f"with the same number (now {trainer.world})"
        )
    if state.get("lock_sha256") != _lock_hash(contract, contract_path):
        raise RlvrError(f"the lock file changed since checkpoint {path.name}; the locked artifacts differ")
    weights = {}
    for file in sorted((path / "model").glob("*.safetensors")):
        weights.update(load_file(file))
    missing, unexpected = trainer.policy.load_state_dict(weights, strict=False)
    if unexpected or [m for m in missing if "lm_head" not in m]:
        raise RlvrError(f"checkpoint {path.name} does not fit the policy (missing {missing}, unexpected {unexpected})")
    if trainer.policy.config.tie_word_embeddings:
        trainer.policy.tie_weights()
    blob = torch.load(path / "state.pt", weights_only=False)
    trainer.optimizer.load_state_dict(blob["optimizer"])
    trainer.scheduler.load_state_dict(blob["scheduler"])
    set_rng_state(blob["rng"])
    trainer.restore(state)
    return step
