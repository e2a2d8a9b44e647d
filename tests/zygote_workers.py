"""A warm interpreter that forks the processes of the runs the tests launch under torchrun:
each `python -u -m rlvr_cli ARGS` torchrun starts (tests/worker_python.py, its PYTHON_EXEC)
is forked from this process, which has imported torch, transformers and rlvr's modules, as
tests/zygote.py forks the tests' `rlvr` commands.

One per environment (less what torchrun sets per process: RANK, MASTER_PORT, …), listening on
a Unix socket named after it. Each request gets a watcher process of its own, which forks the
command into a session of its own (as torchrun starts each process), with the requester's
standard streams (passed over the socket), working directory and environment, and `-u`'s
unbuffered streams; it answers {"pid"}, then {"status"} when the command has ended, and kills
the command if the requester goes away first. The parent never computes, so each fork is as
clean as a fresh start; it ends when the test process that started it closes its stdin.
"""

from __future__ import annotations

import contextlib
import io
import json
import os
import select
import signal
import socket
import struct
import sys

import zygote
from worker_python import comparable


def _command(request: dict, streams: list[int]) -> None:
    """In the forked command: take the requester's streams, become `python -u -m rlvr_cli ARGV`
    (or `python -u SCRIPT ARGV`)."""
    os.setsid()
    for number in (signal.SIGTERM, signal.SIGHUP, signal.SIGQUIT, signal.SIGUSR1, signal.SIGUSR2, signal.SIGCHLD):
        signal.signal(number, signal.SIG_DFL)
    signal.signal(signal.SIGINT, signal.default_int_handler)
    for fd, target in zip(streams, request["streams"], strict=True):
        os.dup2(fd, target)
        os.close(fd)
    for target in {0, 1, 2} - set(request["streams"]):
        os.close(target)
    sys.stdout = sys.__stdout__ = _unbuffered(1, sys.stdout)
    sys.stderr = sys.__stderr__ = _unbuffered(2, sys.stderr)
    os.chdir(request["cwd"])
    zygote.run_as_main(request["env"], request["argv"], script=request.get("script"))


def _unbuffered(fd: int, like: io.TextIOWrapper) -> io.TextIOWrapper:
    """A stream as `python -u` makes it: no buffer under the text layer, written through."""
    return io.TextIOWrapper(
        io.FileIO(fd, "w", closefd=False), encoding=like.encoding, errors=like.errors, write_through=True
    )


def _read_request(link: socket.socket) -> tuple[dict, list[int]]:
    data, streams, _, _ = socket.recv_fds(link, 1 << 20, 3)
    while not data.endswith(b"\n"):
        more = link.recv(1 << 20)
        if not more:
            raise EOFError("the requester went away")
        data += more
    return json.loads(data), list(streams)


def _watch(link: socket.socket, served: dict, log: str) -> None:
    """In the watcher: check the environment, fork the command, answer, wait for whichever ends first."""
    try:
        request, streams = _read_request(link)
    except (OSError, EOFError, ValueError):
        os._exit(0)
    if comparable(request["env"]) != served:
        differ = sorted(set(comparable(request["env"]).items()) ^ set(served.items()))
        link.sendall(json.dumps({"fresh": sorted({k for k, _ in differ})}).encode() + b"\n")
        os._exit(0)
    pid = os.fork()
    if pid == 0:
        try:
            link.close()
            _command(request, streams)  # never returns
        finally:
            os._exit(1)  # a command that could not even start (its working directory gone, …)
    for fd in streams:
        os.close(fd)
    try:
        requester = struct.unpack("3i", link.getsockopt(socket.SOL_SOCKET, socket.SO_PEERCRED, struct.calcsize("3i")))
        with open(log, "a") as forked:  # what this warm interpreter forked, for whom (tests/conftest.py kill_rlvr)
            forked.write(json.dumps({"pid": pid, "requester": requester[0], "argv": request["argv"]}) + "\n")
        link.sendall(json.dumps({"pid": pid}).encode() + b"\n")
        ended = os.pidfd_open(pid)
        while True:
            ready, _, _ = select.select([link, ended], [], [])
            if ended in ready:
                _, status = os.waitpid(pid, 0)
                with contextlib.suppress(OSError):
                    link.sendall(json.dumps({"status": status}).encode() + b"\n")
                os._exit(0)
            if not link.recv(1):  # the requester is gone (killed): so goes its command
                break
    except OSError:  # the requester went away while it was answered
        pass
    os.kill(pid, signal.SIGKILL)
    os.waitpid(pid, 0)


def serve(path: str) -> None:
    zygote.preload()
    served = comparable(dict(os.environ))
    listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    listener.bind(path)
    listener.listen(64)
    sys.stdout.buffer.write(b'{"ready": true}\n')
    sys.stdout.buffer.flush()
    try:
        while True:
            ready, _, _ = select.select([listener, sys.stdin], [], [], 1.0)
            _reap()
            if sys.stdin in ready and not sys.stdin.buffer.read1(1):
                return  # the test process has gone
            if listener in ready:
                link, _ = listener.accept()
                if os.fork() == 0:
                    try:
                        listener.close()
                        _watch(link, served, path + ".log")
                    finally:  # a watcher never returns here, whatever happened to it
                        os._exit(0)
                link.close()
    finally:
        os.unlink(path)  # its log stays: a later server of this environment goes on with it


def _reap() -> None:
    try:
        while os.waitpid(-1, os.WNOHANG)[0]:
            pass
    except ChildProcessError:
        pass


if __name__ == "__main__":
    serve(sys.argv[1])
