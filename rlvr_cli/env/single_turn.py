"""Single-turn verification in a worker process, each call bounded by `timeout_s`.

A verifier is user code: it may raise, hang, or return garbage. It runs in a separate
process (spawned, so it never inherits torch state) that imports `module:function` from the
contract's folder. An exception becomes a `verifier_error` verdict, a call past the timeout a
`timeout` verdict (the worker is killed and restarted), a malformed return value a
`verifier_error`. None of them is ever a reward of 0.
"""

from __future__ import annotations

import importlib
import multiprocessing as mp
import sys
import time
import traceback
from collections.abc import Callable
from pathlib import Path
from typing import Any

from rlvr_cli.env.verdict import Verdict
from rlvr_cli.errors import RlvrError


def resolve(spec: str, folder: Path) -> Callable[[dict, str], Any]:
    """`module:function`, importable from the contract's folder or the environment."""
    module_name, _, function = spec.partition(":")
    if str(folder) not in sys.path:
        sys.path.insert(0, str(folder))
    module = importlib.import_module(module_name)
    fn = getattr(module, function, None)
    if not callable(fn):
        raise AttributeError(f"{module_name} has no function {function!r}")
    return fn


def _worker(spec: str, folder: str, conn: Any) -> None:  # runs in the child process
    try:
        fn = resolve(spec, Path(folder))
    except Exception as exc:  # noqa: BLE001
        conn.send(("load_error", f"{type(exc).__name__}: {exc}"))
        return
    conn.send(("ready", None))
    while True:
        try:
            task, response = conn.recv()
        except EOFError:
            return
        try:
            verdict = Verdict.coerce(fn(task, response))
            conn.send(("ok", (verdict.status, verdict.reward, dict(verdict.components), verdict.detail)))
        except Exception as exc:  # noqa: BLE001 - the verifier's bug becomes a verdict
            last = traceback.extract_tb(exc.__traceback__)[-1:]
            where = f" at {Path(last[0].filename).name}:{last[0].lineno}" if last else ""
            conn.send(("error", f"{type(exc).__name__}: {exc}{where}"))


class VerifierPool:
    """One worker process, restarted after a timeout; `verify` is called from the trainer."""

    def __init__(self, spec: str, folder: Path, timeout_s: float) -> None:
        self.spec, self.folder, self.timeout_s = spec, folder, timeout_s
        self._ctx = mp.get_context("spawn")
        self._proc: Any = None
        self._conn: Any = None
        self.calls = 0

    def __enter__(self) -> VerifierPool:
        self._start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def _start(self) -> None:
        parent, child = self._ctx.Pipe()
        self._proc = self._ctx.Process(target=_worker, args=(self.spec, str(self.folder), child), daemon=True)
        self._proc.start()
        child.close()
        self._conn = parent
        if not parent.poll(60):
            self.close()
            raise RlvrError(f"verifier {self.spec} did not start within 60 s")
        kind, detail = parent.recv()
        if kind != "ready":
            self.close()
            raise RlvrError(f"verifier {self.spec} cannot be loaded: {detail}")

    def close(self) -> None:
        if self._conn is not None:
            self._conn.close()
        if self._proc is not None and self._proc.is_alive():
            self._proc.kill()
            self._proc.join(5)
        self._proc = self._conn = None

    def verify(self, task: dict[str, Any], response: str) -> tuple[Verdict, float]:
        """The verdict and the seconds it took."""
        if self._proc is None or not self._proc.is_alive():
            self._start()
        self.calls += 1
        start = time.monotonic()
        try:
            self._conn.send((task, response))
            ready = self._conn.poll(self.timeout_s)
            if not ready:
                self.close()  # kill the hung verifier; the next call starts a fresh one
                return Verdict("timeout", detail=f"no verdict within {self.timeout_s} s"), time.monotonic() - start
            kind, payload = self._conn.recv()
        except (EOFError, BrokenPipeError, ConnectionResetError, OSError) as exc:
            self.close()
            return Verdict("verifier_error", detail=f"verifier process died: {exc}"), time.monotonic() - start
        elapsed = time.monotonic() - start
        if kind == "ok":
            status, reward, components, detail = payload
            return Verdict(status, reward, components, detail), elapsed
        return Verdict("verifier_error", detail=payload), elapsed
