"""Files of the run folder and the contract's folder: one atomic writer, one sha256, one
JSONL reader. Every file rlvr writes goes aside, is fsynced, and is renamed into place, so
a crash leaves the old version or the new one, never half of either."""

from __future__ import annotations

import contextlib
import errno
import hashlib
import json
import os
from collections.abc import Callable, Iterator
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
    """Write `data` to `path.tmp`, fsync it, rename it over `path` (and fsync the folder). A
    write that fails (a full disk) leaves `path` as it was and no `.tmp` behind."""
    tmp = path.with_name(path.name + ".tmp")
    try:
        with tmp.open("wb") as fh:
            fh.write(data)
            fh.flush()
            if durable:
                os.fsync(fh.fileno())
    except BaseException:
        with contextlib.suppress(OSError):
            tmp.unlink()
        raise
    os.replace(tmp, path)
    if durable:
        fsync_dir(path.parent)


def atomic_write_text(path: Path, text: str, *, durable: bool = True) -> None:
    atomic_write_bytes(path, text.encode("utf-8"), durable=durable)


def atomic_write_json(path: Path, data: Any, *, durable: bool = True) -> None:
    atomic_write_text(path, json.dumps(data, indent=2, default=str) + "\n", durable=durable)


def read_json_object(path: Path) -> dict[str, Any]:
    """A JSON object kept between runs (a tracker's state, the cached peak), or {} where the file
    is missing, unreadable, not JSON or not an object: state that can be rebuilt, never an error."""
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return {}
    return data if isinstance(data, dict) else {}


FULL_BELOW_BYTES = 1 << 20  # a file system with less free space than this is full for a writer that failed


@contextlib.contextmanager
def disk_errors(where: Path) -> Iterator[None]:
    """Library writers that hide the operating system's error report a full disk as ENOSPC
    (an OSError the run reports as a full disk, exit 1), not as their own exception: torch's
    zip writer says `unexpected pos`, safetensors `I/O error: ... (os error 28)`."""
    try:
        yield
    except OSError:
        raise
    except Exception as exc:
        if "os error 28" in str(exc) or "No space left" in str(exc) or _nearly_full(where):
            raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC), str(where)) from exc
        raise


def _nearly_full(where: Path) -> bool:
    try:
        stats = os.statvfs(where if where.exists() else where.parent)
    except OSError:
        return False
    return stats.f_bavail * stats.f_frsize < FULL_BELOW_BYTES


class _Sink:
    """The file `torch.save` writes through: it keeps what a write raised, which torch's zip
    writer turns into a RuntimeError ("enforce fail ... unexpected pos"), so the caller sees what
    it was: the OSError of a full disk, or the `Interrupted` of a SIGTERM or SIGINT whose handler
    ran inside this callback (the run then pauses as at any other moment, not as a bug)."""

    def __init__(self, fh: Any, before_write: Callable[[], None] | None) -> None:
        self.fh, self.before_write, self.error = fh, before_write, None

    def write(self, data: Any) -> int:
        try:
            if self.before_write is not None:
                self.before_write()
            return self.fh.write(data)
        except BaseException as exc:
            self.error = exc
            raise

    def flush(self) -> None:
        self.fh.flush()


def save_torch(obj: Any, path: Path, before_write: Callable[[], None] | None = None) -> None:
    """`torch.save(obj, path)`, with a failed write reported as the OSError it was.
    `before_write` runs before every write (fault injection)."""
    import torch

    with path.open("wb") as fh:
        sink = _Sink(fh, before_write)
        try:
            torch.save(obj, sink)
        except BaseException as exc:
            if sink.error is not None and sink.error is not exc:
                raise sink.error from exc
            raise


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
