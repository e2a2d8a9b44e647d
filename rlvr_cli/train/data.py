"""Tasks from the contract's JSONL splits, and a deterministic sampler with an exact cursor."""

from __future__ import annotations

import random
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from rlvr_cli.errors import RlvrError
from rlvr_cli.jsonl import read_jsonl


def read_split(path: Path, name: str) -> list[dict[str, Any]]:
    """Every task of a split; a bad line is an error naming the file and line."""
    if not path.is_file():
        raise RlvrError(f"data split {name} ({path}) does not exist")
    tasks = []
    for number, row in read_jsonl(path):
        if not isinstance(row, dict) or "id" not in row or "prompt" not in row:
            raise RlvrError(f"{path}:{number}: a task is an object with 'id' and 'prompt'")
        tasks.append(row)
    if not tasks:
        raise RlvrError(f"data split {name} ({path}) holds no task")
    return tasks


def messages_of(task: dict[str, Any]) -> list[dict[str, Any]]:
    """A string prompt is one user turn; a list is already chat messages."""
    prompt = task["prompt"]
    return [{"role": "user", "content": prompt}] if isinstance(prompt, str) else list(prompt)


@dataclass
class Sampler:
    """Shuffles the tasks once per epoch with `seed + epoch`; (epoch, position) is the cursor."""

    size: int
    seed: int
    epoch: int = 0
    position: int = 0

    def _order(self) -> list[int]:
        order = list(range(self.size))
        random.Random(self.seed + self.epoch).shuffle(order)
        return order

    def take(self, n: int) -> list[int]:
        out: list[int] = []
        order = self._order()
        while len(out) < n:
            if self.position >= self.size:
                self.epoch, self.position = self.epoch + 1, 0
                order = self._order()
            out.append(order[self.position])
            self.position += 1
        return out

    def state(self) -> dict[str, int]:
        return {"epoch": self.epoch, "position": self.position, "size": self.size, "seed": self.seed}
