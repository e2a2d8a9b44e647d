"""Which metrics a run produces: each metric that needs something of the contract (a reference,
holdout evaluations, a served engine…) and what to add when a rule names one it cannot have."""

from collections.abc import Callable

from rlvr_cli.contract.models import Contract
from rlvr_cli.metrics import METRICS, is_metric


def _has_reference(c: Contract) -> bool:
    return c.artifacts.reference is not None and not c.artifacts.reference.is_none


def unavailable_metric(c: Contract, metric: str) -> str | None:
    """Why this run cannot produce `metric`, or None when it can."""
    if not is_metric(metric):
        return "is not a metric rlvr produces"
    if metric.startswith("holdout/") and metric[8:] not in [p.name for p in c.objective.reward.components]:
        return f"names '{metric[8:]}', which is not a reward component"
    needs = (
        "holdout"
        if metric.startswith(("holdout/", "holdout_by/"))
        else next((m.needs for m in METRICS if m.name == metric), None)
    )
    if metric.startswith(("layer_activation_rms/", "layer_grad_norm/")) and not c.monitoring.layer_stats_every:
        return "needs per-layer signals (monitoring.layer_stats_every)"
    met, why = NEEDS.get(needs or "", (None, ""))
    return None if met is None or met(c) else why


NEEDS: dict[str, tuple[Callable[[Contract], bool], str]] = {  # what a run needs to produce a metric
    "reference": (
        _has_reference,
        "needs a reference (artifacts.reference): KL is measured against it, with or without a penalty",
    ),
    "holdout": (
        lambda c: c.monitoring.holdout_every is not None,
        "needs holdout evaluations (monitoring.holdout_every)",
    ),
    "hints": (
        lambda c: c.data.hints is not None and c.data.hints.used,
        "needs hint-assisted rollouts (data.hints.used)",
    ),
    "fp16": (lambda c: c.hyperparameters.dtypes.compute == "fp16", "needs fp16 compute (its loss scaler)"),
    "reference_answers": (
        lambda c: bool(c.monitoring.reference_answers and c.monitoring.holdout_every),
        "needs reference responses on holdout steps (monitoring.reference_answers and holdout_every)",
    ),
    "clip": (
        lambda c: c.objective.clip.kind not in ("sapo", "vespo"),
        "has nothing to count under clip.kind sapo or vespo: they clip nothing",
    ),
    "rejection": (lambda c: bool(c.objective.rejection), "needs objective.rejection"),
    "off_policy_mask": (lambda c: c.objective.off_policy_mask is not None, "needs objective.off_policy_mask"),
    "same_weights": (
        lambda c: not c.hyperparameters.sample_ahead,
        "compares the engine with the trainer under the weights that sampled: with hyperparameters.sample_ahead "
        "every step after the first trains samples drawn by older weights, so it is measured on the first step only "
        "(watch policy_lag, or a correction's is_weight_mean and is_cut_share)",
    ),
    "sample_ahead": (lambda c: c.hyperparameters.sample_ahead, "needs sampling ahead (hyperparameters.sample_ahead)"),
    "correction": (lambda c: c.objective.corrects, "needs an importance correction (objective.correction: tis or mis)"),
    "served": (
        lambda c: c.hyperparameters.sampling.server is not None,
        "needs a served engine (hyperparameters.sampling.server)",
    ),
}
