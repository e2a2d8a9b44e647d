"""How a run that did not finish ends: `status.json` says what stopped it (a rule's abort, a
signal, a full disk, another rank that died, a bug) with what was kept and the command that goes
on, and the user reads the same words. Nothing that arrives meanwhile cuts that short."""

from __future__ import annotations

import contextlib
import os
from typing import TYPE_CHECKING

from rlvr_cli.engine.types import NonFiniteLogits
from rlvr_cli.env.scoring import InvalidVerdictStop
from rlvr_cli.errors import ExitCode, Interrupted, RlvrError, ending
from rlvr_cli.train import distributed as dist
from rlvr_cli.train.stops import _eprint

if TYPE_CHECKING:
    from rlvr_cli.train.loop import Run


def ended(run: Run, exc: BaseException) -> int:
    """Called with what ended the run early: writes its status, then returns the exit code (an
    abort) or raises what the command reports. A SIGTERM or SIGINT from here on is absorbed
    (torchrun sends SIGTERM to every rank once one has died, while this rank writes why)."""
    ending()
    if isinstance(exc, RuntimeError) and Interrupted.raised is not None:  # the signal's, turned into
        exc = Interrupted.raised  # another error by the code it was raised in (torch's writers: "unexpected pos")
    if isinstance(exc, InvalidVerdictStop | NonFiniteLogits):
        run.status("aborted", reason=str(exc), next=kept(run))
        _eprint(f"aborted: {exc}")
        return ExitCode.ABORTED
    if isinstance(exc, Interrupted | KeyboardInterrupt):
        signal_name = exc.signal_name if isinstance(exc, Interrupted) else "SIGINT"
        run.status("paused", reason=f"interrupted by {signal_name} at step {run.state.step}", next=kept(run))
        if run.setup.main:
            _eprint(f"interrupted by {signal_name} at step {run.state.step}: {kept(run)}")
        raise exc
    if isinstance(exc, OSError):
        _failed(run, f"{exc.strerror or exc} ({getattr(exc, 'filename', None) or 'run folder'})")
        raise RlvrError(f"{exc.strerror or exc}: the run stopped at step {run.state.step}; {kept(run)}") from None
    if dist.peer_lost(exc):  # another rank died or hung: say so, not "a bug in rlvr"
        first = str(exc).strip().splitlines()[0][:300] if str(exc).strip() else type(exc).__name__
        what = "stopped"
        if "timed out" in first.lower():  # it did not answer in time: it hangs, or is far slower than this one
            what = f"did not answer in time ({dist.TIMEOUT_VARIABLE} sets how long a process waits)"
        reason = (
            f"another process of the run {what} during step {run.state.step} (a collective failed: {first}); "
            "its own output says why"
        )
        _failed(run, reason)
        raise RlvrError(f"{reason}; {kept(run)}") from None
    _failed(run, str(exc) if isinstance(exc, RlvrError) else f"{type(exc).__name__}: {exc}")
    raise exc


def kept(run: Run) -> str:
    """What survives in the run folder, and the command that goes on from it."""
    found = run.folder.complete_checkpoints()
    again = f"rlvr train {run.contract_path} --run-dir {run.folder.path} --auto"
    if run.steps != run.contract.hyperparameters.max_steps:  # the user's --max-steps goes on with the run
        again += f" --max-steps {run.steps}"
    if run.setup.world > 1 and os.environ.get("LOCAL_WORLD_SIZE") == str(run.setup.world):
        again += f" --nproc {run.setup.world}"  # one node: `--nproc` relaunches it; several: your torchrun line
    if found:
        what = f"kept checkpoint step-{found[-1][0]} with every record and metric up to it"
        return f"{what}; continue with: {again}"
    return f"no checkpoint yet (records so far are kept and redone identically); start again with: {again}"


def _failed(run: Run, reason: str) -> None:
    # the disk that failed the run may refuse the status too; the error still reaches the user
    with contextlib.suppress(OSError):
        run.status("failed", reason=reason, next=kept(run))
