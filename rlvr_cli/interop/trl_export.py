"""The contract → TRL 1.16's GRPOConfig keyword arguments that compute the same objective
(RLOOConfig's, trl_rloo_export.py, for the answer's likelihood ratio), with every choice TRL
cannot express listed (trl_map.py is the other direction)."""

from __future__ import annotations

import math

from rlvr_cli.contract.models import Contract
from rlvr_cli.interop import trl_clip
from rlvr_cli.interop.common import Mapping, check_std
from rlvr_cli.interop.trl_map import AGGREGATION, MINI_BATCHES_DIFFER

LOSS_TYPE = {
    "token_mean": "dapo",
    "seq_mean_token_mean": "grpo",
    "constant_norm": "dr_grpo",
    "seq_mean_token_sum": "luspo",
}
assert all(AGGREGATION[v] == k for k, v in LOSS_TYPE.items())


def export_config(contract: Contract, processes: int = 1) -> Mapping:
    """GRPOConfig keywords (dotted paths are plain keys here) and the differences."""
    out = Mapping()
    _objective(contract, out)
    batch(contract, out, processes)
    sampling(contract, out)
    _correction(contract, out)
    optimizer(contract, out)
    return out


def trainer(contract: Contract) -> str:
    """Which TRL trainer computes the contract's ratio: RLOOTrainer takes the answer's likelihood
    ratio (`sequence_sum`), GRPOTrainer the others."""
    ratio, vespo = contract.objective.ratio, contract.objective.clip.kind == "vespo"  # vespo: GRPOTrainer's
    return "rloo" if ratio is not None and ratio.level == "sequence_sum" and not vespo else "grpo"


def _cispo(contract: Contract, out: Mapping) -> None:
    """trl's cispo: the weight's cap epsilon_high = 1 + high, no floor, per-token ratios, token_mean."""
    clip = contract.objective.clip
    out.set("loss_type", "cispo", "objective.clip.kind: cispo")
    out.set("epsilon_high", round(1 + clip.high, 12), "objective.clip.high: the weight's cap, 1 + high")
    if clip.low != 1:
        out.refuse("objective.clip.low", f"{clip.low}: trl's cispo weight has no floor (low 1)")
    if contract.objective.aggregation != "token_mean":
        out.refuse("objective.aggregation", f"{contract.objective.aggregation}: trl's cispo loss is token_mean")


def _sapo(contract: Contract, out: Mapping) -> None:
    """trl's sapo: the gate's temperatures, each answer's token mean averaged (grpo's aggregation)."""
    tau = contract.objective.clip.temperature
    assert tau is not None  # RLV003: sapo requires it
    out.set("loss_type", "sapo", "objective.clip.kind: sapo")
    out.set("sapo_temperature_pos", tau.positive, "objective.clip.temperature.positive")
    out.set("sapo_temperature_neg", tau.negative, "objective.clip.temperature.negative")
    if contract.objective.aggregation != "seq_mean_token_mean":
        out.refuse("objective.aggregation", f"{contract.objective.aggregation}: trl's sapo loss is seq_mean_token_mean")


def _vespo(contract: Contract, out: Mapping) -> None:
    """trl's vespo: the gamma weight's k and λ; token_mean; no KL weighed by a ratio (trl's would be
    the token ratio) and no vLLM weights (trl folds them into w)."""
    o = contract.objective
    g = o.clip.gamma
    assert g is not None  # RLV003: vespo requires it
    out.set("loss_type", "vespo", "objective.clip.kind: vespo")
    for sign, short in ((g.positive, "pos"), (g.negative, "neg")):
        out.set(f"vespo_k_{short}", sign.shape, f"objective.clip.gamma ({short}).shape")
        out.set(f"vespo_lambda_{short}", sign.rate, f"objective.clip.gamma ({short}).rate")
    if o.aggregation != "token_mean":
        out.refuse("objective.aggregation", f"{o.aggregation}: trl's vespo loss is token_mean")
    if o.kl.weight == "ratio":
        out.refuse("objective.kl.weight", "ratio: trl would weigh vespo's KL by the token ratio")
    if o.corrects:
        out.refuse("objective.correction", "trl's vespo folds vLLM's weights into w instead")


def _objective(contract: Contract, out: Mapping) -> None:
    o = contract.objective
    if o.aggregation not in LOSS_TYPE:
        out.refuse("objective.aggregation", f"{o.aggregation}: trl has no loss_type that sums each answer's tokens")
    else:
        out.set("loss_type", LOSS_TYPE[o.aggregation], f"objective.aggregation: {o.aggregation}")
    a = o.advantage
    if a.whiten is not None:
        out.refuse("objective.advantage.whiten", "trl's GRPOTrainer never whitens (RLOOTrainer does)")
    if a.baseline != "group_mean":
        out.refuse("objective.advantage.baseline", f"{a.baseline}: trl's GRPOTrainer subtracts the group's mean")
    else:
        out.set(
            "scale_rewards", {"group_std": "group", "batch_std": "batch", "none": "none"}[a.scale], "advantage.scale"
        )
        check_std(out, a, "trl", 1e-4)
    if o.clip.kind == "cispo":
        _cispo(contract, out)
    elif o.clip.kind == "sapo":
        _sapo(contract, out)
    elif o.clip.kind == "vespo":
        _vespo(contract, out)
    else:
        out.set("epsilon", o.clip.low, "objective.clip.low")
        out.set("epsilon_high", o.clip.high, "objective.clip.high")
    if o.clip.dual is not None:  # trl's two-sided clipping is the dual clip where δ > 1 + high (trl_map._delta)
        out.set("delta", o.clip.dual, "objective.clip.dual")
        if o.clip.dual <= 1 + o.clip.high:
            out.refuse("objective.clip.dual", f"{o.clip.dual}: trl's delta equals a dual clip above 1 + high only")
    out.set("beta", o.kl.coef, "objective.kl.coef")
    if o.kl.coef > 0:
        weight = o.kl.weight or "none"
        out.set("use_bias_correction_kl", weight == "ratio", f"objective.kl.weight: {weight}")
        if weight == "score_function":
            out.refuse("objective.kl.weight", "score_function: trl multiplies the KL by the ratio or by nothing")
        if o.kl.gradient == "k2":
            out.refuse("objective.kl.gradient", "k2: trl's KL has k3's own gradient")
        if o.kl.estimator != "k3":
            out.refuse("objective.kl.estimator", f"{o.kl.estimator}: trl's KL is k3")
        if o.kl.placement != "loss":
            out.refuse("objective.kl.placement", "reward: trl's KL is a loss term")
    out.set("entropy_coef", o.entropy_coef, "objective.entropy_coef")
    if o.entropy_coef > 0 and o.aggregation != "token_mean":
        out.differs(
            "objective.entropy_coef", "trl's bonus is each micro-batch's token mean, not the loss's aggregation"
        )
    level = "token" if o.clip.kind == "vespo" else o.ratio.level if o.ratio else "token"  # vespo: φ reads the sum
    out.set("importance_sampling_level", level, "objective.ratio.level")
    if o.ratio is not None and o.ratio.denominator == "engine":
        out.refuse("objective.ratio.denominator", "engine: trl divides by its own recomputed log-probs")
    reward(contract, out, "its tokens still count in the loss's denominator")


def reward(contract: Contract, out: Mapping, counted: str) -> None:
    """The reward's weights; a unit trl cannot reward refused; an excluded verdict's difference
    (`counted`: how the trainer's loss still counts it)."""
    o = contract.objective
    out.set("reward_weights", [c.weight for c in o.reward.components], "objective.reward.components (in order)")
    if o.reward.unit != "response":
        out.refuse("objective.reward.unit", f"{o.reward.unit}: trl rewards each completion")
    if o.reward.on_invalid == "exclude":
        out.differs(
            "objective.reward.on_invalid",
            "exclude: the exported reward functions return None for an invalid verdict; trl leaves it out of the "
            f"group's statistics and gives it advantage 0, but {counted}",
        )


def batch(contract: Contract, out: Mapping, processes: int) -> None:
    hp = contract.hyperparameters
    sequences = hp.prompts_per_step * hp.group_size // hp.mini_batches  # an optimizer step's
    micro = hp.micro_batch_sequences or sequences
    if sequences % (micro * processes):
        out.refuse("hyperparameters.micro_batch_sequences", f"{sequences} sequences over {processes} process(es)")
        micro = sequences // processes
    accumulate = sequences // (micro * processes)
    out.set("num_generations", hp.group_size, "hyperparameters.group_size")
    out.set("per_device_train_batch_size", micro, "hyperparameters.micro_batch_sequences")
    out.set(
        "gradient_accumulation_steps", accumulate, f"prompts_per_step × group_size / mini_batches / micro / {processes}"
    )
    out.set("steps_per_generation", accumulate * hp.mini_batches, "gradient_accumulation_steps × mini_batches")
    if hp.mini_batches > 1:
        out.differs("hyperparameters.mini_batches", MINI_BATCHES_DIFFER)
    out.set("num_iterations", hp.updates_per_batch, "hyperparameters.updates_per_batch")
    out.set("max_steps", hp.max_steps * hp.steps_per_batch, "max_steps × optimizer steps a batch")
    out.set("seed", hp.seed, "hyperparameters.seed")
    if hp.sample_ahead:
        out.refuse("hyperparameters.sample_ahead", "trl samples each batch after the previous update")
    if contract.length.overlong_penalty is not None:
        out.refuse("length.overlong_penalty", "trl has no soft overlong punishment")
    if contract.length.dynamic_sampling and contract.length.dynamic_sampling.drop_uniform_groups:
        out.refuse("length.dynamic_sampling", "trl keeps groups whose rewards are all equal")


def sampling(contract: Contract, out: Mapping) -> None:
    s, length = contract.hyperparameters.sampling, contract.length
    out.set("temperature", s.temperature, "sampling.temperature")
    out.set("top_p", s.top_p, "sampling.top_p")
    out.set("top_k", s.top_k, "sampling.top_k")
    out.set("max_completion_length", length.max_response_tokens, "length.max_response_tokens")
    if length.on_truncated == "penalize":
        out.refuse("length.on_truncated", "penalize: trl has no truncation penalty")
    out.set("mask_truncated_completions", length.on_truncated == "exclude", "length.on_truncated")
    if length.on_truncated == "exclude":
        out.differs(
            "length.on_truncated",
            "exclude: trl masks a truncated completion's loss but keeps it in its group's statistics",
        )
    out.set("use_vllm", s.engine in ("vllm", "sglang"), "sampling.engine")
    if s.engine == "sglang":
        out.refuse("hyperparameters.sampling.engine", "sglang: trl samples with transformers or vLLM")
    if s.engine == "vllm":
        out.set("vllm_mode", "server" if s.server else "colocate", "sampling.server")
        if s.server:
            out.set("vllm_server_base_url", s.server.url, "sampling.server.url")


def _off_policy_mask(contract: Contract, out: Mapping) -> None:
    """trl's off_policy_mask_threshold compares π_θ with vLLM's log-probs under use_vllm, with the old
    ones otherwise: the contract's `against` must be the one the exported sampler makes it."""
    mask = contract.objective.off_policy_mask
    if mask is None:
        return
    out.set("off_policy_mask_threshold", mask.threshold, "objective.off_policy_mask.threshold")
    vllm = contract.hyperparameters.sampling.engine == "vllm"
    if mask.against != ("engine" if vllm else "old"):
        out.refuse(
            "objective.off_policy_mask.against",
            f"{mask.against}: trl's mask compares π_θ with the {'vLLM' if vllm else 'old'} log-probs here",
        )


def _entropy_mask(contract: Contract, out: Mapping) -> None:
    o = contract.objective
    out.set("top_entropy_quantile", o.entropy_mask.top if o.entropy_mask else 1.0, "objective.entropy_mask")
    if o.entropy_mask and out.values.get("gradient_accumulation_steps", 1) > 1:
        out.differs("objective.entropy_mask", trl_clip.ENTROPY_QUANTILE_DIFFERS)
    if o.entropy_mask and o.entropy_coef > 0:
        out.differs(
            "objective.entropy_mask", "trl's entropy bonus acts on the masked tokens too; the contract's on all"
        )


def _correction(contract: Contract, out: Mapping) -> None:
    _off_policy_mask(contract, out)
    _entropy_mask(contract, out)
    if contract.objective.rejection:
        out.refuse("objective.rejection", "trl rejects nothing by the engine/trainer divergence")
    c = contract.objective.correction
    corrects = contract.objective.corrects
    if contract.hyperparameters.sampling.engine == "vllm":
        out.set("vllm_importance_sampling_correction", corrects, "objective.correction")
    elif corrects:
        out.refuse("objective.correction", "trl corrects only samples drawn by vLLM")
    if not corrects or c is None:
        return
    kind = "truncate" if c.kind == "tis" else "mask"
    out.set("vllm_importance_sampling_mode", f"{c.level}_{kind}", "objective.correction.kind, level")
    if c.kind == "tis":
        out.set("vllm_importance_sampling_clip_max", c.cap, "objective.correction.cap")
    else:
        out.set("vllm_importance_sampling_clip_min", c.low or None, "objective.correction.low")
        out.set("vllm_importance_sampling_clip_max", None if math.isinf(c.high or 0) else c.high, "correction.high")


def optimizer(contract: Contract, out: Mapping) -> None:
    hp = contract.hyperparameters
    o = hp.optimizer
    if o.name == "adam" and o.weight_decay > 0:
        out.refuse(
            "hyperparameters.optimizer.name", "adam with weight decay (L2): transformers' Adam decay is decoupled"
        )
    out.set("optim", "sgd" if o.name == "sgd" else "adamw_torch", "optimizer.name")
    out.set("learning_rate", o.lr, "optimizer.lr")
    out.set("adam_beta1", o.betas[0], "optimizer.betas")
    out.set("adam_beta2", o.betas[1], "optimizer.betas")
    out.set("weight_decay", o.weight_decay, "optimizer.weight_decay")
    out.set("max_grad_norm", o.grad_clip, "optimizer.grad_clip")
    schedule = hp.schedule
    out.set("lr_scheduler_type", schedule.name if schedule else "constant", "schedule.name")
    warmup = schedule.warmup_steps if schedule else 0
    out.set("warmup_steps", warmup, "schedule.warmup_steps")
    if warmup:
        out.differs(
            "hyperparameters.schedule.warmup_steps", "transformers' warm-up is lr·s/w, the contract's lr·(s+1)/w"
        )
    if warmup and schedule and schedule.name == "constant":
        out.set("lr_scheduler_type", "constant_with_warmup", "schedule.name constant with a warm-up")
    dtypes = hp.dtypes
    if dtypes.params != "fp32":
        out.refuse("hyperparameters.precision", f"{dtypes.params} weights: transformers keeps fp32 master weights")
    out.set("bf16", dtypes.compute == "bf16", "precision")
    out.set("fp16", dtypes.compute == "fp16", "precision")
    # an adapter goes to GRPOTrainer(peft_config=LoraConfig(**peft_config.yaml)) (export_files.py)
