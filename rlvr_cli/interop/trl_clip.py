"""TRL 1.16's clip options as the contract's `objective.clip`: epsilon and epsilon_high, the
two-sided clipping `delta` (the dual clip), loss_type cispo's cap, sapo's temperatures and vespo's
gamma weight, and the tokens and answers it masks out of the policy loss (trl_map.py reads the rest)."""

from __future__ import annotations

from typing import Any

from rlvr_cli.interop.common import Mapping


def clip(get: Any, out: Mapping, loss_type: str) -> None:
    """`get`: trl_map's Reader over the config."""
    low, high = get("epsilon"), get("epsilon_high")
    high = low if high is None else high
    if loss_type == "cispo":
        _cispo(get, out, high)
        return
    if loss_type in ("sapo", "vespo"):  # no clip: epsilon, epsilon_high and delta are not read
        (_sapo if loss_type == "sapo" else _vespo)(get, out)
        if get("delta") is not None:
            out.refuse("delta", f"{get('delta')}: trl's {loss_type} loss does not read delta (it would change nothing)")
        return
    out.set("objective.clip.low", low, get.source("epsilon"))
    out.set("objective.clip.high", high, get.source("epsilon_high") + " (null: epsilon)")
    _delta(get, out, high)


def _delta(get: Any, out: Mapping, high: float) -> None:
    """trl's two-sided clipping caps ρ at delta before the min: for A < 0 the loss is −A·max(min(ρ, δ),
    clip(ρ)), the dual clip's −A·min(max(ρ, clip(ρ)), δ) wherever δ > 1 + high (above it, for A > 0,
    the clip already acts); at or below 1 + high it is another loss."""
    delta = get("delta")
    if delta is None:
        return
    if delta <= 1 + high:
        out.refuse("delta", f"{delta}: at or below 1 + epsilon_high it caps what the clip keeps, not a dual clip")
    else:
        out.set("objective.clip.dual", float(delta), get.source("delta") + ": two-sided clipping, the dual clip")


def _cispo(get: Any, out: Mapping, cap: float) -> None:
    """trl's cispo weighs each token's log-likelihood by sg(min(ρ, epsilon_high)): the contract's
    cispo clip with no floor (low 1) and 1 + high = epsilon_high (epsilon is not read)."""
    out.set("objective.clip.kind", "cispo", get.source("loss_type"))
    out.set("objective.clip.low", 1.0, "trl's cispo: no floor on the weight (epsilon is not read)")
    if cap <= 1:
        out.refuse("epsilon_high", f"{cap}: trl's cispo caps the weight at epsilon_high, below every ratio of 1")
    out.set("objective.clip.high", round(cap - 1, 12), get.source("epsilon_high") + ": the weight's cap, 1 + high")
    if get("importance_sampling_level") != "token":
        out.refuse("importance_sampling_level", "sequence: the contract's cispo weighs each token by its own ratio")


def _sapo(get: Any, out: Mapping) -> None:
    """trl's sapo gates each token's −A·ρ by σ(τ(ρ − 1))·4/τ, τ sapo_temperature_pos where A > 0 and
    sapo_temperature_neg elsewhere: the contract's sapo clip."""
    out.set("objective.clip.kind", "sapo", get.source("loss_type"))
    out.set("objective.clip.temperature.positive", get("sapo_temperature_pos"), get.source("sapo_temperature_pos"))
    out.set("objective.clip.temperature.negative", get("sapo_temperature_neg"), get.source("sapo_temperature_neg"))


def off_policy_mask(get: Any, out: Mapping) -> None:
    """trl's off_policy_mask_threshold δ (DeepSeek-V3.2's OPSM): an answer with A < 0 whose mean of
    log π_x − log π_θ exceeds δ loses its policy loss, π_x vLLM's log-probs with use_vllm, else the
    old ones — which on a generation's only optimizer step are π_θ's own, so nothing is masked."""
    delta = get("off_policy_mask_threshold")
    if delta is None:
        return
    if delta < 0:
        out.refuse("off_policy_mask_threshold", f"{delta}: below 0 it masks every answer with A < 0 on-policy")
        return
    against = "engine" if get("use_vllm") else "old"
    steps = out.values.get("hyperparameters.updates_per_batch", 1) * out.values.get("hyperparameters.mini_batches", 1)
    if against == "old" and steps == 1:
        where = "objective.ratio.denominator"  # said beside the old log-probs the mask would compare
        out.comments[where] = (
            f"{out.comments.get(where, '')}; off_policy_mask_threshold {delta} not imported: on a generation's "
            "only optimizer step trl's mask compares π_θ with itself and drops nothing"
        ).lstrip("; ")
        return
    out.set("objective.off_policy_mask.threshold", float(delta), get.source("off_policy_mask_threshold"))
    why = "trl: vLLM's log-probs (use_vllm)" if against == "engine" else "trl: the old log-probs (no vLLM)"
    out.set("objective.off_policy_mask.against", against, why)


#: what trl's entropy mask computes otherwise, said on import and on export
ENTROPY_QUANTILE_DIFFERS = (
    "trl takes the entropy quantile over each micro-batch of per_device_train_batch_size answers (gathered across "
    "processes); the contract over the optimizer step's whole batch: the same tokens only with "
    "gradient_accumulation_steps 1"
)


def entropy_mask(get: Any, out: Mapping) -> None:
    """trl's top_entropy_quantile q < 1: the policy loss of the tokens at or above the q-quantile of
    the micro-batch's entropies (1.0: every token)."""
    q = get("top_entropy_quantile")
    if q >= 1:
        return
    if q <= 0:
        out.refuse("top_entropy_quantile", f"{q}: the contract's entropy mask trains a share in (0, 1)")
        return
    out.set("objective.entropy_mask.top", float(q), get.source("top_entropy_quantile"))
    if get("gradient_accumulation_steps") > 1:
        out.differs("top_entropy_quantile", ENTROPY_QUANTILE_DIFFERS)
    if get("entropy_coef") > 0:
        out.differs("top_entropy_quantile", "trl's entropy bonus acts on the masked tokens too; the contract's on all")


def _vespo(get: Any, out: Mapping) -> None:
    """trl's vespo weighs each token's −A·log π by sg(φ(w)), w the answer's likelihood ratio (the sum
    of its log-ratios, whatever importance_sampling_level says): the contract's vespo with
    `ratio.level: sequence_sum`. What trl folds into w or weighs by its token ratio has no
    equivalent: vLLM's importance weights, the bias-corrected KL."""
    out.set("objective.clip.kind", "vespo", get.source("loss_type"))
    for sign, short in (("positive", "pos"), ("negative", "neg")):
        for key, name in (("shape", "k"), ("rate", "lambda")):
            value = get(f"vespo_{name}_{short}")
            if key == "rate":
                value = max(value, 1e-4)  # trl clamps λ at 1e-4
            out.set(f"objective.clip.gamma.{sign}.{key}", value, get.source(f"vespo_{name}_{short}"))
    out.set("objective.ratio.level", "sequence_sum", "trl's vespo: w = exp(Σ log π_θ − log π_old) of each answer")
    if get("beta") > 0 and get("use_bias_correction_kl"):
        out.refuse("use_bias_correction_kl", "true: trl weighs vespo's KL by the token ratio, not the answer's")
    if get("use_vllm") and get("vllm_importance_sampling_correction"):
        out.refuse("vllm_importance_sampling_correction", "true: trl's vespo folds vLLM's weights into w")
