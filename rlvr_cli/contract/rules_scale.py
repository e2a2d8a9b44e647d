"""Rules on precision and parallelism: dtypes that silently lose updates, keys of a strategy the
contract does not use."""

from __future__ import annotations

import math
from collections.abc import Iterator
from pathlib import Path

from rlvr_cli.contract.diagnostics import Finding, error, warning
from rlvr_cli.contract.models import Contract
from rlvr_cli.contract.rules import rule

TYPICAL = 0.02  # the usual initialisation std of a decoder's weights
BF16_BITS = 8  # significand bits, the implicit one included: a weight's last bit is |w|·2⁻⁷ at most


def smallest_moving_weight(step: float) -> float:
    """The largest |w| a step of `step` still changes in bf16: round-to-nearest keeps w unless
    the step is more than half its spacing, 2^(e - 8) for 2^e ≤ |w| < 2^(e + 1)."""
    return 2.0 ** math.ceil(math.log2(step * 2**BF16_BITS))


@rule
def rlv304_pure_bf16(c: Contract, _: Path) -> Iterator[Finding]:
    hp = c.hyperparameters
    p = hp.dtypes
    where = ("hyperparameters", "precision")
    if p.params == "bf16" and p.compute != "bf16":
        yield error("RLV003", (*where, "compute"), f"compute {p.compute} over bf16 weights: use compute: bf16")
    if p.params != "bf16":
        return
    lr = hp.optimizer.lr
    limit = smallest_moving_weight(lr)
    step = "an Adam step moves each weight by about lr" if hp.optimizer.name != "sgd" else "an SGD step is lr·grad"
    lost = "a typical weight is 1e-2, so most updates round away" if limit <= TYPICAL else "larger ones do not"
    yield warning(
        "RLV304",
        (*where, "params"),
        f"pure bf16 weights keep 8 significant bits: at lr {lr:g} ({step}) a weight changes only while "
        f"|w| < {limit:.2g}; {lost} (precision: bf16 keeps fp32 master weights and computes in bf16)",
    )


@rule
def rlv003_strategy_keys(c: Contract, _: Path) -> Iterator[Finding]:
    par = c.hyperparameters.parallel
    if par is not None and "sample_groups" in par.model_fields_set and c.environment.kind != "single_turn":
        yield error(
            "RLV003",
            ("hyperparameters", "parallel", "sample_groups"),
            f"sample_groups applies to single-turn environments; a {c.environment.kind} rollout samples each "
            "process's episodes together always (one batch a turn), so the key would change nothing",
        )
    if par is None or par.strategy == "fsdp2":
        return
    for key, default in (
        ("reshard_after_forward", True),
        ("accumulate_whole_gradients", False),
        ("cpu_offload", False),
    ):
        if key in par.model_fields_set and getattr(par, key) != default:
            yield error(
                "RLV003",
                ("hyperparameters", "parallel", key),
                f"{key} applies to strategy fsdp2 only; with ddp it would change nothing",
            )


@rule
def rlv306_stale_samples_uncorrected(c: Contract, _: Path) -> Iterator[Finding]:
    ratio, hp = c.objective.ratio, c.hyperparameters
    if hp.ahead_steps and ratio is not None and ratio.denominator == "trainer_recomputed" and not c.objective.corrects:
        yield warning(
            "RLV306",
            ("objective", "ratio", "denominator"),
            f"samples drawn up to {hp.ahead_steps} step(s) ahead by older weights are divided by the current "
            "weights' log-probs with no importance correction: they count as the current policy's (a biased "
            "gradient); add objective.correction (tis or mis) or use denominator: engine",
        )
