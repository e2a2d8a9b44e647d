"""Diagnostics are data: a code, a severity, a dotted path, a position and a message."""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Any, Literal

from rlvr_cli.errors import RlvrError

Severity = Literal["error", "warning", "waived"]

# Structural problems: the contract cannot be read as a contract, so nothing waives them.
UNWAIVABLE = frozenset({"RLV001", "RLV002", "RLV003"})


@dataclass
class Diagnostic:
    code: str
    severity: Severity
    path: str
    line: int
    column: int
    message: str
    suggestion: str | None = None
    waiver: dict[str, Any] | None = field(default=None)
    tasks: tuple[str, ...] = ()  # the task ids a data finding is about (a waiver's `tasks` scope)

    def as_json(self) -> dict[str, Any]:
        data = asdict(self)
        if data["waiver"] is None:
            del data["waiver"]
        if not data["tasks"]:
            del data["tasks"]
        else:
            data["tasks"] = list(data["tasks"])
        return data


@dataclass
class Finding:
    """What a rule reports before positions are attached: code, severity, path, message."""

    code: str
    severity: Literal["error", "warning"]
    path: tuple[str | int, ...]
    message: str
    suggestion: str | None = None
    tasks: tuple[str, ...] = ()


def error(code: str, path: tuple, message: str, **kw: object) -> Finding:
    return Finding(code, "error", path, message, **kw)  # type: ignore[arg-type]


def warning(code: str, path: tuple, message: str, **kw: object) -> Finding:
    return Finding(code, "warning", path, message, **kw)  # type: ignore[arg-type]


def dotted(path: tuple[str | int, ...]) -> str:
    """('data', 'sources', 0, 'license') -> 'data.sources[0].license'."""
    out = ""
    for part in path:
        out += f"[{part}]" if isinstance(part, int) else (f".{part}" if out else str(part))
    return out


class ContractError(RlvrError):
    """The contract is not valid; `diagnostics` says where and why."""

    def __init__(self, path: str, diagnostics: list[Diagnostic]) -> None:
        errors = [d for d in diagnostics if d.severity == "error"]
        first = errors[0] if errors else None
        summary = f"{first.line}:{first.column}: [{first.code}] {first.message}" if first else ""
        super().__init__(f"{path}: {len(errors)} error(s); first at {summary}")
        self.path = path
        self.diagnostics = diagnostics
