"""Fault injection for tests of the run's guards: RLVR_FAULT=nan_loss@STEP poisons that
step's loss with NaN. Unset in normal runs; it changes nothing else."""

from __future__ import annotations

import os

import torch


def poison(loss: torch.Tensor, step: int) -> torch.Tensor:
    spec = os.environ.get("RLVR_FAULT", "")
    if spec.startswith("nan_loss@") and spec.split("@", 1)[1] == str(step):
        return loss * torch.tensor(float("nan"))
    return loss
