"""MLflow: a run in the contract's experiment, in a file store under the tracker's folder unless
the contract gives a tracking `uri` (`mlflow ui --backend-store-uri <run>/trackers/mlflow`).

The contract is the run's params (dotted keys), its files are artifacts, every metric row is
logged at its step. MLflow's metric names allow no `=`: `accept_rate/difficulty=easy` is logged
as `accept_rate/difficulty:easy`. A resumed run logs into the same MLflow run.
"""

from __future__ import annotations

import os
import re
import tempfile
import time
from pathlib import Path
from typing import Any

from rlvr_cli.trackers.sink import Opening

END = {"finished": "FINISHED", "paused": "KILLED", "aborted": "FAILED", "failed": "FAILED"}
PARAM_CHARS = 6000  # MLflow's longest param value
_NOT_ALLOWED = re.compile(r"[^/\w.\- :]")


def metric_name(key: str) -> str:
    """A metric name as MLflow stores it."""
    return _NOT_ALLOWED.sub(":", key)


class MlflowSink:
    purges = False

    def __init__(self) -> None:
        self.client: Any = None
        self.run_id = ""

    def open(self, opening: Opening) -> dict[str, Any]:
        # a local file store is MLflow's own offline form; recent MLflow asks for this to allow it
        os.environ.setdefault("MLFLOW_ALLOW_FILE_STORE", "true")
        os.environ.setdefault("MLFLOW_HTTP_REQUEST_MAX_RETRIES", "2")  # a dead server fails fast
        from mlflow.entities import Param
        from mlflow.tracking import MlflowClient

        uri = opening.spec.uri or opening.folder.resolve().as_uri()
        self.client = MlflowClient(tracking_uri=uri)
        self.run_id = str(opening.kept.get("mlflow_run_id") or "")
        if not self.run_id:
            found = self.client.get_experiment_by_name(opening.project)
            experiment = found.experiment_id if found else self.client.create_experiment(opening.project)
            run = self.client.create_run(experiment, run_name=opening.run_id, tags={"rlvr.run_id": opening.run_id})
            self.run_id = run.info.run_id
            params = [Param(metric_name(k), str(v)[:PARAM_CHARS]) for k, v in sorted(opening.config.items())]
            for start in range(0, len(params), 100):  # MLflow takes 100 params a batch
                self.client.log_batch(self.run_id, params=params[start : start + 100])
        else:
            self.client.update_run(self.run_id, status="RUNNING")
        return {"mlflow_run_id": self.run_id, "tracking_uri": uri}

    def log(self, step: int, values: dict[str, float]) -> None:
        from mlflow.entities import Metric

        now = int(time.time() * 1000)
        metrics = [Metric(metric_name(k), v, now, step) for k, v in values.items()]
        for start in range(0, len(metrics), 1000):  # MLflow takes 1,000 metrics a batch
            self.client.log_batch(self.run_id, metrics=metrics[start : start + 1000])

    def file(self, path: Path, text: str) -> None:
        with tempfile.TemporaryDirectory() as tmp:
            copy = Path(tmp) / path.name
            copy.write_text(text, encoding="utf-8")
            self.client.log_artifact(self.run_id, str(copy))

    def close(self, outcome: str) -> None:
        if self.client is not None and self.run_id:
            self.client.set_terminated(self.run_id, END.get(outcome, "FINISHED"))
