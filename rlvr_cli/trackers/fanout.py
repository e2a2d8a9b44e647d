"""Every tracker the contract names, fed from the step loop without ever holding it up.

Each tracker has a thread and a bounded queue: the loop puts a row and goes on. Importing the
tracker, opening its run, writing: all happen on that thread. A tracker that raises, or falls
`BACKLOG` events behind, is dropped with its reason, which `news()` hands the loop once and
`states()` keeps for `status.json`.

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
import queue
import threading
import time
import uuid
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from rlvr_cli.contract.operations import Tracker
from rlvr_cli.files import atomic_write_json
from rlvr_cli.trackers.sink import Opening, Sink

BACKLOG = 10_000  # events a tracker may fall behind before it is dropped
NICE = 10  # a tracker's thread yields the cores to training (and to its sampling and data threads)
CLOSE_SECONDS = 30.0  # how long the end of a run waits for a tracker to finish writing
PRELOAD_SECONDS = 120.0  # how long a tracker waits for the packages loading ahead
EXTRA = {"tensorboard": "tensorboard", "mlflow": "mlflow", "wandb": "wandb", "trackio": "trackio"}
PACKAGE = {"tensorboard": "tensorboard", "mlflow": "mlflow", "wandb": "wandb", "trackio": "trackio"}  # imported as


#: what each tracker's opening imports: loaded ahead while the run sets up (`preload`)
MODULES = {
    "tensorboard": ("tensorboard.summary.writer.event_file_writer", "tensorboard.plugins.text.summary_v2"),
    "mlflow": ("mlflow.tracking", "mlflow.entities"),
    "wandb": ("wandb",),
    "trackio": (),  # trackio reads its folder when imported: it is imported where the folder is known
}


def preload(kinds: list[str]) -> None:
    """Import the trackers' packages on a background thread while the run loads its model and
    data, so their import does not contend with the first steps; a failure is left to `open`."""
    import importlib

    def load() -> None:
        with contextlib.suppress(OSError, AttributeError):
            os.setpriority(os.PRIO_PROCESS, threading.get_native_id(), NICE)
        for kind in kinds:
            for name in MODULES.get(kind, ()):
                with contextlib.suppress(Exception):
                    importlib.import_module(name)

    if kinds:
        thread = threading.Thread(target=load, name="tracker-preload", daemon=True)
        _PRELOADING.append(thread)
        thread.start()


_PRELOADING: list[threading.Thread] = []  # a tracker opens after these: one thread imports a package at a time


def make_sink(kind: str) -> Sink:
    """The tracker's adapter; importing its package happens in `open`, on the tracker's thread."""
    from rlvr_cli.trackers import mlflow_sink, tb_sink, trackio_sink, wandb_sink

    sinks = {
        "tensorboard": tb_sink.TensorBoardSink,
        "mlflow": mlflow_sink.MlflowSink,
        "wandb": wandb_sink.WandbSink,
        "trackio": trackio_sink.TrackioSink,
    }
    return sinks[kind]()  # type: ignore[no-any-return]


@dataclass
class Worker:
    spec: Tracker
    sink: Sink
    state_file: Path
    events: queue.Queue[tuple[str, Any] | None] = field(default_factory=lambda: queue.Queue(BACKLOG))
    failure: str | None = None
    told: bool = False
    logged_through: int = -1
    kept: dict[str, Any] = field(default_factory=dict)
    project: str = ""  # the tracker's project (MLflow: experiment), kept for later commands
    outcome: str = "finished"  # how the run ended: finished | paused | aborted | failed
    thread: threading.Thread | None = None

    def put(self, event: tuple[str, Any] | None) -> None:
        if self.failure is not None:
            return
        try:
            self.events.put_nowait(event)
        except queue.Full:
            self.failure = f"fell {BACKLOG} events behind the run; dropped"

    def describe(self) -> str:
        if self.failure is not None:
            return f"failed: {self.failure}"
        verb = "closed" if self.thread is not None and not self.thread.is_alive() else "writing"
        return f"{verb} (through step {self.logged_through})" if self.logged_through >= 0 else verb

    def run(self, opening: Opening) -> None:
        with contextlib.suppress(OSError, AttributeError):  # Linux: a thread's own niceness; training comes first
            os.setpriority(os.PRIO_PROCESS, threading.get_native_id(), NICE)
        for thread in list(_PRELOADING):  # two threads importing one package can see it half-initialised
            thread.join(PRELOAD_SECONDS)
        try:
            self.project = opening.project
            self.kept = self.sink.open(opening) or {}
            self._save(opening.run_id)
            while (event := self.events.get()) is not None:
                if self.failure is not None:
                    return
                self._handle(event, opening.run_id)
        except Exception as exc:  # a tracker's failure is reported, never raised into the run
            self.failure = self.failure or _reason(self.spec.kind, exc)  # the first reason stands
        finally:
            with contextlib.suppress(Exception):
                self.sink.close(self.outcome)

    def _handle(self, event: tuple[str, Any], run_id: str) -> None:
        kind, payload = event
        if kind == "log":
            step, values = payload
            if step <= self.logged_through and not self.sink.purges:
                return  # this tracker run has the step already (an exact resume redoes it)
            self.sink.log(step, values)
            self.logged_through = max(self.logged_through, step)
            self._save(run_id)
        elif kind == "file":
            self.sink.file(*payload)

    def _save(self, run_id: str) -> None:
        data = {
            "run_id": run_id,
            "project": self.project,
            "logged_through": self.logged_through,
            "spec": self.spec.model_dump(),
            **self.kept,
        }
        atomic_write_json(self.state_file, data, durable=False)


class Trackers:
    """The contract's trackers for one invocation of a command that writes to the run."""

    def __init__(self, workers: list[Worker]) -> None:
        self.workers = workers

    @classmethod
    def start(
        cls, specs: list[Tracker], run_dir: Path, name: str, config: dict[str, Any], first_step: int, resume: bool
    ) -> Trackers:
        """Open every tracker (on its thread); `resume` continues the run id the folder has."""
        root = run_dir / "trackers"
        root.mkdir(parents=True, exist_ok=True)
        previous = {s.kind: _read_state(root / f"{s.kind}.json") for s in specs} if resume else {}
        run_id = next((p["run_id"] for p in previous.values() if p.get("run_id")), None)
        run_id = run_id or f"{_slug(name)}-{uuid.uuid4().hex[:8]}"
        workers = []
        for spec in specs:
            kept = previous.get(spec.kind, {})
            worker = Worker(spec, make_sink(spec.kind), root / f"{spec.kind}.json")
            worker.logged_through = int(kept.get("logged_through", -1)) if resume else -1
            folder = (run_dir / spec.dir) if spec.dir else root / spec.kind
            project = spec.project or kept.get("project") or name  # a later command keeps training's project
            opening = Opening(run_id, name, project, folder, config, first_step, kept if resume else {}, spec)
            worker.thread = threading.Thread(
                target=worker.run, args=(opening,), name=f"tracker-{spec.kind}", daemon=True
            )
            worker.thread.start()
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
                specs.append(Tracker.model_validate(_read_state(path)["spec"]))
        if not specs:
            return None
        latest = max(int(_read_state(root / f"{s.kind}.json").get("logged_through", 0)) for s in specs)
        return cls.start(specs, run_dir, run_dir.name, {}, latest + 1, resume=True)

    def log(self, step: int, row: dict[str, Any]) -> None:
        """One row at the tracker step `step`: its finite numbers, under their metric names."""
        values = {k: float(v) for k, v in row.items() if k != "step" and _number(v)}
        if values:
            for worker in self.workers:
                worker.put(("log", (step, values)))

    def file(self, path: Path, text: str | None = None) -> None:
        """A file of the run (the contract, its lock, the plan, a report, a verdict)."""
        if text is None:
            try:
                text = path.read_text(encoding="utf-8", errors="replace")
            except OSError:
                return
        for worker in self.workers:
            worker.put(("file", (path, text)))

    def news(self) -> list[str]:
        """Trackers that failed since the last call, each said once."""
        out = []
        for worker in self.workers:
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
            worker.outcome = outcome
            with contextlib.suppress(queue.Full):
                worker.events.put(None, timeout=1.0)
        for worker in self.workers:
            if worker.thread is not None:
                worker.thread.join(max(0.0, deadline - time.monotonic()))
                if worker.thread.is_alive():
                    worker.failure = (
                        worker.failure or f"still writing after {timeout:.0f} s; its last rows may be missing"
                    )
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


def _reason(kind: str, exc: BaseException) -> str:
    missing = getattr(exc, "name", None) or ""
    if isinstance(exc, ModuleNotFoundError) and missing.split(".")[0] == PACKAGE[kind]:
        return f"{kind} is not installed (pip install 'rlvr-cli[{EXTRA[kind]}]')"
    text = str(exc).strip().splitlines()[0][:300] if str(exc).strip() else ""
    return f"{type(exc).__name__}: {text}" if text else type(exc).__name__


def _read_state(path: Path) -> dict[str, Any]:
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return {}
    return data if isinstance(data, dict) else {}


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
