"""Conversations and what rendering one produces: the JSONL shape `rlvr render` reads, the
token spans of each turn, and the template checks' findings. Plain data, no tokenizer."""

from __future__ import annotations

import bisect
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from rlvr_cli.errors import RlvrError, UsageProblem
from rlvr_cli.files import read_jsonl

ROLES = ("system", "user", "assistant", "tool", "ipython")


class RenderError(RlvrError):
    """A conversation or tokenizer that cannot be rendered: exit 1 with where and why."""


@dataclass
class Span:
    role: str
    turn: int
    start: int
    end: int  # exclusive, token indices
    trainable: bool
    part: str  # header | content | glue | turn | rewritten
    last_turn: int = -1  # a span over several turns the template renders as one ends here

    def __post_init__(self) -> None:
        if self.last_turn < 0:
            self.last_turn = self.turn


@dataclass
class Check:
    code: str
    severity: str  # error | warning
    message: str


class Offsets:
    """Each token's (start, end) characters in the rendered text. Backed by the Rust
    tokenizer's encoding where there is one (nothing converted to Python until asked), else
    by a plain list."""

    def __init__(self, encoding: Any = None, pairs: list[tuple[int, int]] | None = None, count: int = 0) -> None:
        self._encoding = encoding
        self._pairs = pairs
        self._count = len(pairs) if pairs is not None else count

    def __len__(self) -> int:
        return self._count

    def __getitem__(self, index: int) -> tuple[int, int]:
        if self._pairs is None:
            if not -self._count <= index < self._count:
                raise IndexError(index)
            return tuple(self._encoding.token_to_chars(index % self._count))
        return self._pairs[index]

    def pairs(self) -> list[tuple[int, int]]:
        if self._pairs is None:
            self._pairs = [tuple(pair) for pair in self._encoding.offsets]
        return self._pairs

    def at(self, char: int, length: int) -> tuple[int, bool]:
        """First token starting at or after `char`; False when `char` falls inside a token."""
        if char >= length:
            return self._count, True
        if self._pairs is None:
            token = self._encoding.char_to_token(char)
            if token is not None:
                start = self._encoding.token_to_chars(token)[0]
                return (token, True) if start == char else (token + 1, False)
        pairs = self.pairs()  # a character no token covers: search the list
        index = bisect.bisect_left(pairs, char, key=lambda pair: pair[0])
        inside = index > 0 and pairs[index - 1][1] > char
        return index, not inside


@dataclass
class Rendered:
    input_ids: list[int]
    tokens: list[str]
    loss_mask: list[int]
    spans: list[Span]
    checks: list[Check] = field(default_factory=list)
    text: str = ""
    offsets: Offsets | list[tuple[int, int]] = field(default_factory=list)
    line: int = 0  # the conversation's line in its JSONL file (0: built in code)

    def text_of(self, start: int, end: int) -> str:
        """The rendered text of tokens [start, end)."""
        if start >= end:
            return ""
        first = self.offsets[start][0]
        last = self.offsets[end][0] if end < len(self.offsets) else len(self.text)
        return self.text[first:last]

    def as_json(self) -> dict[str, Any]:
        return {
            "input_ids": self.input_ids,
            "tokens": self.tokens,
            "loss_mask": self.loss_mask,
            "spans": [asdict(s) for s in self.spans],
            "checks": [asdict(c) for c in self.checks],
        }


@dataclass
class Conversation:
    messages: list[dict[str, Any]]
    tools: list[dict[str, Any]] | None = None
    line: int = 0  # 1-based line in the JSONL file; 0 when built in code


def read_conversations(path: Path) -> list[Conversation]:
    """One conversation per JSONL line: `{"messages": [...], "tools"?: [...]}`."""
    if not path.is_file():
        raise UsageProblem(f"{path}: no such conversations file")
    conversations = [
        parse_conversation(row, f"{path}:{number}", number) for number, row in read_jsonl(path, RenderError)
    ]
    if not conversations:
        raise RenderError(f"{path}: holds no conversation")
    return conversations


def parse_conversation(row: Any, where: str, line: int = 0) -> Conversation:
    """Check the shape of one conversation; raise RenderError naming `where`."""
    if not isinstance(row, dict) or not isinstance(row.get("messages"), list):
        raise RenderError(f"{where}: expected an object with a 'messages' list")
    unknown = set(row) - {"messages", "tools"}
    if unknown:
        raise RenderError(f"{where}: unknown keys {sorted(unknown)}; expected 'messages' and 'tools'")
    messages = row["messages"]
    if not messages:
        raise RenderError(f"{where}: the conversation is empty")
    for i, message in enumerate(messages):
        _check_message(message, f"{where}: messages[{i}]")
    tools = row.get("tools")
    if tools is not None and not (isinstance(tools, list) and all(isinstance(t, dict) for t in tools)):
        raise RenderError(f"{where}: 'tools' must be a list of objects")
    return Conversation(messages, tools, line)


def _check_message(message: Any, where: str) -> None:
    if not isinstance(message, dict):
        raise RenderError(f"{where}: a message is an object with 'role' and 'content'")
    role = message.get("role")
    if role not in ROLES:
        raise RenderError(f"{where}: unknown role {role!r}; expected one of {', '.join(ROLES)}")
    content = message.get("content")
    calls = message.get("tool_calls")
    if content is not None and not isinstance(content, str):
        raise RenderError(f"{where}: content must be a string")
    if calls is not None:
        if role != "assistant":
            raise RenderError(f"{where}: only assistant messages carry tool_calls")
        for call in calls if isinstance(calls, list) else [None]:
            function = call.get("function") if isinstance(call, dict) else None
            if not isinstance(function, dict) or not isinstance(function.get("name"), str):
                raise RenderError(f"{where}: tool_calls items are {{type: function, function: {{name, arguments}}}}")
    if content is None and not calls:
        raise RenderError(f"{where}: a message needs content (or tool_calls)")
