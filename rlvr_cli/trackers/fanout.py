"""Every tracker the contract names, fed from the step loop without ever holding it up.

Each tracker runs in a process of its own (`trackers/writer.py`), fed JSON lines through a
non-blocking pipe: the loop puts a row and goes on. Importing the tracker, opening its run, writing: all
happen in that process, which shares no interpreter lock with training and runs at a lower
priority. A tracker that fails, dies, or falls `BACKLOG` events behind is dropped with its reason,
which `news()` hands the loop once and `states()` keeps for `status.json`; what its package
prints goes to `trackers/<kind>.log`.

The tracker's step is the steps done: metrics.jsonl's `step` + 1, as in the report; 0 is the
holdout before training. Resume continues the same tracker run: `trackers/<kind>.json` keeps its
id and the last step it took, and steps it already has are not sent again (an exact resume
redoes them with the same values); TensorBoard instead drops its own later events (purge).
"""

from __future__ import annotations

import contextlib
import json
import math
import os
import select
import subprocess
import sys
import time
import uuid
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from rlvr_cli.contract.operations import Tracker
from rlvr_cli.files import read_json_object
from rlvr_cli.trackers.sink import Opening, Spec

BACKLOG = 10_000  # events a tracker may fall behind before it is dropped
CLOSE_SECONDS = 30.0  # how long the end of a run waits for a tracker to finish writing


def line(event: dict[str, Any]) -> bytes:
    """One event as the tracker's process reads it."""
    return (json.dumps(event, default=str) + "\n").encode("utf-8")


@dataclass
class Worker:
    """The run's side of one tracker's process: non-blocking pipes both ways, served from the
    loop's own calls (no thread of the run waits on a tracker). Bytes the pipe cannot take yet
    wait in `pending`; the process's answers are read when the loop next puts or asks."""

    spec: Tracker
    state_file: Path
    failure: str | None = None
    told: bool = False
    logged_through: int = -1
    sent: int = 0  # events put, the opening included
    done: int = 0  # events the process has handled
    ended: str | None = None  # the outcome the process closed its tracker run with
    proc: subprocess.Popen[bytes] | None = None
    pending: bytearray = field(default_factory=bytearray)  # written by the run, not yet taken by the pipe
    answers: bytearray = field(default_factory=bytearray)  # read from the process, not yet a whole line
    eof: bool = False  # the process's answers have ended

    def put(self, data: bytes) -> None:
        if self.failure is not None or self.proc is None:
            return
        self.poll()
        if self.sent - self.done >= BACKLOG:
            self.failure = f"fell {BACKLOG} events behind the run; dropped"
            return
        self.sent += 1
        self.pending += data
        self.flush()

    def describe(self) -> str:
        if self.failure is not None:
            return f"failed: {self.failure}"
        verb = "closed" if self.ended is not None else "writing"
        return f"{verb} (through step {self.logged_through})" if self.logged_through >= 0 else verb

    def start(self, opening: Opening, log: Path) -> None:
        try:
            with log.open("ab") as err:
                self.proc = subprocess.Popen(
                    [sys.executable, "-m", "rlvr_cli.trackers.writer"],
                    stdin=subprocess.PIPE,
                    stdout=subprocess.PIPE,
                    stderr=err,
                    bufsize=0,
                    start_new_session=True,  # a Ctrl-C reaches the run, which closes its trackers in turn
                )
        except OSError as exc:
            self.failure = f"could not start its process: {exc}"
            return
        assert self.proc.stdin is not None and self.proc.stdout is not None
        os.set_blocking(self.proc.stdin.fileno(), False)
        os.set_blocking(self.proc.stdout.fileno(), False)
        through = self.logged_through
        self.put(line({"open": {**opening.to_json(), "state_file": str(self.state_file), "logged_through": through}}))

    def flush(self) -> None:
        """Hand the pipe what it takes now."""
        if not self.pending or self.proc is None or self.proc.stdin is None or self.proc.stdin.closed:
            return
        try:
            while self.pending:
                written = os.write(self.proc.stdin.fileno(), self.pending[: 1 << 16])
                del self.pending[:written]
        except BlockingIOError:
            pass
        except OSError:  # the process is gone: its answers' end says why
            self.pending.clear()

    def poll(self) -> None:
        """Read what the process has answered so far."""
        if self.proc is None or self.proc.stdout is None or self.eof:
            return
        try:
            while chunk := os.read(self.proc.stdout.fileno(), 1 << 16):
                self.answers += chunk
            self.eof = True
        except BlockingIOError:
            pass
        except OSError:
            self.eof = True
        *whole, rest = self.answers.split(b"\n")
        self.answers = bytearray(rest)
        for text in whole:
            self._answer(text)
        if self.eof:
            self._ended()

    def _answer(self, text: bytes) -> None:
        with contextlib.suppress(ValueError, TypeError, KeyError):
            answer = json.loads(text)
            if "done" in answer:
                self.done, self.logged_through = int(answer["done"]), int(answer["through"])
            elif "failed" in answer:
                self.failure = self.failure or str(answer["failed"])  # the first reason stands
            elif "closed" in answer:
                self.ended = str(answer["closed"])

    def _ended(self) -> None:
        assert self.proc is not None
        code = self.proc.wait()
        if self.ended is None and self.failure is None:
            self.failure = f"its process ended (exit code {code}); see {self.state_file.with_suffix('.log')}"

    def finish(self, outcome: str) -> None:
        """Send the run's outcome: the process closes its tracker run and ends."""
        if self.proc is None or self.eof:
            return
        self.pending += line({"close": outcome})
        self.flush()

    def settle(self, deadline: float, timeout: float) -> None:
        """Wait until the process has taken everything and ended, or the deadline; then kill it."""
        if self.proc is None:
            return
        while not self.eof and time.monotonic() < deadline:
            self.flush()
            stdin = self.proc.stdin
            if not self.pending and stdin is not None and not stdin.closed:
                with contextlib.suppress(OSError):
                    stdin.close()  # everything is written: the process's stdin ends after the close
            wait = [stdin] if self.pending and stdin is not None else []
            select.select([self.proc.stdout], wait, [], max(0.0, min(0.5, deadline - time.monotonic())))
            self.poll()
        if not self.eof:
            self.failure = self.failure or f"still writing after {timeout:.0f} s; its last rows may be missing"
            self.proc.kill()
            self.proc.wait()


class Trackers:
    """The contract's trackers for one invocation of a command that writes to the run."""

    def __init__(self, workers: list[Worker]) -> None:
        self.workers = workers

    @classmethod
    def start(
        cls, specs: list[Tracker], run_dir: Path, name: str, config: dict[str, Any], first_step: int, resume: bool
    ) -> Trackers:
        """Open every tracker (in its process); `resume` continues the run id the folder has."""
        root = run_dir / "trackers"
        root.mkdir(parents=True, exist_ok=True)
        previous = {s.kind: read_json_object(root / f"{s.kind}.json") for s in specs} if resume else {}
        run_id = next((p["run_id"] for p in previous.values() if p.get("run_id")), None)
        run_id = run_id or f"{_slug(name)}-{uuid.uuid4().hex[:8]}"
        workers = []
        for spec in specs:
            kept = previous.get(spec.kind, {})
            worker = Worker(spec, root / f"{spec.kind}.json")
            worker.logged_through = int(kept.get("logged_through", -1)) if resume else -1
            folder = (run_dir / spec.dir) if spec.dir else root / spec.kind
            project = spec.project or kept.get("project") or name  # a later command keeps training's project
            plain = Spec(**spec.model_dump())
            opening = Opening(run_id, name, project, folder, config, first_step, kept if resume else {}, plain)
            worker.start(opening, root / f"{spec.kind}.log")
            workers.append(worker)
        return cls(workers)

    @classmethod
    def reopen(cls, run_dir: Path) -> Trackers | None:
        """The trackers a run folder's training wrote to, for a later command (report, gate): the
        same tracker runs in the same projects, their config as training wrote it."""
        root = run_dir / "trackers"
        specs = []
        for path in sorted(root.glob("*.json")) if root.is_dir() else []:
            with contextlib.suppress(ValueError, TypeError, KeyError):
                specs.append(Tracker.model_validate(read_json_object(path)["spec"]))
        if not specs:
            return None
        latest = max(int(read_json_object(root / f"{s.kind}.json").get("logged_through", 0)) for s in specs)
        return cls.start(specs, run_dir, run_dir.name, {}, latest + 1, resume=True)

    def log(self, step: int, row: dict[str, Any]) -> None:
        """One row at the tracker step `step`: its finite numbers, under their metric names."""
        values = {k: float(v) for k, v in row.items() if k != "step" and _number(v)}
        if values:
            data = line({"log": [step, values]})  # encoded once for every tracker
            for worker in self.workers:
                worker.put(data)

    def file(self, path: Path, text: str | None = None) -> None:
        """A file of the run (the contract, its lock, the plan, a report, a verdict)."""
        if text is None:
            try:
                text = path.read_text(encoding="utf-8", errors="replace")
            except OSError:
                return
        data = line({"file": [str(path), text]})
        for worker in self.workers:
            worker.put(data)

    def news(self) -> list[str]:
        """Trackers that failed since the last call, each said once."""
        out = []
        for worker in self.workers:
            worker.poll()
            worker.flush()
            if worker.failure is not None and not worker.told:
                worker.told = True
                out.append(
                    f"tracker {worker.spec.kind} stopped: {worker.failure}; the run goes on, its own files complete"
                )
        return out

    def states(self) -> dict[str, str]:
        """Each tracker: `failed: why`, or `writing`/`closed` with the last step it took."""
        return {w.spec.kind: w.describe() for w in self.workers}

    def close(self, outcome: str = "finished", timeout: float = CLOSE_SECONDS) -> list[str]:
        """Let every tracker finish what it has, up to `timeout` seconds in all; what did not."""
        deadline = time.monotonic() + timeout
        for worker in self.workers:
            worker.finish(outcome)
        for worker in self.workers:
            worker.settle(deadline, timeout)
        return self.news()


def flatten(data: Any, prefix: str = "") -> dict[str, Any]:
    """{"a": {"b": [1, 2]}} → {"a.b.0": 1, "a.b.1": 2}: a contract as a tracker's config."""
    if isinstance(data, dict):
        out: dict[str, Any] = {}
        for key, value in data.items():
            out.update(flatten(value, f"{prefix}{key}."))
        return out
    if isinstance(data, list):
        out = {}
        for i, value in enumerate(data):
            out.update(flatten(value, f"{prefix}{i}."))
        return out or {prefix[:-1]: "[]"}
    return {prefix[:-1]: data}


def _number(value: Any) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool) and math.isfinite(value)


def _slug(name: str) -> str:
    return "".join(c if c.isalnum() or c in "-_" else "-" for c in name)[:60] or "run"


def publish(run_dir: Path, paths: list[Path]) -> list[str]:
    """Send files written after training (a report, a gate verdict) to the trackers the run
    wrote to, in the same tracker runs; what failed, to be said. Nothing while it still trains."""
    from rlvr_cli.store.run import RunFolder

    folder = RunFolder(run_dir)
    if folder.writer_alive():
        return []
    trackers = Trackers.reopen(run_dir)
    if trackers is None:
        return []
    for path in paths:
        trackers.file(path)
    outcome = folder.read_status().state if folder.is_run() else "finished"
    return trackers.close(outcome)
