"""The metric vocabulary: every number `rlvr train` writes to metrics.jsonl, in one place.

The monitoring rules (RLV604 checks a rule's metric against this list), `rlvr status`, the
report and the trainer all read it from here. `StepMetrics` is one step's row: the trainer
fills it, `row()` is what metrics.jsonl holds (NaN becomes null: JSON has no NaN).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field, fields
from typing import Any


def _m(description: str, needs: str | None = None) -> Any:
    return field(default=None, metadata={"description": description, "needs": needs})


#: the metrics named by a prefix and a value, each kept in a dict of StepMetrics
PREFIXES = ("accept_rate/", "holdout/", "holdout_by/", "layer_activation_rms/", "layer_grad_norm/")
GROUPS = ("accept_rates", "holdout_components", "holdout_segments", "layer_stats")


@dataclass
class StepMetrics:
    """One row of metrics.jsonl. A field left None was not produced this step and is absent from
    the row (a monitoring rule then neither counts nor breaks its streak); NaN means measured
    but undefined (no valid reward, say) and is written as null."""

    step: int
    # ── rollouts ──
    reward_mean: float | None = _m("mean reward of the step's valid samples")
    reward_std: float | None = _m("std of the step's valid rewards")
    response_length_mean: float | None = _m("mean response length in tokens")
    truncation_rate: float | None = _m("share of responses that hit max_response_tokens")
    zero_std_fraction: float | None = _m("share of groups whose rewards are all equal (no learning signal)")
    all_correct_fraction: float | None = _m("share of groups where every sample earned the best reward")
    all_wrong_fraction: float | None = _m("share of groups where no sample earned any reward")
    verifier_error_rate: float | None = _m("share of verdicts that are verifier_error, timeout or sandbox_error")
    groups_generated: float | None = _m("groups sampled this step, dynamic-sampling rounds included")
    groups_accepted: float | None = _m("groups kept for the update")
    dynamic_sampling_rounds: float | None = _m("sampling rounds this step")
    samples_kept: float | None = _m("samples that entered the objective")
    # ── the update ──
    loss: float | None = _m("the objective's loss, summed over micro-batches")
    pg_loss: float | None = _m("the policy-gradient part of the loss")
    kl: float | None = _m("mean per-token KL to the reference", needs="reference")
    entropy: float | None = _m("mean per-token entropy of the policy")
    clip_fraction: float | None = _m(
        "share of trained tokens whose ratio was clipped (0 under clip.kind sapo or vespo: nothing is clipped)",
        needs="clip",
    )
    ratio_max: float | None = _m("largest importance ratio of the step")
    grad_norm: float | None = _m("gradient norm before clipping")
    nonfinite_count: float | None = _m("non-finite losses, log-probs and gradients (the update is skipped when > 0)")
    lr: float | None = _m("learning rate after the step")
    loss_scale: float | None = _m("the fp16 loss scaler's scale after the step", needs="fp16")
    overflow_count: float | None = _m(
        "optimizer passes the fp16 loss scaler skipped this step because gradients overflowed", needs="fp16"
    )
    rejected_share: float | None = _m(
        "share of the step's trained tokens objective.rejection took out of the loss (engine/trainer mismatch)",
        needs="rejection",
    )
    off_policy_masked_share: float | None = _m(
        "share of trained tokens in answers the off-policy mask dropped (objective.off_policy_mask)",
        needs="off_policy_mask",
    )
    policy_lag: float | None = _m("optimizer steps between the weights that sampled and the weights updated")
    is_weight_mean: float | None = _m(
        "mean importance weight on the trained tokens (objective.correction): w = π_old / π_engine, exp(Σ over the "
        "answer's tokens of log π_old − log π_engine) at sequence level, after truncation (tis) or masking (mis)",
        needs="correction",
    )
    is_cut_share: float | None = _m(
        "share of trained tokens whose importance weight the correction cut: truncated to the cap (tis) or masked "
        "out, weight 0 (mis)",
        needs="correction",
    )
    # ── the engine against the trainer (samples drawn this step, the same weights on both sides) ──
    engine_logprob_diff_mean: float | None = _m(
        "mean |engine − trainer| log-prob of the sampled tokens under the weights that sampled them",
        needs="same_weights",
    )
    engine_logprob_diff_max: float | None = _m(
        "largest |engine − trainer| log-prob of a sampled token", needs="same_weights"
    )
    engine_kl: float | None = _m(
        "sequence-level KL estimate of the engine from the trainer: mean over samples of Σ (engine − trainer) log-prob",
        needs="same_weights",
    )
    engine_mismatch_share: float | None = _m(
        "share of sampled tokens whose engine and trainer log-probs differ by more than 0.1 nats", needs="same_weights"
    )
    # ── throughput and budget ──
    time_generate_s: float | None = _m("seconds spent sampling")
    time_score_s: float | None = _m("seconds spent verifying")
    time_update_s: float | None = _m("seconds spent in the update")
    time_wait_rollouts_s: float | None = _m(
        "seconds the step waited for the samples drawn during the previous update (0: they were ready)",
        needs="sample_ahead",
    )
    rollout_age_s: float | None = _m(
        "age of the samples drawn ahead when the step used them: seconds since their sampling began",
        needs="sample_ahead",
    )
    time_records_s: float | None = _m(
        "seconds the step spent on its rollout records (building the rows; Parquet is written in the background)"
    )
    time_engine_weights_s: float | None = _m(
        "seconds the step spent handing the served engine its weights: writing them and waiting for it to load them",
        needs="served",
    )
    tokens_per_s: float | None = _m("generated tokens per second of the step")
    time_collectives_s: float | None = _m(
        "under torchrun: seconds the main process spent in rlvr's collectives during the update and the "
        "step's gathers (FSDP2's own gathers run inside time_update_s)",
        needs="torchrun",
    )
    rank_lag_s: float | None = _m(
        "under torchrun: how long the fastest process waited for the slowest to finish sampling and scoring",
        needs="torchrun",
    )
    slowest_rank: float | None = _m("under torchrun: the process the others waited for this step", needs="torchrun")
    step_tflop: float | None = _m(
        "model TFLOPs the step needed: sampling every group, forward and backward of the trained ones per "
        "optimizer pass, the reference's forward (per token 2·N + 4·L·d·position; train/flops.py)"
    )
    mfu: float | None = _m(
        "model FLOPs utilisation: step_tflop / (step_seconds × the device's measured peak × processes)"
    )
    memory_peak_gib: float | None = _m(
        "the most memory a process has held so far, in GiB, read after the step (the largest of the "
        "processes): on a GPU PyTorch's allocated tensors (what `rlvr plan` estimates per device); on a CPU "
        "the resident set, the interpreter, libraries and the allocator's kept memory included (Linux; "
        "train/peak_memory.py)"
    )
    step_seconds: float | None = _m(
        "wall time of the step: sampling, scoring, the update, its records and any holdout evaluation"
    )
    elapsed_s: float | None = _m(
        "wall seconds from the start of this process's steps to the end of this step: the time between two "
        "rows includes what the run does between steps (the metrics row, status.json, checkpoints)"
    )
    total_rollouts: float | None = _m("rollouts generated so far")
    total_verifier_calls: float | None = _m("verifier calls so far")
    total_tokens: float | None = _m("tokens generated so far")
    total_verifier_seconds: float | None = _m("seconds spent verifying so far, discarded samples included")
    tokens_discarded: float | None = _m(
        "generated tokens of the step that no update trains on (dropped groups, truncated or invalid samples)"
    )
    verifier_seconds: float | None = _m("verifier seconds of the step's samples (sum over samples)")
    verifier_seconds_discarded: float | None = _m("verifier seconds of the step's samples that no update trains on")
    # ── hints (data.hints.used) ──
    hint_share: float | None = _m(
        "share of the step's samples shown a hint (falls to 0 by hints.until_step)", needs="hints"
    )
    reward_hinted_mean: float | None = _m(
        "mean reward of hinted samples, in groups that also have unhinted ones", needs="hints"
    )
    reward_unhinted_mean: float | None = _m(
        "mean reward of unhinted samples of the same groups (what the policy does without help)", needs="hints"
    )
    hint_gap: float | None = _m(
        "reward_hinted_mean − reward_unhinted_mean: how much the policy still depends on hints", needs="hints"
    )
    # ── holdout ──
    holdout_reward: float | None = _m("mean greedy reward on the holdout split", needs="holdout")
    holdout_nll: float | None = _m(
        "on holdout steps: mean negative log-likelihood per token of the holdout's reference responses "
        "(monitoring.reference_answers; temperature 1)",
        needs="reference_answers",
    )
    reward_holdout_divergence: float | None = _m(
        "train reward gain minus holdout reward gain since the last evaluation", needs="holdout"
    )
    #: per-value dynamic-sampling acceptance, `accept_rate/<field>=<value>`
    accept_rates: dict[str, float] = field(default_factory=dict)
    #: on holdout steps, the mean of each reward component over valid verdicts, `holdout/<component>`
    holdout_components: dict[str, float] = field(default_factory=dict)
    #: on holdout steps, the holdout reward per segment, `holdout_by/<field>=<value>` (domain, difficulty)
    holdout_segments: dict[str, float] = field(default_factory=dict)
    #: every `monitoring.layer_stats_every` steps, per decoder layer i: `layer_activation_rms/<i>` (the RMS of the
    #: residual stream entering it, first optimizer pass) and `layer_grad_norm/<i>` (its gradient's norm, unclipped)
    layer_stats: dict[str, float] = field(default_factory=dict)

    def update(self, values: dict[str, float]) -> None:
        for key, value in values.items():
            if key.startswith("accept_rate/"):
                self.accept_rates[key] = value
            elif key.startswith("holdout/"):
                self.holdout_components[key] = value
            elif key.startswith("holdout_by/"):
                self.holdout_segments[key] = value
            elif key.startswith(("layer_activation_rms/", "layer_grad_norm/")):
                self.layer_stats[key] = value
            elif key in NAMES:
                setattr(self, key, value)
            else:
                raise KeyError(f"{key!r} is not a metric (rlvr_cli.metrics)")

    def get(self, name: str) -> float | None:
        if name.startswith(PREFIXES):
            value = {**self.accept_rates, **self.holdout_components, **self.holdout_segments, **self.layer_stats}.get(
                name
            )
        else:
            value = getattr(self, name, None)
        return None if value is None or (isinstance(value, float) and not math.isfinite(value)) else value

    def row(self) -> dict[str, Any]:
        """The metrics.jsonl object: every measured metric, NaN as null, accept rates last."""
        out: dict[str, Any] = {"step": self.step}
        for f in fields(self):
            if f.name in ("step", *GROUPS):
                continue
            value = getattr(self, f.name)
            if value is None:
                continue
            out[f.name] = None if isinstance(value, float) and not math.isfinite(value) else value
        out.update(self.accept_rates)
        out.update(self.holdout_components)
        out.update(self.holdout_segments)
        out.update(self.layer_stats)
        return out


@dataclass(frozen=True)
class Metric:
    name: str
    description: str
    # "reference" | "holdout" | "hints" | "fp16" | "sample_ahead" | "reference_answers" | "torchrun" | None
    # (torchrun: several processes, which the contract cannot say; the others RLV604 checks)
    needs: str | None


METRICS: tuple[Metric, ...] = tuple(
    Metric(f.name, f.metadata["description"], f.metadata["needs"])
    for f in fields(StepMetrics)
    if f.name not in ("step", *GROUPS)
)
NAMES: frozenset[str] = frozenset(m.name for m in METRICS)
#: metrics whose drift every run must watch (RLV603, docs/rules.md)
WATCHED = ("entropy", "response_length_mean", "verifier_error_rate")
#: what `rlvr status` prints of the last step, in this order
STATUS_LINE = (
    "reward_mean",
    "holdout_reward",
    "kl",
    "entropy",
    "response_length_mean",
    "clip_fraction",
    "verifier_error_rate",
    "nonfinite_count",
    "tokens_per_s",
    "mfu",
    "rank_lag_s",
    "rollout_age_s",
    "engine_logprob_diff_max",
)


def is_metric(name: str) -> bool:
    return name in NAMES or name.startswith(PREFIXES)


def holdout_part(row: dict[str, Any], step: int) -> str | None:
    """`correct 0.700 (step 10)` from an evaluation step's row, or None on other steps."""
    values = [
        f"{key.split('/', 1)[1]} {value:.3f}"
        for key, value in sorted(row.items())
        if key.startswith("holdout/") and isinstance(value, (int, float))
    ]
    if not values and isinstance(row.get("holdout_reward"), (int, float)):
        values = [f"reward {row['holdout_reward']:.3f}"]
    return f"{' '.join(values)} (step {step})" if values else None
