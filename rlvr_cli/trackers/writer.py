"""One tracker in a process of its own: `python -m rlvr_cli.trackers.writer`.

The run writes JSON lines to its stdin (`open`, then `log`/`file` events, then `close` with the
run's outcome); it answers on its stdout, one JSON line per event handled (`{"done": n,
"through": step}`), or `{"failed": why}` once. Everything the tracker's package prints goes to
its log file, never to the run's terminal. A process of its own shares no interpreter lock with
training and runs only on cores training leaves idle; it reads its package's process-wide settings (trackio's
folder) for itself. If the run dies without `close`, its stdin ends and the tracker run is closed
as failed.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import sys
from pathlib import Path
from typing import IO, Any

NICE = 19  # where the idle class is not available: the lowest priority there is


def main() -> None:
    reply = os.fdopen(os.dup(1), "w", encoding="utf-8", buffering=1)  # the answers keep the real stdout
    os.dup2(2, 1)  # the package's prints join its log file (stderr)
    sys.stdout = sys.stderr
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # the run decides when its trackers end
    background()
    serve(sys.stdin, reply)


def background() -> None:
    """Run only on cores training leaves idle (Linux's idle class; its threads inherit it):
    a tracker waits for a gap, it never takes a core from a step. The end of the run, with the
    cores free, lets it catch up."""
    try:
        os.sched_setscheduler(0, os.SCHED_IDLE, os.sched_param(0))  # type: ignore[attr-defined]
    except (AttributeError, OSError):
        with contextlib.suppress(OSError):
            os.nice(NICE)


def serve(events: IO[str], reply: IO[str]) -> None:
    from rlvr_cli.trackers.sink import Opening

    sink: Any = None
    outcome = "failed"  # the run's stdin ended without a word: it died
    handled, through = 0, -1
    state: dict[str, Any] = {}
    state_file = Path(os.devnull)
    try:
        for line in events:
            message = json.loads(line)
            if "close" in message:
                outcome = message["close"]
                break
            if "open" in message:
                opened = message["open"]
                state = {"spec": opened["spec"]}
                opening = Opening.from_json(opened)
                state = {"run_id": opening.run_id, "project": opening.project, "spec": opened["spec"]}
                state_file, through = Path(opened["state_file"]), int(opened["logged_through"])
                sink = make_sink(opening.spec.kind)
                state.update(sink.open(opening) or {})
                save(state_file, state, through)
            elif "log" in message:
                step, values = message["log"]
                if step > through or sink.purges:  # else the tracker run has it (an exact resume redoes it)
                    sink.log(step, values)
                    through = max(through, step)
                    save(state_file, state, through)
            elif "file" in message:
                path, text = message["file"]
                sink.file(Path(path), text)
            handled += 1
            reply.write(json.dumps({"done": handled, "through": through}) + "\n")
    except Exception as exc:  # the tracker's failure is reported to the run, never raised into it
        with contextlib.suppress(OSError, ValueError):
            reply.write(json.dumps({"failed": reason(state.get("spec", {}).get("kind", ""), exc)}) + "\n")
    finally:
        if sink is not None:
            with contextlib.suppress(Exception):
                sink.close(outcome)
        with contextlib.suppress(OSError, ValueError):
            reply.write(json.dumps({"closed": outcome}) + "\n")


def make_sink(kind: str) -> Any:
    """The tracker's adapter; importing its package happens in `open`, in the tracker's process."""
    from rlvr_cli.trackers import mlflow_sink, tb_sink, trackio_sink, wandb_sink

    sinks = {
        "tensorboard": tb_sink.TensorBoardSink,
        "mlflow": mlflow_sink.MlflowSink,
        "wandb": wandb_sink.WandbSink,
        "trackio": trackio_sink.TrackioSink,
    }
    return sinks[kind]()


def save(path: Path, state: dict[str, Any], through: int) -> None:
    from rlvr_cli.files import atomic_write_json

    atomic_write_json(path, {**state, "logged_through": through}, durable=False)


EXTRA = {"tensorboard": "tensorboard", "mlflow": "mlflow", "wandb": "wandb", "trackio": "trackio"}


def reason(kind: str, exc: BaseException) -> str:
    missing = getattr(exc, "name", None) or ""
    if isinstance(exc, ModuleNotFoundError) and kind in EXTRA and missing.split(".")[0] == kind:
        return f"{kind} is not installed (pip install 'rlvr-cli[{EXTRA[kind]}]')"
    text = str(exc).strip().splitlines()[0][:300] if str(exc).strip() else ""
    return f"{type(exc).__name__}: {text}" if text else type(exc).__name__


if __name__ == "__main__":
    main()
