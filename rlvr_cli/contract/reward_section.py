"""`objective.reward`: what one reward is attached to and how it is made from the verdict
(docs/contract.md, "What one reward is attached to")."""

from typing import Literal

from pydantic import Field

from rlvr_cli.contract.sections import PositiveInt, Section


class RewardComponent(Section):
    name: str = Field(min_length=1, description="A component the verifier returns.")
    weight: float = Field(description="Its weight in the reward.")


class Reward(Section):
    unit: Literal["response", "session", "trajectory", "set"] = Field(description="What one reward is attached to.")
    components: list[RewardComponent] = Field(
        min_length=1, description="The reward is the weighted sum of these verifier components."
    )
    on_invalid: Literal["exclude", "fail"] = Field(
        description="What an invalid verdict (verifier_error, timeout, sandbox_error) does."
    )
    set_size: PositiveInt | None = Field(
        None,
        description="unit set: responses judged together — each group's consecutive members, set_size at a time, "
        "are one set, verified by `verify(task, responses)` and sharing its reward (RLV206).",
    )
    credit: Literal["all_sessions", "last_session"] | None = Field(
        None,
        description="unit trajectory with environment.max_sessions > 1: which sessions of an episode its one reward "
        "trains — all_sessions (each with the episode's advantage) or last_session (the one that ended it; the "
        "others are recorded, not trained). Required there (RLV205), refused elsewhere.",
    )

    @property
    def best(self) -> float:
        """The highest reward 0/1 components can give: what "all correct" means."""
        return sum(max(c.weight, 0.0) for c in self.components)
