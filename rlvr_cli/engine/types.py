"""What every rollout engine returns, and the sampling parameters it is given."""

from __future__ import annotations

from dataclasses import dataclass, field


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
