"""TRL's RLOOConfig (1.16) → the contract. RLOOTrainer shares GRPOConfig's batch, sampling,
optimizer and adapter options (trl_map reads them, with RLOOConfig's own defaults); its objective
is fixed in code: the leave-one-out baseline with no std (whitened over the batch with
`normalize_advantages`), the
answer's likelihood ratio clipped per answer and averaged over answers (`ratio.level:
sequence_sum`, `seq_mean_token_mean`), and β times the answer's summed k1 KL subtracted from its
reward. tests/interop checks this table against the installed RLOOConfig's defaults, and the
imported objective's loss against RLOOTrainer's own."""

from __future__ import annotations

from typing import Any

from rlvr_cli.interop import trl_map
from rlvr_cli.interop.common import Mapping, plain

#: GRPOConfig options RLOOConfig does not have (its objective is not configurable there)
GRPO_ONLY = (
    "vllm_importance_sampling_correction",
    "vllm_importance_sampling_mode",
    "vllm_importance_sampling_clip_min",
    "vllm_importance_sampling_clip_max",
    "use_bias_correction_kl",
    "delta",
    "sapo_temperature_pos",
    "sapo_temperature_neg",
    "vespo_k_pos",
    "vespo_lambda_pos",
    "vespo_k_neg",
    "vespo_lambda_neg",
    "importance_sampling_level",
    "loss_type",
    "scale_rewards",
    "multi_objective_aggregation",
    "top_entropy_quantile",
    "off_policy_mask_threshold",
    "entropy_coef",
    "use_adaptive_entropy",
)
#: RLOOConfig 1.16's defaults for every option the mapping reads
DEFAULTS: dict[str, Any] = {
    **{k: v for k, v in trl_map.DEFAULTS.items() if k not in GRPO_ONLY},
    "num_generations": 2,
    "beta": 0.05,
    "normalize_advantages": False,
    "reward_clip_range": None,
}
NO_EQUIVALENT = {
    **{k: v for k, v in trl_map.NO_EQUIVALENT.items() if k in DEFAULTS},
    "reward_clip_range": "rewards clipped to a range before the baseline",
}


def import_config(
    config: dict[str, Any],
    *,
    train_rows: int,
    processes: int,
    components: int,
    policy: str,
    model_type: str | None = None,
    peft: tuple[dict[str, Any], str] | None = None,
) -> Mapping:
    """The contract's values for an RLOOConfig (its keys over 1.16's defaults); the adapter as
    for a GRPOConfig."""
    get, out = trl_map.Reader(config, DEFAULTS), Mapping()
    for key, what in NO_EQUIVALENT.items():
        if get(key) != DEFAULTS[key] and not (key == "generation_kwargs" and not get(key)):
            out.refuse(key, f"{plain(get(key))}: {what}")
    trl_map.batch(get, out, train_rows, processes)
    _objective(get, out, components)
    return trl_map.finish(get, out, policy, model_type, peft)


def _objective(get: trl_map.Reader, out: Mapping, components: int) -> None:
    fixed = "trl RLOOTrainer (not an option)"
    out.set("objective.advantage.baseline", "leave_one_out", f"{fixed}: the mean of the group's other rewards")
    out.set("objective.advantage.scale", "none", f"{fixed}: no std")
    if get("normalize_advantages"):
        source = get.source("normalize_advantages")
        out.set("objective.advantage.whiten.over", "batch", f"{source}: the whole batch's advantages")
        out.set("objective.advantage.whiten.std", "sample", "trl nanstd divides by n − 1 (not an option)")
        out.set("objective.advantage.whiten.epsilon", 1e-4, "trl adds 1e-4 to the std (not an option)")
        out.set("objective.advantage.whiten.epsilon_use", "add_to_std", "trl: ÷ (std + 1e-4) (not an option)")
    out.set("objective.aggregation", "seq_mean_token_mean", f"{fixed}: each answer's loss, averaged over answers")
    out.set("objective.ratio.level", "sequence_sum", f"{fixed}: exp of the answer's summed log-ratio")
    out.set("objective.ratio.denominator", "trainer_recomputed", "trl recomputes π_old with the trainer")
    low, high = get("epsilon"), get("epsilon_high")
    out.set("objective.clip.low", low, get.source("epsilon"))
    out.set("objective.clip.high", low if high is None else high, get.source("epsilon_high") + " (null: epsilon)")
    beta = get("beta")
    out.set("objective.kl.coef", beta, get.source("beta"))
    if beta > 0:
        out.set("objective.kl.estimator", "k1", f"{fixed}: log π_old − log π_ref per token")
        out.set("objective.kl.placement", "reward", f"{fixed}: summed over the answer, subtracted from its reward")
    out.set("objective.entropy_coef", 0.0, f"{fixed}: no entropy bonus")
    out.set("objective.correction.kind", "none", f"{fixed}: no importance correction of vLLM's samples")
    weights = get("reward_weights")
    if weights is None:
        out.comments["objective.reward.weights"] = (
            f"trl reward_weights: null ({trl_map.VERSION} default: 1.0 for each reward function); "
            "the contract's weights kept"
        )
    elif len(weights) != components:
        out.refuse("reward_weights", f"{len(weights)} weights for the contract's {components} components")
    else:
        out.set("objective.reward.weights", list(weights), get.source("reward_weights"))
