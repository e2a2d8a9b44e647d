"""The test side of tests/zygote.py: start the warm interpreter once per test process, ask it
to fork a command, wait with a timeout, read what the command wrote."""

from __future__ import annotations

import atexit
import contextlib
import json
import os
import selectors
import shutil
import signal
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
#: variables that change from test to test and that no library reads when it is imported
VOLATILE = {"PYTEST_CURRENT_TEST"}


def _comparable(env: dict) -> dict:
    return {k: v for k, v in env.items() if k not in VOLATILE}


class Zygote:
    def __init__(self) -> None:
        self.env = dict(os.environ)
        self.proc: subprocess.Popen | None = None
        self.folder = Path(tempfile.mkdtemp(prefix="rlvr-zygote-"))
        atexit.register(self.close)
        atexit.register(shutil.rmtree, self.folder, True)

    def _start(self) -> bool:
        self.proc = subprocess.Popen(
            [sys.executable, str(ROOT / "tests" / "zygote.py")],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            cwd=ROOT,
            env=self.env,
        )
        return self._read(300) == {"ready": True}

    def _read(self, timeout: float) -> dict | None:
        assert self.proc is not None and self.proc.stdout is not None
        with selectors.DefaultSelector() as sel:
            sel.register(self.proc.stdout, selectors.EVENT_READ)
            if not sel.select(timeout):
                return None
        line = self.proc.stdout.readline()
        return json.loads(line) if line else None

    def run(self, argv: list[str], cwd: Path | None, env: dict, timeout: float) -> tuple[int, str, str] | None:
        """(exit code, stdout, stderr) of `rlvr ARGV`, or None when it must start fresh (an
        environment the warm interpreter was not started with, or no warm interpreter)."""
        if _comparable(env) != _comparable(self.env):
            return None

        if (self.proc is None or self.proc.poll() is not None) and not self._start():
            self.close()
            return None
        assert self.proc is not None and self.proc.stdin is not None
        out, err = self.folder / "out", self.folder / "err"
        request = {"argv": argv, "cwd": str(cwd) if cwd else None, "env": env, "out": str(out), "err": str(err)}
        self.proc.stdin.write(json.dumps(request).encode() + b"\n")
        self.proc.stdin.flush()
        started = self._read(60)
        if started is None:
            self.close()
            return None
        ended = self._read(timeout)
        if ended is None and self.proc.poll() is not None:
            raise RuntimeError(f"the tests' warm interpreter died while running rlvr {' '.join(argv)}")
        if ended is None:  # as subprocess.run does on a timeout: kill the command, then raise
            with contextlib.suppress(ProcessLookupError):  # it ended meanwhile
                os.kill(started["pid"], signal.SIGKILL)
            self._read(60)
            raise subprocess.TimeoutExpired(["rlvr", *argv], timeout)
        status = ended["status"]
        code = os.waitstatus_to_exitcode(status)
        return code, _text(out), _text(err)

    def close(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait()
        self.proc = None


def _text(path: Path) -> str:
    """As subprocess.run(text=True) reads a stream: decoded, universal newlines."""
    return path.read_bytes().decode("utf-8", errors="replace").replace("\r\n", "\n").replace("\r", "\n")
