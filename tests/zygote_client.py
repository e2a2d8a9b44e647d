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
from collections import OrderedDict
from pathlib import Path

from tests.worker_python import comparable, socket_path

ROOT = Path(__file__).resolve().parent.parent


def _comparable(env: dict) -> dict:
    return comparable(env, torchrun=False)


class Zygote:
    def __init__(self, env: dict | None = None) -> None:
        self.env = dict(os.environ if env is None else env)
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

    def run(
        self, argv: list[str], cwd: Path | None, env: dict, timeout: float, module: str = "rlvr_cli"
    ) -> tuple[int, str, str] | None:
        """(exit code, stdout, stderr) of `python -m MODULE ARGV` (`rlvr ARGV`), or None when it
        must start fresh (an environment the warm interpreter was not started with, or no warm
        interpreter)."""
        if _comparable(env) != _comparable(self.env):
            return None

        if (self.proc is None or self.proc.poll() is not None) and not self._start():
            self.close()
            return None
        assert self.proc is not None and self.proc.stdin is not None
        out, err = self.folder / "out", self.folder / "err"
        request = {"argv": argv, "cwd": str(cwd) if cwd else None, "env": env, "out": str(out), "err": str(err)}
        request["module"] = module
        self.proc.stdin.write(json.dumps(request).encode() + b"\n")
        self.proc.stdin.flush()
        started = self._read(60)
        if started is None:
            self.close()
            return None
        ended = self._read(timeout)
        if ended is None and self.proc.poll() is not None:
            raise RuntimeError(f"the tests' warm interpreter died while running {module} {' '.join(argv)}")
        if ended is None:  # as subprocess.run does on a timeout: kill the command, then raise
            with contextlib.suppress(ProcessLookupError):  # it ended meanwhile
                os.kill(started["pid"], signal.SIGKILL)
            self._read(60)
            raise subprocess.TimeoutExpired([module, *argv], timeout)
        status = ended["status"]
        code = os.waitstatus_to_exitcode(status)
        return code, _text(out), _text(err)

    def close(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait()
        self.proc = None


class Pool:
    """Warm interpreters, one per environment the commands run in. The test process's first
    environment gets one at once; another gets one the second time it is asked for (a module
    fixture or a library that set a variable in process, and every later command of that test
    process would pay a fresh interpreter's imports), a one-off runs fresh. At most SIZE are kept,
    the least recently used closed first."""

    SIZE = 3

    def __init__(self) -> None:
        self.warm: OrderedDict[frozenset, Zygote] = OrderedDict()
        self.seen: set[frozenset] = set()

    def run(
        self, argv: list[str], cwd: Path | None, env: dict, timeout: float, module: str = "rlvr_cli"
    ) -> tuple[int, str, str] | None:
        """As Zygote.run; None when the command must start fresh."""
        key = frozenset(_comparable(env).items())
        zygote = self.warm.get(key)
        if zygote is None:
            if self.warm and key not in self.seen:
                self.seen.add(key)
                return None
            zygote = self.warm[key] = Zygote(env)
            while len(self.warm) > self.SIZE:
                self.warm.popitem(last=False)[1].close()
        self.warm.move_to_end(key)
        return zygote.run(argv, cwd, env, timeout, module)

    def close(self) -> None:
        for zygote in self.warm.values():
            zygote.close()
        self.warm.clear()


def _text(path: Path) -> str:
    """As subprocess.run(text=True) reads a stream: decoded, universal newlines."""
    return path.read_bytes().decode("utf-8", errors="replace").replace("\r\n", "\n").replace("\r", "\n")


class Workers:
    """Warm interpreters that the processes of the runs the tests launch under torchrun are
    forked from (tests/zygote_workers.py), one per environment a launch runs in, at most SIZE,
    started when a test is about to launch in that environment (`ensure`). torchrun finds them
    through `environment()`: its PYTHON_EXEC, a copy of tests/worker_python.py, which asks the
    warm interpreter of its environment and starts fresh where there is none."""

    SIZE = 2

    def __init__(self) -> None:
        self.folder = Path(tempfile.mkdtemp(prefix="rlvr-workers-"))
        self.python = self.folder / "python"
        self.python.write_text(f"#!{sys.executable} -S\n" + (ROOT / "tests" / "worker_python.py").read_text())
        self.python.chmod(0o700)
        self.servers: OrderedDict[str, subprocess.Popen] = OrderedDict()
        atexit.register(shutil.rmtree, self.folder, True)
        atexit.register(self.close)

    def environment(self) -> dict:
        return {"PYTHON_EXEC": str(self.python), "RLVR_TESTS_WORKERS": str(self.folder)}

    def ensure(self, env: dict) -> None:
        """A warm interpreter for torchrun's processes launched in `env`, started if need be."""
        path = socket_path(env)
        if path is None:
            return
        running = self.servers.get(path)
        if running is not None and running.poll() is None:
            self.servers.move_to_end(path)
            return
        server = subprocess.Popen(
            [sys.executable, str(ROOT / "tests" / "zygote_workers.py"), path],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            cwd=ROOT,
            env=env,
        )
        with selectors.DefaultSelector() as sel:
            sel.register(server.stdout, selectors.EVENT_READ)  # type: ignore[arg-type]
            ready = bool(sel.select(300)) and server.stdout.readline() == b'{"ready": true}\n'  # type: ignore[union-attr]
        if not ready:  # its launches start fresh
            server.kill()
            server.wait()
            return
        self.servers[path] = server
        while len(self.servers) > self.SIZE:
            self._stop(self.servers.popitem(last=False)[1])

    def serves(self, env: dict) -> bool:
        """Whether a warm interpreter of this environment runs (its launches fork from it)."""
        path = socket_path(env)
        server = self.servers.get(path) if path else None
        return server is not None and server.poll() is None

    def forked_for(self, requester: int) -> int | None:
        """The pid of the running process a warm interpreter forked for this stand-in, or None
        (the newest such line: a pid is reused in time)."""
        found = None
        for log in self.folder.glob("*.sock.log"):
            for line in log.read_text().splitlines():
                row = json.loads(line)
                if row["requester"] == requester and Path(f"/proc/{row['pid']}").exists():
                    found = row["pid"]
        return found

    @staticmethod
    def _stop(server: subprocess.Popen) -> None:
        with contextlib.suppress(OSError):
            server.stdin.close()  # type: ignore[union-attr]
        try:
            server.wait(10)
        except subprocess.TimeoutExpired:
            server.kill()
            server.wait()

    def close(self) -> None:
        for server in self.servers.values():
            self._stop(server)
        self.servers.clear()
