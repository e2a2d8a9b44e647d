"""Atomic checkpoints and exact resume.

A checkpoint is written into `checkpoints/.step-<N>.tmp/`, every file fsynced, a `COMPLETE`
marker holding each file's sha256 written last, and the folder renamed to `step-<N>/`. A
folder named `step-<N>` therefore always holds a complete checkpoint; a crash leaves at most
a `.tmp` folder, or a `.removed` one (a pruned checkpoint is renamed aside before it is
deleted), removed on the next start. Resume verifies the checksums and refuses a
checkpoint whose contract differs from the one given. `state.pt` holds tensors and plain
values only and is read with `weights_only=True`: a checkpoint from elsewhere runs no code.
"""

from __future__ import annotations

import json
import os
import random
import shutil
import sys
from pathlib import Path
from typing import Any

import torch

from rlvr_cli.contract.models import CHECKPOINT_PARTS
from rlvr_cli.errors import RlvrError
from rlvr_cli.files import disk_errors, fsync_dir, save_torch, sha256_file
from rlvr_cli.store.record_checks import pin_problems
from rlvr_cli.store.records import shards_sha256
from rlvr_cli.store.run import MARKER, RunFolder
from rlvr_cli.train import lora, restore, resume_changes, sharding
from rlvr_cli.train.run_plan import contract_hash
from rlvr_cli.train.setup import Setup
from rlvr_cli.train.state import TrainState


def _fsync_tree(folder: Path) -> None:
    for path in sorted(folder.rglob("*")):
        if path.is_file():
            with path.open("rb") as fh:
                os.fsync(fh.fileno())
    for path in [*sorted(p for p in folder.rglob("*") if p.is_dir()), folder]:
        fsync_dir(path)


def rng_state() -> dict[str, Any]:
    """Every RNG a step draws from, as tensors and plain values (loadable with weights_only)."""
    version, internal, gauss = random.getstate()
    state: dict[str, Any] = {"python": [version, list(internal), gauss], "torch": torch.get_rng_state()}
    if torch.cuda.is_available():  # this process's device (each process uses one)
        state["cuda"] = torch.cuda.get_rng_state()
    try:
        import numpy as np

        kind, keys, pos, has_gauss, cached = np.random.get_state()
        state["numpy"] = [kind, torch.from_numpy(keys.astype("int64")), int(pos), int(has_gauss), float(cached)]
    except ImportError:  # pragma: no cover
        pass
    return state


def set_rng_state(state: dict[str, Any]) -> None:
    version, internal, gauss = state["python"]
    random.setstate((version, tuple(internal), gauss))
    torch.set_rng_state(state["torch"])
    if "cuda" in state and torch.cuda.is_available():
        torch.cuda.set_rng_state(state["cuda"])
    if "numpy" in state:
        import numpy as np

        kind, keys, pos, has_gauss, cached = state["numpy"]
        np.random.set_state((kind, keys.numpy().astype("uint32"), pos, has_gauss, cached))


def tmp_folder(run: RunFolder, step: int) -> Path:
    return run.checkpoints / f".step-{step}.tmp"


def start_sharded(setup: Setup, state: TrainState, run: RunFolder) -> bool:
    """Every process: write this process's shard of a sharded policy into the checkpoint's
    `.tmp` folder (the main one makes the folder first). False when the step's checkpoint is
    already complete (nothing to write)."""
    from rlvr_cli.train import distributed as dist
    from rlvr_cli.train import shards

    if (run.checkpoints / f"step-{state.step}" / MARKER).is_file():
        return False
    tmp = tmp_folder(run, state.step)
    if setup.main:
        shutil.rmtree(tmp, ignore_errors=True)
        tmp.mkdir(parents=True)
    dist.barrier()
    with disk_errors(tmp):
        shards.save(setup.policy, setup.optimizer, tmp, set(setup.contract.checkpoint.include))
    setup.fault.kill_in_shards(state.step)
    dist.barrier()
    return True


def save_checkpoint(
    setup: Setup, state: TrainState, run: RunFolder, contract_path: Path, records: Any, sharded: bool = False
) -> Path:
    """Write the run's whole state at `state.step`; returns the published folder. `sharded`: the
    processes' shards are already in the `.tmp` folder (`start_sharded`)."""
    root = run.checkpoints
    root.mkdir(parents=True, exist_ok=True)
    final = root / f"step-{state.step}"
    if final.is_dir() and (final / MARKER).is_file():
        return final
    _remove(final)  # a step folder without its marker was never complete
    tmp = tmp_folder(run, state.step)
    if not sharded:
        shutil.rmtree(tmp, ignore_errors=True)
        tmp.mkdir()
    try:
        _write_checkpoint(setup, state, run, contract_path, records, tmp, sharded)
    except BaseException:  # a full disk, a signal: nothing half-written stays (the space is freed)
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    os.replace(tmp, final)
    _fsync_tree(root)
    prune(run, setup.contract.checkpoint.keep_last)
    return final


def _write_checkpoint(
    setup: Setup, state: TrainState, run: RunFolder, contract_path: Path, records: Any, tmp: Path, sharded: bool
) -> None:
    """Every file of the checkpoint into `tmp`, its `COMPLETE` marker last, all fsynced."""
    contract = setup.contract
    parts = set(contract.checkpoint.include)  # what the contract asks to keep (RLV701 wants all)
    saved = {"optimizer": setup.optimizer.state_dict, "scheduler": setup.scheduler.state_dict, "rng": rng_state}
    if sharded:  # the weights and the optimizer state are in shards/
        del saved["optimizer"]
    with disk_errors(tmp):  # torch and safetensors hide ENOSPC in errors of their own
        if "model" in parts and not sharded:
            if setup.peft_model is not None:  # the adapter alone: the base never changes
                lora.save(setup.peft_model, tmp / "adapter")
            else:
                setup.policy.save_pretrained(tmp / "model")  # safetensors, loadable by transformers
        blob = {k: get() for k, get in saved.items() if k in parts}
        if setup.scaler is not None and "optimizer" in parts:
            blob["scaler"] = setup.scaler.state_dict()  # fp16: the loss scale and its growth counter
        save_torch(blob, tmp / "state.pt", before_write=lambda: setup.fault.disk(state.step))
    counters = state.as_json()
    if "sampler" not in parts:
        counters["sampler"] = {**counters["sampler"], "seed": None, "epoch": None}
    if "data_cursor" not in parts:
        counters["sampler"] = {**counters["sampler"], "position": None}
    meta = {
        **counters,
        "include": sorted(parts),
        "records_cursor": records.cursor if records else None,
        "records_sha256": shards_sha256(records.shards[: records.cursor]) if records else None,
        "records_last_step": records.last_step if records else None,
        "contract_sha256": contract_hash(contract_path),
        "contract_text": contract_path.read_text(encoding="utf-8"),  # what a resume may change: resume_changes
        "reference": contract.artifacts.reference.model_dump(by_alias=True) if contract.artifacts.reference else None,
        "verifier": contract.artifacts.verifier.model_dump(),
        "lock_sha256": _lock_hash(contract, contract_path),
        "world_size": setup.world,
        "sampled_by": setup.sampled_by,
        "per_group_seeds": setup.sampled_by == "group",  # what checkpoints before `sampled_by` said
        "metrics_sha256": sha256_file(run.metrics) if run.metrics.is_file() else None,
    }
    (tmp / "trainer.json").write_text(json.dumps(meta, indent=1, default=str), encoding="utf-8")
    sums = {p.relative_to(tmp).as_posix(): sha256_file(p) for p in sorted(tmp.rglob("*")) if p.is_file()}
    (tmp / MARKER).write_text(json.dumps({"files": sums}, indent=1), encoding="utf-8")
    _fsync_tree(tmp)


def _lock_hash(contract: Any, contract_path: Path) -> str | None:
    from rlvr_cli.contract.lock import lock_path

    path = lock_path(contract, contract_path)
    return sha256_file(path) if path.is_file() else None


def clear_interrupted(root: Path) -> None:
    """Remove `.tmp` folders a crash left mid-write (never published) and `.removed` ones a
    crash left mid-removal."""
    for pattern in (".step-*.tmp", ".step-*.removed"):
        for path in root.glob(pattern):
            shutil.rmtree(path, ignore_errors=True)


def _remove(path: Path) -> None:
    """Unpublish a step folder at once (renamed aside), then delete it: a kill during the
    deletion leaves a `.removed` folder, never a `step-<N>/` that lost some of its files."""
    if not path.exists():
        return
    aside = path.with_name(f".{path.name}.removed")
    shutil.rmtree(aside, ignore_errors=True)
    os.replace(path, aside)
    shutil.rmtree(aside, ignore_errors=True)


def prune(run: RunFolder, keep_last: int) -> None:
    """Keep the newest `keep_last` complete checkpoints (never fewer than one); drop leftovers."""
    clear_interrupted(run.checkpoints)
    found = run.complete_checkpoints()
    for _, path in found[: max(0, len(found) - max(keep_last, 1))]:
        _remove(path)


def verify(path: Path) -> None:
    """Every file the marker lists matches its sha256, and none is a link: a checkpoint holds
    its own files (a link could point anywhere, outside the run included)."""
    links = [p for p in [path, *path.rglob("*")] if p.is_symlink()]
    if links:
        shown = links[0]
        raise RlvrError(
            f"checkpoint {path.name}: {shown.relative_to(path.parent)} is a symbolic link (to {os.readlink(shown)}); "
            "a checkpoint must hold its own files, so it is not loaded"
        )
    marker = _read_json(path / MARKER)
    for name, expected in marker["files"].items():
        file = path / name
        if not file.is_file() or sha256_file(file) != expected:
            raise RlvrError(f"checkpoint {path.name}: {name} does not match its checksum")


def load_latest(setup: Setup, run: RunFolder, contract_path: Path, force: bool = False) -> TrainState:
    """Restore the newest complete checkpoint into the setup's models; returns its state. The
    metrics log is cut back to the checkpoint's step and must then be what it was when the
    checkpoint was written (its sha256 is in the checkpoint)."""
    clear_interrupted(run.checkpoints)
    found = run.complete_checkpoints()
    if not found:
        raise RlvrError(f"{run.path} has no complete checkpoint to resume from")
    _, path = found[-1]
    verify(path)
    meta = _read_json(path / "trainer.json")
    _refuse_changes(setup, meta, path, contract_path)
    included = set(meta.get("include", CHECKPOINT_PARTS))
    _refuse_partial(included, path.name, force)
    from rlvr_cli.train import shards

    in_shards = shards.present(path)
    into_shards = not in_shards and sharding.is_sharded(setup.policy)  # whole weights (one process, ddp) into shards
    whole = _read_for_shards(setup, path) if into_shards else None
    if not in_shards and not into_shards:
        restore.load_whole(setup, path)
    try:
        # tensors and plain values: no code runs; mapped, so processes that read it share its pages
        blob = torch.load(path / "state.pt", weights_only=True, mmap=into_shards)
    except Exception as exc:
        raise RlvrError(
            f"checkpoint {path.name}: state.pt holds more than tensors and plain values, so it is not "
            f"loaded (a checkpoint from elsewhere must not run code): {str(exc).splitlines()[0][:200]}"
        ) from None
    if not isinstance(blob, dict):
        raise RlvrError(f"checkpoint {path.name}: state.pt does not hold rlvr's state (a {type(blob).__name__})")
    restore.refuse_nonfinite_state(blob, path.name)
    try:
        if in_shards:  # each process reads its own shard, whatever number of processes wrote them
            shards.load(setup.policy, setup.optimizer, path, included & {"model", "optimizer"})
        elif into_shards:
            shards.into_shards(setup.policy, setup.optimizer, whole, blob.get("optimizer"), path.name)
        elif "optimizer" in blob:
            setup.optimizer.load_state_dict(blob["optimizer"])
        if "scheduler" in blob:
            setup.scheduler.load_state_dict(blob["scheduler"])
        if setup.scaler is not None and "scaler" in blob:
            setup.scaler.load_state_dict(blob["scaler"])
    except (ValueError, KeyError, RuntimeError, TypeError) as exc:  # another optimizer's or model's state
        raise RlvrError(f"checkpoint {path.name}: its optimizer state does not fit this run ({exc})") from None
    if "rng" in blob:
        set_rng_state(blob["rng"])
    sampler = meta["sampler"]  # parts not kept start afresh (only with --force)
    defaults = {"seed": setup.contract.hyperparameters.seed, "epoch": 0, "position": 0}
    meta["sampler"] = {k: (defaults[k] if sampler.get(k) is None and k in defaults else v) for k, v in sampler.items()}
    state = TrainState.from_json(meta, len(setup.train_tasks))
    if setup.main:
        _restore_metrics(run, state.step, meta.get("metrics_sha256"), path.name)
        _check_records(run, meta, path.name)
    return state


def _read_for_shards(setup: Setup, path: Path) -> dict[str, torch.Tensor] | None:
    """The whole weights on the main process (None elsewhere); a refusal stops every process."""
    from rlvr_cli.train import distributed

    weights, problem = None, None
    if setup.main:
        try:
            weights = restore.read_for_shards(setup, path)
        except RlvrError as exc:
            problem = str(exc)
    problems = [p for p in distributed.gather(problem) if p]
    if problems:
        raise RlvrError(problems[0])
    return weights


def _read_json(path: Path) -> Any:
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError) as exc:
        raise RlvrError(f"checkpoint {path.parent.name}: {path.name} cannot be read ({exc})") from None
    if not isinstance(data, dict):
        raise RlvrError(f"checkpoint {path.parent.name}: {path.name} is not rlvr's (not a JSON object)")
    return data


def _check_records(run: RunFolder, meta: dict[str, Any], name: str) -> None:
    """The record shards the checkpoint listed must still be what they were (it pins them)."""
    if meta.get("records_sha256") is None or not (run.records / "manifest.json").is_file():
        return  # no manifest: the record store refuses the folder itself, with its own reason
    problems = pin_problems(run.records, int(meta["records_cursor"]), meta["records_sha256"], f"checkpoint {name}")
    if problems:
        raise RlvrError(f"{problems[0]}; restore records/ as the run wrote it, or start a new run")


def _refuse_partial(included: set[str], name: str, force: bool) -> None:
    """A checkpoint that kept less than everything resumes only with --force, and never without
    the weights or the step counter."""
    missing = [p for p in CHECKPOINT_PARTS if p not in included]
    if not missing:
        return
    if "model" in missing or "rollout_cursor" in missing:
        raise RlvrError(
            f"checkpoint {name} lacks {', '.join(missing)} (checkpoint.include): there is nothing to resume"
        )
    if not force:
        raise RlvrError(
            f"checkpoint {name} lacks {', '.join(missing)} (checkpoint.include): resume would not be exact; "
            "`--resume --force` continues with those parts started afresh"
        )


def _restore_metrics(run: RunFolder, step: int, expected: str | None, name: str) -> None:
    run.truncate_metrics(step)
    found = sha256_file(run.metrics) if run.metrics.is_file() else None
    if expected is not None and found != expected:
        raise RlvrError(
            f"metrics.jsonl up to checkpoint {name} is not what the run wrote (its sha256 differs); "
            "restore it, or start a new run"
        )


def _sampled_by(meta: dict[str, Any], setup: Setup) -> str:
    """How the checkpoint's run seeded its samples (Setup.sampled_by); older checkpoints said
    only whether each group had a seed of its own, which a tool-use run's flag claimed wrongly."""
    if meta.get("sampled_by") in ("group", "rank", "run"):
        return str(meta["sampled_by"])
    world = meta.get("world_size", 1)
    if meta.get("per_group_seeds", world > 1):
        return "group" if setup.contract.environment.kind == "single_turn" else "rank"
    return "rank" if world > 1 else "run"


def _check_sampling(setup: Setup, meta: dict[str, Any], path: Path) -> None:
    """Groups seeded one by one go on at any number of processes, and only so; samples seeded by
    rank (or by the run, in one plain process) go on as those of the processes that resume."""
    written, now, before = _sampled_by(meta, setup), setup.sampled_by, meta.get("world_size", 1)
    if (written == "group") != (now == "group"):
        how = "under torchrun (`--nproc N`, any N)" if written == "group" else "in one plain process (without --nproc)"
        seeds = "each group is sampled with a seed of its own" if written == "group" else "groups share the run's seed"
        if written == "rank":
            how, seeds = f"by {before} processes under torchrun", "each samples its groups together, seeded by rank"
        raise RlvrError(f"checkpoint {path.name} was written {how}, where {seeds}; resume it the same way")
    if written != "group" and (written, before) != (now, setup.world) and setup.main:
        print(
            f"resuming as {_processes(now, setup.world)} from a checkpoint of {_processes(written, before)}: each "
            "process samples its groups as one batch seeded by its rank (tool-use rollouts, and single-turn ones "
            "under parallel.sample_groups: together; one plain process, by the run's seed), so from here the "
            f"samples are those of {_processes(now, setup.world)}",
            file=sys.stderr,
        )


def _processes(sampled_by: str, world: int) -> str:
    return "one plain process" if sampled_by == "run" else f"{world} process{'es' if world > 1 else ''} under torchrun"


def _refuse_changes(setup: Setup, meta: dict[str, Any], path: Path, contract_path: Path) -> None:
    if meta["contract_sha256"] != contract_hash(contract_path):
        text = meta.get("contract_text")
        notes = resume_changes.check(
            text if isinstance(text, str) else None, contract_path.read_text("utf-8"), path.name
        )
        if notes and setup.main:
            print(
                f"resuming with {'; '.join(notes)}: the same experiment computed another way, so it goes on to "
                "float tolerance, not bit for bit",
                file=sys.stderr,
            )
    _check_sampling(setup, meta, path)
    if meta.get("lock_sha256") != _lock_hash(setup.contract, contract_path):
        raise RlvrError(f"the lock file changed since checkpoint {path.name}; the locked artifacts differ")
