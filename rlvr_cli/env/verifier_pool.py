"""Single-turn verification in a worker process, each call bounded by `timeout_s`.

A verifier is user code: it may raise, hang, or return garbage. It runs in a separate
process (spawned, so it never inherits torch state) that imports `module:function` from the
contract's folder. An exception becomes a `verifier_error` verdict, a call past the timeout a
`timeout` verdict (the worker is killed and restarted), a malformed return value a
`verifier_error`. None of them is ever a reward of 0.

A batch goes to the worker in one message and its verdicts come back in few: the worker sends
what it has at most every `FLUSH_S` and at the batch's end (one message per verdict cost ~35 µs
each, most of a fast verifier's time). It marks in shared memory which call it is in and since
when, so the trainer bounds each call by `timeout_s` from its own start and knows which one hung
or killed the worker; verdicts finished but not yet sent when that happens are asked again.
"""

from __future__ import annotations

import contextlib
import importlib
import multiprocessing as mp
import os
import signal
import sys
import threading
import time
import traceback
from collections.abc import Callable
from pathlib import Path
from typing import Any

from rlvr_cli.env.verdict import Verdict
from rlvr_cli.errors import RlvrError

FLUSH_S = 0.05  # the worker sends the verdicts it holds at least this often


def import_entry(spec: str, folder: Path) -> Any:
    """The object `module:name` names, importable from the contract's folder or the environment."""
    module_name, _, name = spec.partition(":")
    added = str(folder) not in sys.path
    if added:  # only for this import: the contract's folder must not shadow modules afterwards
        sys.path.insert(0, str(folder))
    try:
        module = importlib.import_module(module_name)
    finally:
        if added:
            sys.path.remove(str(folder))
    found = getattr(module, name, None)
    if found is None:
        raise AttributeError(f"{module_name} has no {name!r}")
    return found


def resolve(spec: str, folder: Path) -> Callable[[dict, str], Any]:
    """A verifier `module:function` (never one from the standard library: `os:system` is not a verifier)."""
    if spec.partition(":")[0].split(".")[0] in sys.stdlib_module_names:
        raise AttributeError(f"{spec} is in the standard library; the verifier is your own code")
    fn = import_entry(spec, folder)
    if not callable(fn):
        raise AttributeError(f"{spec} is not a function")
    return fn


def _isolate() -> None:
    """In the worker: its own process group (so every child it spawns is killed with it), no
    Ctrl-C of its own (the trainer decides), and the verifier's prints go to stderr — user
    code never writes to rlvr's stdout."""
    os.setpgrp()
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    sys.stdout.flush()
    os.dup2(2, 1)
    sys.stdout = sys.stderr


def _limit_memory(extra_mb: int | None) -> None:
    """Cap the address space at what the loaded verifier holds plus `extra_mb`: a verifier that
    allocates past it gets MemoryError (a verifier_error verdict), not the machine's memory."""
    if extra_mb is None:
        return
    import resource

    held = next(
        int(line.split()[1])
        for line in Path("/proc/self/status").read_text().splitlines()
        if line.startswith("VmSize:")
    )
    limit = held * 1024 + extra_mb * (1 << 20)
    resource.setrlimit(resource.RLIMIT_AS, (limit, limit))


ANSWER_CHECK = "rlvr_cli.env.builtin.answer:AnswerCheck"
BUILTINS = {
    "answer_check": ANSWER_CHECK,
    "unit_tests": "rlvr_cli.env.builtin.unit_tests:UnitTests",
    "judge": "rlvr_cli.env.builtin.judge:Judge",
}


def builtin_options(env: Any, folder: Path) -> tuple[str, dict[str, Any]] | None:
    """The built-in verifier the contract chose and its options, or None for `verifier`."""
    for kind, spec in BUILTINS.items():
        section = getattr(env, kind)
        if section is not None:
            options = section.model_dump()
            if kind == "unit_tests":  # answer before the pool's own bound kills the worker
                options["deadline_s"] = max(1.0, env.timeout_s - 0.5)
            if kind == "judge":
                options["folder"] = str(folder)
            return spec, options
    return None


def _worker(
    spec: str, folder: str, conn: Any, at: Any, memory_mb: int | None = None, options: dict | None = None
) -> None:  # runs in the child process
    _isolate()
    try:
        fn = resolve(spec, Path(folder))
        if options is not None:  # a built-in verifier, configured by the contract
            fn = fn(**options)
        _limit_memory(memory_mb)
    except Exception as exc:
        conn.send(("load_error", f"{type(exc).__name__}: {exc}"))
        return
    try:
        conn.send(("ready", None))
        while True:
            seq, batch = conn.recv()  # a list of (index, task, response); every index is answered
            held, sent = [], time.monotonic()
            for position, (index, task, response) in enumerate(batch):
                begun = time.monotonic()
                at[2], at[1], at[0] = begun, position, seq  # the call in progress, for the pool's clock
                held.append((index, *_call(fn, task, response), time.monotonic() - begun))
                if position == len(batch) - 1 or time.monotonic() - sent >= FLUSH_S:
                    conn.send((seq, held))
                    held, sent = [], time.monotonic()
    except (EOFError, OSError):  # the pool closed the pipe (a timeout, or the end): nothing to say
        return


def _call(fn: Callable[[dict, str], Any], task: dict, response: str) -> tuple[str, Any]:
    try:
        verdict = Verdict.coerce(fn(task, response))
        return "ok", (verdict.status, verdict.reward, dict(verdict.components), verdict.detail)
    except Exception as exc:
        last = traceback.extract_tb(exc.__traceback__)[-1:]
        where = f" at {Path(last[0].filename).name}:{last[0].lineno}" if last else ""
        return "error", f"{type(exc).__name__}: {exc}{where}"


class VerifierPool:
    """One worker process, restarted after a timeout; `verify` is called from the trainer."""

    def __init__(
        self, spec: str, folder: Path, timeout_s: float, memory_mb: int | None = None, options: dict | None = None
    ) -> None:
        self.spec, self.folder, self.timeout_s, self.memory_mb = spec, folder, timeout_s, memory_mb
        self.options = options
        self._ctx = mp.get_context("spawn")
        self._proc: Any = None
        self._conn: Any = None
        self._seq = 0  # each batch's number: an answer that does not carry it is not trusted
        self._at: Any = None  # shared with the worker: (batch, position, start) of the call in progress
        self._lock = threading.Lock()  # one batch at a time (samples drawn ahead are scored on their thread)
        self.sets = False  # reward.unit set: the verifier judges a list of responses (rollout/sets.py)

    @classmethod
    def for_contract(cls, contract: Any, folder: Path) -> VerifierPool:
        """The pool of a single_turn contract's `environment.verifier`, with its limits."""
        env = contract.environment
        builtin = builtin_options(env, folder)
        if env.judge is not None:  # minutes of retries per verdict against a judge that cannot answer: say so now
            from rlvr_cli.env.builtin.judge import check_answers, check_reachable

            check_reachable(env.judge.base_url)
            check_answers(builtin[1])  # type: ignore[index]
        if builtin is not None:
            return cls(builtin[0], folder, env.timeout_s, env.memory_mb, builtin[1])
        pool = cls(env.verifier, folder, env.timeout_s, env.memory_mb)
        pool.sets = contract.objective.reward.unit == "set"
        return pool

    def __enter__(self) -> VerifierPool:
        self._start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def _start(self) -> None:
        parent, child = self._ctx.Pipe()
        self._at = self._ctx.RawArray("d", 3)
        args = (self.spec, str(self.folder), child, self._at, self.memory_mb, self.options)
        self._proc = self._ctx.Process(target=_worker, args=args, daemon=True)
        self._proc.start()
        child.close()
        self._conn = parent
        if not parent.poll(60):
            self.close()
            raise RlvrError(f"verifier {self.spec} did not start within 60 s")
        try:
            kind, detail = parent.recv()
        except (EOFError, OSError):
            self.close()
            raise RlvrError(
                f"the verifier process for {self.spec} died while starting (a script that uses "
                "rlvr as a library needs an `if __name__ == '__main__':` guard)"
            ) from None
        if kind != "ready":
            self.close()
            raise RlvrError(f"verifier {self.spec} cannot be loaded: {detail}")

    def close(self) -> None:
        if self._conn is not None:
            self._conn.close()
        if self._proc is not None:
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.killpg(self._proc.pid, signal.SIGKILL)  # the worker and every child it spawned
            self._proc.join(5)
        self._proc = self._conn = None

    def _death(self) -> str:
        """How the worker ended: its exit code or the signal that killed it."""
        proc = self._proc
        if proc is None:
            return "it is gone"
        proc.join(1)
        code = proc.exitcode
        if code is None:
            return "its pipe broke while it still ran"
        if code < 0:
            name = signal.Signals(-code).name if -code in signal.Signals._value2member_map_ else str(-code)
            return f"killed by signal {name}" + (" (out of memory?)" if name == "SIGKILL" else "")
        return f"exited with code {code}"

    def verify(self, task: dict[str, Any], response: str) -> tuple[Verdict, float]:
        """The verdict and the seconds it took."""
        return self.verify_many([(task, response)])[0]

    def verify_many(self, items: list[tuple[dict[str, Any], str]]) -> list[tuple[Verdict, float]]:
        """Send a batch at once; each call is bounded by `timeout_s` from its start. After a
        timeout the worker is killed and the rest of the batch goes to a fresh one."""
        if self.sets and any(isinstance(response, str) for _, response in items):
            raise RlvrError(
                f"{self.spec} judges sets of responses together (objective.reward.unit: set); this command "
                "judges one response at a time, which such a verifier cannot do"
            )
        results: list[tuple[Verdict, float] | None] = [None] * len(items)
        with self._lock:
            while todo := [i for i, r in enumerate(results) if r is None]:
                self._run_batch(items, todo, results)
        return results  # type: ignore[return-value]

    def _in_progress(self) -> tuple[int, int, float]:
        """(batch, position, start) of the worker's call in progress, read until two reads agree."""
        while True:
            first = tuple(self._at)
            if tuple(self._at) == first:
                return int(first[0]), int(first[1]), first[2]

    def _run_batch(self, items: list, todo: list[int], results: list) -> None:
        """Verdicts of `items` at the indices `todo`, into `results`; returns early, the rest
        unanswered, when the worker timed out, died or wrote out of turn (that call's verdict says so)."""
        if self._proc is None or not self._proc.is_alive():
            self._start()
        self._seq += 1
        seq, got, last = self._seq, 0, time.monotonic()  # answers so far; when the last one came
        try:
            self._conn.send((seq, [(i, *items[i]) for i in todo]))
            while got < len(todo):
                batch, position, begun = self._in_progress()
                if batch != seq or position < got:  # the next call has not begun: the clock is ours
                    position, begun = got, last
                wait = begun + self.timeout_s - time.monotonic()
                if wait > 0 and not self._conn.poll(wait):
                    continue  # the worker may have moved on to a later call: look again
                if wait <= 0:
                    self.close()  # kill the hung verifier; finished calls not yet sent are asked again
                    detail = f"no verdict within {self.timeout_s} s"
                    results[todo[position]] = (Verdict("timeout", detail=detail), time.monotonic() - begun)
                    return
                answer = self._conn.recv()
                answers = _answers(answer, seq, todo[got:])
                if answers is None:
                    self.close()  # something else wrote to the pipe: no later answer can be trusted
                    results[todo[got]] = (Verdict("verifier_error", detail="verifier answer out of order"), 0.0)
                    return
                for index, kind, payload, seconds in answers:
                    results[index] = (_verdict(kind, payload), seconds)
                got, last = got + len(answers), time.monotonic()
        except (EOFError, BrokenPipeError, ConnectionResetError, OSError):
            batch, position, begun = self._in_progress()
            if batch != seq or position < got:
                position, begun = got, last
            detail = f"verifier process died: {self._death()}"
            self.close()
            results[todo[position]] = (Verdict("verifier_error", detail=detail), time.monotonic() - begun)


def _answers(answer: Any, seq: int, expected: list[int]) -> list[tuple[int, str, Any, float]] | None:
    """The worker's verdicts in `answer`, or None unless they are this batch's next ones, in turn."""
    if not (isinstance(answer, tuple) and len(answer) == 2 and answer[0] == seq and isinstance(answer[1], list)):
        return None
    held = answer[1]
    if not 0 < len(held) <= len(expected):
        return None
    for entry, index in zip(held, expected, strict=False):
        if not (isinstance(entry, tuple) and len(entry) == 4 and entry[0] == index and entry[1] in ("ok", "error")):
            return None
        if not isinstance(entry[3], float):
            return None
    return held


def _verdict(kind: str, payload: Any) -> Verdict:
    if kind == "ok":
        status, reward, components, detail = payload
        return Verdict(status, reward, components, detail)
    return Verdict("verifier_error", detail=payload)
