"""Full weights vs a LoRA adapter (hyperparameters.adapter, peft): one CPU process training the same
contract on the same ~53 M-parameter model (`rlvr init`'s single-turn task, KL to the reference on).

Per run: peak resident memory (ru_maxrss of the training process), the bytes of gradients and
optimizer state the run holds (counted from its checkpoint's state.pt and the trained parameters),
the checkpoint's size on disk (its weights: model/ or adapter/), and seconds per step (metrics.jsonl
`step_seconds`, steps after the first). Run: `.venv/bin/python benchmarks/lora_vs_full.py`
(about 4 minutes on 2 cores).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

from fsdp_vs_ddp import RANK, experiment  # the same 53 M-parameter model and its run wrapper

STEPS = 4
LORA = "{kind: lora, rank: 16, alpha: 32, dropout: 0.0, target_modules: all-linear, bias: none, init: default}"


def size(path: Path) -> int:
    return sum(p.stat().st_size for p in path.rglob("*") if p.is_file())


def state_bytes(checkpoint: Path) -> int:
    """Optimizer state (every tensor of state.pt's optimizer) plus gradients (one per trained weight)."""
    import torch

    blob = torch.load(checkpoint / "state.pt", weights_only=True)
    tensors = [t for s in blob["optimizer"]["state"].values() for t in s.values() if isinstance(t, torch.Tensor)]
    moments = sum(t.numel() * t.element_size() for t in tensors if t.dim() > 0)
    return moments + moments // 2  # AdamW keeps two moments per trained weight: gradients are half of them


def run(folder: Path, name: str, out: Path) -> dict:
    contract = folder / f"{name}.rlvr.yaml"
    text = (folder / "experiment.rlvr.yaml").read_text()
    text = text.replace("every_steps: 20", f"every_steps: {STEPS}")
    if name == "lora":
        text = text.replace("  precision: fp32\n", f"  precision: fp32\n  adapter: {LORA}\n")
    contract.write_text(text)
    (out / "run.py").write_text(RANK)  # one process: rank 0, its peak written to PEAK_DIR
    run_dir, peaks = out / f"run-{name}", out / f"peaks-{name}"
    peaks.mkdir()
    env = {**os.environ, "PEAK_DIR": str(peaks), "RANK": "0"}
    command = [sys.executable, str(out / "run.py"), "train", str(contract), "--run-dir", str(run_dir)]
    done = subprocess.run([*command, "--max-steps", str(STEPS)], capture_output=True, text=True, env=env)
    if done.returncode:
        raise SystemExit(f"{name} failed: {done.stderr[-2000:]}")
    rows = [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines()]
    checkpoint = run_dir / "checkpoints" / f"step-{STEPS}"
    weights = checkpoint / ("adapter" if name == "lora" else "model")
    return {
        "peak_rss_gib": json.loads((peaks / "rank-0.json").read_text())["peak"] / 2**30,
        "grads_and_optimizer_mib": state_bytes(checkpoint) / 2**20,
        "checkpoint_weights_mib": size(weights) / 2**20,
        "checkpoint_mib": size(checkpoint) / 2**20,
        "seconds_per_step": sum(r["step_seconds"] for r in rows[1:]) / max(1, len(rows) - 1),
    }


def main() -> None:
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        folder = experiment(root)
        results = {name: run(folder, name, root) for name in ("full", "lora")}
    full, lora = results["full"], results["lora"]
    print(f"{'':<28}{'full':>12}{'lora r=16':>12}{'lora/full':>11}")
    for key in full:
        print(f"{key:<28}{full[key]:>12.2f}{lora[key]:>12.2f}{lora[key] / full[key]:>11.3f}")
    print(f"steps/s ratio (lora/full): {full['seconds_per_step'] / lora['seconds_per_step']:.2f}")


if __name__ == "__main__":
    main()
