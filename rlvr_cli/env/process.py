"""The resources server of a run in a child process of its own (its own interpreter: no share
of the trainer's GIL), stopped when the trainer ends however it ends. Its output and exit status
go to a log in the run folder (`env-server.log`), and a run that loses its server says how the
server ended and what it printed last."""

from __future__ import annotations

import contextlib
import os
import secrets
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from rlvr_cli.env.agent import Endpoint, environment, free_port
from rlvr_cli.env.child import ERROR_PREFIX
from rlvr_cli.errors import RlvrError

LOG_NAME = "env-server.log"


class ChildServer:
    """The child process serving the environment, and where its output goes."""

    def __init__(self, proc: subprocess.Popen, log: Any, log_path: Path | None) -> None:
        self.proc, self.log, self.log_path = proc, log, log_path

    def describe(self) -> str:
        """How the server stands (running, or how it ended) and its last lines of output."""
        try:  # asked when it stopped answering: a server that is dying gets a moment to end
            code = self.proc.wait(timeout=2.0)
        except subprocess.TimeoutExpired:
            code = None
        if code is None:
            state = "is still running"
        elif code < 0:
            state = f"was killed by signal {-code}"
        else:
            state = f"exited with code {code}"
        where = f" (its output: {self.log_path})" if self.log_path else ""
        tail = " | ".join(self.tail(5))
        return f"the resources server {state}{where}" + (f"; its last lines: {tail[:600]}" if tail else "")

    def tail(self, lines: int) -> list[str]:
        try:
            self.log.flush()
            self.log.seek(0, os.SEEK_END)
            size = self.log.tell()
            self.log.seek(max(0, size - 8192))
            text = self.log.read().decode(errors="replace")
        except (OSError, ValueError):
            return []
        return [line for line in text.strip().splitlines() if line.strip()][-lines:]

    def stop(self) -> None:
        with contextlib.suppress(OSError, ValueError):
            self.proc.stdin.close()  # type: ignore[union-attr]
        self.proc.terminate()
        try:
            self.proc.wait(10)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
        with contextlib.suppress(OSError, ValueError):
            self.log.write(f"[rlvr] the resources server exited with code {self.proc.returncode}\n".encode())
            self.log.close()


def _log(log_dir: Path | None) -> tuple[Any, Path | None]:
    """The file the child writes to: `env-server.log` in the run folder (one per process under
    torchrun), else a temporary file. Never a pipe: a full pipe would block the server."""
    if log_dir is None:
        return tempfile.TemporaryFile(), None
    rank = int(os.environ.get("RANK", "0") or 0)
    path = log_dir / (LOG_NAME if rank == 0 else f"env-server.rank{rank}.log")
    log_dir.mkdir(parents=True, exist_ok=True)
    return path.open("a+b"), path


@contextlib.contextmanager
def environment_process(
    spec: str, folder: Any, attempts: int = 3, max_output_bytes: int | None = None, log_dir: Path | None = None
) -> Iterator[Endpoint]:
    """The endpoint of `environment.server`: a URL as is, or `module:Class` served by a child
    process behind a fresh per-run bearer token (the endpoint's `child` describes it)."""
    if spec.startswith(("http://", "https://")):
        with environment(spec, folder) as endpoint:
            yield endpoint
        return
    token = secrets.token_urlsafe(24)
    why = ""
    for _ in range(attempts):  # a port taken between choosing and binding it: another port
        port = free_port()
        log, log_path = _log(log_dir)
        start = log.seek(0, os.SEEK_END)
        proc = subprocess.Popen(
            [sys.executable, "-m", "rlvr_cli.env.child", spec, str(folder), str(port)],
            stdin=subprocess.PIPE,
            stdout=log,
            stderr=log,
            env={**os.environ, "RLVR_CHILD_TOKEN": token, "RLVR_CHILD_MAX_OUTPUT_BYTES": str(max_output_bytes or "")},
            start_new_session=True,  # Ctrl-C is the trainer's to handle; the server goes when it closes stdin
        )
        child = ChildServer(proc, log, log_path)
        endpoint = Endpoint(f"http://127.0.0.1:{port}", token, child=child)
        why = _await_server(proc, endpoint, log, start)
        if not why:
            break
        child.stop()
    else:
        raise RlvrError(f"the resources server {spec} did not start: {why}")
    try:
        yield endpoint
    finally:
        child.stop()


def _await_server(proc: Any, endpoint: Endpoint, log: Any, start: int, wait_s: float = 60.0) -> str:
    """ "" once the child answers; else why it did not (it is stopped): the line the child
    wrote for the trainer (`rlvr-server-error: ...`), or its last line."""
    import httpx

    deadline = time.monotonic() + wait_s
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            log.seek(start)
            lines = log.read().decode(errors="replace").strip().splitlines()
            said = [line[len(ERROR_PREFIX) :] for line in lines if line.startswith(ERROR_PREFIX)]
            return said[-1] if said else lines[-1] if lines else f"it exited with code {proc.returncode}"
        try:
            httpx.get(f"{endpoint.url}/tools", headers={"Authorization": f"Bearer {endpoint.token}"}, timeout=1)
            return ""
        except httpx.HTTPError:
            time.sleep(0.05)
    proc.kill()
    proc.wait()
    return f"no answer within {wait_s:.0f} s"
