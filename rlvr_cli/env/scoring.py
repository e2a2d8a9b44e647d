"""From sampled responses to rewards: truncation, verification, invalid verdicts, weights."""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any

from rlvr_cli.contract.models import Contract
from rlvr_cli.env.verdict import Verdict
from rlvr_cli.errors import RlvrError


class InvalidVerdictStop(RlvrError):
    """`on_invalid: fail` met an invalid verdict: the run stops (aborted, with the verdict)."""


@dataclass
class Sample:
    """One generated response and everything learned about it."""

    task: dict[str, Any]
    group: int
    index: int
    prompt_ids: list[int]
    response_ids: list[int]
    mask: list[int]
    finish: str
    seed: int
    round: int
    text: str = ""
    verdict: Verdict | None = None
    reward: float = math.nan  # NaN: excluded from the objective
    verify_seconds: float = 0.0
    kept: bool = True
    reason: str | None = None
    old_logp: list[float] = field(default_factory=list)
    advantage: float = 0.0
    revision: int = 0  # optimizer steps of the weights that sampled it
    lag: int | None = None  # optimizer steps between those weights and the last ones it trained (None: untrained)
    hint: str | None = None  # the hint this sample was shown (data.hints), never trained
    sampling_logp: list[float] = field(default_factory=list)  # the engine's, when it sampled
    answer_prefix: str = ""  # text the response started with before sampling (a hint as response prefix)
    transcript: dict[str, Any] | None = None  # tool_use: items, per-turn spans, tool calls, how it ended

    @property
    def answer(self) -> str:
        """What the verifier reads: the response, after any prefix it was given."""
        return self.answer_prefix + self.text

    @property
    def valid(self) -> bool:
        return not math.isnan(self.reward)


def weighted_reward(contract: Contract, verdict: Verdict) -> float:
    """The contract's reward: Σ weight · component; a missing component is the verifier's bug."""
    total = 0.0
    for part in contract.objective.reward.components:
        if part.name not in verdict.components:
            raise KeyError(part.name)
        total += part.weight * float(verdict.components[part.name])
    return total


def needs_verdict(contract: Contract, sample: Sample) -> bool:
    """Truncated responses are excluded or penalized without a verifier call (unless `keep`)."""
    length = contract.length
    if sample.finish == "length" and length.on_truncated != "keep":
        if length.on_truncated == "exclude":
            sample.kept, sample.reason = False, "truncated"
        else:
            sample.reward = float(length.truncation_penalty)  # type: ignore[arg-type]
        return False
    return True


def apply_verdict(contract: Contract, sample: Sample, verdict: Verdict, seconds: float) -> None:
    """Reward from the verdict; an invalid verdict is excluded or stops the run."""
    sample.verify_seconds = seconds
    if verdict.valid:
        try:
            sample.reward = weighted_reward(contract, verdict)
        except KeyError as missing:
            verdict = Verdict("verifier_error", detail=f"verdict lacks component {missing}")
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
    todo = [s for s in samples if needs_verdict(contract, s)]
    verdicts = pool.verify_many([(s.task, s.answer) for s in todo]) if todo else []
    for sample, (verdict, seconds) in zip(todo, verdicts, strict=True):
        apply_verdict(contract, sample, verdict, seconds)


def answer_and_score(
    contract: Contract,
    model: Any,
    tokenizer: Any,
    prompts: list[list[int]],
    tasks: list[dict[str, Any]],
    pool: Any,
    *,
    stop_ids: list[int],
    pad_id: int,
    samples: int = 1,
    greedy: bool = True,
    seed: int = 0,
) -> list[Sample]:
    """`samples` answers per task (greedy, or the contract's sampling), each scored.
    Used for holdout evaluation during training and for audits and gates after it."""
    from rlvr_cli.engine.generate import generate, response_text

    sampling = contract.hyperparameters.sampling
    gens = generate(
        model,
        [p for p in prompts for _ in range(samples)],
        max_new_tokens=contract.length.max_response_tokens,
        temperature=0.0 if greedy else sampling.temperature,
        top_p=sampling.top_p,
        top_k=sampling.top_k,
        stop_ids=stop_ids,
        pad_id=pad_id,
        seed=seed,
        engine=sampling.engine,
    )
    rows = [
        Sample(
            tasks[i // samples],
            0,
            i % samples,
            [],
            gen.response_ids,
            gen.mask,
            gen.finish,
            seed,
            0,
            text=response_text(tokenizer, gen.response_ids, gen.finish),
        )
        for i, gen in enumerate(gens)
    ]
    score_all(contract, rows, pool)
    return rows
