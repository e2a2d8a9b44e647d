"""`rlvr train --nproc N`: torchrun's own launcher (torch.distributed.run, the same arguments),
run so that a process that fails ends the launch with that process's exit code and one line.

Each process of the run already says why it stopped (`error: …`, exit 1; paused by a signal, 143;
…: docs/cli.md's exit codes). torchrun itself would add its launcher's traceback and a box naming
the failed process, and exit 1 whatever the process's code was. Here the launch exits with the
code of the first process that failed (128 + the signal for one a signal killed), after a line
that names it.
"""

from __future__ import annotations

import logging
import signal
import sys


def exit_code(code: int) -> int:
    """A process's exit code as a shell reports it: a process a signal killed (negative in
    torch's record) is 128 + the signal; 0 or out of range is 1 (it did fail)."""
    if code < 0:
        return 128 + -code
    return code if 0 < code < 256 else 1


def _said_below(record: logging.LogRecord) -> bool:
    """torchrun's own line for a failed process (`failed (exitcode: 1) local_rank: 0 (pid: …) of
    binary: …`) is left out: the line `main` prints says the same, with the code as the shell
    gets it."""
    return not str(record.msg).startswith("failed (exitcode")


def main(argv: list[str]) -> int:
    logging.getLogger("torch.distributed.elastic.multiprocessing.api").addFilter(_said_below)
    from torch.distributed.elastic.multiprocessing.api import SignalException
    from torch.distributed.elastic.multiprocessing.errors import ChildFailedError
    from torch.distributed.run import parse_args, run

    try:
        run(parse_args(argv))
    except SignalException as exc:  # torchrun has passed the signal on to every process and waited for them
        name = signal.Signals(exc.sigval).name
        print(
            f"the launch got {name}: every process of the run was given it (status.json says where the run stopped)",
            file=sys.stderr,
        )
        return 128 + int(exc.sigval)
    except ChildFailedError as exc:
        rank, failure = exc.get_first_failure()
        code = exit_code(failure.exitcode)
        how = f"exit code {code}"
        if failure.exitcode < 0:
            name = signal.Signals(-failure.exitcode).name if -failure.exitcode in signal.valid_signals() else "a signal"
            how = f"{name} (exit code {code})"
        print(f"process {rank} of the run stopped first: {how}; its own message is above", file=sys.stderr)
        return code
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
