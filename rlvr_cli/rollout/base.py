"""The rollout interface every caller uses, and the time a rollout spends."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Protocol

from rlvr_cli.engine.engines import PolicyEngine
from rlvr_cli.env.sample import Sample


@dataclass
class Times:
    """Seconds spent sampling (`generate`) and verifying (`score`); a tool-use episode's
    verification is part of the episode and counted with it."""

    generate: float = 0.0
    score: float = 0.0


class Rollout(Protocol):
    engine: PolicyEngine  # what samples, and the revision it holds

    def sample(
        self,
        tasks: Sequence[dict[str, Any]],
        *,
        group_size: int,
        seed: int,
        round_: int = 0,
        revision: int = 0,
        greedy: bool = False,
        hinted: int = 0,
        groups: Sequence[int] | None = None,
        times: Times | None = None,
    ) -> list[Sample]:
        """`group_size` samples of every task, verified, in task order. `revision`: the
        optimizer steps of the weights that sample (the engine must hold them); `hinted`: the
        first `hinted` of each group are shown the task's hint; `groups`: each task's group
        number (default 0, 1, ...)."""
        ...

    def sample_share(
        self,
        tasks: Sequence[dict[str, Any]],
        *,
        rank: int,
        world: int,
        group_size: int,
        seed: int,
        round_: int,
        revision: int,
        hinted: int,
        times: Times | None = None,
    ) -> tuple[list[Sample], list[dict[str, Any]]]:
        """Under torchrun: this process's groups (g ≡ rank mod world) of `tasks`, and those
        tasks, sampled so that a run resumed with the same processes continues exactly."""
        ...

    def using(self, engine: PolicyEngine) -> Rollout:
        """The same rollout (prompts, reward source) sampling with another engine: sampling
        ahead draws with its own copy of the weights (train/overlap.py)."""
        ...
