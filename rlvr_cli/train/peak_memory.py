"""The most memory a process has held since it started (`memory_peak_gib`), read at the end of
every step: the step where it rises is the step that needed more. On a GPU it is PyTorch's
allocated memory (`max_memory_allocated`: the tensors `rlvr plan` estimates per device). On a
CPU it is the process's resident high-water mark (Linux's `VmHWM`): the interpreter, the
libraries and the memory the allocator keeps after a free count too. Neither count is started
again: both belong to the process, and what else reads them (`/usr/bin/time`, `getrusage`, a
profiler) would read the reset too."""

from __future__ import annotations

import re
from pathlib import Path

import torch

GIB = 2**30
_HWM = re.compile(r"^VmHWM:\s+(\d+) kB", re.MULTILINE)


def peak_gib(device: torch.device) -> float | None:
    """The peak so far, in GiB; None where the system does not say."""
    if device.type == "cuda":
        return torch.cuda.max_memory_allocated(device) / GIB
    try:
        match = _HWM.search(Path("/proc/self/status").read_text())
    except OSError:
        return None
    return None if match is None else int(match.group(1)) * 1024 / GIB
