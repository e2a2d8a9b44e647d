"""The immutable rollout log: Parquet shards written aside and renamed, never rewritten,
and `manifest.json` holding each shard's row count and sha256.

A crash at any moment leaves either the old manifest or the new one (both replaced by
rename); a shard file that no manifest lists is an orphan from an interrupted write and is
ignored (and removed when the store is opened again).
"""

from __future__ import annotations

import contextlib
import json
import math
import time
from collections.abc import Callable
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass, field, fields
from pathlib import Path
from typing import Any

from rlvr_cli.errors import RlvrError
from rlvr_cli.files import atomic_write_bytes, sha256_bytes

MANIFEST = "manifest.json"
#: a shard is written at most this often (and at every flush, or when it holds `shard_rows` rows),
#: and the writer lists new shards in the manifest at most this often too. A step that takes longer
#: has its records written at once; the steps of a small model gather into one shard: a Parquet
#: file costs ~1.5 ms to encode whatever its rows, and a file a step (10,000 shards in a long run)
#: made the writer take CPU from the step on a small machine and the manifest a growing list
LIST_EVERY_S = 1.0


def _col(arrow: str) -> Any:
    return field(metadata={"arrow": arrow})


@dataclass(slots=True)  # not frozen: a frozen dataclass's __init__ costs 4x (13 µs a row, ~1 ms a toy step)
class RecordRow:
    """One rollout, as the Parquet shards store it (the schema is derived from these fields)."""

    run: str = _col("string")
    step: int = _col("int64")
    round: int = _col("int64")
    prompt_id: str = _col("string")
    group: int = _col("int64")
    sample: int = _col("int64")
    session_id: str = _col("string")
    parent_session_id: str | None = _col("string")
    policy_revision: int = _col("int64")
    policy_lag: int | None = _col("int64")
    prompt_ids: list[int] = _col("list<int32>")
    response_ids: list[int] = _col("list<int32>")
    loss_mask: list[int] = _col("list<int8>")
    old_logprobs: list[float] | None = _col("list<float32>")
    # the engine's log-probs of the sampled tokens as it drew them, by the weights of policy_revision
    sampling_logprobs: list[float] | None = _col("list<float32>")
    sampling: str = _col("string")
    seed: int = _col("int64")
    response_text: str = _col("string")
    finish_reason: str = _col("string")
    transcript: str | None = _col("string")
    status: str | None = _col("string")
    reward: float | None = _col("float64")
    verifier_reward: float | None = _col("float64")
    components: str | None = _col("string")
    advantage: float = _col("float64")
    kept: bool = _col("bool")
    discard_reason: str | None = _col("string")
    hint: str | None = _col("string")
    filters: str | None = _col("string")
    domain: str | None = _col("string")
    difficulty: str | None = _col("string")
    split: str = _col("string")
    verify_seconds: float = _col("float64")
    verifier: str | None = _col("string")
    data_check: str | None = _col("string")  # sha256 of the run's data-check.json
    verdict_detail: str | None = _col("string")  # the verifier's own words: which cases failed, why invalid


COLUMNS: tuple[tuple[str, str], ...] = tuple((f.name, f.metadata["arrow"]) for f in fields(RecordRow))


def arrow_schema() -> Any:
    """The Parquet schema of a shard (pyarrow is imported here, not by readers of this module)."""
    import pyarrow as pa

    scalar = {
        "string": pa.string(),
        "int64": pa.int64(),
        "int32": pa.int32(),
        "int8": pa.int8(),
        "float64": pa.float64(),
        "float32": pa.float32(),
        "bool": pa.bool_(),
    }

    def of(kind: str) -> Any:
        return pa.list_(scalar[kind[5:-1]]) if kind.startswith("list<") else scalar[kind]

    return pa.schema([(name, of(kind)) for name, kind in COLUMNS])


def json_schema() -> dict[str, Any]:
    """The record row as JSON Schema, derived from the same fields (one source of truth)."""

    def of(kind: str) -> dict[str, Any]:
        if kind.startswith("list<"):
            return {"type": ["array", "null"], "items": of(kind[5:-1])}
        if kind.startswith("int"):
            return {"type": ["integer", "null"]}
        if kind.startswith("float"):
            return {"type": ["number", "null"]}
        if kind == "bool":
            return {"type": ["boolean", "null"]}
        return {"type": ["string", "null"]}

    return {
        "$schema": "https://json-schema.org/draft/2020-12/schema",
        "title": "rlvr rollout record",
        "type": "object",
        "additionalProperties": False,
        "properties": {name: of(kind) for name, kind in COLUMNS},
        "required": [name for name, _ in COLUMNS],
    }


class RecordStore:
    """Append-only shards under `records/`; `cursor` is the number of shards listed.

    Opening the store removes shard files that no manifest lists (a write interrupted
    between the shard's rename and the manifest's), but only when a manifest exists: a
    folder with shards and no manifest is refused, never cleaned.

    `append` gathers a step's rows for the next shard, and hands the gathered steps to one writer
    thread once `LIST_EVERY_S` seconds have passed since the last shard began (or they fill
    `shard_rows`); it returns at once (the trainer does not wait on Parquet encoding and fsync).
    Each shard holds whole steps in order (`step` and `last_step` in the manifest; a step of more
    than `shard_rows` rows spans several shards); shards are written one at a time, in order, and
    after a failed write none is (the shards stay a prefix of the steps). The manifest lists them
    as they are written, rewritten at most every `LIST_EVERY_S` seconds. `flush()` waits for the
    writes, lists every shard written and raises what a write raised (a full disk, say); the
    next `append` raises it too. `cursor` flushes (a checkpoint pins what the manifest lists);
    `close()` (or leaving a `with`) flushes and ends the thread.
    """

    def __init__(self, folder: Path, shard_rows: int, before_write: Callable[[int], None] | None = None) -> None:
        self.folder = folder
        self.shard_rows = shard_rows
        folder.mkdir(parents=True, exist_ok=True)
        self.shards: list[dict[str, Any]] = self._read_manifest()
        self._drop_orphans()
        self._listed, self._listed_at = len(self.shards), -math.inf  # what the manifest on disk lists, and when
        self._writer: ThreadPoolExecutor | None = ThreadPoolExecutor(max_workers=1, thread_name_prefix="rlvr-records")
        self._pending: list[tuple[int, Future[None]]] = []
        self._gathered: list[tuple[int, list[RecordRow]]] = []  # steps for the next shard, not yet handed over
        self._handed_at = -math.inf  # when the writer last got a shard (monotonic): never yet
        self._broken: BaseException | None = None
        self._before_write = before_write  # called with the step before its shards are written (fault injection)

    def _read_manifest(self) -> list[dict[str, Any]]:
        path = self.folder / MANIFEST
        if not path.is_file():
            if any(self.folder.glob("*.parquet")):
                raise RlvrError(
                    f"{self.folder} holds record shards but no {MANIFEST}; refusing to touch them "
                    "(restore the manifest, or move the shards away and start a new run)"
                )
            return []
        return read_manifest(self.folder)

    def _drop_orphans(self) -> None:
        listed = {s["file"] for s in self.shards}
        for path in self.folder.glob("*.parquet*"):
            if path.name not in listed:
                path.unlink()

    def keep_before(self, step: int) -> None:
        """Unlist (then remove) the shards of steps at or after `step`: an earlier attempt that ran
        further than this run will leaves no records of steps this run never takes."""
        kept = [s for s in self.shards if s.get("step", -1) < step]
        cut = bool(kept) and last_step(kept[-1]) >= step  # a shard of steps on both sides
        if len(kept) == len(self.shards) and not cut:
            return
        dropped, self.shards = self.shards[len(kept) :], kept
        if cut:
            dropped.append(self.shards.pop())
            self.shards.append(self._cut(dropped[-1], step))
        self._list()
        for shard in dropped:
            (self.folder / shard["file"]).unlink(missing_ok=True)

    def _cut(self, shard: dict[str, Any], step: int) -> dict[str, Any]:
        """A new shard of `shard`'s rows of steps before `step` (written, not yet listed)."""
        import pyarrow.compute as pc
        import pyarrow.parquet as pq

        table = pq.read_table(self.folder / shard["file"])
        table = table.filter(pc.less(table["step"], step))
        name = f"{Path(shard['file']).stem}-before-{step}.parquet"
        data = _encoded(table)
        atomic_write_bytes(self.folder / name, data)
        last = max(table["step"].to_pylist(), default=shard["step"])
        return {
            "file": name,
            "rows": table.num_rows,
            "sha256": sha256_bytes(data),
            "step": shard["step"],
            "last_step": last,
        }

    @property
    def cursor(self) -> int:
        self.flush()
        return len(self.shards)

    @property
    def rows(self) -> int:
        self.flush()
        return sum(s["rows"] for s in self.shards)

    @property
    def last_step(self) -> int:
        """The last step whose records are listed, being written or gathered (-1: none)."""
        listed = max((last_step(s) for s in list(self.shards)), default=-1)
        return max([listed, *(step for step, _ in self._pending), *(step for step, _ in self._gathered)])

    def append(self, rows: list[RecordRow], step: int) -> None:
        """Add one step's rows to the next shard; hand it to the writer thread when it is due."""
        if self._writer is None:
            raise RlvrError("the record store is closed")
        self._collect(wait=False)
        self._gathered.append((step, rows))
        full = sum(len(r) for _, r in self._gathered) >= self.shard_rows
        if full or time.monotonic() - self._handed_at >= LIST_EVERY_S:
            self._hand_over()

    def _hand_over(self) -> None:
        if self._gathered and self._writer is not None:
            steps, self._gathered = self._gathered, []
            self._pending.append((steps[-1][0], self._writer.submit(self._write, steps)))
            self._handed_at = time.monotonic()

    def flush(self) -> None:
        """Wait for the pending writes and list every shard written; raise what the first failing
        write raised (the shards written before it are listed)."""
        try:
            self._hand_over()
            self._collect(wait=True)
        except BaseException:
            with contextlib.suppress(Exception):
                self._list_written()
            raise
        self._list_written()

    def _list_written(self) -> None:
        if self._listed != len(self.shards):
            self._list()

    def _list(self) -> None:
        listed = list(self.shards)
        atomic_write_bytes(self.folder / MANIFEST, (json.dumps({"shards": listed}, indent=1) + "\n").encode())
        self._listed, self._listed_at = len(listed), time.monotonic()

    def close(self) -> None:
        """Flush, then end the writer thread (it ends even when the flush raises)."""
        try:
            self.flush()
        finally:
            if self._writer is not None:
                self._writer.shutdown(wait=True, cancel_futures=True)
                self._writer = None

    def __enter__(self) -> RecordStore:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def _collect(self, wait: bool) -> None:
        while self._pending and (wait or self._pending[0][1].done()):
            _, future = self._pending[0]
            try:
                future.result()
            except BaseException:
                # a failed write: the later ones refuse to run (`_broken`). Interrupted while it is
                # still being written (a signal in this thread), it stays pending, so closing waits
                # for it instead of listing the shards while the writer thread lists them too
                if future.done():
                    self._pending.clear()
                raise
            self._pending.pop(0)

    def _write(self, steps: list[tuple[int, list[RecordRow]]]) -> None:
        if self._broken is not None:  # the shards stay a prefix of the steps: no gap after a failure
            first = steps[0][0]
            raise RlvrError(f"step {first}'s records were not written: an earlier write failed ({self._broken})")
        try:
            if self._before_write is not None:
                for step, _ in steps:
                    self._before_write(step)
            rows = [(step, row) for step, part in steps for row in part]
            for start in range(0, len(rows), self.shard_rows):
                chunk = rows[start : start + self.shard_rows]
                self._write_shard([row for _, row in chunk], chunk[0][0], chunk[-1][0])
        except BaseException as exc:
            self._broken = exc
            raise

    def _write_shard(self, rows: list[RecordRow], step: int, last: int) -> None:
        import pyarrow as pa

        name = f"shard-{len(self.shards):06d}.parquet"
        table = pa.Table.from_pydict({c: [getattr(r, c) for r in rows] for c, _ in COLUMNS}, schema=arrow_schema())
        data = _encoded(table)
        atomic_write_bytes(self.folder / name, data)
        entry = {"file": name, "rows": len(rows), "sha256": sha256_bytes(data), "step": step, "last_step": last}
        self.shards.append(entry)
        if self._listed == 0 or time.monotonic() - self._listed_at >= LIST_EVERY_S:  # the first: a manifest exists
            self._list()


def _encoded(table: Any) -> bytes:
    import pyarrow as pa
    import pyarrow.parquet as pq

    sink = pa.BufferOutputStream()
    # no dictionary pages: a shard repeats few values, and building them took a third of the
    # encoding's time (1.4 → 1.0 ms for 16 rows) for a file 10 % larger
    pq.write_table(table, sink, compression="zstd", use_dictionary=False)
    return sink.getvalue().to_pybytes()


def last_step(shard: dict[str, Any]) -> int:
    """The last step a manifest entry holds (an entry without `last_step` holds one step)."""
    return int(shard.get("last_step", shard.get("step", -1)))


def read_manifest(folder: Path) -> list[dict[str, Any]]:
    """The shards `manifest.json` lists; a manifest that cannot be read is an error saying so."""
    path = folder / MANIFEST
    try:
        shards = json.loads(path.read_text(encoding="utf-8"))["shards"]
        if not isinstance(shards, list) or not all(isinstance(x, dict) and "file" in x for x in shards):
            raise TypeError("'shards' is not a list of {file, rows, sha256}")
    except (OSError, ValueError, KeyError, TypeError) as exc:
        raise RlvrError(f"{path} cannot be read: {exc}") from None
    return shards


def shards_sha256(shards: list[dict[str, Any]]) -> str:
    """The sha256 of a list of manifest entries (file, rows, sha256, step, and last_step where an
    entry has it: shards of a single step written before shards held several have none): what a
    checkpoint pins, so a shard edited later together with its manifest entry is still caught."""
    keys = ("file", "rows", "sha256", "step")
    canonical = [
        {k: s.get(k) for k in keys} | ({"last_step": s["last_step"]} if "last_step" in s else {}) for s in shards
    ]
    return sha256_bytes(json.dumps(canonical, sort_keys=True).encode())


def read_records(folder: Path) -> Any:
    """Every listed shard as one pyarrow table (no verification; `rlvr audit rollouts` verifies)."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    tables = [pq.read_table(folder / s["file"]) for s in read_manifest(folder)]
    return pa.concat_tables(tables) if tables else arrow_schema().empty_table()
