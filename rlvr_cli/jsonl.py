"""Reading JSONL files (data splits, conversations): one JSON value per non-empty line."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from rlvr_cli.errors import RlvrError


def read_jsonl(path: Path, error: type[RlvrError] = RlvrError) -> Iterator[tuple[int, Any]]:
    """(line number, value) for every non-empty line; `error` names the file and line."""
    try:
        lines = path.read_text(encoding="utf-8").splitlines()
    except UnicodeDecodeError as exc:
        raise error(f"{path}: not UTF-8 text ({exc.reason})") from None
    for number, line in enumerate(lines, 1):
        if not line.strip():
            continue
        try:
            yield number, json.loads(line)
        except json.JSONDecodeError as exc:
            raise error(f"{path}:{number}: not JSON ({exc.msg} at column {exc.colno})") from None
