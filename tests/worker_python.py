"""What torchrun starts for each process of a run the tests launch (its PYTHON_EXEC): a
stand-in for `python -u -m rlvr_cli ARGS` (or a test's own `python -u SCRIPT ARGS`) that asks
the tests' warm interpreter for that environment (tests/zygote_workers.py) to fork the process,
and becomes a fresh `python -u ARGS` (exec) wherever it cannot: another command, no warm
interpreter for this environment, an environment that differs from the one it was started in.

The forked process gets this one's standard streams, working directory and environment, and
this one stands for it towards torchrun: signals torchrun sends (SIGTERM, SIGINT, …) are passed
on, and this one ends as the process ended (its exit code, or killed by the same signal). Were
this one killed outright (SIGKILL), the warm side kills the process it forked.

Runs under `python -S` (no site, the standard library only) so that it starts in milliseconds.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import signal
import socket
import sys

#: what torchrun sets for each process: the warm interpreter of an environment serves every rank
TORCHRUN = {
    "RANK",
    "LOCAL_RANK",
    "GROUP_RANK",
    "ROLE_RANK",
    "ROLE_NAME",
    "LOCAL_WORLD_SIZE",
    "WORLD_SIZE",
    "GROUP_WORLD_SIZE",
    "ROLE_WORLD_SIZE",
    "MASTER_ADDR",
    "MASTER_PORT",
    "TORCH_NCCL_ASYNC_ERROR_HANDLING",
}
#: variables that change from test to test and that no library reads when it is imported: pytest's,
#: and rlvr's own (RLVR_FAULT, …), which rlvr reads when it runs (tests/arch/test_zygote.py)
VOLATILE = {"PYTEST_CURRENT_TEST"}
RUN_TIME = "RLVR_"
RELAYED = (signal.SIGTERM, signal.SIGINT, signal.SIGHUP, signal.SIGQUIT, signal.SIGUSR1, signal.SIGUSR2)


def comparable(env: dict, torchrun: bool = True) -> dict:
    """The environment less what changes from test to test and (`torchrun`) what torchrun sets
    per process: two commands whose environments compare equal can fork from one warm parent."""
    return {
        k: v
        for k, v in env.items()
        if k not in VOLATILE
        and not k.startswith(RUN_TIME)
        and not (torchrun and (k in TORCHRUN or k.startswith("TORCHELASTIC_")))
    }


def socket_path(env: dict) -> str | None:
    """Where the warm interpreter for this environment listens, or None (no warm launches)."""
    folder = env.get("RLVR_TESTS_WORKERS")
    if not folder:
        return None
    digest = hashlib.sha256(json.dumps(sorted(comparable(env).items())).encode()).hexdigest()
    return os.path.join(folder, digest[:24] + ".sock")


def _fresh(args: list[str]) -> None:
    os.execv(sys.executable, [sys.executable, *args])


def _open_streams() -> list[int]:
    streams = []
    for fd in (0, 1, 2):
        try:
            os.fstat(fd)
        except OSError:
            continue
        streams.append(fd)
    return streams


def _script(args: list[str]) -> str | None:
    """The script of `-u SCRIPT ARGS` (a test's own script that torchrun starts), else None."""
    if len(args) >= 2 and args[0] == "-u" and args[1].endswith(".py") and os.path.isfile(args[1]):
        return os.path.abspath(args[1])
    return None


def main(args: list[str]) -> None:
    path = socket_path(dict(os.environ))
    script = _script(args)
    if path is None or (args[:3] != ["-u", "-m", "rlvr_cli"] and script is None):
        _fresh(args)
    link = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    try:
        link.connect(path)  # type: ignore[arg-type]
    except OSError:
        link.close()
        _fresh(args)
    streams = _open_streams()
    request = {
        "argv": args[2:] if script else args[3:],
        "cwd": os.getcwd(),
        "env": dict(os.environ),
        "streams": streams,
    }
    if script:
        request["script"] = script
    socket.send_fds(link, [json.dumps(request).encode() + b"\n"], streams)
    answers = link.makefile("rb")
    answer = json.loads(answers.readline() or b"{}")
    if "pid" not in answer:  # the warm side could not take it: start fresh, as torchrun would have
        link.close()
        _fresh(args)
    pid = answer["pid"]

    def relay(number: int, _frame: object) -> None:
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, number)

    for number in RELAYED:
        signal.signal(number, relay)
    line = answers.readline()
    if not line:
        os._exit(1)
    status = json.loads(line)["status"]
    if os.WIFSIGNALED(status):  # end as the process did, so that torchrun reads the same
        number = os.WTERMSIG(status)
        if number not in (signal.SIGKILL, signal.SIGSTOP):  # the two that keep their default anyway
            signal.signal(number, signal.SIG_DFL)
        os.kill(os.getpid(), number)
    os._exit(os.waitstatus_to_exitcode(status))


if __name__ == "__main__":
    main(sys.argv[1:])
