"""What a verifier returns: a status, a reward, and the components the reward is made of."""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any, Literal

Status = Literal["ok", "format_error", "verifier_error", "timeout", "sandbox_error"]
STATUSES: tuple[str, ...] = ("ok", "format_error", "verifier_error", "timeout", "sandbox_error")
INVALID: frozenset[str] = frozenset({"verifier_error", "timeout", "sandbox_error"})


@dataclass(frozen=True)
class Verdict:
    """Only `ok` and `format_error` carry a reward; the other statuses are invalid samples."""

    status: Status
    reward: float | None = None
    components: dict[str, float] = field(default_factory=dict)
    detail: str | None = None

    @property
    def valid(self) -> bool:
        return self.status not in INVALID

    def as_json(self) -> dict[str, Any]:
        """The verdict as the server's `/verify` answers it and as audits and records show it."""
        return {"status": self.status, "reward": self.reward, "components": self.components, "detail": self.detail}

    @classmethod
    def coerce(cls, value: Any) -> Verdict:
        """Accept a Verdict or a plain dict with the same keys; anything else is an error."""
        if isinstance(value, Verdict):
            verdict = value
        elif isinstance(value, dict):
            unknown = set(value) - {"status", "reward", "components", "detail"}
            if unknown:
                raise ValueError(f"verdict has unknown keys {sorted(unknown)}")
            verdict = cls(**value)
        else:
            raise TypeError(f"a verifier must return a Verdict or a dict, got {type(value).__name__}")
        verdict.check()
        return verdict

    def check(self) -> None:
        if self.status not in STATUSES:
            raise ValueError(f"verdict status {self.status!r} is not one of {', '.join(STATUSES)}")
        if self.valid and not _number(self.reward):
            raise ValueError(f"a '{self.status}' verdict needs a finite reward, got {self.reward!r}")
        for name, value in self.components.items():
            if not _number(value):
                raise ValueError(f"component {name!r} is {value!r}, not a finite number")


def _number(value: Any) -> bool:
    """A finite int or float; `True` is not a reward (Python counts it as 1)."""
    return isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)
