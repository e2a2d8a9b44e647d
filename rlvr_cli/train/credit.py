"""Credit for episodes of several sessions (rollout/sessions.py): which sessions a step trains,
the units its advantages are computed over, and those advantages.

- `reward.unit: trajectory`: one unit per episode — its reward, its group's baseline; the
  sessions it trains are `reward.credit`'s: `all_sessions` (each with the episode's advantage)
  or `last_session` (the one that ended it; the others are recorded with reason `credit`).
- `reward.unit: session`: one unit per session — its own verdict, compared with every session
  of its group (groups are ragged: padded with excluded entries, which means and stds skip).

An episode of one session is one unit and one trained row, as a single response is."""

from __future__ import annotations

import math
from typing import Any

import torch

from rlvr_cli.env.sample import Sample
from rlvr_cli.train import distributed as dist
from rlvr_cli.train import objective as obj


def several(samples: list[Sample]) -> bool:
    """Whether any episode here holds more than one session."""
    return any(s.sessions for s in samples)


def spread(contract: Any, samples: list[Sample]) -> None:
    """Which of each episode's other sessions are trained: under `trajectory` they follow the
    episode (and `credit: last_session` records them untrained); under `session` each keeps its
    own verdict, and leaves with its group when the group is discarded."""
    reward = contract.objective.reward
    for sample in samples:
        for part in sample.sessions:
            if reward.unit == "session":
                if not sample.kept and sample.reason == "uniform_group":
                    part.kept, part.reason = False, part.reason or "uniform_group"
            elif not sample.kept:
                part.kept, part.reason = False, sample.reason
            elif reward.credit == "last_session":
                part.kept, part.reason = False, "credit"


def units(contract: Any, flat: list[Sample]) -> tuple[list[Sample], list[Sample], list[int]]:
    """(the units advantages are computed over, the rows the update trains, each row's unit)."""
    if contract.objective.reward.unit == "set":  # a set's first member stands for the set
        size = contract.objective.reward.set_size
        leads = {(s.group, s.index // size): u for u, s in enumerate(s for s in flat if s.index % size == 0)}
        every = [s for s in flat if s.index % size == 0]
        trained = [s for s in flat if s.kept]
        return every, trained, [leads[(s.group, s.index // size)] for s in trained]
    per_session = contract.objective.reward.unit == "session" and several(flat)
    every = [p for s in flat for p in s.episode] if per_session else flat
    rows, owner = [], []
    for u, unit in enumerate(every):
        parts = [unit] if per_session else unit.episode
        for part in parts:
            if part.kept and (part is unit or unit.kept):
                rows.append(part)
                owner.append(u)
    return every, rows, owner


def ragged_advantages(
    contract: Any, every: list[Sample], rewards: torch.Tensor, subgroup: bool, tokens: torch.Tensor
) -> torch.Tensor:
    """Group-relative advantages `(N,)` of units whose groups hold any number of them (all ranks'
    units under torchrun): each group padded to the widest with excluded entries (`tokens` `(N,)`:
    each unit's trained tokens, for `whiten.over: batch_tokens`)."""
    mine = [
        (s.group, s.index, s.session, r, s.hint is not None, n)
        for s, r, n in zip(every, rewards.tolist(), tokens.tolist(), strict=True)
    ]
    ordered = sorted(item for part in dist.gather(mine) for item in part) if dist.active() else sorted(mine)
    groups: dict[int, list[tuple[Any, ...]]] = {}
    for item in ordered:
        groups.setdefault(item[0], []).append(item)
    width = max((len(g) for g in groups.values()), default=1)
    padded: list[float] = []
    shown: list[bool] = []
    counts: list[float] = []
    where: dict[tuple[int, int, int], int] = {}
    for members in groups.values():
        for g, i, k, r, h, n in members:
            where[(g, i, k)] = len(padded)
            padded.append(r)
            shown.append(h)
            counts.append(n)
        padded += [math.nan] * (width - len(members))
        shown += [False] * (width - len(members))
        counts += [0.0] * (width - len(members))
    adv = obj.hinted_advantages(
        torch.tensor(padded, dtype=torch.float64),
        torch.tensor(shown, dtype=torch.bool),
        width,
        contract.objective,
        subgroup,
        torch.tensor(counts, dtype=torch.float64),
    )
    return torch.tensor([float(adv[where[(s.group, s.index, s.session)]]) for s in every], dtype=torch.float64)


def unit_width(contract: Any) -> int:
    """Units per group when every group holds the same number: its samples, or its sets."""
    reward, size = contract.objective.reward, contract.hyperparameters.group_size
    return size // reward.set_size if reward.unit == "set" else size


def share(every: list[Sample], rows: list[Sample], owner: list[int]) -> None:
    """Each trained row carries its unit's advantage (a session of an episode, a member of a set)."""
    for row, unit in zip(rows, owner, strict=True):
        row.advantage = every[unit].advantage
