"""The contract → a NeMo RL GRPO recipe (the keys over NeMo RL's examples/configs/grpo_math_1B.yaml
that compute the same objective), with every choice NeMo RL cannot express listed
(nemo_rl_map.py is the other direction; an exported recipe imports back to the same objective)."""

from __future__ import annotations

from typing import Any

from rlvr_cli.contract.models import Contract
from rlvr_cli.interop.common import Mapping, check_reinforce_plus_plus
from rlvr_cli.interop.nemo_rl_map import MINI_BATCHES_DIFFER, G, L, P
from rlvr_cli.interop.nemo_rl_reward import RFPP, RFPP_WHITEN

#: where the recipe sits in a NeMo RL checkout, and the config it is written over
RECIPE_DEFAULTS = "../../grpo_math_1B.yaml"
PRECISION = {"bf16": "bfloat16", "fp16": "float16", "fp32": "float32"}
OPTIMIZER = {"adamw": "torch.optim.AdamW", "adam": "torch.optim.Adam"}


def export_config(contract: Contract) -> Mapping:
    out = Mapping()
    _advantage(contract, out)
    _loss(contract, out)
    _batch(contract, out)
    _length(contract, out)
    _sampling(contract, out)
    _optimizer(contract, out)
    out.differs(
        "objective.reward",
        "NeMo RL's environment computes the reward (env.math by default): the contract's verifier and its "
        "weights are not exported; give NeMo RL an environment that returns the contract's reward",
    )
    return out


def _advantage(contract: Contract, out: Mapping) -> None:
    a = contract.objective.advantage
    if a.whiten is not None:
        _reinforce_plus_plus(a, out)
        return
    loo = a.baseline == "leave_one_out"
    fixed = {"group_std": not loo, "leave_one_out_std": loo, "none": True}
    if not fixed.get(a.scale, False):
        out.refuse("objective.advantage.scale", f"{a.scale}: NeMo RL divides by the std of the rewards its baseline "
                   "averages, or by nothing")  # fmt: skip
    normalize = a.scale != "none"
    for section in (f"{G}.adv_estimator", G):  # the estimator's section, and the keys older releases read
        out.set(f"{section}.use_leave_one_out_baseline", loo, f"objective.advantage.baseline: {a.baseline}")
        out.set(f"{section}.normalize_rewards", normalize, f"objective.advantage.scale: {a.scale}")
    out.set(f"{G}.adv_estimator.name", "grpo", "the group baseline")
    out.set(f"{G}.adv_estimator.minus_baseline", True, "NeMo RL's default")
    if normalize and a.std != "sample":
        out.refuse("objective.advantage.std", f"{a.std}: NeMo RL divides by the sample std (n − 1)")
    if normalize and a.epsilon != 1e-6:
        out.refuse("objective.advantage.epsilon", f"{a.epsilon}: NeMo RL adds 1e-6 to the std, not an option")


def _reinforce_plus_plus(a: Any, out: Mapping) -> None:
    """A whitened advantage is NeMo RL's REINFORCE++ with baseline, where it is that one exactly."""
    out.set(f"{G}.adv_estimator.name", RFPP, "objective.advantage.whiten")
    out.set(f"{G}.adv_estimator.minus_baseline", True, f"objective.advantage.baseline: {a.baseline}")
    check_reinforce_plus_plus(out, a, "NeMo RL", RFPP, RFPP_WHITEN)


def _loss(contract: Contract, out: Mapping) -> None:
    o = contract.objective
    if o.clip.kind in ("sapo", "vespo"):
        out.refuse("objective.clip.kind", f"{o.clip.kind}: NeMo RL's losses clip the ratio (PPO's or CISPO's way)")
    out.set(f"{L}.ratio_clip_min", o.clip.low, "objective.clip.low")
    out.set(f"{L}.ratio_clip_max", o.clip.high, "objective.clip.high")
    out.set(f"{L}.ratio_clip_c", o.clip.dual, "objective.clip.dual")
    if o.aggregation not in ("token_mean", "seq_mean_token_mean"):
        out.refuse("objective.aggregation", f"{o.aggregation}: NeMo RL's losses are token_mean and seq_mean_token_mean")
    token = o.aggregation == "token_mean"
    out.set(f"{L}.token_level_loss", token, f"objective.aggregation: {o.aggregation}")
    sequence = o.ratio is not None and o.ratio.level == "sequence"
    out.set(f"{L}.sequence_level_importance_ratios", sequence, "objective.ratio.level")
    if o.ratio is not None and o.ratio.level == "sequence_sum":
        out.refuse("objective.ratio.level", "sequence_sum: NeMo RL's sequence ratio is GSPO's mean")
    if sequence and token:
        out.refuse("objective.ratio.level", "sequence with token_mean: NeMo RL takes GSPO's ratio with a sequence mean")
    if o.ratio is not None and o.ratio.denominator == "engine":
        out.refuse("objective.ratio.denominator", "engine: NeMo RL's ratio is over the trainer's recomputed log-probs")
    if o.entropy_coef:
        out.refuse("objective.entropy_coef", f"{o.entropy_coef}: NeMo RL's GRPO loss has no entropy bonus")
    out.set(f"{L}.reference_policy_kl_penalty", o.kl.coef, "objective.kl.coef")
    if o.kl.coef:
        out.set(f"{L}.reference_policy_kl_type", o.kl.estimator, "objective.kl.estimator")
        if o.kl.placement != "loss":
            out.refuse("objective.kl.placement", f"{o.kl.placement}: NeMo RL's GRPO adds the KL to the loss")
        if o.kl.gradient == "k2":
            out.refuse("objective.kl.gradient", "k2: NeMo RL's KL has its estimator's own gradient")
        if o.kl.weight == "ratio":
            out.refuse("objective.kl.weight", "ratio: NeMo RL never multiplies its KL by the ratio")
        elif o.kl.weight == "score_function":
            out.differs(
                "objective.kl.weight",
                "score_function: NeMo RL's newest releases weigh the KL so; earlier ones take the estimator's own "
                "gradient",
            )
        out.bound("loss_fn.kl_input_clamp_value", "NeMo RL clamps the log-ratio to ±20 and the KL to ±10 (defaults)")
    for key in ("use_on_policy_kl_approximation", "use_kl_in_reward", "force_on_policy_ratio"):
        out.set(f"{L}.{key}", False, "the contract's loss")
    out.set(f"{L}.use_cispo", o.clip.kind == "cispo", f"objective.clip.kind: {o.clip.kind or 'ppo'}")
    _correction(contract, out)


def _correction(contract: Contract, out: Mapping) -> None:
    if contract.objective.rejection:
        out.refuse("objective.rejection", "NeMo RL has no rejection by the engine/trainer divergence of this form")
    if contract.objective.entropy_mask is not None:
        out.refuse("objective.entropy_mask", "NeMo RL has no entropy mask of the policy loss")
    if contract.objective.off_policy_mask is not None:
        out.refuse("objective.off_policy_mask", "NeMo RL has no off-policy sequence masking")
    c = contract.objective.correction
    on = c is not None and c.kind != "none"
    out.set(f"{L}.use_importance_sampling_correction", on, f"objective.correction.kind: {c.kind if c else 'none'}")
    if not on:
        return
    level = contract.objective.ratio.level if contract.objective.ratio else "token"
    if c.level != level:
        out.refuse("objective.correction.level", f"{c.level}: NeMo RL weighs at the ratio's level ({level})")
    if c.kind == "tis":
        out.set(f"{L}.truncated_importance_sampling_type", "tis", "objective.correction.kind: tis")
        out.set(f"{L}.truncated_importance_sampling_ratio", c.cap, "objective.correction.cap")
    else:
        out.set(f"{L}.truncated_importance_sampling_type", "icepop", "objective.correction.kind: mis")
        out.set(f"{L}.truncated_importance_sampling_ratio", c.high, "objective.correction.high")
        out.set(f"{L}.truncated_importance_sampling_ratio_min", c.low, "objective.correction.low")


def _batch(contract: Contract, out: Mapping) -> None:
    h = contract.hyperparameters
    out.set(f"{G}.num_prompts_per_step", h.prompts_per_step, "hyperparameters.prompts_per_step")
    out.set(f"{G}.num_generations_per_prompt", h.group_size, "hyperparameters.group_size")
    out.set(f"{G}.max_num_steps", h.max_steps, "hyperparameters.max_steps")
    out.set(f"{G}.max_num_epochs", h.max_steps, "as many epochs as steps: max_num_steps decides")
    out.set(f"{G}.seed", h.seed, "hyperparameters.seed")
    sequences = h.prompts_per_step * h.group_size
    out.set(f"{P}.train_global_batch_size", sequences // h.mini_batches, f"{sequences} sequences / mini_batches")
    out.set(f"{P}.train_micro_batch_size", h.micro_batch_sequences or sequences // h.mini_batches, "micro-batches")
    if h.mini_batches > 1:
        out.differs("hyperparameters.mini_batches", MINI_BATCHES_DIFFER)
    if h.updates_per_batch > 1:
        out.refuse("hyperparameters.updates_per_batch", f"{h.updates_per_batch}: NeMo RL's GRPO takes one pass a batch")
    _adapter(contract, out)
    if h.sample_ahead:
        out.refuse("hyperparameters.sample_ahead", "true: NeMo RL's asynchronous GRPO is not mapped")


def _adapter(contract: Contract, out: Mapping) -> None:
    """The adapter as NeMo RL's DTensor LoRA (`policy.dtensor_cfg.lora_cfg`)."""
    a, c = contract.hyperparameters.adapter, f"{P}.dtensor_cfg.lora_cfg"
    out.set(f"{c}.enabled", a is not None, "hyperparameters.adapter" if a else "no adapter: every weight trains")
    if a is None:
        return
    out.set(f"{c}.dim", a.rank, "adapter.rank")
    out.set(f"{c}.alpha", a.alpha, "adapter.alpha")
    out.set(f"{c}.dropout", a.dropout, "adapter.dropout")
    out.set(f"{c}.dropout_position", "pre", "peft drops out the adapter's input")
    every = a.target_modules == "all-linear"
    out.set(f"{c}.match_all_linear", every, f"adapter.target_modules: {a.target_modules if every else 'listed'}")
    out.set(f"{c}.target_modules", [] if every else list(a.target_modules), "adapter.target_modules")
    out.set(f"{c}.exclude_modules", [], "adapter.target_modules")
    if a.bias != "none":
        out.refuse("hyperparameters.adapter.bias", f"{a.bias}: NeMo RL's LoRA trains no bias")
    if a.init != "default" or a.path is not None:
        out.refuse("hyperparameters.adapter", "a gaussian initialisation or a starting adapter: not mapped")
    out.differs("hyperparameters.adapter.init", "NeMo RL draws A by xavier, peft otherwise (B starts at 0 in both)")


def _length(contract: Contract, out: Mapping) -> None:
    length = contract.length
    out.set(
        f"{P}.max_total_sequence_length", length.max_prompt_tokens + length.max_response_tokens, "prompt + response"
    )
    out.set(f"{P}.generation.max_new_tokens", length.max_response_tokens, "length.max_response_tokens")
    out.set("data.max_input_seq_length", length.max_prompt_tokens, "length.max_prompt_tokens")
    out.set(f"{G}.overlong_filtering", length.on_truncated == "exclude", f"length.on_truncated: {length.on_truncated}")
    penalty = length.overlong_penalty
    out.set(f"{G}.reward_shaping.enabled", penalty is not None, "length.overlong_penalty")
    if length.on_truncated == "penalize":
        _stop_properly(contract, out)
    if penalty is not None:
        out.set(f"{G}.reward_shaping.overlong_buffer_length", penalty.buffer_tokens, "overlong_penalty.buffer_tokens")
        out.set(f"{G}.reward_shaping.overlong_buffer_penalty", penalty.factor, "overlong_penalty.factor")
        out.set(f"{G}.reward_shaping.max_response_length", length.max_response_tokens, "length.max_response_tokens")
        out.set(f"{G}.reward_shaping.stop_properly_penalty_coef", None, "the DAPO penalty, not stop-properly")
    sampling = length.dynamic_sampling
    on = sampling is not None and sampling.drop_uniform_groups
    out.set(f"{G}.use_dynamic_sampling", on, "length.dynamic_sampling.drop_uniform_groups")
    if on:
        out.set(f"{G}.dynamic_sampling_max_gen_batches", sampling.max_rounds, "dynamic_sampling.max_rounds")
        out.set(f"{G}.batch_multiplier", 1, "one batch of prompts a round, as the contract")
        shaped = length.overlong_penalty is not None or length.on_truncated == "penalize"
        if shaped and sampling.uniform_on == "reward":
            out.refuse(
                "length.dynamic_sampling.uniform_on",
                "reward: beside reward shaping NeMo RL's dynamic sampling compares the unshaped rewards "
                "(uniform_on: verifier_reward)",
            )


def _stop_properly(contract: Contract, out: Mapping) -> None:
    """A truncated response rewarded 0 is NeMo RL's stop_properly_penalty_coef 0.0 (its reward × 0);
    another reward, or beside the DAPO penalty (which stop_properly switches off), is not."""
    length = contract.length
    if length.truncation_penalty != 0 or length.overlong_penalty is not None:
        why = "beside overlong_penalty" if length.truncation_penalty == 0 else f"reward {length.truncation_penalty}"
        out.refuse("length.on_truncated", f"penalize, {why}: NeMo RL scales a truncated reward (stop_properly)")
        return
    out.set(f"{G}.reward_shaping.enabled", True, "length.on_truncated: penalize")
    out.set(f"{G}.reward_shaping.stop_properly_penalty_coef", 0.0, "length.truncation_penalty: 0.0 (the reward × 0)")


def _sampling(contract: Contract, out: Mapping) -> None:
    s = contract.hyperparameters.sampling
    out.set(f"{P}.generation.temperature", s.temperature, "sampling.temperature")
    out.set(f"{P}.generation.top_p", s.top_p, "sampling.top_p")
    out.set(f"{P}.generation.top_k", s.top_k or None, "sampling.top_k (0: null)")
    out.set(f"{P}.generation.backend", "vllm", "NeMo RL samples with vLLM, colocated")
    out.set(f"{P}.generation.colocated.enabled", True, "colocated")
    if contract.environment.kind != "single_turn":
        out.refuse("environment.kind", "tool_use: NeMo RL's multi-turn environments are not mapped")


def _optimizer(contract: Contract, out: Mapping) -> None:
    h = contract.hyperparameters
    o = h.optimizer
    if o.name not in OPTIMIZER:
        out.refuse("hyperparameters.optimizer.name", f"{o.name}: exported as AdamW or Adam only")
    out.set(f"{P}.optimizer.name", OPTIMIZER.get(o.name, "torch.optim.AdamW"), "optimizer.name")
    out.set(f"{P}.optimizer.kwargs.lr", o.lr, "optimizer.lr")
    out.set(f"{P}.optimizer.kwargs.betas", list(o.betas), "optimizer.betas")
    out.set(f"{P}.optimizer.kwargs.weight_decay", o.weight_decay, "optimizer.weight_decay")
    out.set(f"{P}.optimizer.kwargs.eps", 1e-8, "torch's Adam epsilon, as the contract's")
    out.set(f"{P}.max_grad_norm", o.grad_clip or None, "optimizer.grad_clip (0: null)")
    out.set(f"{P}.precision", PRECISION[h.dtypes.compute], f"precision: {h.dtypes.compute} compute over fp32 weights")
    if h.dtypes.params != "fp32":
        out.refuse("hyperparameters.precision", f"{h.dtypes.params} weights: NeMo RL keeps fp32 weights")
    schedule = h.schedule
    if schedule.name != "constant":
        out.refuse("hyperparameters.schedule.name", f"{schedule.name}: exported as a constant rate with warm-up only")
    warm = schedule.warmup_steps // h.mini_batches
    if not warm:
        out.set(f"{P}.scheduler", [{"name": "torch.optim.lr_scheduler.ConstantLR", "kwargs": {"factor": 1.0,
                "total_iters": 1}}], "a constant rate, no warm-up")  # fmt: skip
        return
    linear = {"start_factor": 1 / warm, "end_factor": 1.0, "total_iters": warm}
    constant = {"factor": 1.0, "total_iters": 10_000_000_000}
    scheduler = [
        {"name": "torch.optim.lr_scheduler.LinearLR", "kwargs": linear},
        {"name": "torch.optim.lr_scheduler.ConstantLR", "kwargs": constant},
        {"milestones": [warm]},
    ]
    out.set(f"{P}.scheduler", scheduler, f"schedule.warmup_steps {schedule.warmup_steps}: {warm} batches")
    out.differs(
        "hyperparameters.schedule.warmup_steps",
        f"NeMo RL's warm-up is lr·(1/{warm} + {1 - 1 / warm:g}·s/{warm}) a batch from step 0, the contract's "
        f"lr·(s+1)/{schedule.warmup_steps} at every optimizer step",
    )
    if schedule.warmup_steps % h.mini_batches:
        out.differs("hyperparameters.schedule.warmup_steps", f"not a whole number of batches of {h.mini_batches} steps")
