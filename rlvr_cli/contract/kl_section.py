"""`objective.kl`: the penalty towards the frozen reference — its weight β, estimator, placement,
what each token's KL is multiplied by and whose gradient it has (docs/contract.md, "Objective");
train/objective.py computes it."""

from collections.abc import Iterator
from typing import Literal

from pydantic import Field

from rlvr_cli.contract.sections import Section


class KL(Section):
    coef: float = Field(ge=0, description="β ≥ 0.")
    estimator: Literal["k1", "k2", "k3"] | None = Field(None, description="Required when coef > 0.")
    placement: Literal["loss", "reward"] | None = Field(None, description="Required when coef > 0.")
    weight: Literal["none", "ratio", "score_function"] | None = Field(
        None,
        description="With placement loss, what each token's KL is multiplied by: nothing (none; absent: none), the "
        "objective's ratio π_θ/π_old at its level, its gradient kept (ratio: TRL's use_bias_correction_kl, "
        "DeepSeek-V3.2's unbiased KL), or exp(log π_θ − sg(log π_θ)), value 1, adding KL·∇log π_θ "
        "(score_function: NeMo RL's newest).",
    )
    gradient: Literal["estimator", "k2"] | None = Field(
        None,
        description="With placement loss and estimator k1 or k3, whose gradient each token's KL has: the "
        "estimator's own (estimator; absent: estimator), or k2's, ½(log π_θ − log π_ref)², the value staying the "
        "estimator's (k2: straight-through, whose expected gradient is the KL's on samples of π_θ; verl's k1+, k3+).",
    )


def findings(kl: KL) -> Iterator[tuple[tuple[str, ...], str, str]]:
    """(path, key or '', message) of each RLV003 of `objective.kl`: keys β > 0 needs (key given:
    a missing key), and keys that change nothing where they are written."""
    if kl.coef > 0:
        for key in ("estimator", "placement"):
            if getattr(kl, key) is None:
                yield ("objective", "kl"), key, "kl.coef > 0"
    in_loss = kl.coef > 0 and kl.placement == "loss"
    if kl.weight not in (None, "none") and not in_loss:
        yield (
            ("objective", "kl", "weight"),
            "",
            "weighs the KL term of the loss: only with kl.coef > 0 and placement loss",
        )
    if kl.gradient not in (None, "estimator"):
        if not in_loss:
            yield (
                ("objective", "kl", "gradient"),
                "",
                "is the gradient of the KL term of the loss: only with kl.coef > 0 and placement loss",
            )
        elif kl.estimator == "k2":
            yield (
                ("objective", "kl", "gradient"),
                "",
                "k2: the estimator k2 has k2's gradient already (it would change nothing)",
            )
