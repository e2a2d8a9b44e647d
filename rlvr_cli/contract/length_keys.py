"""Sections of `length` beside its limits: packing, dynamic sampling (DAPO's), and DAPO's soft
overlong punishment (env/scoring.py applies it to the reward)."""

from typing import Literal

from pydantic import Field

from rlvr_cli.contract.sections import Int, Section


class Packing(Section):
    enabled: bool = Field(description="Whether episodes are packed.")
    isolate_episodes: bool = Field(
        True, description="Packed episodes never attend to each other (must be true, RLV503)."
    )


class DynamicSampling(Section):
    drop_uniform_groups: bool = Field(description="Drop groups whose rewards are all equal and sample again (DAPO).")
    max_rounds: Int = Field(1, ge=1, description="Sampling rounds per step at most.")
    log_by: list[str] | None = Field(
        None, description="Task fields acceptance rates are logged by (e.g. domain, difficulty)."
    )
    uniform_on: Literal["reward", "verifier_reward"] = Field(
        "reward",
        description="What must be equal across a group for it to be dropped: the reward the advantages use "
        "(verl's filter_groups.metric: reward), or the verifier's weighted reward before length shaping — the "
        "overlong penalty, a truncated response's penalty (it is then verified all the same) — as NeMo RL's "
        "unshaped_total_reward and verl's score (RLV505).",
    )


class OverlongPenalty(Section):
    buffer_tokens: Int = Field(
        ge=1, description="The last tokens of the response budget over which the penalty grows (≤ max_response_tokens)."
    )
    factor: float = Field(gt=0, description="The penalty of a response that fills the whole budget.")


OVERLONG_PENALTY = Field(
    None,
    description="DAPO's soft overlong punishment: a verified response of n tokens, n > max_response_tokens − "
    "buffer_tokens, gets factor · (n − (max_response_tokens − buffer_tokens)) / buffer_tokens taken off its reward "
    "(factor at the budget); verl's overlong_buffer (the dapo reward manager). A truncated response given "
    "truncation_penalty gets that alone.",
)
