"""`rlvr train` as a short story. `train_step` is one step, top to bottom:

    rollout → score → KL in the reward → advantages → update → the engine's weights → log

and `run_steps` wraps it with what a run adds each step: records, holdout evaluation, metrics,
the monitoring rules, the budget and checkpoints. Set-up is `setup.build`; a checkpoint's counters: `TrainState`.
"""

from __future__ import annotations

import contextlib
import gc
import math
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol

from rlvr_cli.contract import lock
from rlvr_cli.contract.models import Contract
from rlvr_cli.engine.types import EngineFailed
from rlvr_cli.env.agent import EnvUnreachable
from rlvr_cli.env.sample import Sample
from rlvr_cli.errors import RlvrError
from rlvr_cli.files import sha256_bytes
from rlvr_cli.metrics import StepMetrics
from rlvr_cli.rollout.base import Rollout
from rlvr_cli.rollout.rollouts import open_rollout
from rlvr_cli.store.records import RecordStore
from rlvr_cli.store.run import RunFolder, Status
from rlvr_cli.trackers.fanout import Trackers
from rlvr_cli.train import (
    calibration,
    credit,
    ending,
    flops,
    importance,
    overlap,
    peak_memory,
    reference_nll,
    rejection,
    tracking,
    update,
)
from rlvr_cli.train import distributed as dist
from rlvr_cli.train.checkpoint import load_latest
from rlvr_cli.train.collect import StepResult, collect
from rlvr_cli.train.evaluation import holdout, holdout_start
from rlvr_cli.train.faults import Fault
from rlvr_cli.train.logbook import NoSignal, rollout_metrics, write_records
from rlvr_cli.train.monitor import Monitor
from rlvr_cli.train.overlap import Ahead
from rlvr_cli.train.run_plan import build_plan, plan_text, trainer_words
from rlvr_cli.train.setup import Setup, build, check_data
from rlvr_cli.train.state import TrainState
from rlvr_cli.train.stops import (
    _eprint,
    budget_spent,
    checkpoint,
    checkpoint_step_start,
    finish,
    skipped_too_often,
    step_mark,
    stop_for_rule,
    stop_for_skipped_updates,
)

#: while the steps run, status.json is rewritten at most this often (`rlvr status` sees a step
#: within it); a checkpoint, a stop and the end write it at once, durably
STATUS_EVERY_S = 1.0


class Progress(Protocol):
    """How the command shows progress (a rich bar, or one line per step)."""

    def start(self, total: int, first: int) -> None: ...
    def step(self, step: int, row: dict[str, Any], eta: float) -> None: ...
    def before_training(self, row: dict[str, Any]) -> None: ...
    def say(self, text: str) -> None: ...
    def stop(self) -> None: ...


@dataclass
class Run:
    """Everything one invocation of `rlvr train` works with."""

    setup: Setup
    state: TrainState
    folder: RunFolder
    records: RecordStore | None  # only the main process writes records
    monitor: Monitor
    contract_path: Path
    steps: int  # this invocation's last step (`--max-steps`, or the contract's)
    ahead: Ahead | None = None  # sampling the next step during this one's update (train/overlap.py)
    trackers: Trackers | None = None  # monitoring.trackers, on the main process (train/tracking.py)
    shape: flops.Shape | None = None  # the policy's FLOPs per token (train/flops.py)
    peak: float = 0.0  # the training device's measured FLOP/s in the compute dtype
    references: list[tuple[list[int], list[int]]] | None = None  # monitoring.reference_answers: holdout_nll
    status_at: float = -math.inf  # when the steps last wrote status.json (monotonic): never yet

    @property
    def contract(self) -> Contract:
        return self.setup.contract

    def status(self, state: str, durable: bool = True, **details: Any) -> None:
        if self.setup.main:
            trackers = self.trackers.states() if self.trackers else None
            status = Status(state, step=self.state.step, trackers=trackers, **details)  # type: ignore[arg-type]
            self.folder.write_status(status, durable=durable)


def train_step(
    setup: Setup, state: TrainState, rollout: Rollout, ahead: Ahead | None = None, launch: bool = False
) -> tuple[StepMetrics, list[Sample]]:
    """One step: sample and verify groups, compute advantages, update the policy, measure. With
    `ahead`, groups sampled during the last update are used; `launch` samples the next step's."""
    result = collect(setup, state, rollout, ahead)  # rollout → score
    credit.spread(setup.contract, result.generated)  # which sessions of each episode train; before the weights move:
    update.sampling_logprobs(setup, [p for s in result.generated for p in s.episode if not p.kept])
    if ahead is not None and launch:
        ahead.launch(state, rollout)
    flat, trained, owner = credit.units(setup.contract, [s for group in result.accepted for s in group])
    learned: dict[str, float] = {}
    start = time.perf_counter()
    dist.spent()  # collectives of this step from here (the sampling's gathers are in time_generate_s)
    anything = dist.total(float(len(trained)))  # the first collective: here a rank waits for the slowest
    result.times.waited = time.perf_counter() - start
    if anything:
        fwd = update.Forward.of(setup, trained)
        ref = update.reference_logprobs(setup, fwd)
        rewards, old = update.rewards_with_kl(setup, flat, fwd, ref, owner)  # KL in the reward
        old, rejected = rejection.reject(setup, trained, fwd, old)  # rejected tokens leave the loss mask
        tokens = fwd.batch.response_mask.sum(dim=1)  # (B,): each trained row's tokens (whiten over batch_tokens)
        adv = update.step_advantages(setup, flat, rewards, owner, tokens)  # advantages (and each row its unit's)
        credit.share(flat, trained, owner)
        old = importance.ratio_denominator(setup, state, trained, fwd, old)
        learned = {**update.optimizer_passes(setup, state, trained, adv, fwd, old, ref), **rejected}  # update
    if ahead is not None:
        ahead.before_sync()
    setup.engine.sync(setup.policy, state.optimizer_steps)  # nothing samples from older weights
    result.times.update = time.perf_counter() - start
    if dist.active():  # metrics and records cover every rank's samples, in group order
        everyone = (s for part in dist.gather(result.generated) for s in part)
        result.generated = sorted(everyone, key=lambda s: (s.round, s.group, s.index))
        result.accepted = [g for part in dist.gather(result.accepted) for g in part]
    metrics = StepMetrics(state.step)  # log
    metrics.memory_peak_gib = peak_memory.peak_gib(setup.device)
    if dist.active():
        metrics.update(ranks(result, metrics.memory_peak_gib))
    metrics.update(rollout_metrics(setup.contract, result))
    metrics.update(learned | setup.engine.handover())  # (a served engine: the seconds its weights took)
    _count(state, metrics, result)
    return metrics, result.generated


def ranks(result: StepResult, peak: float | None) -> dict[str, float | None]:
    """Under torchrun: seconds in rlvr's collectives, how far the fastest rank waited for the
    slowest, and the largest peak memory of any process."""
    waits, peaks = zip(*dist.gather((result.times.waited, peak)), strict=True)
    known = [p for p in peaks if p is not None]
    return {
        "time_collectives_s": dist.spent(),
        "rank_lag_s": max(waits) - min(waits),
        "slowest_rank": float(waits.index(min(waits))),
        "memory_peak_gib": max(known) if known else None,
    }


def _count(state: TrainState, metrics: StepMetrics, result: StepResult) -> None:
    """The phases' timings and the running totals the budget is checked against (the step's
    wall time is `run_steps`': it covers the records and any holdout evaluation too)."""
    totals = state.totals
    totals.rollouts += len(result.generated)
    totals.verifier_calls += sum(s.verdict is not None for s in result.generated)
    totals.tokens += sum(len(s.response_ids) for s in result.generated)
    totals.verifier_seconds += sum(s.verify_seconds for s in result.generated)
    metrics.update(result.times.metrics())
    metrics.update({f"total_{k}": float(v) for k, v in totals.as_json().items()})


def run_steps(run: Run, rollout: Rollout, progress: Progress) -> int:
    setup, state = run.setup, run.state
    started, first = time.perf_counter(), state.step
    no_signal, rows = NoSignal(), run.folder.metrics_appender()
    progress.start(run.steps, first)
    try:
        if first == 0:
            holdout_start(run, rollout, progress)
        while state.step < run.steps:
            # nothing to sample ahead after the contract's last step; before an early stop
            # (--max-steps) the next step is sampled all the same: the checkpoint keeps it
            more = state.step + 1 < run.contract.hyperparameters.max_steps
            step_started = time.perf_counter()
            setup.fault.rank_fault(state.step, setup.rank)
            mark = step_mark(run)
            try:
                metrics, generated = train_step(setup, state, rollout, run.ahead, more)
            except (EnvUnreachable, EngineFailed):
                checkpoint_step_start(run, mark)  # `--auto` goes on from this step, not the last checkpoint
                raise
            if run.records is not None and state.step > run.records.last_step:  # a redone step is not written twice
                metrics.time_records_s = write_records(run.records, setup, state.step, generated)
            holdout(run, rollout, metrics)
            _step_time(run, metrics, generated, time.perf_counter() - step_started)
            metrics.elapsed_s = time.perf_counter() - started
            row = metrics.row()
            if setup.main:
                rows.append(row)
            state.step += 1
            tracking.send(run, state.step, row, progress)
            eta = (time.perf_counter() - started) / (state.step - first) * (run.steps - state.step)
            progress.step(state.step, row, eta)
            said = no_signal.observe(state.step, row)
            if said and setup.main:
                progress.say(said)
            if time.monotonic() - run.status_at >= STATUS_EVERY_S:  # `rlvr status` sees the step
                run.status("running", durable=False, max_steps=run.steps)
                run.status_at = time.monotonic()
            fired = run.monitor.observe(row)  # check rules
            state.monitor = run.monitor.state()
            if fired is not None:
                return stop_for_rule(run, fired)
            if skipped_too_often(state, row):
                return stop_for_skipped_updates(run)
            spent = budget_spent(run)
            if spent:
                return finish(run, spent)
            if state.step % run.contract.checkpoint.every_steps == 0 or state.step == run.steps:
                checkpoint(run)
    finally:
        rows.close()
        progress.stop()
    return finish(run, f"reached step {state.step}")


def _step_time(run: Run, metrics: StepMetrics, generated: list[Sample], wall: float) -> None:
    """The step's wall time (its records and any holdout evaluation included) and what it did in it."""
    metrics.step_seconds = wall
    every = [p for s in generated for p in s.episode]  # an episode's sessions each hold their own tokens
    metrics.tokens_per_s = sum(len(s.response_ids) for s in every) / max(wall, 1e-9)
    if run.peak:
        trained, hp = [s for s in every if s.kept], run.contract.hyperparameters
        done = flops.step_flops(
            run.shape, every, trained, hp.updates_per_batch, run.setup.reference is not None,
            run.setup.contract.objective.entropy_mask is not None,
        )  # fmt: skip
        metrics.step_tflop = done / 1e12
        metrics.mfu = done / (max(wall, 1e-9) * run.peak * run.setup.world)


def start(contract: Contract, contract_path: Path, run_dir: Path, steps: int, resume: bool, force: bool) -> Run:
    """Build the run: set-up, then a fresh state or the newest checkpoint's."""
    folder = RunFolder(run_dir)
    lock.check_unchanged(contract, contract_path)
    report = dist.on_main(lambda: check_data(contract, contract_path))  # once, not once a process
    setup = build(contract, contract_path.resolve().parent, Fault.from_env(), run_dir)
    setup.data_check = sha256_bytes(report.dumps().encode()) if setup.main else None
    if setup.main:
        folder.write_data_check(report.dumps())
    monitor = Monitor(contract)
    if resume:
        state = _resume(setup, folder, monitor, contract_path, steps, force)
    else:
        state = TrainState.fresh(len(setup.train_tasks), contract.hyperparameters.seed)
    if setup.main:
        folder.truncate_metrics(state.step)  # steps after the checkpoint are redone and logged once
    # one process owns the record store: opening it also clears orphans of interrupted writes
    records = RecordStore(folder.records, contract.records.shard_rows, setup.fault.records) if setup.main else None
    if records is not None:
        records.keep_before(steps)  # an interrupted attempt may have gone further than this run goes
    setup.engine.sync(setup.policy, state.optimizer_steps)  # a resumed run's weights, wherever it samples
    ahead = None
    if overlap.allowed(setup):
        ahead = Ahead(setup)
        ahead.restore(state.ahead)
    references = reference_nll.references(setup)  # a field no holdout task has stops the run here
    return Run(setup, state, folder, records, monitor, contract_path, steps, ahead, references=references)


def _resume(
    setup: Setup, folder: RunFolder, monitor: Monitor, contract_path: Path, steps: int, force: bool
) -> TrainState:
    status = folder.read_status()
    if status.state == "aborted" and not force:
        raise RlvrError(f"the run was aborted ({status.reason}); resume refuses it unless --force")
    state = load_latest(setup, folder, contract_path, force)
    if status.state == "finished" and state.step >= steps:
        raise AlreadyFinished(f"the run already finished at step {state.step}")
    monitor.restore(state.monitor)
    if status.state in ("paused", "aborted") and status.rule is not None:
        monitor.acknowledge(status.rule.name)  # resuming is the owner's answer: the window starts again
    if setup.main:
        _eprint(f"resuming from checkpoint step-{state.step}")
    return state


class AlreadyFinished(RlvrError):
    """`--resume` of a run that already reached its last step."""


def train(
    contract: Contract, contract_path: Path, run_dir: Path, steps: int, resume: bool, force: bool, progress: Progress
) -> int:
    """Run (or resume) the contract in `run_dir` up to step `steps`; returns the exit code.
    Whatever stops the run — a rule, a signal, a full disk, a bug — `status.json` says so."""
    run = start(contract, contract_path, run_dir, steps, resume, force)
    setup = run.setup
    run.shape = flops.Shape.of(setup.policy)
    run.peak, peak_source = calibration.device_peak(setup.device, setup.compute or setup.dtype)
    resolved = {
        "peak_tflops": round(run.peak / 1e12, 4),  # per device, measured: the denominator of `mfu`
        "peak_source": peak_source,
        "processes": setup.world,
        "rollout_engine": setup.engine_version,
        "update_forward": update.forward_description(setup),
        **trainer_words(setup),  # what trains, and how the policy's tool calls are read
    }
    note = calibration.compute_note(setup.device, setup.compute or setup.dtype, run.peak)
    if note is not None:  # bf16 or fp16 on a CPU that multiplies them slower than fp32
        resolved["compute_note"] = note
    plan = build_plan(contract, contract_path, run_dir, steps, str(setup.device), resolved)
    if setup.main:
        _eprint(plan_text(plan) + (f"\nprocesses: {setup.world} (torch.distributed)" if setup.world > 1 else ""))
        run.folder.write_plan(plan)
        tracking.open_trackers(run, lock.lock_path(contract, contract_path))
        run.status("running", max_steps=steps)
    try:
        # the records of every finished step are on disk when the run ends, however it ends
        rollout = open_rollout(contract, setup.folder, setup.renderer, setup.engine, log_dir=run.folder.path)
        records = run.records or contextlib.nullcontext()
        with tracking.closing(run), rollout as opened, _closing(run.ahead), records, _steady_heap():
            return run_steps(run, opened, progress)
    except BaseException as exc:
        return ending.ended(run, exc)  # status.json says what stopped the run; the error reaches the user


@contextlib.contextmanager
def _steady_heap() -> Any:
    """What is alive when the steps begin (the libraries, the model, the optimizer: ~400,000
    objects) leaves the garbage collector's generations until they end, so a full collection
    scans only what the steps made (measured on the toy generation-bound shape: one full
    collection of 0.2 s in 200 steps before, none after)."""
    gc.collect()
    gc.freeze()
    try:
        yield
    finally:
        gc.unfreeze()  # collectable again, for a process that goes on (a library caller, a test)


@contextlib.contextmanager
def _closing(ahead: Ahead | None) -> Any:
    """The sampling thread ends with the run, however it ends."""
    try:
        yield
    finally:
        if ahead is not None:
            ahead.close()
