"""The rollout interface every caller uses, and the time a rollout spends."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, replace
from typing import Any, Protocol

from rlvr_cli.engine.engines import PolicyEngine
from rlvr_cli.env.sample import Sample


@dataclass
class Times:
    """Seconds spent sampling (`generate`) and verifying (`score`); a tool-use episode's
    verification is part of the episode and counted with it."""

    generate: float = 0.0
    score: float = 0.0


@dataclass(frozen=True, kw_only=True)
class Draw:
    """What to sample: `group_size` samples of every task with `seed`, in dynamic-sampling round
    `round`, by the weights of `revision` (optimizer steps; the engine must hold them), greedy or
    with the contract's sampling; the first `hinted` of each group are shown the task's hint;
    `groups`: each task's group number in the step (default 0, 1, ...)."""

    group_size: int
    seed: int
    round: int = 0
    revision: int = 0
    greedy: bool = False
    hinted: int = 0
    groups: Sequence[int] | None = None

    def numbers(self, tasks: int) -> list[int]:
        return list(self.groups) if self.groups is not None else list(range(tasks))


class Rollout(Protocol):
    engine: PolicyEngine  # what samples, and the revision it holds

    def sample(self, tasks: Sequence[dict[str, Any]], draw: Draw, times: Times | None = None) -> list[Sample]:
        """The draw's samples of every task, verified, in task order."""
        ...

    def sample_share(
        self, tasks: Sequence[dict[str, Any]], draw: Draw, rank: int, world: int, times: Times | None = None
    ) -> tuple[list[Sample], list[dict[str, Any]]]:
        """Under torchrun: this process's groups (g ≡ rank mod world) of `tasks`, and those
        tasks, sampled so that a run resumed with the same processes continues exactly."""
        ...

    def using(self, engine: PolicyEngine) -> Rollout:
        """The same rollout (prompts, reward source) sampling with another engine: sampling
        ahead draws with its own copy of the weights (train/overlap.py)."""
        ...


def sample_together(
    rollout: Rollout, tasks: Sequence[dict[str, Any]], draw: Draw, rank: int, world: int, times: Times | None
) -> tuple[list[Sample], list[dict[str, Any]]]:
    """This process's groups (g ≡ rank mod world) in one batch seeded by its rank: fuller decode
    steps (and one round trip a turn for tool use), and samples that are those of `world` processes."""
    mine, numbers = list(tasks[rank::world]), draw.numbers(len(tasks))[rank::world]
    if not mine:  # a later round of dynamic sampling may have fewer groups than processes
        return [], []
    return rollout.sample(mine, replace(draw, seed=draw.seed * 10_007 + rank, groups=numbers), times), mine
