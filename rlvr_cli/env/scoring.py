"""From sampled responses to rewards: truncation, verification, invalid verdicts, weights.
The verdict's fields of a `Sample` (env/sample.py) are written here and nowhere else."""

from __future__ import annotations

from typing import Any

from rlvr_cli.contract.models import Contract
from rlvr_cli.env.sample import Sample
from rlvr_cli.env.verdict import Verdict
from rlvr_cli.errors import RlvrError


class InvalidVerdictStop(RlvrError):
    """`on_invalid: fail` met an invalid verdict: the run stops (aborted, with the verdict)."""


def overlong_penalty(contract: Contract, sample: Sample) -> float:
    """DAPO's soft overlong punishment (`length.overlong_penalty`), ≤ 0: nothing up to
    max_response_tokens − buffer_tokens tokens, then linearly to −factor at the budget."""
    overlong, budget = contract.length.overlong_penalty, contract.length.max_response_tokens
    if overlong is None:
        return 0.0
    beyond = len(sample.response_ids) - (budget - overlong.buffer_tokens)
    return min(-beyond / overlong.buffer_tokens * overlong.factor, 0.0)


def weighted_reward(contract: Contract, verdict: Verdict) -> float:
    """The contract's reward: Σ weight · component; a missing component is the verifier's bug."""
    total = 0.0
    for part in contract.objective.reward.components:
        if part.name not in verdict.components:
            raise KeyError(part.name)
        total += part.weight * float(verdict.components[part.name])
    return total


def needs_verdict(contract: Contract, sample: Sample) -> bool:
    """Truncated responses are excluded or penalized without a verifier call (unless `keep`), except
    that a penalized one is verified where dynamic sampling compares verifier rewards (its reward
    stays the penalty: `apply_verdict`)."""
    length = contract.length
    if sample.finish == "length" and length.on_truncated != "keep":
        if length.on_truncated == "exclude":
            sample.kept, sample.reason = False, "truncated"
            return False
        sample.reward = float(length.truncation_penalty)  # type: ignore[arg-type]
        return verifies_penalized(contract)
    return True


def verifies_penalized(contract: Contract) -> bool:
    """Whether a truncated response given its penalty is verified all the same: dynamic sampling
    compares the verifier's rewards (`uniform_on: verifier_reward`) of a group's answers."""
    ds = contract.length.dynamic_sampling
    on = bool(ds and ds.drop_uniform_groups and ds.uniform_on == "verifier_reward")
    return on and contract.objective.reward.unit != "set"  # a set with a truncated member: penalized whole


def apply_verdict(contract: Contract, sample: Sample, verdict: Verdict, seconds: float) -> None:
    """Reward from the verdict; an invalid verdict is excluded or stops the run. A truncated
    response given its penalty (verified only for dynamic sampling) keeps the penalty and no
    verdict, as unverified: only its `verifier_reward` is read (NaN where the verdict is invalid)."""
    sample.verify_seconds = seconds
    penalized = sample.finish == "length" and contract.length.on_truncated == "penalize"
    if verdict.valid:
        try:
            sample.verifier_reward = weighted_reward(contract, verdict)
            if not penalized:
                sample.reward = sample.verifier_reward + overlong_penalty(contract, sample)
        except KeyError as missing:
            verdict = Verdict("verifier_error", detail=f"verdict lacks component {missing}")
    if penalized:
        return
    sample.verdict = verdict
    if not verdict.valid:
        if contract.objective.reward.on_invalid == "fail":
            raise InvalidVerdictStop(
                f"task {sample.task.get('id')}: verdict {verdict.status} ({verdict.detail}); "
                "objective.reward.on_invalid is fail"
            )
        sample.kept, sample.reason = False, verdict.status


def score_all(contract: Contract, samples: list[Sample], pool: Any) -> None:
    """Score a batch of samples with one round trip to the verifier worker."""
    if contract.objective.reward.unit == "set":
        score_sets(contract, samples, pool)
        return
    todo = [s for s in samples if needs_verdict(contract, s)]
    verdicts = pool.verify_many([(s.task, s.answer) for s in todo]) if todo else []
    for sample, (verdict, seconds) in zip(todo, verdicts, strict=True):
        apply_verdict(contract, sample, verdict, seconds)


def score_sets(contract: Contract, samples: list[Sample], pool: Any) -> None:
    """`reward.unit: set` (rollout/sets.py): one verdict per set, from `verify(task, responses)`,
    carried by every member. A set with a truncated member is judged as its member would be
    alone (`length.on_truncated`): excluded whole, or every member given the penalty."""
    size = contract.objective.reward.set_size or 1
    todo = []
    for members in (samples[i : i + size] for i in range(0, len(samples), size)):  # task by task, whole sets
        cut = [m for m in members if not needs_verdict(contract, m)]
        if not cut:
            todo.append(members)
        elif contract.length.on_truncated == "exclude":
            for m in members:
                m.kept, m.reason = False, m.reason or "truncated_set_member"
        else:
            for m in members:
                m.reward = float(contract.length.truncation_penalty)  # type: ignore[arg-type]
    verdicts = pool.verify_many([(m[0].task, [s.answer for s in m]) for m in todo]) if todo else []
    for members, (verdict, seconds) in zip(todo, verdicts, strict=True):
        for member in members:
            apply_verdict(contract, member, verdict, seconds)


__all__ = [
    "InvalidVerdictStop",
    "Sample",
    "apply_verdict",
    "needs_verdict",
    "overlong_penalty",
    "score_all",
    "weighted_reward",
]
