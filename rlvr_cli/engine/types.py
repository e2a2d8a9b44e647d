"""What every rollout engine returns, and the sampling parameters it is given."""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from typing import Any

from rlvr_cli.errors import ExitCode, RlvrError


class NonFiniteLogits(RlvrError):
    """The policy's logits hold NaN or infinity: nothing can be sampled (NaN weights, an
    overflow). The run stops (exit 5, aborted) instead of drawing tokens from garbage."""

    exit_code = ExitCode.ABORTED

    def __init__(self, where: str) -> None:
        super().__init__(
            f"the policy's logits are not finite ({where}): its weights hold NaN or infinity, so nothing can be "
            "sampled; resume from an earlier checkpoint, with a lower learning rate or a nonfinite_count rule"
        )


@dataclass
class Generation:
    """One sampled response, trimmed after its first stop token."""

    response_ids: list[int]
    mask: list[int]
    finish: str  # stop | length
    seed: int
    logprobs: list[float] = field(default_factory=list)  # per response token, at the sampling temperature


@dataclass(frozen=True)
class SamplingParams:
    max_new_tokens: int
    temperature: float
    top_p: float
    top_k: int
    stop_ids: tuple[int, ...]
    pad_id: int

    @classmethod
    def of(cls, contract: Any, renderer: Any, greedy: bool = False) -> SamplingParams:
        """The contract's sampling (`hyperparameters.sampling`, `length.max_response_tokens`) with
        the renderer's stop and pad tokens; `greedy`: temperature 0 (holdout, gates, audits).
        The one place a contract becomes sampling arguments."""
        sampling = contract.hyperparameters.sampling
        return cls(
            max_new_tokens=contract.length.max_response_tokens,
            temperature=0.0 if greedy else sampling.temperature,
            top_p=sampling.top_p,
            top_k=sampling.top_k,
            stop_ids=tuple(renderer.stop_ids),
            pad_id=renderer.pad_id,
        )

    def up_to(self, max_new_tokens: int) -> SamplingParams:
        """The same sampling with another token limit (a tool-use turn: what is left of the budget)."""
        return replace(self, max_new_tokens=max_new_tokens)


class EngineFailed(RlvrError):
    """The serving engine the contract names refused, hung or answered wrongly: no rollout can
    be trusted, so the run stops (exit 1, `status.json` failed, every finished step kept)."""

    exit_code = ExitCode.FAILED
