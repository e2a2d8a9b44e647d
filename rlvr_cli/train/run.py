"""`rlvr train`: the run folder, the plan, the step loop with its outputs, and the status.

Run folder (ARCHITECTURE.md): plan.json, metrics.jsonl, records/, checkpoints/step-<N>/,
final/, status.json. Exit codes: 0 finished, 1 refused (invalid contract, bad input) or
failed, 4 paused by a monitoring rule (resumable), 5 aborted.
"""

from __future__ import annotations

import json
import math
import os
import sys
import time
from pathlib import Path
from typing import Any

from rlvr_cli.contract.models import Contract
from rlvr_cli.errors import UsageProblem

EXIT_FINISHED, EXIT_FAILED, EXIT_PAUSED, EXIT_ABORTED = 0, 1, 4, 5


def write_json(path: Path, data: Any) -> None:
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text(json.dumps(data, indent=2, default=str) + "\n", encoding="utf-8")
    os.replace(tmp, path)


def set_status(run_dir: Path, state: str, **details: Any) -> None:
    write_json(
        run_dir / "status.json",
        {"state": state, "updated": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()), **details},
    )


def default_run_dir(contract: Contract, contract_path: Path) -> Path:
    return contract_path.resolve().parent / "runs" / contract.name


def prepare_run_dir(run_dir: Path, resume: bool) -> None:
    if resume:
        if not (run_dir / "status.json").is_file():
            raise UsageProblem(f"{run_dir} holds no run to resume")
        return
    if run_dir.exists() and any(run_dir.iterdir()):
        raise UsageProblem(
            f"run folder {run_dir} already holds a run; pass --resume to continue it "
            "or --run-dir for a new one (nothing is overwritten)"
        )
    run_dir.mkdir(parents=True, exist_ok=True)


def clean(metrics: dict[str, float]) -> dict[str, Any]:
    """JSON has no NaN: a metric that could not be measured this step is null."""
    return {k: (None if isinstance(v, float) and not math.isfinite(v) else v) for k, v in metrics.items()}


def run_train(
    contract_path: Path, run_dir: Path | None, max_steps: int | None, resume: bool, force: bool = False
) -> int:
    from rlvr_cli.commands.common import load_valid_contract
    from rlvr_cli.train import distributed

    contract = load_valid_contract(contract_path)
    run_dir = (run_dir or default_run_dir(contract, contract_path)).resolve()
    distributed.init()
    if distributed.rank_world()[0] == 0:
        prepare_run_dir(run_dir, resume)
    distributed.barrier()
    steps = max_steps if max_steps is not None else contract.hyperparameters.max_steps
    if steps < 1:
        raise UsageProblem("--max-steps must be at least 1")
    from rlvr_cli.train.session import Session

    session = Session(contract, contract_path, run_dir, steps, resume, force)
    try:
        return session.run()
    finally:
        distributed.shutdown()


def launch(nproc: int, argv: list[str]) -> int:
    """`rlvr train --nproc N ...`: the same command under torchrun with N processes."""
    import subprocess

    command = [
        sys.executable,
        "-m",
        "torch.distributed.run",
        "--standalone",
        f"--nproc_per_node={nproc}",
        "-m",
        "rlvr_cli",
        "train",
        *argv,
    ]
    eprint("launching: " + " ".join(command[2:]))
    return subprocess.run(command).returncode


def progress_line(step: int, total: int, metrics: dict[str, Any], eta: float) -> str:
    def fmt(key: str) -> str:
        value = metrics.get(key)
        return "n/a" if value is None or (isinstance(value, float) and math.isnan(value)) else f"{value:.3f}"

    return (
        f"step {step}/{total}  reward {fmt('reward_mean')}  kl {fmt('kl')}  entropy {fmt('entropy')}  "
        f"len {fmt('response_length_mean')}  {metrics.get('tokens_per_s', 0):.0f} tok/s  ETA {eta:.0f}s"
    )


def eprint(message: str) -> None:
    print(message, file=sys.stderr, flush=True)


class Progress:
    """A live rich progress bar on an interactive stderr; one plain line per step otherwise
    (logs, CI). Shows step, reward, KL, entropy, length, throughput and ETA."""

    def __init__(self, total: int, first: int, enabled: bool = True) -> None:
        self.total, self.enabled = total, enabled
        self.live = (
            enabled and sys.stderr.isatty() and not os.environ.get("NO_COLOR") and os.environ.get("TERM") != "dumb"
        )
        self.bar: Any = None
        if self.live:
            from rich.console import Console
            from rich.progress import BarColumn, MofNCompleteColumn, TextColumn, TimeRemainingColumn
            from rich.progress import Progress as RichProgress

            self.bar = RichProgress(
                TextColumn("step"),
                MofNCompleteColumn(),
                BarColumn(),
                TextColumn("{task.fields[info]}"),
                TimeRemainingColumn(),
                console=Console(stderr=True),
                transient=False,
            )
            self.task = self.bar.add_task("train", total=total, completed=first, info="")

    def __enter__(self) -> Progress:
        if self.bar is not None:
            self.bar.start()
        return self

    def __exit__(self, *exc: object) -> None:
        if self.bar is not None:
            self.bar.stop()

    def update(self, step: int, row: dict[str, Any], eta: float) -> None:
        if not self.enabled:
            return
        if self.bar is None:
            eprint(progress_line(step, self.total, row, eta))
            return
        info = progress_line(step, self.total, row, eta).split("  ", 1)[1].rsplit("  ETA", 1)[0]
        self.bar.update(self.task, completed=step, info=info)
