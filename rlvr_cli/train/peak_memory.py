"""The most memory a process held during a step (`memory_peak_gib`), read and started again at
the end of every step. On a GPU it is PyTorch's allocated memory (`max_memory_allocated`: the
tensors `rlvr plan` estimates per device). On a CPU it is the process's resident set (Linux's
`VmHWM`, restarted by writing 5 to `/proc/self/clear_refs`): the interpreter, the libraries and
the memory the allocator keeps after a free count too."""

from __future__ import annotations

import re
from pathlib import Path

import torch

GIB = 2**30
_HWM = re.compile(r"^VmHWM:\s+(\d+) kB", re.MULTILINE)


def step_peak_gib(device: torch.device) -> float | None:
    """The peak since the last call (or the start of the process), in GiB; None where the
    system does not say, or cannot start the count again (a lifetime peak would read as a step's)."""
    if device.type == "cuda":
        peak = torch.cuda.max_memory_allocated(device)
        torch.cuda.reset_peak_memory_stats(device)
        return peak / GIB
    try:
        match = _HWM.search(Path("/proc/self/status").read_text())
        if match is None:
            return None
        Path("/proc/self/clear_refs").write_text("5")  # the peak starts again from what is resident now
    except OSError:
        return None
    return int(match.group(1)) * 1024 / GIB
