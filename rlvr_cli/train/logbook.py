"""What one step reports: its rollout metrics (metrics.jsonl) and its record rows (records/)."""

from __future__ import annotations

import json
import math
import time
from typing import Any

import torch

from rlvr_cli.contract.models import Contract
from rlvr_cli.env.sample import Sample
from rlvr_cli.rollout import hints
from rlvr_cli.store.records import RecordRow, RecordStore
from rlvr_cli.train import objective as obj
from rlvr_cli.train.collect import StepResult


def rollout_metrics(contract: Contract, result: StepResult) -> dict[str, float]:
    gen = result.generated
    valid = [s.reward for s in gen if s.valid]
    scored = [s for s in gen if s.verdict is not None]
    rewards = torch.tensor([s.reward for s in gen], dtype=torch.float64)
    outcomes = obj.group_outcomes(rewards, contract.hyperparameters.group_size, contract.objective.reward.best)
    groups = max(outcomes["groups"], 1)
    mean = sum(valid) / len(valid) if valid else math.nan
    var = sum((r - mean) ** 2 for r in valid) / len(valid) if valid else math.nan
    return {
        "reward_mean": mean,
        "reward_std": math.sqrt(var) if valid else math.nan,
        "response_length_mean": sum(len(s.response_ids) for s in gen) / max(len(gen), 1),
        "truncation_rate": sum(s.finish == "length" for s in gen) / max(len(gen), 1),
        "zero_std_fraction": outcomes["zero_std"] / groups,
        "all_correct_fraction": outcomes["all_correct"] / groups,
        "all_wrong_fraction": outcomes["all_wrong"] / groups,
        "verifier_error_rate": sum(not s.verdict.valid for s in scored) / max(len(scored), 1),  # type: ignore[union-attr]
        "groups_generated": float(outcomes["groups"]),
        "groups_accepted": float(len(result.accepted)),
        "dynamic_sampling_rounds": float(result.rounds),
        "samples_kept": float(sum(s.kept for g in result.accepted for s in g)),
        **spent(result),
        **engine_mismatch(result),
        **acceptance_by(contract, result),
        **hints.metrics(contract, gen),
    }


def spent(result: StepResult) -> dict[str, float]:
    """What the step spent on samples no update trains on, beside what it spent in all."""
    lost = [s for s in result.generated if not s.kept]
    return {
        "tokens_discarded": float(sum(len(s.response_ids) for s in lost)),
        "verifier_seconds": sum(s.verify_seconds for s in result.generated),
        "verifier_seconds_discarded": sum(s.verify_seconds for s in lost),
    }


MISMATCH = 0.1  # nats: a token whose engine and trainer log-probs differ more is counted (engine_mismatch_share)


def engine_mismatch(result: StepResult) -> dict[str, float]:
    """The engine's log-probs of the tokens it sampled against the trainer's of the same tokens
    under the same weights: samples drawn this step (sampled ahead: weights since moved, not
    comparable), and not trained on samples drawn ahead's denominator (theirs is the engine's)."""
    lagged = any(s.revision < result.revision for g in result.accepted for s in g if s.kept)
    diffs, per_sequence = [], []
    for s in (part for sample in result.generated for part in sample.episode):
        if s.revision != result.revision or (s.kept and lagged) or not s.sampling_logp or not s.old_logp:
            continue
        mask = s.sampled or s.mask or [1] * len(s.response_ids)  # sampled tokens only (a tool result never was),
        # rejected ones included: objective.rejection took them out for their mismatch
        d = [e - t for e, t, m in zip(s.sampling_logp, s.old_logp, mask, strict=False) if m]
        diffs += d
        per_sequence.append(sum(d))
    if not diffs:
        return {}
    return {
        "engine_logprob_diff_mean": sum(abs(x) for x in diffs) / len(diffs),
        "engine_logprob_diff_max": max(abs(x) for x in diffs),
        "engine_kl": sum(per_sequence) / len(per_sequence),
        "engine_mismatch_share": sum(abs(x) > MISMATCH for x in diffs) / len(diffs),
    }


SEGMENTS = ("domain", "difficulty")  # the task fields the holdout reward is split by


def holdout_segments(rows: list[Sample]) -> dict[str, float]:
    """The holdout reward per value of each segment field the tasks carry,
    `holdout_by/difficulty=hard` (invalid verdicts excluded, as in `holdout_reward`)."""
    out: dict[str, float] = {}
    for name in SEGMENTS:
        seen: dict[str, list[float]] = {}
        for s in rows:
            if s.task.get(name) is not None:
                seen.setdefault(str(s.task[name]), [])
                if s.valid:
                    seen[str(s.task[name])].append(s.reward)
        for value, rewards in sorted(seen.items()):
            out[f"holdout_by/{name}={value}"] = sum(rewards) / len(rewards) if rewards else math.nan
    return out


def acceptance_by(contract: Contract, result: StepResult) -> dict[str, float]:
    """Dynamic sampling: the share of generated groups accepted, per `log_by` field value
    (e.g. `accept_rate/difficulty=easy`); discarded groups are in the records with a reason."""
    ds = contract.length.dynamic_sampling
    if not ds or not ds.drop_uniform_groups:
        return {}
    size = contract.hyperparameters.group_size
    accepted = {(g[0].round, g[0].group) for g in result.accepted}  # under torchrun, copies gathered apart
    out: dict[str, float] = {}
    for field_name in ds.log_by or []:
        seen: dict[str, list[int]] = {}
        for start in range(0, len(result.generated), size):
            first = result.generated[start]
            seen.setdefault(str(first.task.get(field_name)), []).append(int((first.round, first.group) in accepted))
        for value, flags in sorted(seen.items()):
            out[f"accept_rate/{field_name}={value}"] = sum(flags) / len(flags)
    return out


def record_rows(
    contract: Contract,
    step: int,
    verifier: str,
    samples: list[Sample],
    data_check: str | None = None,
    engine: str = "",
) -> list[RecordRow]:
    run = contract.name
    adapter = contract.hyperparameters.adapter  # the policy that sampled: the base, this adapter at policy_revision
    sampling = json.dumps(
        {
            **contract.hyperparameters.sampling.model_dump(),
            "engine_version": engine,
            **({"adapter": adapter.describe()} if adapter else {}),
        }
    )
    return [
        RecordRow(
            run=run,
            step=step,
            round=s.round,
            prompt_id=str(s.task.get("id")),
            group=s.group,
            sample=s.index,
            session_id=session_id(run, step, s, s.session),
            parent_session_id=None if s.parent is None else session_id(run, step, s, s.parent),
            policy_revision=s.revision,
            policy_lag=s.lag,
            prompt_ids=s.prompt_ids,
            response_ids=s.response_ids,
            loss_mask=s.mask,
            old_logprobs=s.old_logp or None,
            sampling_logprobs=s.sampling_logp or None,
            sampling=sampling,
            seed=s.seed,
            response_text=s.text,
            finish_reason=s.finish,
            transcript=json.dumps(s.transcript) if s.transcript is not None else None,
            status=s.verdict.status if s.verdict else None,
            reward=s.reward if s.valid else None,
            verifier_reward=s.verdict.reward if s.verdict else None,
            components=json.dumps(s.verdict.components) if s.verdict else None,
            advantage=s.advantage,
            kept=s.kept,
            discard_reason=s.reason,
            hint=s.hint,
            filters=contract.data.filters,
            domain=_str(s.task.get("domain")),
            difficulty=_str(s.task.get("difficulty")),
            split="train",
            verify_seconds=s.verify_seconds,
            verifier=verifier,
            data_check=data_check,
            verdict_detail=(s.verdict.detail or "")[:2000] or None if s.verdict else None,
        )
        for s in (part for sample in samples for part in sample.episode)
    ]


def session_id(run: str, step: int, sample: Sample, session: int) -> str:
    """A record's session id: `run/step/group/sample` for an episode's first session (every
    single response's), `…/sample.k` for its k-th."""
    base = f"{run}/{step}/{sample.group}/{sample.index}"
    return base if session == 0 else f"{base}.{session}"


def write_records(records: RecordStore, setup: Any, step: int, generated: list[Sample]) -> float:
    """The step's rollouts to the record store; the seconds the step spent on them."""
    started = time.perf_counter()
    rows = record_rows(setup.contract, step, setup.verifier_id, generated, setup.data_check, setup.engine_version)
    records.append(rows, step)
    return time.perf_counter() - started


def _str(value: Any) -> str | None:
    return None if value is None else str(value)


class NoSignal:
    """Says once, after `STEPS` steps in a row in which every group's rewards were all equal,
    that the run learns nothing (every advantage is 0), and the likely causes."""

    STEPS = 3

    def __init__(self) -> None:
        self.rows: list[dict[str, Any]] = []
        self.said = False

    def observe(self, step: int, row: dict[str, Any]) -> str | None:
        """The warning, on the step that completes the stretch; None otherwise."""
        self.rows = [*self.rows, row] if row.get("zero_std_fraction") == 1.0 else []
        if self.said or len(self.rows) < self.STEPS:
            return None
        self.said = True
        first = step - self.STEPS + 1
        if all(r.get("all_wrong_fraction") == 1.0 for r in self.rows):
            what = "every answer got the lowest reward"
            causes = (
                "the task is too hard for the model; the verifier rejects every answer (`rlvr audit verifier`); "
                "the answer format is never produced (`rlvr render`, and the answers in records/)"
            )
        elif all(r.get("all_correct_fraction") == 1.0 for r in self.rows):
            what = "every answer got the best reward"
            causes = "the task is too easy for the model, or the verifier accepts anything (`rlvr audit verifier`)"
        else:
            what = "within each group every answer got the same reward"
            causes = (
                "too few samples per group (group_size) for the task's difficulty, or a verifier that ignores "
                "the answer (`rlvr audit verifier`)"
            )
        return (
            f"warning: no learning signal in steps {first}–{step}: {what}, so every advantage is 0 and the "
            f"policy does not change. Likely causes: {causes}."
        )
