"""`memory_peak_gib`: the most memory a process has held, read at the end of every step."""

from __future__ import annotations

import re
import resource
from pathlib import Path

import torch

from rlvr_cli.train.peak_memory import peak_gib

CPU = torch.device("cpu")


def resident_gib() -> float:
    kib = re.search(r"^VmRSS:\s+(\d+) kB", Path("/proc/self/status").read_text(), re.MULTILINE)
    assert kib is not None
    return int(kib.group(1)) / 2**20


def test_the_peak_holds_what_was_freed_and_leaves_the_processs_own_count_alone() -> None:
    start = resident_gib()
    held = torch.ones(64 * 2**20)  # 256 MiB, every page written: resident
    del held  # an allocation this large goes back to the system when freed
    peak = peak_gib(CPU)
    assert peak is not None
    assert peak >= start + 0.2  # the tensor that is gone still counts
    assert resident_gib() <= peak - 0.2  # what the process holds now is not the peak
    rusage = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 2**20  # KiB → GiB
    assert rusage >= peak - 0.01  # reading it started nothing again: getrusage still sees it
