"""Session states compared as the isolation audit compares them: two snapshots differ at the
JSON paths whose values differ, once each session's own marker is read as one placeholder; what
differs between two sessions that did the same thing (a per-session folder, an id, a clock) is
noise, never a finding; the rest is evidence."""

from __future__ import annotations

import json
from typing import Any

MARKER = "<marker>"


def normalized(view: Any, marker: str) -> Any:
    """A snapshot with its session's marker replaced, wherever it appears."""
    return json.loads(json.dumps(view).replace(marker, MARKER))


def leaves(view: Any, path: str = "") -> dict[str, Any]:
    """Every scalar of a JSON value by its path (`accounts.alice`, `ledger[0][2]`)."""
    if isinstance(view, dict):
        out: dict[str, Any] = {}
        for key, value in view.items():
            out.update(leaves(value, f"{path}.{key}" if path else str(key)))
        return out or {path: {}}
    if isinstance(view, list):
        out = {}
        for i, value in enumerate(view):
            out.update(leaves(value, f"{path}[{i}]"))
        return out or {path: []}
    return {path: view}


def differing(a: Any, b: Any) -> set[str]:
    """The paths where two views differ (a path only one of them has included)."""
    left, right = leaves(a), leaves(b)
    return {p for p in left.keys() | right.keys() if left.get(p, ...) != right.get(p, ...)}


def evidence(a: Any, b: Any, paths: set[str]) -> str:
    """The first differing path, with both values."""
    first = sorted(paths)[0]
    left, right = leaves(a), leaves(b)
    show = lambda v: "absent" if v is ... else json.dumps(v)[:120]  # noqa: E731
    return f"{first!r} was {show(left.get(first, ...))}, now {show(right.get(first, ...))}"
