"""The denominator of `mfu`: the best FLOP/s this machine has shown for the compute dtype, kept
in a cache so that every run on it divides by the same number.

One start-up product is a noisy peak: on a 2-core CPU with AMX, four 1024² bf16 products read
410 GFLOP/s in one run and 1,080 in the next, so each run's `mfu` moved 2.6× with nothing
changed, and a low reading flattered it. So the first run on a machine calibrates at more sizes
(three sweeps up to 2048² on a CPU, 8192² on a GPU, products of up to 0.2 s); every run still
measures its quick product (`flops.measured_peak`: up to 512² on a CPU, 8192² on a GPU), and the
cache keeps the best ever seen: a disturbed measurement (two runs calibrating at once) can only
lower one run's reading, never the cached peak. The key
names the machine as the product sees it (the CPU model and its matrix extensions, or the GPU's
name and compute capability), the threads, the PyTorch version and the dtype.

The cache is `$RLVR_CACHE_DIR/peaks.json` (default `$XDG_CACHE_HOME/rlvr`, else `~/.cache/rlvr`).
Delete it to calibrate again. A cache that cannot be read or written is measured around, never an
error: the run does not depend on it.
"""

from __future__ import annotations

import json
import math
import os
import platform
import tempfile
from pathlib import Path
from typing import TYPE_CHECKING, Any

from rlvr_cli.files import read_json_object
from rlvr_cli.train import flops

if TYPE_CHECKING:
    import torch

#: the CPU flags that change what a matrix product reaches
_MATRIX_FLAGS = ("avx2", "avx512f", "avx512_bf16", "avx512_fp16", "amx_bf16", "amx_fp16", "amx_int8")


def cache_path() -> Path:
    root = os.environ.get("RLVR_CACHE_DIR")
    if root:
        return Path(root) / "peaks.json"
    xdg = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(xdg) / "rlvr" / "peaks.json"


def machine_key(device: torch.device, dtype: torch.dtype) -> str:
    import torch

    if device.type == "cuda":
        index = device.index if device.index is not None else torch.cuda.current_device()
        major, minor = torch.cuda.get_device_capability(index)
        where = f"cuda|{torch.cuda.get_device_name(index)}|sm_{major}{minor}"
    else:
        model, flags = _cpu()
        matrix = ",".join(f for f in _MATRIX_FLAGS if f in flags)
        where = f"{device.type}|{model}|{matrix}|threads={torch.get_num_threads()}"
    return f"{where}|torch={torch.__version__}|{str(dtype).removeprefix('torch.')}"


def _cpu() -> tuple[str, set[str]]:
    try:
        text = Path("/proc/cpuinfo").read_text(errors="replace")
    except OSError:
        return platform.processor() or platform.machine(), set()
    fields = dict(line.split(":", 1) for line in text.splitlines() if ":" in line)  # the last CPU's; all alike
    fields = {k.strip(): v.strip() for k, v in fields.items()}
    model = fields.get("model name") or fields.get("CPU part") or platform.machine()
    return model, set(fields.get("flags", fields.get("Features", "")).split())


def device_peak(device: torch.device, dtype: torch.dtype) -> tuple[float, str]:
    """(FLOP/s, where it came from): the best of this run's product and the cached peak, the
    cache raised when this run measured more."""
    key, path = machine_key(device, dtype), cache_path()
    cached = read_json_object(path).get(key)
    best = cached if _plausible(cached) else None
    if best is None:  # the first run on this machine calibrates wider and longer: 3 sweeps, up to 0.2 s a product
        top = 8192 if device.type == "cuda" else 2048
        measured = max(flops.measured_peak(device, dtype, enough_s=0.2, top=top) for _ in range(3))
    else:
        measured = flops.measured_peak(device, dtype)
    if best is not None and best >= measured:
        return best, "cached best"  # no path: plan.json travels in release bundles (docs/release.md)
    _write(path, key, measured)
    return measured, "measured now" if best is None else f"measured now, above the cached {best / 1e12:.4g} TFLOP/s"


def _plausible(value: Any) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool) and math.isfinite(value) and value > 0


def _write(path: Path, key: str, value: float) -> None:
    """Merge into what is there now (another run may have written since), atomically."""
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        data = read_json_object(path)
        if _plausible(data.get(key)) and data[key] >= value:
            return
        data[key] = value
        fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=".peaks-", suffix=".json")
    except OSError:
        return
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as out:
            json.dump(data, out, indent=1, sort_keys=True)
        os.replace(tmp, path)
    except OSError:
        Path(tmp).unlink(missing_ok=True)


def compute_note(device: torch.device, compute: torch.dtype, peak: float) -> str | None:
    """On a CPU, where the contract computes in bf16 or fp16 and this machine multiplies that
    dtype slower than fp32 (no bf16 or fp16 matrix instructions: an AVX2-only CPU runs a 512²
    bf16 product at ~1 GFLOP/s against ~130 in fp32), what fp32 would give instead; else None.
    The run computes what the contract says; the note says what it costs here."""
    import torch

    if device.type != "cpu" or compute not in (torch.bfloat16, torch.float16):
        return None
    fp32, _ = device_peak(device, torch.float32)
    if peak >= fp32:
        return None
    name = "bf16" if compute == torch.bfloat16 else "fp16"
    return (
        f"{name} compute: this CPU multiplies {name} at {peak / 1e9:.3g} GFLOP/s against {fp32 / 1e9:.3g} in fp32 "
        f"(the best it has shown of each), {fp32 / peak:.3g}× slower; `precision: fp32` would train faster here"
    )
