"""TensorBoard: event files under the tracker's folder (`tensorboard --logdir <run>/trackers`).

Scalars are TensorBoard's own float32 `simple_value`s; files are text summaries (TensorBoard's
Text tab), shown as code. A resumed run writes a purge marker at its first step, so TensorBoard
drops the events of steps the interrupted invocation wrote past its checkpoint.
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

from rlvr_cli.trackers.sink import Opening


class TensorBoardSink:
    purges = True

    def __init__(self) -> None:
        self.writer: Any = None

    def open(self, opening: Opening) -> dict[str, Any]:
        from tensorboard.compat.proto import event_pb2
        from tensorboard.summary.writer.event_file_writer import EventFileWriter

        self.event_pb2 = event_pb2
        opening.folder.mkdir(parents=True, exist_ok=True)
        self.writer = EventFileWriter(str(opening.folder))
        if opening.kept:  # a resumed run: what the last invocation wrote from here on is void
            log = event_pb2.SessionLog(status=event_pb2.SessionLog.START)
            self.writer.add_event(event_pb2.Event(wall_time=time.time(), step=opening.first_step, session_log=log))
        else:
            self.file(Path("config"), "\n".join(f"{k}: {v}" for k, v in sorted(opening.config.items())))
        return {"logdir": str(opening.folder)}

    def log(self, step: int, values: dict[str, float]) -> None:
        from tensorboard.compat.proto import summary_pb2

        summary = summary_pb2.Summary(
            value=[summary_pb2.Summary.Value(tag=k, simple_value=v) for k, v in values.items()]
        )
        self.writer.add_event(self.event_pb2.Event(wall_time=time.time(), step=step, summary=summary))
        self.writer.flush()  # a killed run loses no step it logged

    def file(self, path: Path, text: str) -> None:
        from tensorboard.plugins.text.summary_v2 import text_pb

        shown = "\n".join("    " + line for line in text.splitlines())  # markdown: a code block
        summary = text_pb(f"files/{path.name}", shown)
        self.writer.add_event(self.event_pb2.Event(wall_time=time.time(), step=0, summary=summary))
        self.writer.flush()

    def close(self, outcome: str) -> None:
        if self.writer is not None:
            self.writer.close()
