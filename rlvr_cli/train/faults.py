"""Fault injection for tests of the run's guards, parsed once when a run starts.

`RLVR_FAULT=nan_loss@STEP` poisons that step's loss with NaN. Unset in normal runs, where
`Fault.none()` changes nothing.
"""

from __future__ import annotations

import os
from dataclasses import dataclass

import torch


@dataclass(frozen=True)
class Fault:
    nan_loss_step: int | None = None

    @classmethod
    def none(cls) -> Fault:
        return cls()

    @classmethod
    def from_env(cls) -> Fault:
        spec = os.environ.get("RLVR_FAULT", "")
        if spec.startswith("nan_loss@") and spec.split("@", 1)[1].isdigit():
            return cls(nan_loss_step=int(spec.split("@", 1)[1]))
        return cls()

    def poison(self, loss: torch.Tensor, step: int) -> torch.Tensor:
        if self.nan_loss_step == step:
            return loss * torch.tensor(float("nan"))
        return loss
