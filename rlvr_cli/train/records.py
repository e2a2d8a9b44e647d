"""The immutable rollout log: Parquet shards written aside and renamed, never rewritten,
and `manifest.json` holding each shard's row count and sha256.

A crash at any moment leaves either the old manifest or the new one (both replaced by
rename); a shard file that no manifest lists is an orphan from an interrupted write and is
ignored (and removed when the store is opened again).
"""

from __future__ import annotations

import hashlib
import json
import os
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq

MANIFEST = "manifest.json"

SCHEMA = pa.schema(
    [
        ("run", pa.string()),
        ("step", pa.int64()),
        ("round", pa.int64()),
        ("prompt_id", pa.string()),
        ("group", pa.int64()),
        ("sample", pa.int64()),
        ("session_id", pa.string()),
        ("parent_session_id", pa.string()),
        ("policy_revision", pa.int64()),
        ("prompt_ids", pa.list_(pa.int32())),
        ("response_ids", pa.list_(pa.int32())),
        ("loss_mask", pa.list_(pa.int8())),
        ("old_logprobs", pa.list_(pa.float32())),
        ("sampling", pa.string()),
        ("seed", pa.int64()),
        ("response_text", pa.string()),
        ("finish_reason", pa.string()),
        ("transcript", pa.string()),
        ("status", pa.string()),
        ("reward", pa.float64()),
        ("verifier_reward", pa.float64()),
        ("components", pa.string()),
        ("advantage", pa.float64()),
        ("kept", pa.bool_()),
        ("discard_reason", pa.string()),
        ("hint", pa.string()),
        ("filters", pa.string()),
        ("domain", pa.string()),
        ("difficulty", pa.string()),
        ("split", pa.string()),
        ("verify_seconds", pa.float64()),
    ]
)


def json_schema() -> dict[str, Any]:
    """The record row as JSON Schema, derived from the Parquet schema (one source of truth)."""
    import pyarrow.types as t

    def of(dtype: pa.DataType) -> dict[str, Any]:
        if t.is_list(dtype):
            return {"type": ["array", "null"], "items": of(dtype.value_type)}
        if t.is_integer(dtype):
            return {"type": ["integer", "null"]}
        if t.is_floating(dtype):
            return {"type": ["number", "null"]}
        if t.is_boolean(dtype):
            return {"type": ["boolean", "null"]}
        return {"type": ["string", "null"]}

    return {
        "$schema": "https://json-schema.org/draft/2020-12/schema",
        "title": "rlvr rollout record",
        "type": "object",
        "additionalProperties": False,
        "properties": {f.name: of(f.type) for f in SCHEMA},
        "required": [f.name for f in SCHEMA],
    }


def _fsync_write(path: Path, data: bytes) -> None:
    with path.open("wb") as fh:
        fh.write(data)
        fh.flush()
        os.fsync(fh.fileno())


def _fsync_dir(path: Path) -> None:
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


class RecordStore:
    """Append-only shards under `records/`; `cursor` is the number of shards listed."""

    def __init__(self, folder: Path, shard_rows: int) -> None:
        self.folder = folder
        self.shard_rows = shard_rows
        folder.mkdir(parents=True, exist_ok=True)
        self.shards: list[dict[str, Any]] = self._read_manifest()
        self._drop_orphans()

    def _read_manifest(self) -> list[dict[str, Any]]:
        path = self.folder / MANIFEST
        if not path.is_file():
            return []
        return list(json.loads(path.read_text(encoding="utf-8"))["shards"])

    def _drop_orphans(self) -> None:
        listed = {s["file"] for s in self.shards}
        for path in self.folder.glob("*.parquet*"):
            if path.name not in listed:
                path.unlink()

    @property
    def cursor(self) -> int:
        return len(self.shards)

    @property
    def rows(self) -> int:
        return sum(s["rows"] for s in self.shards)

    @property
    def last_step(self) -> int:
        """The last step whose records are listed (-1: none)."""
        return max((s.get("step", -1) for s in self.shards), default=-1)

    def append(self, rows: list[dict[str, Any]], step: int) -> None:
        """Write one step's rows as new shards (at most `shard_rows` rows each)."""
        for start in range(0, len(rows), self.shard_rows):
            self._write_shard(rows[start : start + self.shard_rows], step)

    def _write_shard(self, rows: list[dict[str, Any]], step: int) -> None:
        name = f"shard-{len(self.shards):06d}.parquet"
        table = pa.Table.from_pylist(rows, schema=SCHEMA)
        sink = pa.BufferOutputStream()
        pq.write_table(table, sink, compression="zstd")
        data = sink.getvalue().to_pybytes()
        tmp = self.folder / (name + ".tmp")
        _fsync_write(tmp, data)
        os.replace(tmp, self.folder / name)
        self.shards.append({"file": name, "rows": len(rows), "sha256": hashlib.sha256(data).hexdigest(), "step": step})
        self._write_manifest()

    def _write_manifest(self) -> None:
        tmp = self.folder / (MANIFEST + ".tmp")
        _fsync_write(tmp, (json.dumps({"shards": self.shards}, indent=1) + "\n").encode())
        os.replace(tmp, self.folder / MANIFEST)
        _fsync_dir(self.folder)


def read_records(folder: Path) -> pa.Table:
    """Every listed shard as one table (no verification; `rlvr audit rollouts` verifies)."""
    shards = json.loads((folder / MANIFEST).read_text(encoding="utf-8"))["shards"]
    tables = [pq.read_table(folder / s["file"]) for s in shards]
    return pa.concat_tables(tables) if tables else SCHEMA.empty_table()
