"""What an import or an export found: the values it maps, the comment naming each value's
source, the choices that map to another number (the relation stated) and those with no
equivalent at all."""

from __future__ import annotations

import struct
from dataclasses import dataclass, field
from typing import Any

from rlvr_cli.contract import yaml12
from rlvr_cli.errors import RlvrError

LABEL = {"refused": "no equivalent", "differs": "differs", "bound": "exact within"}


@dataclass(frozen=True)
class Difference:
    """One choice the other side computes differently. kind `differs`: the number differs as
    `text` says; `refused`: the other side has nothing that computes it; `bound`: the same number
    within the range `text` states (a clamp no sane run reaches)."""

    key: str
    text: str
    kind: str = "differs"

    @property
    def refused(self) -> bool:
        return self.kind == "refused"

    def line(self) -> str:
        return f"{LABEL[self.kind]}: {self.key}: {self.text}"


@dataclass
class Mapping:
    """Values at dotted paths of the target (a contract, or the peer's config), each with the
    comment that says where it came from, and the differences met on the way."""

    values: dict[str, Any] = field(default_factory=dict)
    comments: dict[str, str] = field(default_factory=dict)
    differences: list[Difference] = field(default_factory=list)
    unread: list[str] = field(default_factory=list)

    def set(self, path: str, value: Any, comment: str = "") -> None:
        self.values[path] = value
        if comment:
            self.comments[path] = comment

    def differs(self, key: str, text: str) -> None:
        self.differences.append(Difference(key, text))

    def refuse(self, key: str, text: str) -> None:
        self.differences.append(Difference(key, text, "refused"))

    def bound(self, key: str, text: str) -> None:
        self.differences.append(Difference(key, text, "bound"))

    @property
    def refused(self) -> list[Difference]:
        return [d for d in self.differences if d.refused]

    @property
    def inexact(self) -> list[Difference]:
        return [d for d in self.differences if d.kind == "differs"]


def check_reinforce_plus_plus(out: Mapping, advantage: Any, peer: str, estimator: str, fixed: tuple) -> None:
    """A whitened advantage is the peer's REINFORCE++ with baseline where it is that one exactly:
    r − the group's mean, whitened as `fixed` ((key, value, why), …) says; anything else refused."""
    if (advantage.baseline, advantage.scale) != ("group_mean", "none"):
        out.refuse(
            "objective.advantage.whiten",
            f"after baseline {advantage.baseline}, scale {advantage.scale}: {peer} whitens r − the group's mean "
            f"alone ({estimator})",
        )
    for key, value, _ in fixed:
        if getattr(advantage.whiten, key) != value:
            out.refuse(
                f"objective.advantage.whiten.{key}",
                f"{getattr(advantage.whiten, key)}: {peer}'s {estimator} whitens with {key} {value} (not an option)",
            )


def check_std(out: Mapping, advantage: Any, peer: str, epsilon: float) -> None:
    """Both peers divide by the sample std plus a fixed epsilon: anything else has no equivalent."""
    if advantage.scale == "none":
        return
    if advantage.std == "population":
        out.refuse(
            "objective.advantage.std",
            f"population: {peer} divides by the sample std (n − 1); its advantages are √((K−1)/K)× the contract's "
            "for groups of K",
        )
    if advantage.epsilon != epsilon:
        out.refuse(
            "objective.advantage.epsilon", f"{advantage.epsilon}: {peer} adds {epsilon:g} to the std, not an option"
        )


class CannotMap(RlvrError):
    """The configuration holds choices the other side cannot express: exit 1, each one listed."""

    def __init__(self, what: str, differences: list[Difference]) -> None:
        lines = "\n".join(f"  - {d.line()}" for d in differences)
        super().__init__(f"{what}:\n{lines}")
        self.differences = differences


def nested(values: dict[str, Any]) -> dict[str, Any]:
    """{"a.b": 1, "a.c": 2} → {"a": {"b": 1, "c": 2}}."""
    out: dict[str, Any] = {}
    for path, value in values.items():
        node = out
        *parents, last = path.split(".")
        for part in parents:
            node = node.setdefault(part, {})
        node[last] = value
    return out


def flat(tree: Any, prefix: str = "") -> dict[str, Any]:
    """{"a": {"b": 1}} → {"a.b": 1}; lists and scalars are leaves."""
    if not isinstance(tree, dict) or (prefix and not tree):
        return {prefix: tree}
    out: dict[str, Any] = {}
    for key, value in tree.items():
        out.update(flat(value, f"{prefix}.{key}" if prefix else str(key)))
    return out


def float32_exact(value: float) -> bool:
    """Whether `value` survives a round trip through float32 unchanged."""
    return struct.unpack("f", struct.pack("f", value))[0] == value


def plain(value: Any) -> str:
    """A value as a comment shows it."""
    if value is None:
        return "null"
    if isinstance(value, bool):
        return str(value).lower()
    return str(value)


def overrides(lines: list[str]) -> dict[str, Any]:
    """Hydra's `key=value` command-line overrides (`+key=` and `++key=` alike), values as YAML."""
    out: dict[str, Any] = {}
    for line in lines:
        key, sep, value = line.partition("=")
        if not sep or not key.strip("+~"):
            raise ValueError(f"override {line!r} is not key=value")
        try:
            yaml12.parse(value)
        except yaml12.YamlError as error:
            raise ValueError(f"override {line!r}: {error.message}") from None
        out[key.lstrip("+")] = yaml12.parse(value).data if value else None  # 1e-6 a number, as Hydra reads it
    return out


def typed(value: Any, kind: str) -> Any:
    """`value` as `kind` (an integer written 32.0 is 32), or None where it is not one."""
    number = isinstance(value, (int, float)) and not isinstance(value, bool)
    if kind == "an integer":
        return int(value) if number and float(value).is_integer() else None
    if kind == "a number":
        return value if number else None
    if kind == "true or false":
        return value if isinstance(value, bool) else None
    if kind == "two numbers":
        ok = isinstance(value, list) and len(value) == 2 and all(typed(v, "a number") is not None for v in value)
        return value if ok else None
    if kind == "a string":
        return value if isinstance(value, str) else None
    if kind == "a list of names":
        return value if isinstance(value, list) and all(isinstance(v, str) for v in value) else None
    return value if isinstance(value, list) and all(isinstance(v, dict) for v in value) else None


def kind_of(default: Any) -> str | None:
    """The kind a key holds, read off its default (None: any)."""
    if isinstance(default, bool):
        return "true or false"
    if isinstance(default, (int, float)):
        return "a number"
    return "a string" if isinstance(default, str) else None
