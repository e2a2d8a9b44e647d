"""`objective.advantage`: how the rewards of a group become each sample's advantage
(docs/contract.md, "Advantages"); train/advantages.py computes it."""

from typing import Literal

from pydantic import Field

from rlvr_cli.contract.sections import Section


class Whiten(Section):
    over: Literal["batch", "batch_tokens"] = Field(
        description="batch: every sample of the step's batch but excluded ones, each counted once (TRL "
        "RLOOTrainer); batch_tokens: the same samples, each counted once per trained token (REINFORCE++ with "
        "baseline: verl's masked_whiten, NeMo RL's reinforce_plus_plus)."
    )
    std: Literal["population", "sample"] = Field(
        description="The advantages' std: ÷n or ÷(n−1), n the samples (batch) or their tokens (batch_tokens)."
    )
    epsilon: float = Field(gt=0, description="> 0; where it enters: epsilon_use.")
    epsilon_use: Literal["add_to_std", "add_to_variance", "variance_floor"] = Field(
        description="÷ (std + epsilon) (TRL), ÷ √(variance + epsilon) (verl), or ÷ √max(variance, epsilon) (NeMo RL).",
    )


class Advantage(Section):
    baseline: Literal["group_mean", "leave_one_out"] = Field(
        description="What is subtracted from each reward: the mean reward of its group (group_mean), or the mean "
        "of the group's other rewards (leave_one_out: RLOO)."
    )
    scale: Literal["group_std", "batch_std", "leave_one_out_std", "none"] = Field(
        description="What the centred reward is divided by: the group's std, the batch's std, the std of the "
        "group's other rewards (leave_one_out_std, with baseline leave_one_out: NeMo RL's; where it is 0 the "
        "centred reward is not divided), or nothing (Dr. GRPO)."
    )
    std: Literal["population", "sample"] | None = Field(None, description="Required unless scale is none.")
    epsilon: float | None = Field(None, gt=0, description="Added to the std; > 0.")
    whiten: Whiten | None = Field(
        None,
        description="After the baseline and scale, over the whole batch: subtract the mean advantage, divide by "
        "the advantages' std (epsilon entering as epsilon_use says): TRL RLOOTrainer's normalize_advantages "
        "(over: batch), REINFORCE++ with baseline (over: batch_tokens). Absent: not whitened.",
    )
