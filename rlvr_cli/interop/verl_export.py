"""The contract → verl 0.9.1's ppo_trainer keys that compute the same objective, with every
choice verl cannot express listed (verl_map.py is the other direction)."""

from __future__ import annotations

from typing import Any

from rlvr_cli.contract.models import Contract
from rlvr_cli.interop import verl_rejection
from rlvr_cli.interop.common import Mapping, check_reinforce_plus_plus, check_std, float32_exact
from rlvr_cli.interop.verl_map import (
    AGGREGATION,
    MINI_BATCHES_DIFFER,
    RFPP_BASELINE,
    RFPP_WHITEN,
    SCHEDULE_DIFFERS,
    A,
    C,
    M,
    R,
    aggregation_bounds,
)

#: `dynamic_sampling.uniform_on` → verl's filter_groups.metric (the v1 trainer's replay buffer reads it)
FILTER_METRIC = {
    "reward": ("reward", "rm_scores: the reward the advantages use"),
    "verifier_reward": ("score", "the exported reward function's score, before any overlong penalty"),
}
LOSS_AGG = {v: k for k, v in AGGREGATION.items() if v != "constant_norm"}
KL = {"k1": "kl", "k2": "mse", "k3": "low_var_kl"}
#: a dual-clip constant no ratio reaches: verl clamps the log-ratio to ±20, e^20 ≈ 4.9e8
NO_DUAL = 1.0e10


def export_config(contract: Contract) -> Mapping:
    out = Mapping()
    _objective(contract, out)
    _kl(contract, out)
    _batch(contract, out)
    _sampling(contract, out)
    _optimizer(contract, out)
    _adapter(contract, out)
    return out


def _adapter(contract: Contract, out: Mapping) -> None:
    """The adapter as verl's model keys: its FSDP engine builds LoraConfig(r, lora_alpha,
    target_modules, bias none), with no dropout and peft's initialisation; rank 0 trains every weight."""
    a = contract.hyperparameters.adapter
    out.set(f"{M}.lora_rank", a.rank if a else 0, "adapter.rank" if a else "no adapter: every weight trains")
    if a is None:
        return
    out.set(f"{M}.lora_alpha", a.alpha, "adapter.alpha")
    out.set(f"{M}.target_modules", a.target_modules, "adapter.target_modules")
    if a.dropout:
        out.refuse("hyperparameters.adapter.dropout", f"{a.dropout:g}: verl's LoRA has no dropout")
    if a.bias != "none":
        out.refuse("hyperparameters.adapter.bias", f"{a.bias}: verl trains no bias with an adapter")
    if a.init != "default":
        out.refuse("hyperparameters.adapter.init", f"{a.init}: verl initialises as peft's default")
    if a.path is not None:
        out.refuse("hyperparameters.adapter.path", "verl reads a starting adapter from lora_adapter_path: set it there")


def _whitened(a: Any, out: Mapping) -> None:
    """A whitened advantage is verl's REINFORCE++ with baseline, where it is that one exactly."""
    out.set("algorithm.adv_estimator", RFPP_BASELINE, "objective.advantage.whiten")
    check_reinforce_plus_plus(out, a, "verl", RFPP_BASELINE, RFPP_WHITEN)
    out.bound("objective.advantage.whiten", f"{RFPP_BASELINE}: verl divides its masked means by Σmask + 1e-8")


def _masks(o: Any, out: Mapping) -> None:
    """What leaves the loss before it: verl's rejection sampling; the masks verl does not have."""
    verl_rejection.export(o.rejection, out)
    if o.entropy_mask is not None:
        out.refuse("objective.entropy_mask", "verl has no entropy mask of the policy loss")
    if o.off_policy_mask is not None:
        out.refuse("objective.off_policy_mask", "verl has no off-policy sequence masking")


def _loss_mode(kind: str | None, level: str, out: Mapping) -> str:
    """verl's policy_loss.loss_mode for the clip's kind and the ratio's level."""
    if kind == "vespo":
        out.refuse("objective.clip.kind", "vespo: verl has no gamma-weighted loss")
    return kind if kind in ("cispo", "sapo") else "gspo" if level == "sequence" else "vanilla"


def _objective(contract: Contract, out: Mapping) -> None:
    o = contract.objective
    a = o.advantage
    _masks(o, out)
    if a.whiten is not None:
        _whitened(a, out)
    elif a.baseline == "leave_one_out":
        out.set("algorithm.adv_estimator", "rloo_vectorized", "objective.advantage.baseline: leave_one_out")
        if a.scale != "none":
            out.refuse("objective.advantage.scale", f"{a.scale}: verl's rloo divides by no std")
    else:
        out.set("algorithm.adv_estimator", "grpo", "objective.advantage.baseline: group_mean")
        if a.scale == "batch_std":
            out.refuse("objective.advantage.scale", "batch_std: verl's GRPO divides by the group's std or by nothing")
        out.set("algorithm.norm_adv_by_std_in_grpo", a.scale != "none", "objective.advantage.scale")
        check_std(out, a, "verl", 1e-6)
    weights = [c.weight for c in o.reward.components]
    if not all(float32_exact(w) for w in weights):
        out.differs("objective.reward.components", f"weights {weights}: verl's float32 rewards round them")
    if o.reward.unit != "response":
        out.refuse("objective.reward.unit", f"{o.reward.unit}: verl rewards each response")
    if o.reward.on_invalid == "exclude":
        out.differs(
            "objective.reward.on_invalid",
            "exclude: verl trains every response; the exported reward function scores an invalid verdict 0",
        )
    level = o.ratio.level if o.ratio else "token"
    if level == "sequence_sum":
        out.refuse("objective.ratio.level", "sequence_sum: verl's sequence ratio (gspo) is the tokens' mean")
    mode = _loss_mode(o.clip.kind, level, out)
    out.set(f"{A}.policy_loss.loss_mode", mode, "objective.clip.kind, objective.ratio.level")
    if mode == "sapo":
        _sapo(contract, out, level)
    else:
        out.set(f"{A}.clip_ratio_low", o.clip.low, "objective.clip.low")
        out.set(f"{A}.clip_ratio_high", o.clip.high, "objective.clip.high")
    if level == "sequence" and o.clip.dual is not None:
        out.refuse("objective.clip.dual", "verl's GSPO loss never dual-clips")
    if level == "token" and mode == "vanilla":
        dual = o.clip.dual if o.clip.dual is not None else NO_DUAL
        out.set(f"{A}.clip_ratio_c", dual, "objective.clip.dual (absent: a constant no ratio reaches)")
    if o.aggregation == "constant_norm":
        out.set(f"{A}.loss_agg_mode", "seq-mean-token-sum-norm", "objective.aggregation: constant_norm")
        budget = contract.length.max_response_tokens
        out.set(f"{A}.loss_scale_factor", budget, "length.max_response_tokens (null would divide by the padded width)")
    else:
        out.set(f"{A}.loss_agg_mode", LOSS_AGG[o.aggregation], "objective.aggregation")
    for difference in aggregation_bounds(o.aggregation):
        out.bound(*difference)
    out.set(f"{C}.bypass_mode", bool(o.ratio and o.ratio.denominator == "engine"), "objective.ratio.denominator")
    c = o.correction
    if c is not None and c.kind != "none":
        out.set(f"{C}.rollout_is", c.level, "objective.correction.level")
        threshold = c.cap if c.kind == "tis" else f"{c.low}_{c.high}"
        out.set(f"{C}.rollout_is_threshold", threshold, "objective.correction")
    else:
        out.set(f"{C}.rollout_is", None, "objective.correction: none")
    out.set(f"{A}.entropy_coeff", o.entropy_coef, "objective.entropy_coef")
    out.bound("log-ratio", "verl clamps log π_θ − log π_old to ±20 (exact while the ratio stays in e^±20)")


def _sapo(contract: Contract, out: Mapping, level: str) -> None:
    """verl's sapo: the gate's temperatures, per-token ratios, and seq-mean-token-mean — which verl's
    sapo loss takes whatever loss_agg_mode says (its KL loss and entropy bonus follow loss_agg_mode)."""
    tau, o = contract.objective.clip.temperature, contract.objective
    assert tau is not None  # RLV003: sapo requires it
    out.set(f"{A}.tau_pos", tau.positive, "objective.clip.temperature.positive")
    out.set(f"{A}.tau_neg", tau.negative, "objective.clip.temperature.negative")
    if level != "token":
        out.refuse("objective.ratio.level", f"{level}: verl's sapo gates each token's own ratio")
    if o.aggregation != "seq_mean_token_mean":
        out.refuse("objective.aggregation", f"{o.aggregation}: verl's sapo loss is seq_mean_token_mean")


def _kl(contract: Contract, out: Mapping) -> None:
    kl = contract.objective.kl
    on = kl.coef > 0
    out.set(f"{A}.use_kl_loss", on and kl.placement == "loss", "objective.kl")
    out.set("algorithm.use_kl_in_reward", on and kl.placement == "reward", "objective.kl")
    if not on or kl.estimator is None:
        return
    if kl.placement == "loss":
        out.set(f"{A}.kl_loss_coef", kl.coef, "objective.kl.coef")
        straight = "+" if kl.gradient == "k2" else ""  # verl's straight-through: k2's gradient
        out.set(f"{A}.kl_loss_type", KL[kl.estimator] + straight, "objective.kl.estimator, objective.kl.gradient")
        if kl.weight not in (None, "none"):
            out.refuse("objective.kl.weight", f"{kl.weight}: verl's KL loss is the estimator's own, never weighted")
    else:
        out.set("algorithm.kl_ctrl.type", "fixed", "objective.kl.coef")
        out.set("algorithm.kl_ctrl.kl_coef", kl.coef, "objective.kl.coef")
        out.set("algorithm.kl_penalty", KL[kl.estimator], "objective.kl.estimator")
    if kl.estimator == "k3":
        out.bound("objective.kl.estimator", "k3: verl clamps it to [-10, 10] per token")


def _batch(contract: Contract, out: Mapping) -> None:
    hp = contract.hyperparameters
    out.set("data.train_batch_size", hp.prompts_per_step, "hyperparameters.prompts_per_step")
    out.set(f"{A}.ppo_mini_batch_size", hp.prompts_per_step // hp.mini_batches, "prompts_per_step / mini_batches")
    if hp.mini_batches > 1:
        out.differs("hyperparameters.mini_batches", MINI_BATCHES_DIFFER)
    out.set(f"{R}.n", hp.group_size, "hyperparameters.group_size")
    out.set(f"{A}.ppo_epochs", hp.updates_per_batch, "hyperparameters.updates_per_batch")
    if hp.micro_batch_sequences:
        out.set(f"{A}.ppo_micro_batch_size_per_gpu", hp.micro_batch_sequences, "hyperparameters.micro_batch_sequences")
    out.set("trainer.total_training_steps", hp.max_steps, "hyperparameters.max_steps")
    out.set("data.seed", hp.seed, "hyperparameters.seed")
    if hp.sample_ahead:
        out.differs("hyperparameters.sample_ahead", "verl's trainer samples each batch after the previous update")
    if contract.length.overlong_penalty is not None:
        out.refuse(
            "length.overlong_penalty",
            "verl's ppo_trainer config holds no overlong buffer (the DAPO recipe's dapo reward manager reads it from "
            "reward kwargs of its own)",
        )
    ds = contract.length.dynamic_sampling
    if ds is not None and ds.drop_uniform_groups:
        out.set("algorithm.filter_groups.enable", True, "length.dynamic_sampling.drop_uniform_groups")
        metric, why = FILTER_METRIC[ds.uniform_on]
        out.set(
            "algorithm.filter_groups.metric", metric, f"length.dynamic_sampling.uniform_on: {ds.uniform_on} ({why})"
        )
        out.set("algorithm.filter_groups.max_num_gen_batches", ds.max_rounds, "length.dynamic_sampling.max_rounds")


def _sampling(contract: Contract, out: Mapping) -> None:
    s, length = contract.hyperparameters.sampling, contract.length
    out.set(f"{R}.temperature", s.temperature, "sampling.temperature")
    out.set(f"{R}.top_p", s.top_p, "sampling.top_p")
    out.set(f"{R}.top_k", s.top_k or -1, "sampling.top_k (0: -1)")
    out.set(f"{R}.name", "sglang" if s.engine == "sglang" else "vllm", "sampling.engine (verl samples with an engine)")
    out.set("data.max_prompt_length", length.max_prompt_tokens, "length.max_prompt_tokens")
    out.set("data.max_response_length", length.max_response_tokens, "length.max_response_tokens")
    out.set("data.truncation", length.prompt_truncation, "length.prompt_truncation")
    if length.on_truncated != "keep":
        out.refuse("length.on_truncated", f"{length.on_truncated}: verl judges a truncated response like any other")


def _optimizer(contract: Contract, out: Mapping) -> None:
    hp = contract.hyperparameters
    o = hp.optimizer
    if o.name != "adamw":
        out.refuse("hyperparameters.optimizer.name", f"{o.name}: verl's actor optimizer here is AdamW")
    out.set(f"{A}.optim.lr", o.lr, "optimizer.lr")
    out.set(f"{A}.optim.betas", list(o.betas), "optimizer.betas")
    out.set(f"{A}.optim.weight_decay", o.weight_decay, "optimizer.weight_decay")
    out.set(f"{A}.optim.clip_grad", o.grad_clip, "optimizer.grad_clip")
    schedule = hp.schedule
    name = schedule.name if schedule else "constant"
    if name == "linear":
        out.refuse("hyperparameters.schedule.name", "linear: verl's actor schedules are constant and cosine")
    out.set(f"{A}.optim.lr_scheduler_type", "cosine" if name == "cosine" else "constant", "schedule.name")
    out.set(f"{A}.optim.min_lr_ratio", 0.0, "the contract's cosine decays to 0")
    warmup, per_batch = (schedule.warmup_steps if schedule else 0), hp.steps_per_batch
    out.set(f"{A}.optim.lr_warmup_steps", -(-warmup // per_batch), "schedule.warmup_steps / optimizer steps a batch")
    if warmup:
        out.differs("hyperparameters.schedule.warmup_steps", "verl's warm-up is lr·s/w, the contract's lr·(s+1)/w")
    if per_batch > 1 and (warmup or name != "constant"):
        out.differs("hyperparameters.schedule", SCHEDULE_DIFFERS.format(per_batch))
    dtypes = hp.dtypes
    if dtypes.params != "fp32":
        out.refuse("hyperparameters.precision", f"{dtypes.params} weights: verl's actor keeps fp32 weights")
    compute = {"bf16": "bfloat16", "fp16": "float16", "fp32": "float32"}[dtypes.compute]
    out.set(f"{A}.fsdp_config.model_dtype", "fp32", "precision: fp32 master weights")
    out.set(f"{A}.fsdp_config.dtype", compute, "precision: compute dtype")
