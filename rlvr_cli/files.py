"""Files of the run folder and the contract's folder: one atomic writer, one sha256, one
JSONL reader. Every file rlvr writes goes aside, is fsynced, and is renamed into place, so
a crash leaves the old version or the new one, never half of either."""

from __future__ import annotations

import hashlib
import json
import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from rlvr_cli.errors import RlvrError


def sha256_file(path: Path) -> str:
    digest = hashlib.sha256()
    with path.open("rb") as fh:
        while chunk := fh.read(1 << 20):
            digest.update(chunk)
    return digest.hexdigest()


def sha256_bytes(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def fsync_dir(path: Path) -> None:
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def atomic_write_bytes(path: Path, data: bytes, *, durable: bool = True) -> None:
    """Write `data` to `path.tmp`, fsync it, rename it over `path` (and fsync the folder)."""
    tmp = path.with_name(path.name + ".tmp")
    with tmp.open("wb") as fh:
        fh.write(data)
        fh.flush()
        if durable:
            os.fsync(fh.fileno())
    os.replace(tmp, path)
    if durable:
        fsync_dir(path.parent)


def atomic_write_text(path: Path, text: str, *, durable: bool = True) -> None:
    atomic_write_bytes(path, text.encode("utf-8"), durable=durable)


def atomic_write_json(path: Path, data: Any, *, durable: bool = True) -> None:
    atomic_write_text(path, json.dumps(data, indent=2, default=str) + "\n", durable=durable)


def read_jsonl(
    path: Path, error: type[RlvrError] = RlvrError, max_line: int | None = None
) -> Iterator[tuple[int, Any]]:
    """(line number, value) for every non-empty line; `error` names the file and line. A line
    longer than `max_line` characters is refused before it is parsed."""
    try:
        lines = path.read_text(encoding="utf-8").splitlines()
    except UnicodeDecodeError as exc:
        raise error(f"{path}: not UTF-8 text ({exc.reason} at byte {exc.start})") from None
    for number, line in enumerate(lines, 1):
        if not line.strip():
            continue
        if max_line is not None and len(line) > max_line:
            raise error(f"{path}:{number}: a line of {len(line):,} characters (at most {max_line:,})")
        try:
            yield number, json.loads(line)
        except json.JSONDecodeError as exc:
            raise error(f"{path}:{number}: not JSON ({exc.msg} at column {exc.colno})") from None
