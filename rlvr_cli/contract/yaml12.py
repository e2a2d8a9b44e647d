"""A YAML 1.2 (core schema) reader that keeps the position of every key and value.

PyYAML resolves scalars with YAML 1.1 rules (`no` is false, `1e-5` is a string,
`2024-01-01` is a date). Contracts need YAML 1.2: only true/false are booleans, `1e-5`
is a float, dates stay strings. We take libyaml's event stream (fast, and never
recursive, so deep nesting cannot overflow a stack) and build plain Python values
ourselves, which also lets us refuse duplicate keys and bound alias expansion.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Any

import yaml

from rlvr_cli.errors import RlvrError

# libyaml is in every PyYAML wheel; the pure-Python parser is a slow fallback. Only the
# event stream is used: scalars are resolved below with YAML 1.2 rules.
_Parser = getattr(yaml, "CBaseLoader", yaml.BaseLoader)


MAX_DEPTH = 64
MAX_NODES = 50_000  # counted with aliases expanded: bounds "billion laughs"

Path = tuple[str | int, ...]

_NULL = re.compile(r"^(?:~|null|Null|NULL|)$")
_BOOL = {"true": True, "True": True, "TRUE": True, "false": False, "False": False, "FALSE": False}
_INT10 = re.compile(r"^[-+]?[0-9]+$")
_INT8 = re.compile(r"^0o[0-7]+$")
_INT16 = re.compile(r"^0x[0-9a-fA-F]+$")
_FLOAT = re.compile(r"^[-+]?(?:\.[0-9]+|[0-9]+(?:\.[0-9]*)?)(?:[eE][-+]?[0-9]+)?$")
_INF = re.compile(r"^[-+]?\.(?:inf|Inf|INF)$")
_NAN = re.compile(r"^\.(?:nan|NaN|NAN)$")
MAX_INT_DIGITS = 100
_STD_TAGS = {
    "tag:yaml.org,2002:str",
    "tag:yaml.org,2002:int",
    "tag:yaml.org,2002:float",
    "tag:yaml.org,2002:bool",
    "tag:yaml.org,2002:null",
    "tag:yaml.org,2002:map",
    "tag:yaml.org,2002:seq",
    "!",
}


@dataclass(frozen=True)
class Pos:
    """1-based line and column."""

    line: int
    column: int


class YamlError(RlvrError):
    """The text is not a YAML document we accept; carries where and why."""

    def __init__(self, message: str, pos: Pos) -> None:
        super().__init__(message)
        self.message = message
        self.pos = pos


@dataclass
class Document:
    """Plain Python data plus the positions of its keys and values, keyed by path."""

    data: Any
    values: dict[Path, Pos] = field(default_factory=dict)
    keys: dict[Path, Pos] = field(default_factory=dict)

    def value_pos(self, path: Path) -> Pos:
        """Position of the value at `path`, or of its nearest ancestor we know."""
        return _nearest(self.values, path)

    def get(self, path: Path) -> Any:
        """The value at `path`, or None when the path does not exist."""
        node = self.data
        for part in path:
            try:
                node = node[part]
            except (KeyError, IndexError, TypeError):
                return None
        return node

    def anchor_pos(self, path: Path) -> Pos:
        """Where a diagnostic about `path` should point: the key for a mapping or list
        (a block mapping's own position is its first child), the value otherwise."""
        if isinstance(self.get(path), (dict, list)):
            return self.key_pos(path)
        return self.value_pos(path)

    def key_pos(self, path: Path) -> Pos:
        """Position of the key that names `path` (the value's position for list items)."""
        if path in self.keys:
            return self.keys[path]
        return _nearest(self.values, path)


def _nearest(table: dict[Path, Pos], path: Path) -> Pos:
    for cut in range(len(path), -1, -1):
        pos = table.get(path[:cut])
        if pos is not None:
            return pos
    return Pos(1, 1)


def _pos(mark: Any) -> Pos:
    return Pos(mark.line + 1, mark.column + 1)


def resolve_scalar(value: str, *, plain: bool, tag: str | None = None) -> Any:
    """YAML 1.2 core-schema resolution of one scalar."""
    if tag in (None, "!"):
        if not plain:
            return value
        tag = _implicit_tag(value)
    return _construct(value, tag)


def _implicit_tag(value: str) -> str:
    if _NULL.match(value):
        return "tag:yaml.org,2002:null"
    if value in _BOOL:
        return "tag:yaml.org,2002:bool"
    if _INT10.match(value) or _INT8.match(value) or _INT16.match(value):
        return "tag:yaml.org,2002:int"
    if _FLOAT.match(value) or _INF.match(value) or _NAN.match(value):
        return "tag:yaml.org,2002:float"
    return "tag:yaml.org,2002:str"


def _construct(value: str, tag: str) -> Any:
    kind = tag.rsplit(":", 1)[-1]
    if kind == "str":
        return value
    if kind == "null" and _NULL.match(value):
        return None
    if kind == "bool" and value in _BOOL:
        return _BOOL[value]
    if kind == "int":
        if len(value) > MAX_INT_DIGITS:  # no key takes such a number; never Python's own digit-limit error
            raise ValueError(f"an integer of {len(value.lstrip('+-')):,} digits (at most {MAX_INT_DIGITS})")
        if _INT8.match(value):
            return int(value[2:], 8)
        if _INT16.match(value):
            return int(value[2:], 16)
        if _INT10.match(value):
            return int(value)
    if kind == "float":
        if _INF.match(value):
            return float("-inf") if value.startswith("-") else float("inf")
        if _NAN.match(value):
            return float("nan")
        if _FLOAT.match(value) or _INT10.match(value):
            return float(value)
    raise ValueError(f"{value!r} is not a valid !!{kind}")


@dataclass
class _Frame:
    container: dict | list
    path: Path
    anchor: str | None
    size: int = 1
    pending_key: str | None = None


class _Builder:
    """Turns libyaml events into values; one instance per document."""

    def __init__(self) -> None:
        self.doc = Document(data=None)
        self.stack: list[_Frame] = []
        self.anchors: dict[str, tuple[Any, int]] = {}
        self.total = 0
        self.root_set = False

    def child_path(self) -> Path:
        top = self.stack[-1]
        if isinstance(top.container, list):
            return (*top.path, len(top.container))
        return (*top.path, top.pending_key)  # type: ignore[arg-type]

    def add(self, value: Any, size: int, pos: Pos, anchor: str | None) -> None:
        self.total += size
        if self.total > MAX_NODES:
            raise YamlError(
                f"document has more than {MAX_NODES} nodes with aliases expanded (too large, or an alias bomb)", pos
            )
        if anchor is not None:
            self.anchors[anchor] = (value, size)
        if not self.stack:
            self.doc.data, self.root_set = value, True
            return
        top = self.stack[-1]
        top.size += size
        if isinstance(top.container, list):
            top.container.append(value)
        elif top.pending_key is None:
            self._set_key(top, value, pos)
        else:
            top.container[top.pending_key] = value
            top.pending_key = None

    def _set_key(self, top: _Frame, key: Any, pos: Pos) -> None:
        if isinstance(key, (dict, list)):
            raise YamlError("a mapping key must be a plain scalar", pos)
        if key in top.container:
            first = self.doc.keys[(*top.path, key)]
            raise YamlError(f"duplicate key '{key}' (first defined at line {first.line})", pos)
        self.doc.keys[(*top.path, key)] = pos
        top.pending_key = key

    def open(self, container: dict | list, pos: Pos, anchor: str | None, tag: str | None = None) -> None:
        kind = "tag:yaml.org,2002:map" if isinstance(container, dict) else "tag:yaml.org,2002:seq"
        if tag is not None and tag not in (kind, "!"):  # `!!python/object/apply:...` runs code in other loaders
            raise YamlError(f"unsupported tag {tag}", pos)
        if len(self.stack) >= MAX_DEPTH:
            raise YamlError(f"nesting deeper than {MAX_DEPTH} levels", pos)
        path: Path = self.child_path() if self.stack else ()
        if self.stack and isinstance(self.stack[-1].container, dict) and self.stack[-1].pending_key is None:
            raise YamlError("a mapping key must be a plain scalar", pos)
        self.doc.values[path] = pos
        self.stack.append(_Frame(container, path, anchor))

    def close(self, pos: Pos) -> None:
        frame = self.stack.pop()
        self.total -= frame.size - 1  # children were counted as they arrived
        self.add(frame.container, frame.size, self.doc.values[frame.path], frame.anchor)

    def scalar(self, event: Any) -> None:
        pos = _pos(event.start_mark)
        tag = event.tag
        if tag is not None and tag not in _STD_TAGS:
            raise YamlError(f"unsupported tag {tag}", pos)
        is_key = bool(self.stack) and isinstance(self.stack[-1].container, dict)
        is_key = is_key and self.stack[-1].pending_key is None
        if is_key:  # keys stay the text as written: `1e-5:` names the key "1e-5"
            self.add(event.value, 1, pos, event.anchor)
            return
        plain = event.implicit[0] and not event.style  # libyaml says "" for plain, PyYAML None
        try:
            value = resolve_scalar(event.value, plain=plain, tag=tag)
        except ValueError as exc:
            raise YamlError(str(exc), pos) from None
        self.doc.values[self.child_path() if self.stack else ()] = pos
        self.add(value, 1, pos, event.anchor)

    def alias(self, event: Any) -> None:
        pos = _pos(event.start_mark)
        if event.anchor not in self.anchors:
            raise YamlError(f"unknown alias *{event.anchor}", pos)
        value, size = self.anchors[event.anchor]
        if self.stack and isinstance(self.stack[-1].container, dict) and self.stack[-1].pending_key is None:
            raise YamlError("an alias cannot be used as a mapping key", pos)
        if self.stack:
            self.doc.values[self.child_path()] = pos
        self.add(value, size, pos, None)


def _char_at(text: str, line: int, column: int) -> str:
    lines = text.split("\n", line + 1)
    return lines[line][column : column + 1] if line < len(lines) else ""


def parse(text: str) -> Document:
    """Parse exactly one YAML document; raise YamlError with a position on any problem."""
    builder: _Builder | None = None
    documents = 0
    parser = _Parser(text)
    try:
        while True:
            event = parser.get_event()
            if event is None or isinstance(event, yaml.StreamEndEvent):
                break
            if isinstance(event, yaml.DocumentStartEvent):
                documents += 1
                if documents > 1:
                    raise YamlError(
                        "more than one YAML document; a contract is one document",
                        _pos(event.start_mark),
                    )
                builder = _Builder()
            elif isinstance(event, yaml.ScalarEvent):
                builder.scalar(event)  # type: ignore[union-attr]
            elif isinstance(event, yaml.MappingStartEvent):
                builder.open({}, _pos(event.start_mark), event.anchor, event.tag)  # type: ignore[union-attr]
            elif isinstance(event, yaml.SequenceStartEvent):
                builder.open([], _pos(event.start_mark), event.anchor, event.tag)  # type: ignore[union-attr]
            elif isinstance(event, (yaml.MappingEndEvent, yaml.SequenceEndEvent)):
                builder.close(_pos(event.start_mark))  # type: ignore[union-attr]
            elif isinstance(event, yaml.AliasEvent):
                builder.alias(event)  # type: ignore[union-attr]
    except yaml.MarkedYAMLError as exc:
        mark = exc.problem_mark or exc.context_mark
        where = _pos(mark) if mark is not None else Pos(1, 1)
        what = exc.problem or exc.context or "invalid YAML"
        if mark is not None and _char_at(text, mark.line, mark.column) == "\t":
            what = "a tab character; YAML indents with spaces only"
        opened = exc.context_mark if exc.problem_mark is not None else None
        if opened is not None and exc.context and (opened.line, opened.column) != (mark.line, mark.column):
            # an unclosed `[` or `{` is found where parsing fails; say where it was opened
            what += f" ({exc.context} opened at line {opened.line + 1}, column {opened.column + 1})"
        raise YamlError(f"YAML syntax error: {what}", where) from None
    except yaml.YAMLError as exc:
        raise YamlError(f"YAML error: {exc}", Pos(1, 1)) from None
    finally:
        dispose = getattr(parser, "dispose", None)
        if dispose is not None:
            dispose()
    if builder is None or not builder.root_set:
        return Document(data=None)
    return builder.doc
