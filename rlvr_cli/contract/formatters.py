"""How `rlvr validate` writes diagnostics: text, json and github formatters (registered as the
`validate` reporters of the one `--format` registry, `commands/formats.py`), colour and summary."""

from __future__ import annotations

import json
import os
import sys
from collections.abc import Sequence
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from rlvr_cli.contract.diagnostics import Diagnostic
    from rlvr_cli.contract.load import CheckResult

_COLORS = {"error": "\033[31m", "warning": "\033[33m", "waived": "\033[36m"}


def use_color(stream: object = sys.stdout) -> bool:
    if os.environ.get("NO_COLOR") or os.environ.get("TERM") == "dumb":
        return False
    return bool(os.environ.get("FORCE_COLOR")) or bool(getattr(stream, "isatty", lambda: False)())


def describe(d: Diagnostic) -> str:
    """`dotted.path: message (did you mean 'x'?) (waived: reason)`."""
    line = f"{d.path}: {d.message}" if d.path else d.message
    if d.suggestion:
        line += f" (did you mean '{d.suggestion}'?)"
    if d.waiver:
        until = f", until {d.waiver['expires']}" if d.waiver.get("expires") else ""
        line += f" (waived{until}: {d.waiver['reason']})"
    return line


def text_line(path: str, d: Diagnostic, color: bool = False) -> str:
    """`file:line:col: severity[CODE] dotted.path: message (did you mean 'x'?)`."""
    severity = f"{_COLORS[d.severity]}{d.severity}\033[0m" if color else d.severity
    return f"{path}:{d.line}:{d.column}: {severity}[{d.code}] {describe(d)}"


def report_text(results: Sequence[CheckResult], color: bool) -> str:
    lines = [text_line(r.path, d, color) for r in results for d in sorted_diagnostics(r)]
    return "\n".join(lines)


def report_json(results: Sequence[CheckResult], color: bool) -> str:
    files = [
        {
            "path": r.path,
            "valid": r.valid,
            "diagnostics": [d.as_json() for d in sorted_diagnostics(r)],
        }
        for r in results
    ]
    return json.dumps({"files": files}, indent=2, ensure_ascii=False)


def gh_escape(value: str, prop: bool = False) -> str:
    value = value.replace("%", "%25").replace("\r", "%0D").replace("\n", "%0A")
    return value.replace(":", "%3A").replace(",", "%2C") if prop else value


def report_github(results: Sequence[CheckResult], color: bool) -> str:
    kinds = {"error": "error", "warning": "warning", "waived": "notice"}
    lines = []
    for r in results:
        for d in sorted_diagnostics(r):
            props = f"file={gh_escape(r.path, True)},line={d.line},col={d.column}"
            title = gh_escape(f"{d.code} {d.path}".strip(), True)
            lines.append(f"::{kinds[d.severity]} {props},title={title}::{gh_escape(describe(d))}")
    return "\n".join(lines)


def sorted_diagnostics(result: CheckResult) -> list[Diagnostic]:
    return sorted(result.diagnostics, key=lambda d: (d.line, d.column, d.code))


def summary(results: Sequence[CheckResult]) -> str:
    """One human line for stderr."""
    counts = {"error": 0, "warning": 0, "waived": 0}
    for r in results:
        for d in r.diagnostics:
            counts[d.severity] += 1
    invalid = sum(not r.valid for r in results)
    files = f"{len(results)} file{'s' if len(results) != 1 else ''}"
    tail = ", ".join(f"{n} {k}{'s' if n != 1 and k != 'waived' else ''}" for k, n in counts.items() if n)
    state = "all valid" if not invalid else f"{invalid} invalid"
    return f"{files} checked: {state}" + (f" ({tail})" if tail else "")
