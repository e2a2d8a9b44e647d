"""`TrainState`: the counters and cursors of a run — with the weights, optimizer, scheduler and
RNG states, the one thing a checkpoint holds. Plain JSON, no pickles."""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Any

from rlvr_cli.errors import RlvrError
from rlvr_cli.train.task_order import Sampler


@dataclass
class Totals:
    """What the run has spent so far, checked against `acceptance.budget` (`total_*` metrics)."""

    rollouts: int = 0
    verifier_calls: int = 0
    tokens: int = 0
    verifier_seconds: float = 0.0  # not a budget limit: the x axis of `rlvr report --by verifier_seconds`

    def as_json(self) -> dict[str, float]:
        return asdict(self)

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> Totals:
        """A checkpoint's totals; one written before a total existed starts it at 0."""
        kinds = {k: type(getattr(cls(), k)) for k in cls.__dataclass_fields__}
        return cls(**{k: kinds[k](v) for k, v in data.items() if k in kinds})


@dataclass
class TrainState:
    step: int  # the next step to run
    optimizer_steps: int
    sampler: Sampler
    totals: Totals = field(default_factory=Totals)
    holdout_history: list[tuple[int, float, float]] = field(default_factory=list)  # (step, train, holdout)
    monitor: list[list[Any]] = field(default_factory=list)  # each rule's current streak
    ahead: list[dict[str, Any]] | dict[str, Any] | None = None  # the next steps' samples, drawn ahead (overlap.py)
    skipped_in_a_row: int = 0  # steps in a row whose update was skipped for non-finite values

    @classmethod
    def fresh(cls, train_size: int, seed: int) -> TrainState:
        return cls(step=0, optimizer_steps=0, sampler=Sampler(train_size, seed))

    def as_json(self) -> dict[str, Any]:
        return {
            "step": self.step,
            "optimizer_steps": self.optimizer_steps,
            "totals": self.totals.as_json(),
            "sampler": self.sampler.state(),
            "holdout_history": [list(h) for h in self.holdout_history],
            "monitor": self.monitor,
            "ahead": self.ahead,
            "skipped_in_a_row": self.skipped_in_a_row,
        }

    @classmethod
    def from_json(cls, data: dict[str, Any], train_size: int) -> TrainState:
        sampler = data["sampler"]
        if sampler["size"] != train_size:
            raise RlvrError("the train split changed size since the checkpoint; resume would not be exact")
        return cls(
            step=int(data["step"]),
            optimizer_steps=int(data["optimizer_steps"]),
            sampler=Sampler(sampler["size"], sampler["seed"], sampler["epoch"], sampler["position"]),
            totals=Totals.from_json(data["totals"]),
            holdout_history=[(int(s), float(t), float(h)) for s, t, h in data["holdout_history"]],
            monitor=[list(v) for v in data["monitor"]],
            ahead=data.get("ahead"),
            skipped_in_a_row=int(data.get("skipped_in_a_row", 0)),
        )
