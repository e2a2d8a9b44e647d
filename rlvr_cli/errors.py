"""The one exception family domain code raises, the exit codes, and the one internal-error net.

Every command exits with one of `ExitCode`: 0 success, 1 invalid input or a failed check,
2 usage (bad arguments, a missing path or extra), 3 internal error (a bug in rlvr; for an audit:
it could not run), 4 a run paused by a monitoring rule (resumable), 5 a run aborted, 141 the
reader of stdout went away. Domain code raises an `RlvrError` subclass; the CLI prints its
message (never a traceback) and exits with its code.
"""

from __future__ import annotations

import os
import signal
import sys
import threading
from collections.abc import Callable
from enum import IntEnum
from typing import ClassVar, TypeVar

T = TypeVar("T")


class ExitCode(IntEnum):
    OK = 0
    FAILED = 1
    USAGE = 2
    INTERNAL = 3
    PAUSED = 4
    ABORTED = 5
    INTERRUPTED = 130  # SIGINT (Ctrl-C)
    TERMINATED = 143  # SIGTERM (what schedulers send)
    PIPE_CLOSED = 141  # SIGPIPE: the reader of stdout went away (`rlvr schema contract | head`)


class RlvrError(Exception):
    """A problem the user can fix: printed as one clear message, never a traceback."""

    exit_code: int = ExitCode.FAILED


class UsageProblem(RlvrError):
    """Bad arguments, a missing or unreadable path, a missing extra: exit 2."""

    exit_code = ExitCode.USAGE


class CannotRun(RlvrError):
    """An audit that could not run (the environment lacks what the audit needs, a server
    that fails): exit 3, saying why — never the exit 1 of a finding."""

    exit_code = ExitCode.INTERNAL

    def __init__(self, why: str) -> None:
        super().__init__(f"the audit could not run: {why}")


class Interrupted(BaseException):
    """SIGINT or SIGTERM arrived: unwind (writing what the run folder needs), then exit 130/143."""

    #: the one a signal's handler raised last in this command (`signals_unwind`): where a library's
    #: code turns it into an error of its own (torch's writers: "unexpected pos"), the run still
    #: stopped on the signal (train/ending.py)
    raised: ClassVar[Interrupted | None] = None

    def __init__(self, signal_name: str, exit_code: int) -> None:
        super().__init__(signal_name)
        self.signal_name, self.exit_code = signal_name, exit_code


def ending() -> None:
    """The command has begun to end on its own (a failure, a stop): a SIGTERM or SIGINT that
    arrives now is absorbed instead of cutting short the status it writes and the reason it prints
    (torchrun sends SIGTERM to every rank once one has died, while the others are saying why);
    a second one ends the process at once, the way out of a shutdown that hangs. Lasts until the
    command's own signal handling ends (`signals_unwind` restores what was there before)."""
    if threading.current_thread() is not threading.main_thread():
        return

    def absorb(signum: int, _: object) -> None:
        signal.signal(signum, signal.SIG_DFL)

    for name in (signal.SIGTERM, signal.SIGINT):
        signal.signal(name, absorb)


def internal_error(exc: BaseException) -> int:
    """Report an unexpected exception as a bug (exit 3); the traceback only with RLVR_DEBUG=1."""
    if os.environ.get("RLVR_DEBUG"):
        raise exc
    print(
        f"internal error: {type(exc).__name__}: {exc}\n"
        "This is a bug in rlvr; rerun with RLVR_DEBUG=1 for the traceback.",
        file=sys.stderr,
    )
    return ExitCode.INTERNAL


def guard(fn: Callable[[], int]) -> int:
    """Run a command body: domain errors → their message and code, anything else → exit 3."""
    try:
        return fn()
    except RlvrError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return exc.exit_code
    except Interrupted as exc:
        return exc.exit_code
    except KeyboardInterrupt:
        print("interrupted", file=sys.stderr)
        return ExitCode.INTERRUPTED
    except BrokenPipeError:  # not a bug: stop writing, quietly, as a shell tool does
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())  # (the exit's flush writes nowhere)
        return ExitCode.PIPE_CLOSED
    except Exception as exc:
        return internal_error(exc)
