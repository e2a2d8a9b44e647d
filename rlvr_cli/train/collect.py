"""Collect one step's groups: take tasks → sample (verdicts included) → accept, round after
round. `prompts_per_step` groups of `group_size` samples come from the contract's rollout
(`rlvr_cli/rollout/`); with dynamic sampling, all-equal groups are dropped and more are
sampled, up to `max_rounds` rounds; the first round may have been sampled ahead, during the
previous step's update (train/overlap.py)."""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Any

import torch

from rlvr_cli.env.sample import Sample
from rlvr_cli.rollout import hints
from rlvr_cli.rollout.base import Draw, Rollout, Times
from rlvr_cli.train import distributed as dist
from rlvr_cli.train.objective import uniform_groups
from rlvr_cli.train.setup import Setup
from rlvr_cli.train.state import TrainState


@dataclass
class StepTimes(Times):
    """The phases of a step, in seconds (`time_generate_s`, `time_score_s`, `time_update_s`)."""

    update: float = 0.0
    wait_rollouts: float | None = None  # sample_ahead: waiting for the samples drawn during the last update
    rollout_age: float | None = None  # sample_ahead: seconds from the start of their sampling to their use
    waited: float = 0.0  # under torchrun: waiting at the step's first collective for the slowest rank

    def metrics(self) -> dict[str, float]:
        out = {"time_generate_s": self.generate, "time_score_s": self.score, "time_update_s": self.update}
        if self.wait_rollouts is not None:
            out |= {"time_wait_rollouts_s": self.wait_rollouts, "rollout_age_s": self.rollout_age or 0.0}
        return out


@dataclass
class StepResult:
    """What one step produced: accepted groups for the update, every sample for the records."""

    accepted: list[list[Sample]] = field(default_factory=list)
    generated: list[Sample] = field(default_factory=list)
    rounds: int = 0
    times: StepTimes = field(default_factory=StepTimes)
    revision: int = 0  # the policy's optimizer steps when the step began: samples drawn now carry it


def step_seed(setup: Setup, step: int, round_: int) -> int:
    return setup.contract.hyperparameters.seed * 1_000_003 + step * 101 + round_


def sample_groups(
    setup: Setup, rollout: Rollout, indices: list[int], step: int, round_: int, revision: int, first: int, times: Times
) -> tuple[list[Sample], list[dict[str, Any]]]:
    """The groups of the train tasks at `indices`, sampled and verified: this process's share
    under torchrun; with `first`, the step's number of the first group. Returns the samples and
    their tasks, group by group."""
    hp = setup.contract.hyperparameters
    tasks = [setup.train_tasks[i] for i in indices]
    seed = step_seed(setup, step, round_)
    hinted = hints.hinted_per_group(setup.contract, step)
    numbers = list(range(first, first + len(tasks)))
    request = Draw(group_size=hp.group_size, seed=seed, round=round_, revision=revision, hinted=hinted, groups=numbers)
    # the engine this rollout samples with: a sharded policy's weights are gathered for the phase
    # (train/sharding.py); sampling ahead's copy holds its own, so its thread gathers nothing
    with rollout.engine.lent():
        if dist.active():  # under torchrun: this process's share of the groups
            return rollout.sample_share(tasks, request, setup.rank, setup.world, times)
        return rollout.sample(tasks, request, times), tasks


def collect(setup: Setup, state: TrainState, rollout: Rollout, ahead: Any = None) -> StepResult:
    hp = setup.contract.hyperparameters
    ds = setup.contract.length.dynamic_sampling
    drop = bool(ds and ds.drop_uniform_groups)
    result = StepResult(revision=state.optimizer_steps)
    accepted = first = 0  # every process's accepted groups, and the step's number of the next group sampled
    for round_ in range(ds.max_rounds if drop else 1):  # type: ignore[union-attr]
        missing = hp.prompts_per_step - accepted
        if missing <= 0:
            break
        start = time.perf_counter()
        early = ahead.take(state.step) if ahead is not None and round_ == 0 else None
        if early is not None:  # sampled during the previous step's update (train/overlap.py)
            samples, tasks = early
            result.times.wait_rollouts = time.perf_counter() - start
            result.times.rollout_age = ahead.age
            result.times.generate += result.times.wait_rollouts  # the wait, if any
        else:
            indices = state.sampler.take(missing)  # the same on every process: the data cursor is global
            samples, tasks = sample_groups(
                setup, rollout, indices, state.step, round_, state.optimizer_steps, first, result.times
            )
        first += missing
        result.generated += samples
        result.rounds = round_ + 1
        accept(hp.group_size, samples, tasks, ds.uniform_on if drop else None, result)  # type: ignore[union-attr]
        if drop and round_ + 1 < ds.max_rounds:  # type: ignore[union-attr]
            accepted = int(dist.total(float(len(result.accepted))))  # under torchrun: every process's
    return result


def accept(
    size: int, samples: list[Sample], tasks: list[dict[str, Any]], uniform_on: str | None, result: StepResult
) -> None:
    """Groups into the update; with dynamic sampling (`uniform_on`: what is compared, None: no
    dynamic sampling), all-equal groups are discarded (every session of a group's episodes
    counted: under `reward.unit: session` each has its own reward)."""
    drop = uniform_on is not None

    def value(s: Sample) -> float:
        return s.verifier_reward if uniform_on == "verifier_reward" else s.reward

    rewards = torch.tensor([value(s) for s in samples], dtype=torch.float64).view(-1, size)
    uniform = uniform_groups(rewards).tolist() if drop else [False] * len(tasks)  # (G,)
    if drop and any(s.sessions for s in samples):
        for g in range(len(tasks)):
            every = torch.tensor([value(p) for s in samples[g * size : (g + 1) * size] for p in s.episode])
            uniform[g] = bool(uniform_groups(every.view(1, -1).double())[0])
    for g, flat in enumerate(uniform):
        group = samples[g * size : (g + 1) * size]
        if flat:
            for s in group:
                s.kept, s.reason = False, s.reason or "uniform_group"
        else:
            result.accepted.append(group)
