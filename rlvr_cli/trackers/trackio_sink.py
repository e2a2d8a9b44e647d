"""trackio: its local store under the tracker's folder (`TRACKIO_DIR=<run>/trackers/trackio
trackio show`). The contract is the run's config, its files are artifacts, every metric row is
logged at its step. A resumed run logs into the same trackio run.
"""

from __future__ import annotations

import os
import sys
import tempfile
from pathlib import Path
from typing import Any

from rlvr_cli.trackers.sink import Opening


class TrackioSink:
    purges = False

    def __init__(self) -> None:
        self.run: Any = None
        self.log_file: Path | None = None

    def open(self, opening: Opening) -> dict[str, Any]:
        opening.folder.mkdir(parents=True, exist_ok=True)
        os.environ["TRACKIO_DIR"] = str(opening.folder.resolve())  # read when trackio is imported
        import trackio
        import trackio.utils

        if Path(trackio.utils.TRACKIO_DIR).resolve() != opening.folder.resolve():  # read once, at its import
            raise RuntimeError(
                f"trackio was loaded in this process for {trackio.utils.TRACKIO_DIR}; one process writes one "
                "trackio folder"
            )

        self.log_file = opening.folder / "trackio.log"
        for name, module in list(sys.modules.items()):  # its notices go to its log file, not the terminal
            if name == "trackio" or name.startswith("trackio."):
                module.print = self._say  # type: ignore[attr-defined]
        self.run = trackio.init(
            project=opening.project,
            name=opening.run_id,
            config=opening.config or None,
            resume="allow",
            auto_log_gpu=False,
            auto_log_cpu=False,
        )
        return {"trackio_dir": str(opening.folder.resolve())}

    def _say(self, *parts: Any, **_: Any) -> None:
        if self.log_file is not None:
            with self.log_file.open("a", encoding="utf-8") as fh:
                fh.write(" ".join(str(p) for p in parts) + "\n")

    def log(self, step: int, values: dict[str, float]) -> None:
        self.run.log(values, step=step)

    def file(self, path: Path, text: str) -> None:
        with tempfile.TemporaryDirectory() as tmp:
            copy = Path(tmp) / path.name
            copy.write_text(text, encoding="utf-8")
            self.run.log_artifact(copy, name=path.name, type="rlvr-file")

    def close(self, outcome: str) -> None:
        if self.run is not None:
            self.run.finish()
