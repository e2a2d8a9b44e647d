"""Read a contract file into a typed `Contract`, collecting positioned diagnostics.

parse (YAML 1.2 with positions) → structure (pydantic) → rules (RLVxxx) → waivers.
Nothing here prints; the CLI chooses a reporter.
"""

from __future__ import annotations

import typing
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ValidationError

from rlvr_cli.contract import deep as deep_checks
from rlvr_cli.contract import (  # noqa: F401 - they register rules
    rules,
    rules_adapter,
    rules_data,
    rules_monitoring,
    rules_release,
    rules_reward,
    rules_scale,
    waivers,
    yaml12,
)
from rlvr_cli.contract.diagnostics import ContractError, Diagnostic, Finding, dotted
from rlvr_cli.contract.models import Contract
from rlvr_cli.contract.scale import FORMS

MAX_BYTES = 1 << 20  # a contract is a few KiB; a megabyte is a mistake or an attack

_YAML_TYPES = {
    str: "string",
    int: "integer",
    float: "number",
    bool: "boolean",
    type(None): "null",
    dict: "mapping",
    list: "list",
}
_EXPECTED = {
    "float_type": "expected a number",
    "float_parsing": "expected a number",
    "int_type": "expected an integer",
    "int_from_float": "expected an integer",
    "bool_type": "expected true or false",
    "string_type": "expected a string",
    "dict_type": "expected a mapping",
    "model_type": "expected a mapping",
    "model_attributes_type": "expected a mapping",
    "list_type": "expected a list",
    "literal_error": "expected {expected}",
    "finite_number": "expected a finite number",
}


@dataclass
class CheckResult:
    """Everything `check_file` learned about one contract file."""

    path: str
    contract: Contract | None = None
    document: yaml12.Document | None = None
    diagnostics: list[Diagnostic] = field(default_factory=list)

    @property
    def valid(self) -> bool:
        return not any(d.severity == "error" for d in self.diagnostics)

    @property
    def folder(self) -> Path:
        return Path(self.path).resolve().parent

    def add(self, finding: Finding) -> None:
        """Attach a position to a rule's finding and keep it."""
        doc = self.document
        pos = doc.anchor_pos(finding.path) if doc is not None else yaml12.Pos(1, 1)
        self.diagnostics.append(
            Diagnostic(
                code=finding.code,
                severity=finding.severity,
                path=dotted(finding.path),
                line=pos.line,
                column=pos.column,
                message=finding.message,
                suggestion=finding.suggestion,
                tasks=finding.tasks,
            )
        )


def read_text(path: Path) -> str:
    """The file as text; raises YamlError for oversized, binary or non-UTF-8 content."""
    with path.open("rb") as fh:
        raw = fh.read(MAX_BYTES + 1)
    if len(raw) > MAX_BYTES:
        raise yaml12.YamlError(
            f"file is larger than {MAX_BYTES // 1024} KiB; a contract is a small YAML file",
            yaml12.Pos(1, 1),
        )
    try:
        text = raw.decode("utf-8-sig")
    except UnicodeDecodeError as exc:
        raise yaml12.YamlError(
            f"not UTF-8 text: byte 0x{raw[exc.start]:02x} cannot be decoded",
            _offset_pos(raw, exc.start),
        ) from None
    nul = text.find("\x00")
    if nul >= 0:
        raise yaml12.YamlError("binary content (NUL byte) in a YAML file", _offset_pos(text, nul))
    return text


def _offset_pos(data: bytes | str, offset: int) -> yaml12.Pos:
    head = data[:offset]
    newline = b"\n" if isinstance(data, bytes) else "\n"
    line = head.count(newline)  # type: ignore[arg-type]
    return yaml12.Pos(line + 1, offset - (head.rfind(newline) + 1) + 1)  # type: ignore[arg-type]


DeepCheck = Callable[[Contract, Path, Path], Iterable[Finding]]


def check_file(
    path: str | Path, *, deep: bool = False, today: str | None = None, more: Sequence[DeepCheck] = ()
) -> CheckResult:
    """Parse, type-check and rule-check one contract file; never raises on bad content. With
    `deep`, the files the contract names are read too. Each of `more` (checks of a later stage,
    such as the data check, or the artifact check `train` runs) runs before waivers are applied."""
    result = CheckResult(path=str(path))
    try:
        document = yaml12.parse(read_text(Path(path)))
    except yaml12.YamlError as exc:
        _structural(result, "RLV001", exc.message, exc.pos)
        return result
    result.document = document
    if not _check_top_level(result, document):
        return result
    try:
        result.contract = Contract.model_validate(document.data)
    except ValidationError as exc:
        for error in exc.errors(include_url=False):
            result.diagnostics.append(_from_pydantic(error, document))
        return result
    for finding in rules.run_all(result.contract, result.folder):
        result.add(finding)
    if deep:
        for finding in deep_checks.run_all(result.contract, result.folder, Path(path)):
            result.add(finding)
    for extra in more:
        for finding in extra(result.contract, result.folder, Path(path)):
            result.add(finding)
    waivers.apply_waivers(result, today=today, data_checked=deep)
    return result


def load(path: str | Path, more: Sequence[DeepCheck] = ()) -> Contract:
    """Load a valid contract or raise `ContractError` carrying the diagnostics (of `more` too)."""
    result = check_file(path, more=more)
    if not result.valid or result.contract is None:
        raise ContractError(str(path), result.diagnostics)
    return result.contract


def _structural(result: CheckResult, code: str, message: str, pos: yaml12.Pos) -> None:
    result.diagnostics.append(Diagnostic(code, "error", "", pos.line, pos.column, message))


def _check_top_level(result: CheckResult, document: yaml12.Document) -> bool:
    data = document.data
    if data is None:
        _structural(
            result,
            "RLV003",
            "the file is empty; a contract is a YAML mapping starting with 'contract_version: 1'",
            yaml12.Pos(1, 1),
        )
        return False
    if not isinstance(data, dict):
        kind = _YAML_TYPES.get(type(data), type(data).__name__)
        _structural(result, "RLV003", f"a contract is a mapping of sections, got a {kind}", document.value_pos(()))
        return False
    return True


def _from_pydantic(error: Any, document: yaml12.Document) -> Diagnostic:
    loc = tuple(part for part in error["loc"] if part not in FORMS)
    kind = error["type"]
    if kind == "extra_forbidden":
        key = str(loc[-1])
        suggestion = suggest_key(key, loc[:-1])
        pos = document.key_pos(loc)
        code, message = "RLV002", f"unknown key '{key}'"
    elif kind == "missing":
        pos = document.key_pos(loc[:-1]) if loc[:-1] else document.value_pos(())
        code, message, suggestion = "RLV003", f"missing required key '{loc[-1]}'", None
    else:
        pos = document.anchor_pos(loc)
        code, message, suggestion = "RLV003", _type_message(error), None
    return Diagnostic(code, "error", dotted(loc), pos.line, pos.column, message, suggestion)


def _type_message(error: Any) -> str:
    kind, ctx, value = error["type"], error.get("ctx") or {}, error.get("input")
    if kind in _EXPECTED:
        expected = _EXPECTED[kind].format(**ctx)
        return f"{expected}, got {_YAML_TYPES.get(type(value), 'value')} {_short(value)}"
    if kind == "string_pattern_mismatch":
        return f"{_short(value)} does not match the pattern {ctx.get('pattern')}"
    message = str(error["msg"])
    message = message.replace("Input should be", "must be").replace("Value error, ", "")
    return message[0].lower() + message[1:]


def _short(value: Any) -> str:
    text = repr(value) if not isinstance(value, (dict, list)) else type(value).__name__
    return text if len(text) <= 40 else text[:37] + "..."


# ── "did you mean" ────────────────────────────────────────────────────────────────────


def _model_at(loc: tuple[str | int, ...]) -> type[BaseModel] | None:
    model: type[BaseModel] | None = Contract
    for part in loc:
        if isinstance(part, int) or model is None:
            continue
        model = _field_model(model, part)
    return model


def _keys_of(model: type[BaseModel]) -> list[str]:
    return [info.alias or name for name, info in model.model_fields.items()]


def _field_model(model: type[BaseModel], key: str) -> type[BaseModel] | None:
    for name, info in model.model_fields.items():
        if (info.alias or name) == key:
            return _find_model(info.annotation)
    return None


def _find_model(annotation: Any) -> type[BaseModel] | None:
    if isinstance(annotation, type) and issubclass(annotation, BaseModel):
        return annotation
    for arg in typing.get_args(annotation):
        found = _find_model(arg)
        if found is not None:
            return found
    return None


def suggest_key(key: str, parent: tuple[str | int, ...]) -> str | None:
    """A close sibling key, or the dotted place one level down where `key` belongs."""
    model = _model_at(parent)
    if model is None:
        return None
    import difflib  # only on the error path

    siblings = _keys_of(model)
    close = difflib.get_close_matches(key, siblings, n=1, cutoff=0.6)
    if close:
        return close[0]
    for sibling in siblings:
        child = _field_model(model, sibling)
        if child is not None and key in _keys_of(child):
            return f"{sibling}.{key}"
    return None
