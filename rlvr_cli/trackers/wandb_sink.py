"""Weights & Biases: offline by default (files under the tracker's folder, uploaded later with
`wandb sync <run>/trackers/wandb/wandb/offline-run-*`); `mode: online` needs the network and a login.

The contract is the run's config, its files are saved with the run, every metric row is logged at
its step. The W&B run id is the rlvr run id, the same across resumes.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

from rlvr_cli.trackers.sink import Opening

EXIT = {"finished": 0, "paused": 0, "aborted": 1, "failed": 1}


class WandbSink:
    purges = False

    def __init__(self) -> None:
        self.run: Any = None
        self.files: Path | None = None

    def open(self, opening: Opening) -> dict[str, Any]:
        os.environ.setdefault("WANDB_SILENT", "true")
        import wandb

        opening.folder.mkdir(parents=True, exist_ok=True)
        mode = opening.spec.mode or "offline"
        settings = wandb.Settings(console="off", x_disable_stats=True, silent=True)
        self.run = wandb.init(
            project=opening.project,
            id=opening.run_id,
            name=opening.run_id,
            dir=str(opening.folder),
            mode=mode,
            resume="allow",
            config=opening.config or None,
            settings=settings,
            reinit="create_new",
        )
        self.files = opening.folder / "files"
        return {"mode": mode}

    def log(self, step: int, values: dict[str, float]) -> None:
        self.run.log(values, step=step)

    def file(self, path: Path, text: str) -> None:
        assert self.files is not None
        self.files.mkdir(parents=True, exist_ok=True)
        copy = self.files / path.name
        copy.write_text(text, encoding="utf-8")
        self.run.save(str(copy), base_path=str(self.files), policy="now")

    def close(self, outcome: str) -> None:
        if self.run is not None:
            self.run.finish(exit_code=EXIT.get(outcome, 0))
