"""What the two TRL benchmarks share: the GRPOConfig fields they set alike, the step timer,
the timed `generate`, running each trainer as its own process, and the per-step split."""

from __future__ import annotations

import functools
import json
import subprocess
import sys
import time
from collections.abc import Callable
from typing import Any


def grpo_config(folder: Any, **shape: Any) -> Any:
    """TRL's GRPOConfig with what both benchmarks fix: beta 0, token-level loss, group-std
    advantages, constant lr, AdamW (0.9, 0.99), clip-norm 1, no checkpoints, CPU."""
    from trl import GRPOConfig

    return GRPOConfig(
        output_dir=str(folder / "trl"),
        gradient_accumulation_steps=1,
        beta=0.0,
        gradient_checkpointing=False,
        use_cpu=True,
        logging_steps=1,
        report_to=[],
        temperature=1.0,
        top_p=1.0,
        save_strategy="no",
        lr_scheduler_type="constant",
        warmup_steps=0,
        weight_decay=0.0,
        max_grad_norm=1.0,
        adam_beta1=0.9,
        adam_beta2=0.99,
        loss_type="dapo",
        scale_rewards="group",
        dataloader_num_workers=0,
        **shape,
    )


def timer() -> Any:
    """A callback timing the training loop: `loop_s` from the first step's start to the last
    step's end (TRL's logging between steps included, as rlvr's records are in its steps),
    `steps_s` the steps alone."""
    from transformers import TrainerCallback

    class Timer(TrainerCallback):
        def __init__(self) -> None:
            self.first = self.start = self.end = 0.0
            self.steps_s = 0.0

        def on_step_begin(self, *a: Any, **k: Any) -> None:
            self.start = time.perf_counter()
            self.first = self.first or self.start

        def on_step_end(self, *a: Any, **k: Any) -> None:
            self.end = time.perf_counter()
            self.steps_s += self.end - self.start

        @property
        def loop_s(self) -> float:
            return self.end - self.first

    return Timer()


def timed(fn: Callable[..., Any], spent: dict[str, float], key: str) -> Callable[..., Any]:
    """`fn`, adding the seconds each call takes to `spent[key]`."""

    @functools.wraps(fn)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        begin = time.perf_counter()
        try:
            return fn(*args, **kwargs)
        finally:
            spent[key] += time.perf_counter() - begin

    return wrapper


def trl_result(clock: Any, spent: dict[str, float]) -> dict[str, Any]:
    """Training time and its split: generate, score, the rest of TRL's steps, and (other) its
    time between steps."""
    update = clock.steps_s - spent["generate"] - spent["score"]
    return {"train_s": clock.loop_s, "steps_s": clock.steps_s, "split": {**spent, "update": update}}


def rlvr_result(rows: list[dict[str, Any]]) -> dict[str, Any]:
    """Training time and its split from rlvr's metrics rows. `train_s` is the loop, as TRL's is
    timed (`timer`): from the first step's start to the last step's end, with what the run does
    between steps (its metrics row, status.json, checkpoints); `steps_s` the steps alone (a
    step's records are in its time)."""
    rows = [r for r in rows if "step_seconds" in r]
    split = {k: sum(r[f"time_{k}_s"] for r in rows) for k in ("generate", "score", "update")}
    steps = sum(r["step_seconds"] for r in rows)
    loop = rows[-1]["elapsed_s"] - rows[0]["elapsed_s"] + rows[0]["step_seconds"]
    return {"train_s": loop, "steps_s": steps, "split": split}


def run_child(script: str, arguments: list[str]) -> dict[str, Any]:
    """Run one trainer as its own process; its last stdout line is its JSON result."""
    proc = subprocess.run([sys.executable, script, *arguments], capture_output=True, text=True)
    if proc.returncode != 0:
        raise SystemExit(f"{arguments} failed:\n{proc.stderr[-3000:]}")
    return json.loads(proc.stdout.strip().splitlines()[-1])


def print_split(results: dict[str, dict[str, Any]], steps: int) -> None:
    print("per step (ms): generate / score / update (TRL: the rest of its step) / other")
    for name, res in results.items():
        parts = {k: 1000 * v / steps for k, v in res["split"].items()}
        other = 1000 * res["train_s"] / steps - sum(parts.values())
        print(f"{name:8}{parts['generate']:8.1f}{parts['score']:8.1f}{parts['update']:8.1f}{other:8.1f}")
