"""`rlvr train`: resolve the run folder, show progress, launch torchrun for `--nproc`."""

from __future__ import annotations

import contextlib
import math
import os
import signal
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any, NoReturn

from rlvr_cli.commands.common import load_valid_contract, require_extra
from rlvr_cli.contract.models import Contract
from rlvr_cli.errors import ExitCode, Interrupted, RlvrError, UsageProblem
from rlvr_cli.metrics import holdout_part
from rlvr_cli.store.run import RunFolder


def default_run_dir(contract: Contract, contract_path: Path) -> Path:
    return contract_path.resolve().parent / "runs" / contract.name


def choose_mode(run_dir: Path, resume: bool, auto: bool) -> bool:
    """Whether to resume. `--auto` (what a scheduler relaunches) resumes when a complete
    checkpoint exists and starts in the same folder otherwise, saying which."""
    run = RunFolder(run_dir)
    if auto:
        if run.complete_checkpoints():
            print(f"--auto: {run_dir} has a checkpoint; resuming", file=sys.stderr)
            return True
        print(f"--auto: no checkpoint in {run_dir}; starting from step 0", file=sys.stderr)
        run_dir.mkdir(parents=True, exist_ok=True)
        return False
    if resume:
        if not run.is_run():
            raise UsageProblem(f"{run_dir} holds no run to resume")
        if not run.complete_checkpoints():
            raise UsageProblem(
                f"{run_dir} has no complete checkpoint yet, so there is nothing to resume from; "
                "`--auto` starts the run again in the same folder"
            )
        return True
    if run_dir.exists() and any(p.name not in (".lock", ".processes") for p in run_dir.iterdir()):
        raise UsageProblem(
            f"run folder {run_dir} already holds a run; pass --resume (or --auto) to continue it "
            "or --run-dir for a new one (nothing is overwritten)"
        )
    run_dir.mkdir(parents=True, exist_ok=True)
    return False


@contextlib.contextmanager
def exclusive(run_dir: Path) -> Iterator[None]:
    """One `rlvr train` per run folder at a time (an advisory lock the OS drops with the process)."""
    import fcntl

    run_dir.mkdir(parents=True, exist_ok=True)
    with (run_dir / ".lock").open("a+") as fh:
        try:
            fcntl.flock(fh, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError:
            fh.seek(0)
            raise UsageProblem(f"another rlvr train is running in {run_dir} (pid {fh.read().strip() or '?'})") from None
        fh.seek(0)
        fh.truncate()
        fh.write(str(os.getpid()))
        fh.flush()
        yield


@contextlib.contextmanager
def signals_unwind() -> Iterator[None]:
    """SIGTERM (and SIGINT) unwind the run like an exception, so status.json is written."""

    def handler(signum: int, _: Any) -> None:
        name = signal.Signals(signum).name
        stop = Interrupted(name, ExitCode.TERMINATED if signum == signal.SIGTERM else ExitCode.INTERRUPTED)
        Interrupted.raised = stop
        raise stop

    Interrupted.raised = None
    previous = {s: signal.signal(s, handler) for s in (signal.SIGTERM, signal.SIGINT)}
    try:
        yield
    finally:
        for s, h in previous.items():
            signal.signal(s, h)


def refuse_unfit(
    contract: Any, contract_path: Path, world: int, device_memory: float | None, resuming: bool = False
) -> None:
    """Refuse a run whose plan does not fit the memory of the devices it runs on (what CUDA
    reports, or `--device-memory`), with the change that makes it fit (`resuming`: a change a
    resume allows). On CPU without the flag nothing is checked (host memory is shared with
    everything else)."""
    import torch

    from rlvr_cli.train.memory_estimate import GIB, advice, estimate, fmt_bytes, load_shape, peak

    if device_memory is None and not torch.cuda.is_available():
        return
    if contract.artifacts.policy.path is None:
        return  # a hub id: `rlvr plan` reads config.json from a local folder only
    budget = device_memory * GIB if device_memory is not None else float(torch.cuda.mem_get_info()[1])
    shape = load_shape(contract, contract_path.resolve().parent)
    terms = estimate(contract, shape, world)
    needed = peak(contract, terms)[0]
    if needed <= budget:
        return
    tips = "; ".join(advice(contract, shape, terms, budget, world, resuming))
    raise RlvrError(
        f"the plan needs {fmt_bytes(needed)} per device, more than the {fmt_bytes(budget)} "
        f"each of the {world} device(s) has: {tips} (`rlvr plan {contract_path} --gpus {world}` lists every term)"
    )


def run_train(
    contract_path: Path,
    run_dir: Path | None,
    max_steps: int | None,
    resume: bool,
    force: bool,
    auto: bool = False,
    device_memory: float | None = None,
) -> int:
    contract, steps = preflight(contract_path, max_steps)
    from rlvr_cli.train import distributed
    from rlvr_cli.train.loop import AlreadyFinished, train

    run_dir = (run_dir or default_run_dir(contract, contract_path)).resolve()
    distributed.init()
    resuming = resume or (auto and run_dir.is_dir() and bool(RunFolder(run_dir).complete_checkpoints()))
    refuse_unfit(contract, contract_path, distributed.rank_world()[1], device_memory, resuming)
    main = distributed.rank_world()[0] == 0
    with signals_unwind(), contextlib.ExitStack() as stack:
        # inside the signal handling: a run that is ending absorbs a SIGTERM
        stack.push(lambda kind, _exc, _tb: distributed.shutdown(clean=kind is None))
        # the main process decides (`--auto` resumes exactly when a checkpoint exists), every
        # process follows, once each has shown it sees the folder the main process writes
        if main:
            stack.enter_context(exclusive(run_dir))
            resume = choose_mode(run_dir, resume, auto)
        resume = distributed.same_folder(run_dir, resume)
        done = finished_at(run_dir) if auto and resume else None
        if done is not None and (max_steps is None or done >= max_steps):
            print(f"--auto: the run already finished at step {done}; nothing to do", file=sys.stderr)
            return ExitCode.OK
        try:
            return train(contract, contract_path, run_dir, steps, resume, force, Progress(enabled=main))
        except AlreadyFinished as exc:
            if not auto:
                raise
            print(f"--auto: {exc}; nothing to do", file=sys.stderr)
            return ExitCode.OK


def preflight(contract_path: Path, max_steps: int | None, world: int = 1) -> tuple[Contract, int]:
    """What `rlvr train` checks before anything starts: the extra installed, the contract valid
    with its model folders there, at least one step, groups that `world` processes can share.
    `--nproc N` checks it before launching, so a contract that cannot train is said once, not
    once a process among torchrun's lines."""
    require_extra("train", "torch", "transformers")
    from rlvr_cli.train.collectives import check_shareable

    contract = load_valid_contract(contract_path, artifacts=True)
    steps = max_steps if max_steps is not None else contract.hyperparameters.max_steps
    if steps < 1:
        raise UsageProblem("--max-steps must be at least 1")
    check_shareable(contract, world)
    return contract, steps


def finished_at(run_dir: Path) -> int | None:
    """The step a finished run stopped at (whatever `--max-steps` it was given), or None."""
    try:
        status = RunFolder(run_dir).read_status()
    except RlvrError:
        return None
    return status.step if status.state == "finished" and status.step is not None else None


def launch(nproc: int, contract_path: Path, max_steps: int | None, argv: list[str]) -> NoReturn:
    """`rlvr train --nproc N ...`: the same command under torchrun with N processes (this process
    becomes the launcher, rlvr_cli/train/launcher.py, whose exit code is the command's), once
    the contract has passed `preflight` here."""
    preflight(contract_path, max_steps, nproc)
    torchrun = ["--standalone", f"--nproc_per_node={nproc}", "-m", "rlvr_cli", "train", *argv]
    print("launching: torch.distributed.run " + " ".join(torchrun), file=sys.stderr, flush=True)
    sys.stdout.flush()
    # this process becomes the launcher (the same pid): a signal sent to it reaches torchrun's
    # agent, which passes it to every process of the run, as a signal to `torchrun` itself would
    os.execv(sys.executable, [sys.executable, "-m", "rlvr_cli.train.launcher", *torchrun])


def progress_line(
    step: int, total: int, row: dict[str, Any], eta: float, rate: float | None = None, holdout: str | None = None
) -> str:
    """`step 12/200  reward 0.41  kl ...  holdout correct 0.700 (step 10)  812 tok/s  ETA 95s`.
    The holdout part is the newest evaluation's (each component apart: the reward may include a
    format bonus that rises while the task is not learned); tok/s is the mean since the start
    unless `rate` is None (then the step's own)."""

    def fmt(key: str) -> str:
        value = row.get(key)
        return "n/a" if value is None or (isinstance(value, float) and math.isnan(value)) else f"{value:.3f}"

    shown = rate if rate is not None else row.get("tokens_per_s") or 0
    line = (
        f"step {step}/{total}  reward {fmt('reward_mean')}  kl {fmt('kl')}  entropy {fmt('entropy')}  "
        f"len {fmt('response_length_mean')}"
    )
    if holdout:
        line += f"  holdout {holdout}"
    line += f"  {shown:.0f} tok/s" + (f"  mfu {row['mfu']:.1%}" if isinstance(row.get("mfu"), float) else "")
    return line + "".join(f"  {w}" for w in warnings(row)) + f"  ETA {eta:.0f}s"


STRAGGLER = 0.2  # a rank that keeps the others waiting for this share of the step is named
STALE = 2.0  # samples drawn ahead older than this many steps' time are named
DRIFT = 0.1  # an engine whose log-probs differ from the trainer's by more (nats) on some token is named


def warnings(row: dict[str, Any]) -> list[str]:
    """What the step line says only when it matters: a straggling process, a stale queue, a
    drifting engine."""
    out, step = [], row.get("step_seconds") or 0.0
    lag, age = row.get("rank_lag_s"), row.get("rollout_age_s")
    if isinstance(lag, float) and step and lag > STRAGGLER * step:
        out.append(f"rank {int(row.get('slowest_rank') or 0)} lags {lag:.1f}s")
    if isinstance(age, float) and step and age > STALE * step:
        out.append(f"samples {age:.1f}s old")
    drift = row.get("engine_logprob_diff_max")
    if isinstance(drift, float) and drift > DRIFT:
        out.append(f"engine drifts: |Δ log p| up to {drift:.2f} on {row.get('engine_mismatch_share', 0):.0%} > 0.1")
    return out


class Progress:
    """A live rich progress bar on an interactive stderr; one plain line per step otherwise
    (logs, CI). Shows step, reward, KL, entropy, length, throughput and ETA."""

    def __init__(self, enabled: bool = True) -> None:
        self.enabled, self.total = enabled, 0
        self.tokens = self.seconds = 0.0  # since this invocation started: a rate that does not swing
        self.holdout: str | None = None
        self.live = (
            enabled and sys.stderr.isatty() and not os.environ.get("NO_COLOR") and os.environ.get("TERM") != "dumb"
        )
        self.bar: Any = None

    def start(self, total: int, first: int) -> None:
        self.total = total
        if not self.live:
            return
        from rich.console import Console
        from rich.progress import BarColumn, MofNCompleteColumn, TextColumn, TimeRemainingColumn
        from rich.progress import Progress as RichProgress

        self.bar = RichProgress(
            TextColumn("step"),
            MofNCompleteColumn(),
            BarColumn(),
            TextColumn("{task.fields[info]}"),
            TextColumn("ETA"),
            TimeRemainingColumn(),
            console=Console(stderr=True),
            transient=False,
        )
        self.task = self.bar.add_task("train", total=total, completed=first, info="")
        self.bar.start()

    def step(self, step: int, row: dict[str, Any], eta: float) -> None:
        if not self.enabled:
            return
        seconds = row.get("step_seconds") or 0.0
        self.seconds += seconds
        self.tokens += (row.get("tokens_per_s") or 0.0) * seconds
        self.holdout = holdout_part(row, step) or self.holdout
        rate = self.tokens / self.seconds if self.seconds > 0 else None
        line = progress_line(step, self.total, row, eta, rate, self.holdout)
        if self.bar is None:
            print(line, file=sys.stderr, flush=True)
            return
        info = line.split("  ", 1)[1].rsplit("  ETA", 1)[0]
        self.bar.update(self.task, completed=step, info=info)

    def before_training(self, row: dict[str, Any]) -> None:
        """The holdout evaluated before the first update: said once, and shown on the step lines
        until the first evaluation of the run replaces it."""
        self.holdout = holdout_part(row, 0)
        if self.enabled and self.holdout:
            self.say(f"holdout before training: {self.holdout}")

    def say(self, text: str) -> None:
        """A line above the live bar (or among the step lines)."""
        if self.bar is not None:
            self.bar.console.print(text, markup=False, highlight=False)
        else:
            print(text, file=sys.stderr, flush=True)

    def stop(self) -> None:
        if self.bar is not None:
            self.bar.stop()
            self.bar = None
