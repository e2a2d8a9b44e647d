"""What each tracker stored, read back with that tracker's own reader: {metric: {step: value}}."""

from __future__ import annotations

import json
import os
import struct
from pathlib import Path
from typing import Any

Series = dict[str, dict[int, float]]


def tensorboard(folder: Path) -> tuple[Series, dict[str, str]]:
    """TensorBoard's EventAccumulator (it applies purge markers as TensorBoard does)."""
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator
    from tensorboard.util import tensor_util

    acc = EventAccumulator(str(folder), size_guidance={"scalars": 0, "tensors": 0})
    acc.Reload()
    series = {tag: {e.step: e.value for e in acc.Scalars(tag)} for tag in acc.Tags()["scalars"]}
    texts = {
        tag: tensor_util.make_ndarray(acc.Tensors(tag)[-1].tensor_proto).item().decode()
        for tag in acc.Tags()["tensors"]
    }
    return series, texts


def mlflow(state: dict[str, Any]) -> tuple[Series, dict[str, str], Any]:
    """MLflow's client on the store the run wrote to: metric histories, params, artifact names."""
    os.environ.setdefault("MLFLOW_ALLOW_FILE_STORE", "true")  # the local store rlvr writes
    from mlflow.tracking import MlflowClient

    client = MlflowClient(tracking_uri=state["tracking_uri"])
    run = client.get_run(state["mlflow_run_id"])
    series: Series = {}
    for key in run.data.metrics:
        history = client.get_metric_history(run.info.run_id, key)
        steps = [m.step for m in history]
        assert len(steps) == len(set(steps)), f"{key}: a step logged twice: {sorted(steps)}"
        series[key] = {m.step: m.value for m in history}
    artifacts = {a.path for a in client.list_artifacts(run.info.run_id)}
    return series, dict(run.data.params), (run, artifacts)


def wandb(folder: Path) -> tuple[Series, list[dict[str, Any]]]:
    """W&B's offline transaction logs (`*.wandb`: LevelDB log framing of W&B's own protobuf
    records, the files `wandb sync` uploads), every offline folder of the run in order."""
    from wandb.proto import wandb_internal_pb2 as pb

    series: Series = {}
    configs = []
    for path in sorted(folder.glob("wandb/offline-run-*/run-*.wandb")):
        for data in _leveldb_records(path.read_bytes()):
            record = pb.Record()
            record.ParseFromString(data)
            kind = record.WhichOneof("record_type")
            if kind == "history":
                items = {i.key or "/".join(i.nested_key): json.loads(i.value_json) for i in record.history.item}
                step = int(items.pop("_step"))
                for key, value in items.items():
                    if not key.startswith("_"):
                        assert step not in series.get(key, {}), f"{key}: step {step} logged twice"
                        series.setdefault(key, {})[step] = value
            elif kind in ("config", "run"):
                update = record.config.update if kind == "config" else record.run.config.update
                configs.append({i.key: json.loads(i.value_json) for i in update})
            elif kind == "files":
                configs.append({"files": [f.path for f in record.files.files]})
    return series, configs


def _leveldb_records(blob: bytes) -> list[bytes]:
    """The records of a W&B transaction log: a 7-byte header (`:W&B`, magic, version), then
    32 KiB blocks of chunks (crc32 ⟨4⟩, length ⟨2⟩, type ⟨1⟩: full 1, first 2, middle 3, last 4)."""
    assert blob[:4] == b":W&B", "not a W&B transaction log"
    out, pending, pos, block = [], b"", 7, 32768
    while pos + 7 <= len(blob):
        left = block - pos % block
        if left < 7:  # the block's trailer
            pos += left
            continue
        _, length, kind = struct.unpack("<IHB", blob[pos : pos + 7])
        chunk = blob[pos + 7 : pos + 7 + length]
        pos += 7 + length
        if kind == 0 and length == 0:
            break
        pending = chunk if kind in (1, 2) else pending + chunk
        if kind in (1, 4):
            out.append(pending)
            pending = b""
    return out


def trackio(folder: Path, project: str, run: str) -> tuple[Series, dict[str, Any]]:
    """trackio's own SQLite storage, in the folder the run pointed TRACKIO_DIR at."""
    import os

    os.environ["TRACKIO_DIR"] = str(folder)
    import importlib

    import trackio.sqlite_storage as storage
    import trackio.utils as utils

    if Path(utils.TRACKIO_DIR) != folder:  # imported before, for another folder
        importlib.reload(utils)
        importlib.reload(storage)
    series: Series = {}
    for log in storage.SQLiteStorage.get_logs(project, run):
        step = int(log["step"])
        for key, value in log.items():
            if key not in ("step", "timestamp") and not key.startswith("_") and isinstance(value, int | float):
                assert step not in series.get(key, {}), f"{key}: step {step} logged twice"
                series.setdefault(key, {})[step] = float(value)
    return series, storage.SQLiteStorage.get_run_config(project, run) or {}


def expected(run_dir: Path, float32: bool = False) -> Series:
    """metrics.jsonl (and holdout-start.json at step 0) as {metric: {tracker step: value}}."""
    rows = [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines()]
    start = run_dir / "holdout-start.json"
    points = [(0, json.loads(start.read_text()))] if start.is_file() else []
    points += [(row["step"] + 1, row) for row in rows]
    out: Series = {}
    for step, row in points:
        for key, value in row.items():
            if key != "step" and isinstance(value, int | float) and not isinstance(value, bool):
                value = float(value)
                out.setdefault(key, {})[step] = struct.unpack("f", struct.pack("f", value))[0] if float32 else value
    return out
