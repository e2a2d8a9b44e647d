"""A deterministic sampler over the train split with an exact cursor."""

from __future__ import annotations

import random
from dataclasses import dataclass


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
