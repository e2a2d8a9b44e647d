"""What the sessions of an isolation audit leave on disk: a temporary root of the audit's own
for an in-process server, and the folders that still hold a session's marker."""

from __future__ import annotations

import contextlib
import shutil
import tempfile
from pathlib import Path
from typing import Any


@contextlib.contextmanager
def private_temp() -> Any:
    """A temporary folder of the audit's own as the process's temp root while an in-process
    server runs: whatever its sessions create there (whatever it holds) must be gone once they
    are closed, and nothing another process writes to /tmp can be mistaken for it."""
    scratch = Path(tempfile.mkdtemp(prefix="rlvr-isolation-"))
    saved = tempfile.tempdir
    tempfile.tempdir = str(scratch)
    try:
        yield scratch
    finally:
        tempfile.tempdir = saved
        shutil.rmtree(scratch, ignore_errors=True)


def entries(root: Path) -> set[str]:
    with contextlib.suppress(OSError):
        return {str(p.relative_to(root)) for p in root.rglob("*")}
    return set()


def temp_entries(root: Path) -> set[str]:
    with contextlib.suppress(OSError):
        return {str(p) for p in root.iterdir()}
    return set()


def holds_marker(path: Path, markers: list[str], budget: int = 200) -> bool:
    """A folder created during the audit that still holds a session's marker (bounded scan). The
    system's temp root is shared: another process's folder may vanish while it is listed, and
    then holds nothing of the audit's."""
    try:
        files = [path] if path.is_file() else list(path.rglob("*"))[:budget] if path.is_dir() else []
    except OSError:
        return False
    for file in files:
        with contextlib.suppress(OSError):
            if file.is_file() and file.stat().st_size < 1 << 20:
                text = file.read_text(encoding="utf-8", errors="replace")
                if any(m in text for m in markers):
                    return True
    return False
