"""Fault injection for tests of the run's guards, parsed once when a run starts.

`RLVR_FAULT=nan_loss@STEP` poisons that step's loss with NaN; `RLVR_FAULT=disk_full@STEP`
makes that step's checkpoint meet a full disk (ENOSPC, raised inside torch's writer of
`state.pt`), `RLVR_FAULT=records_full@STEP` that step's records (written in the background);
`RLVR_FAULT=term_in_checkpoint@STEP` runs the SIGTERM handler inside torch's writer of that step's
`state.pt` (where the interpreter runs it when the signal arrives during a write).
`RLVR_FAULT=kill_in_shards@STEP` SIGKILLs every process of a sharded run once its shard of
that step's checkpoint is written, before the checkpoint is published; `RLVR_FAULT=kill_rank@STEP`
SIGKILLs the process of rank 1 when that step starts (another rank of the run dies), and
`RLVR_FAULT=hang_rank@STEP` makes it sleep there until it is stopped (another rank hangs), in
torchrun's first attempt only.
`RLVR_FAULT=engine_copy@0` makes the rollout engine sample from a copy of the policy that only
`load_weights` updates (as vLLM's does), and `RLVR_FAULT=stale_engine@0` gives that copy an
engine whose `load_weights` does nothing — the stale-weights bug the records must reveal. Unset
in normal runs, where `Fault.none()` changes nothing.
"""

from __future__ import annotations

import errno
import itertools
import os
from dataclasses import dataclass

import torch

_WRITES = itertools.count()  # term_in_checkpoint: the writes of the checkpoint it interrupts


@dataclass(frozen=True)
class Fault:
    nan_loss_step: int | None = None
    disk_full_step: int | None = None  # the checkpoint of this step meets a full disk
    term_in_checkpoint_step: int | None = None  # SIGTERM arrives while this step's checkpoint is written
    records_full_step: int | None = None  # the records of this step meet a full disk
    engine: str | None = None  # engine_copy | stale_engine: the engine samples from its own copy
    kill_in_shards_step: int | None = None  # every process dies between its shard and the marker
    kill_rank_step: int | None = None  # rank 1 dies when this step starts
    hang_rank_step: int | None = None  # rank 1 sleeps when this step starts, until it is stopped

    @classmethod
    def none(cls) -> Fault:
        return cls()

    @classmethod
    def from_env(cls) -> Fault:
        kind, _, step = os.environ.get("RLVR_FAULT", "").partition("@")
        if not step.isdigit():
            return cls()
        if kind == "nan_loss":
            return cls(nan_loss_step=int(step))
        if kind == "disk_full":
            return cls(disk_full_step=int(step))
        if kind == "records_full":
            return cls(records_full_step=int(step))
        if kind == "term_in_checkpoint":
            return cls(term_in_checkpoint_step=int(step))
        if kind == "kill_in_shards":
            return cls(kill_in_shards_step=int(step))
        if kind == "kill_rank":
            return cls(kill_rank_step=int(step))
        if kind == "hang_rank":
            return cls(hang_rank_step=int(step))
        if kind in ("engine_copy", "stale_engine"):
            return cls(engine=kind)
        return cls()

    def disk(self, step: int) -> None:
        """Before each write of a checkpoint's `state.pt` (inside torch's zip writer)."""
        if self.disk_full_step == step:
            raise OSError(errno.ENOSPC, "No space left on device (injected by RLVR_FAULT)")
        if self.term_in_checkpoint_step == step and next(_WRITES) == 2:  # a write in the middle of the file
            import signal

            handler = signal.getsignal(signal.SIGTERM)  # a SIGTERM that arrived during this write:
            if callable(handler):
                handler(signal.SIGTERM, None)  # its handler runs here, in the writer's callback

    def kill_in_shards(self, step: int) -> None:
        if self.kill_in_shards_step == step:
            import signal

            os.kill(os.getpid(), signal.SIGKILL)

    def rank_fault(self, step: int, rank: int) -> None:
        """Rank 1 dies or hangs at this step, once: not again when torchrun restarts the processes
        (`--max-restarts`)."""
        if rank != 1 or os.environ.get("TORCHELASTIC_RESTART_COUNT", "0") != "0":
            return
        if self.kill_rank_step == step:
            import signal

            os.kill(os.getpid(), signal.SIGKILL)
        while self.hang_rank_step == step:  # until a signal stops the process
            import time

            time.sleep(1.0)

    def records(self, step: int) -> None:
        if self.records_full_step == step:
            raise OSError(errno.ENOSPC, "No space left on device (injected by RLVR_FAULT)")

    def poison(self, loss: torch.Tensor, step: int) -> torch.Tensor:
        if self.nan_loss_step == step:
            return loss * torch.tensor(float("nan"))
        return loss
