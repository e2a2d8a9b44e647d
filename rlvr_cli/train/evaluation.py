"""The holdout evaluation during training: every `holdout_every` steps, and once before the
first update of a run that starts at step 0 (`holdout-start.json`): one greedy answer (or
episode) to every holdout task, never with hints, from the weights as they are. Under torchrun
the processes share the tasks out and every process gets every answer back."""

from __future__ import annotations

from typing import TYPE_CHECKING

from rlvr_cli.env.sample import Sample
from rlvr_cli.metrics import StepMetrics
from rlvr_cli.rollout.base import Draw, Rollout
from rlvr_cli.train import distributed as dist
from rlvr_cli.train import reference_nll, tracking
from rlvr_cli.train.logbook import holdout_segments

if TYPE_CHECKING:
    from rlvr_cli.train.loop import Progress, Run


def holdout(run: Run, rollout: Rollout, metrics: StepMetrics) -> None:
    """Every `holdout_every` steps: one greedy answer (or episode) to every holdout task, never
    with hints, from the weights just trained."""
    every = run.contract.monitoring.holdout_every
    if not every or (run.state.step + 1) % every:
        return
    _metrics(run, _rows(run, rollout), metrics)


def holdout_start(run: Run, rollout: Rollout, progress: Progress) -> None:
    """Before the first update of a run that starts at step 0, the same evaluation of the
    starting weights: the curve's step-0 point (`holdout-start.json`), the baseline the gate
    compares with too. It enters no rule and no reward/holdout divergence."""
    if not run.contract.monitoring.holdout_every:
        return
    _values(run, _rows(run, rollout), metrics := StepMetrics(0))
    row = {k: v for k, v in metrics.row().items() if k.startswith("holdout")}  # every holdout metric
    if run.setup.main:
        run.folder.write_holdout_start(row)
        progress.before_training(row)
        tracking.send(run, 0, row, progress)


def _rows(run: Run, rollout: Rollout) -> list[Sample]:
    if run.ahead is not None:
        run.ahead.wait()  # the sampling in flight shares the reward source
    # in batches of the rows a process samples at once in a step (what the plan gives its KV cache:
    # a group's rows under torchrun unless sample_groups is together, so the same batches at any
    # number of processes); under torchrun batch k is rank k mod N's, and every process gets every
    # answer back, in task order
    setup, tasks = run.setup, run.setup.holdout_tasks
    size = max(setup.contract.rows_sampled_at_once(setup.world, dist.active()), 1)
    answers: list[Sample] = []
    with setup.engine.lent():  # every process enters the phase (fsdp2 gathers the weights for it)
        for start in range(setup.rank * size, len(tasks), setup.world * size):
            numbers = list(range(start, min(start + size, len(tasks))))
            draw = Draw(group_size=1, seed=0, revision=run.state.optimizer_steps, greedy=True, groups=numbers)
            answers += rollout.sample(tasks[start : start + size], draw)
    return sorted((s for part in dist.gather(answers) for s in part), key=lambda s: s.group)


def _values(run: Run, rows: list[Sample], metrics: StepMetrics) -> None:
    valid = [s.reward for s in rows if s.valid]  # an invalid verdict is excluded, never a reward of 0
    metrics.holdout_reward = sum(valid) / len(valid) if valid else float("nan")
    scored = [s.verdict.components for s in rows if s.valid and s.verdict is not None]
    for part in run.contract.objective.reward.components:  # correctness apart from any bonus
        values = [c[part.name] for c in scored if part.name in c]
        metrics.holdout_components[f"holdout/{part.name}"] = sum(values) / len(values) if values else float("nan")
    metrics.update(holdout_segments(rows))
    if run.references:
        metrics.holdout_nll = reference_nll.holdout_nll(run.setup, run.references)


def _metrics(run: Run, rows: list[Sample], metrics: StepMetrics) -> None:
    _values(run, rows, metrics)
    reward = metrics.holdout_reward
    history = run.state.holdout_history
    history.append((run.state.step, metrics.get("reward_mean") or float("nan"), reward))
    if len(history) >= 2:
        (_, train0, hold0), (_, train1, hold1) = history[-2], history[-1]
        metrics.reward_holdout_divergence = (train1 - train0) - (hold1 - hold0)
