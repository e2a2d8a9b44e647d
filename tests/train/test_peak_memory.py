"""`memory_peak_gib`: the most memory a process held during a step, started again every step."""

from __future__ import annotations

import re
from pathlib import Path

import torch

from rlvr_cli.train.peak_memory import step_peak_gib

CPU = torch.device("cpu")


def resident_gib() -> float:
    kib = re.search(r"^VmRSS:\s+(\d+) kB", Path("/proc/self/status").read_text(), re.MULTILINE)
    assert kib is not None
    return int(kib.group(1)) / 2**20


def test_a_steps_peak_counts_what_it_held_and_the_next_step_starts_again() -> None:
    step_peak_gib(CPU)  # whatever this process held before (other tests) is behind us
    start = resident_gib()
    held = torch.ones(64 * 2**20)  # 256 MiB, every page written: resident
    del held  # an allocation this large is returned to the system when freed
    peak = step_peak_gib(CPU)
    after = step_peak_gib(CPU)
    assert peak is not None and after is not None
    assert peak >= start + 0.2  # the step's peak holds the tensor that is gone
    assert after <= peak - 0.2  # the next step's does not: the count started again
