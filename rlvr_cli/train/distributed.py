"""Several processes with PyTorch's own engine: `torchrun` starts them, `torch.distributed`
connects them (gloo on CPU, NCCL on GPUs).

Data parallel with exact global aggregation: every rank takes the same global prompt list
and keeps the groups `g ≡ rank (mod world)`; each group is sampled with its own seed, so a
sample does not depend on how many processes there are. Rewards are gathered so advantages
(including `batch_std`) are computed over the global batch; token and sequence counts are
summed over ranks so `token_mean` and `constant_norm` divide by the same global number on
every rank; gradients are summed (not averaged) over ranks, because the loss already
divides by global counts — the same gradient a single process computes over the whole batch.
"""

from __future__ import annotations

import functools
import os
import sys
import time
from collections.abc import Callable
from typing import Any

import torch


def launched() -> bool:
    """True under torchrun (it sets WORLD_SIZE and RANK)."""
    return "WORLD_SIZE" in os.environ and "RANK" in os.environ


def backends() -> str:
    """The process group's backend for each device: gloo on a CPU; on GPUs, NCCL for the tensors
    on them (gradients, FSDP2's gathers) and gloo for those on the CPU, which rlvr's own counts
    (`total`, `maximum`) and the object collectives use (NCCL alone refuses a CPU tensor)."""
    return "cpu:gloo,cuda:nccl" if torch.cuda.is_available() else "gloo"


def init() -> None:
    """Join the run's other processes (a failure to connect is the user's to fix: a message, exit 1)."""
    import torch.distributed as dist

    from rlvr_cli.errors import RlvrError

    if dist.is_initialized() or not launched():
        return
    backend = backends()
    if torch.cuda.is_available():
        torch.cuda.set_device(int(os.environ.get("LOCAL_RANK", "0")))
    try:
        store, timeout = _attempt_store(), collective_timeout()
        if store is None:
            dist.init_process_group(backend, timeout=timeout)
        else:
            rank, world = int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"])
            dist.init_process_group(backend, store=store, rank=rank, world_size=world, timeout=timeout)
    except (RuntimeError, ValueError) as exc:
        first = (str(exc).strip().splitlines() or [type(exc).__name__])[0][:300]
        raise RlvrError(
            f"process {os.environ.get('RANK')} of {os.environ.get('WORLD_SIZE')} could not connect to the run's "
            f"other processes ({first}); check that every node reaches the rendezvous endpoint and that no "
            "process of an earlier launch is still running"
        ) from None
    if _restarts_share_a_store() and dist.get_rank() == 0:
        print(
            "warning: torchrun restarts these processes (--max-restarts) over one rendezvous store kept across "
            "attempts, where a restarted process can read the addresses of the attempt before it and fail to "
            "connect (pytorch/pytorch#135712); launch torchrun with TORCH_DISABLE_SHARE_RDZV_TCP_STORE=1 "
            "(docs/scale.md)",
            file=sys.stderr,
        )


TIMEOUT_VARIABLE = "RLVR_COLLECTIVE_TIMEOUT_S"


def collective_timeout() -> Any:
    """How long a process waits in a collective for the others before the run stops (a process
    that hangs): `RLVR_COLLECTIVE_TIMEOUT_S` seconds, or None for PyTorch's default (10 minutes
    for NCCL, 30 for gloo)."""
    import datetime

    from rlvr_cli.errors import RlvrError

    text = os.environ.get(TIMEOUT_VARIABLE, "").strip()
    if not text:
        return None
    try:
        seconds = float(text)
    except ValueError:
        seconds = -1.0
    if not 0 < seconds < float("inf"):
        raise RlvrError(f"{TIMEOUT_VARIABLE}={text!r}: give the seconds a collective may wait, a number above 0")
    return datetime.timedelta(seconds=seconds)


def _attempt_store() -> Any:
    """torchrun's agent keeps one rendezvous store across restarts, and its keys with it: a process
    of a restarted attempt can read the connection addresses the attempt before wrote and fail to
    connect (pytorch/pytorch#135712). On one node every process has the same restart count, so
    each attempt's keys go under a prefix of their own. None: the default store (no agent store,
    or several nodes, whose agents count restarts each their own way)."""
    if not _keys_apart():
        return None
    import torch.distributed as dist

    store, _, _ = next(dist.rendezvous("env://"))
    return dist.PrefixStore(f"rlvr/attempt-{os.environ.get('TORCHELASTIC_RESTART_COUNT', '0')}", store)


def _keys_apart() -> bool:
    """torchrun's agent store on one node: each attempt's keys can be kept apart."""
    return os.environ.get("TORCHELASTIC_USE_AGENT_STORE") == "True" and os.environ.get("GROUP_WORLD_SIZE", "1") == "1"


def _restarts_share_a_store() -> bool:
    """Several nodes, restarts allowed, and the store shared across them: what `_attempt_store`
    cannot make safe."""
    several = os.environ.get("GROUP_WORLD_SIZE", "1") != "1"
    restarts = os.environ.get("TORCHELASTIC_MAX_RESTARTS", "0") not in ("", "0")
    return os.environ.get("TORCHELASTIC_USE_AGENT_STORE") == "True" and several and restarts


def active() -> bool:
    import torch.distributed as dist

    return dist.is_available() and dist.is_initialized()


def rank_world() -> tuple[int, int]:
    import torch.distributed as dist

    return (dist.get_rank(), dist.get_world_size()) if active() else (0, 1)


#: seconds this process spent inside rlvr's own collectives since `spent()` last read it
_SPENT = [0.0]


def timed(fn: Callable[..., Any]) -> Callable[..., Any]:
    """Count the call's wall time as time in collectives (`time_collectives_s`)."""

    @functools.wraps(fn)
    def inner(*args: Any, **kwargs: Any) -> Any:
        if not active():
            return fn(*args, **kwargs)
        start = time.perf_counter()
        try:
            return fn(*args, **kwargs)
        finally:
            _SPENT[0] += time.perf_counter() - start

    return inner


def spent() -> float:
    """Seconds in collectives since the last call (and start counting again)."""
    out, _SPENT[0] = _SPENT[0], 0.0
    return out


@timed
def gather(obj: Any) -> list[Any]:
    """Every rank's `obj`, in rank order (just [obj] in one process)."""
    import torch.distributed as dist

    if not active():
        return [obj]
    out: list[Any] = [None] * dist.get_world_size()
    dist.all_gather_object(out, obj)
    return out


@timed
def total(value: float) -> float:
    """The sum of `value` over ranks."""
    import torch.distributed as dist

    if not active():
        return value
    t = torch.tensor([value], dtype=torch.float64)
    dist.all_reduce(t)
    return float(t.item())


@timed
def maximum(value: float) -> float:
    import torch.distributed as dist

    if not active():
        return value
    t = torch.tensor([value], dtype=torch.float64)
    dist.all_reduce(t, op=dist.ReduceOp.MAX)
    return float(t.item())


@timed
def sum_gradients(model: Any, reduce: str = "fp32") -> None:
    """All-reduce (sum) every gradient: the loss already divides by global counts. `reduce`
    (the contract's precision.reduce) is the dtype the sum is taken in."""
    import torch.distributed as dist

    if not active():
        return
    wanted = torch.bfloat16 if reduce == "bf16" else torch.float32
    for p in model.parameters():
        if p.requires_grad:
            if p.grad is None:  # a rank with nothing to train still joins every reduction
                p.grad = torch.zeros_like(p)
            if p.grad.dtype == wanted:
                dist.all_reduce(p.grad)
                continue
            summed = p.grad.to(wanted)
            dist.all_reduce(summed)
            p.grad.copy_(summed)


_PEER_LOST = ("Connection reset by peer", "Connection closed by peer", "NCCL", "gloo", "Timed out", "timed out")


def peer_lost(exc: BaseException) -> bool:
    """Whether `exc` is a collective that failed because another process of the run died or hung
    (torch's distributed errors, or gloo's and NCCL's runtime errors)."""
    if not active():
        return False
    import torch.distributed as dist

    kinds = tuple(k for k in (getattr(dist, "DistError", None),) if isinstance(k, type))
    return (bool(kinds) and isinstance(exc, kinds)) or (
        isinstance(exc, RuntimeError) and any(s in str(exc) for s in _PEER_LOST)
    )


def same_folder(run_dir: Any, choice: bool) -> bool:
    """The main process's `choice` (resume or not), once every process has read the run folder
    the main process writes. On several nodes the run folder must be storage every node sees;
    a process that reads another (a node-local disk under the same path) would decide on its
    own, write its checkpoint shards where the main process never finds them, and resume from
    nothing. So each process reads a mark just written by the main process, and every process
    stops, naming each one that cannot see it, before anything is trained."""
    import secrets
    import socket

    import torch.distributed as dist

    from rlvr_cli.errors import RlvrError

    if not active():
        return choice
    mark = run_dir / ".processes"
    said: list[Any] = [None, choice]
    try:
        if dist.get_rank() == 0:
            said[0] = secrets.token_hex(8)
            mark.write_text(said[0], encoding="utf-8")
    except OSError as exc:  # the others then learn that process 0 stopped
        raise RlvrError(f"cannot write in the run folder {run_dir}: {exc.strerror or exc}") from None
    try:
        dist.broadcast_object_list(said, src=0)
        try:
            seen = mark.read_text(encoding="utf-8") == said[0]
        except OSError:
            seen = False
        views = gather((seen, socket.gethostname()))
    except Exception as exc:  # the main process refused the run (its own output says why) or died
        if not peer_lost(exc):
            raise
        raise RlvrError("process 0 of the run stopped before training began; its own output says why") from None
    if dist.get_rank() == 0:
        mark.unlink(missing_ok=True)
    blind = [f"process {rank} on {host}" for rank, (ok, host) in enumerate(views) if not ok]
    if blind:
        raise RlvrError(
            f"{', '.join(blind)} cannot see the run folder {run_dir} that process 0 writes (on {views[0][1]}): "
            "on several nodes the run folder must be on storage every node sees, under the same path "
            "(docs/scale.md)"
        )
    return bool(said[1])


def on_main(work: Callable[[], Any]) -> Any:
    """`work()` on the main process alone (None elsewhere), for a check whose result only the
    main process keeps; every process stops where it refuses (the others with a line naming
    process 0, whose own output says why) instead of running it N times at once."""
    import torch.distributed as dist

    from rlvr_cli.errors import RlvrError

    if not active():
        return work()
    said: list[Any] = [None]
    try:
        if dist.get_rank() == 0:
            try:
                result = work()
            except BaseException:
                said[0] = "refused"
                raise
            return result
    finally:
        dist.broadcast_object_list(said, src=0)  # the main process says whether it went on
    if said[0] is not None:
        raise RlvrError("process 0 of the run stopped before training began; its own output says why")
    return None


@timed
def barrier() -> None:
    import torch.distributed as dist

    if active():
        dist.barrier()


def shutdown(clean: bool = False) -> None:
    """Leave the run's process group. After a clean finish (`clean`) every process first waits for
    the others, so none tears down its connections while another still works through them."""
    import torch.distributed as dist

    global _LEFT
    if active():
        if clean:
            dist.barrier()
        dist.destroy_process_group()
        _LEFT = True


#: this process has left a process group it joined (`shutdown`): `leave` ends it
_LEFT = False


def leave(code: int | str | None) -> None:
    """End a process that took part in a run of several, with the run's exit code, without the
    interpreter's teardown. FSDP2's state stays alive after the run (its autograd hooks hold it
    from C++, beyond the garbage collector's reach), and with it the process groups: the
    interpreter's teardown then destroys gloo's groups with their worker threads and tensors
    still held, which can abort the process (SIGABRT, "terminate called without an active
    exception") after the run has finished and written everything, and torchrun then reports a
    finished run as failed. By then every file is written and closed and every child process
    stopped; what is left is flushed here. Does nothing in a process that joined no group."""
    if not _LEFT:
        return
    import contextlib
    import logging

    if isinstance(code, str):
        print(code, file=sys.stderr)
    logging.shutdown()
    for stream in (sys.stdout, sys.stderr):
        with contextlib.suppress(OSError, ValueError):  # a closed pipe: nothing more can reach it
            stream.flush()
    os._exit(code if isinstance(code, int) else 0 if code is None else 1)
