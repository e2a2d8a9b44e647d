"""verl 0.9.1's ppo_trainer config → the contract. The config is verl's Hydra YAML (the whole
generated file or only the keys a run sets) with the command line's `key=value` overrides on
top; every key the mapping reads falls back to 0.9.1's default (tests/interop checks the table
against the installed verl's own ppo_trainer config)."""

from __future__ import annotations

from typing import Any

from rlvr_cli.interop import verl_rejection
from rlvr_cli.interop.common import Mapping, float32_exact, plain
from rlvr_cli.interop.verl_config import (  # noqa: F401  (DEFAULTS, settings, VERSION: read here by commands and tests)
    DEFAULTS,
    VERSION,
    A,
    C,
    M,
    R,
    Reader,
    settings,
)

#: verl's loss_agg_mode → the contract's aggregation of the same number (tests/train/test_peers.py)
AGGREGATION = {
    "token-mean": "token_mean",
    "seq-mean-token-mean": "seq_mean_token_mean",
    "seq-mean-token-sum": "seq_mean_token_sum",
    "seq-mean-token-sum-norm": "constant_norm",
}


def aggregation_bounds(aggregation: str) -> list[tuple[str, str]]:
    """Where verl's aggregation equals the contract's only within a stated margin."""
    found = []
    if aggregation in ("seq_mean_token_mean", "seq_mean_token_sum", "constant_norm"):
        found.append(
            ("sequence count", "verl leaves answers with no trained token out of the count (exact while each has one)")
        )
    if aggregation == "seq_mean_token_mean":
        found.append(("token count", "verl divides each answer's sum by its token count + 1e-8 (relative 1e-8/n)"))
    return found


#: what verl computes otherwise, said on import and on export
MINI_BATCHES_DIFFER = (
    "verl's mini-batch holds consecutive sequences of each process's share of the batch; the contract's, every "
    "mini_batches-th group of the whole batch: as many groups, grouped otherwise"
)
SCHEDULE_DIFFERS = "verl moves the learning rate once a batch (after its {} optimizer steps), the contract at every one"
GRPO, RLOO = ("grpo", "grpo_vectorized"), ("rloo", "rloo_vectorized")  # RLOO: r − the others' mean
RFPP_BASELINE = "reinforce_plus_plus_baseline"  # r − the group's mean, whitened over the batch's tokens
#: verl's masked_whiten as the contract's `whiten` (key, value, why): verl_export.py checks the same
RFPP_WHITEN = (
    ("over", "batch_tokens", "verl's masked_whiten: every response token of the batch"),
    ("std", "sample", "verl's masked_var: unbiased, n − 1 over the tokens (not an option)"),
    ("epsilon", 1e-8, "verl: rsqrt(variance + 1e-8) (not an option)"),
    ("epsilon_use", "add_to_variance", "verl: rsqrt(variance + 1e-8) (not an option)"),
)
KL = {"kl": "k1", "k1": "k1", "mse": "k2", "k2": "k2", "low_var_kl": "k3", "k3": "k3"}


def import_config(
    values: dict[str, Any], *, train_rows: int, components: list[float], given: frozenset[str] = frozenset()
) -> Mapping:
    """The contract's values for verl's settings; `given` (the command line's overrides) that the
    mapping never read are listed, so a misspelt override is seen."""
    get, out = Reader(values), Mapping()
    _advantage(get, out, components)
    _loss(get, out)
    _kl(get, out)
    _batch(get, out, train_rows)
    _sampling(get, out)
    _optimizer(get, out)
    _adapter(get, out)
    for key, text in sorted(get.problems.items()):
        out.refuse(key, text)
    out.unread = sorted(k for k in given if k not in get.read)
    return out


def _adapter(get: Reader, out: Mapping) -> None:
    """`model.lora_rank` > 0 trains a LoRA adapter, the LoraConfig verl's FSDP engine builds (no
    dropout, bias none, peft's initialisation); 0 trains every weight."""
    rank = get(f"{M}.lora_rank")
    if not rank:
        out.set("hyperparameters.adapter", None, get.source(f"{M}.lora_rank"))
        return
    if get(f"{M}.exclude_modules"):
        out.refuse(f"{M}.exclude_modules", f"{plain(get(f'{M}.exclude_modules'))}: list the modules to adapt instead")
    if get(f"{M}.lora_adapter_path"):
        out.refuse(
            f"{M}.lora_adapter_path",
            f"{plain(get(f'{M}.lora_adapter_path'))}: set hyperparameters.adapter.path to the adapter folder beside "
            "the contract",
        )
    targets = get(f"{M}.target_modules")
    if isinstance(targets, str) and targets != "all-linear":
        out.refuse(f"{M}.target_modules", f"{targets!r}: a regular expression over module paths; list module names")
        return
    if not isinstance(targets, str) and not (isinstance(targets, list) and all(isinstance(t, str) for t in targets)):
        out.refuse(f"{M}.target_modules", f"{plain(targets)}: not all-linear or a list of module names")
        return
    adapter = {
        "kind": "lora",
        "rank": int(rank),
        "alpha": float(get(f"{M}.lora_alpha")),
        "dropout": 0.0,
        "target_modules": targets if isinstance(targets, str) else list(targets),
        "bias": "none",
        "init": "default",
    }
    keys = (f"{M}.lora_rank", f"{M}.lora_alpha", f"{M}.target_modules")
    out.set("hyperparameters.adapter", adapter, ", ".join(get.source(k) for k in keys) + "; no dropout, bias none")


def _advantage(get: Reader, out: Mapping, weights: list[float]) -> None:
    estimator = get("algorithm.adv_estimator")
    if estimator not in (*GRPO, *RLOO, RFPP_BASELINE):
        out.refuse("algorithm.adv_estimator", f"{estimator}: not a group baseline (grpo, rloo, {RFPP_BASELINE})")
    source = get.source("algorithm.adv_estimator")
    if estimator == RFPP_BASELINE:
        _whitened(out, source)
    else:
        loo = estimator in RLOO
        scaled = not loo and get("algorithm.norm_adv_by_std_in_grpo")
        out.set("objective.advantage.baseline", "leave_one_out" if loo else "group_mean", source)
        why = f"verl's {estimator} divides by no std" if loo else get.source("algorithm.norm_adv_by_std_in_grpo")
        out.set("objective.advantage.scale", "group_std" if scaled else "none", why)
        if scaled:
            out.set("objective.advantage.std", "sample", "verl: torch.std, n − 1 (not an option)")
            out.set("objective.advantage.epsilon", 1e-6, "verl adds 1e-6 to the std (not an option)")
    if estimator.endswith("_vectorized"):
        out.bound("algorithm.adv_estimator", f"{estimator}: verl sums in float32, Σr² − (Σr)²/n for the variance")
    if not all(float32_exact(w) for w in weights):
        out.differs(
            "rewards",
            "verl keeps rewards as float32: a group whose rewards are all equal but not float32 numbers (weights "
            f"{weights}) gets advantages that are not exactly 0 (a group of 1.2: 0.106)",
        )


def _whitened(out: Mapping, source: str) -> None:
    """REINFORCE++ with baseline: r − the group's mean, then verl's masked_whiten over the batch's
    response tokens (each answer's advantage on each of its tokens)."""
    out.set("objective.advantage.baseline", "group_mean", source)
    out.set("objective.advantage.scale", "none", f"verl's {RFPP_BASELINE} divides by no group std")
    for key, value, why in RFPP_WHITEN:
        out.set(f"objective.advantage.whiten.{key}", value, why)
    out.bound("algorithm.adv_estimator", f"{RFPP_BASELINE}: verl divides its masked means by Σmask + 1e-8")


def _loss(get: Reader, out: Mapping) -> None:
    mode = get(f"{A}.policy_loss.loss_mode")
    if mode not in ("vanilla", "gspo", "cispo", "sapo"):
        out.refuse(f"{A}.policy_loss.loss_mode", f"{mode}: not a loss the contract states (vanilla, gspo, cispo, sapo)")
    if mode in ("cispo", "sapo"):  # cispo: −sg(clip(ρ))·A·log π per token; clip_ratio_c is not read
        out.set("objective.clip.kind", mode, get.source(f"{A}.policy_loss.loss_mode"))
    if mode == "sapo":  # −A·σ(τ(ρ − 1))·4/τ per token; no clip_ratio is read
        for key, tau in (("positive", "tau_pos"), ("negative", "tau_neg")):
            out.set(f"objective.clip.temperature.{key}", get(f"{A}.{tau}"), get.source(f"{A}.{tau}"))
    else:
        low = get(f"{A}.clip_ratio_low") if get(f"{A}.clip_ratio_low") is not None else get(f"{A}.clip_ratio")
        high = get(f"{A}.clip_ratio_high") if get(f"{A}.clip_ratio_high") is not None else get(f"{A}.clip_ratio")
        out.set("objective.clip.low", low, get.source(f"{A}.clip_ratio_low"))
        out.set("objective.clip.high", high, get.source(f"{A}.clip_ratio_high"))
    if mode == "vanilla":
        out.set("objective.clip.dual", get(f"{A}.clip_ratio_c"), get.source(f"{A}.clip_ratio_c") + ": always on")
    level = "sequence" if mode == "gspo" else "token"
    out.set("objective.ratio.level", level, get.source(f"{A}.policy_loss.loss_mode"))
    bypass = get(f"{C}.bypass_mode")
    out.set("objective.ratio.denominator", "engine" if bypass else "trainer_recomputed", get.source(f"{C}.bypass_mode"))
    agg = get(f"{A}.loss_agg_mode") if mode != "sapo" else _sapo_aggregation(get, out)
    if agg not in AGGREGATION:
        out.refuse(f"{A}.loss_agg_mode", f"{agg}: not an aggregation the contract states")
    else:
        why = "verl's sapo loss: seq-mean-token-mean, whatever loss_agg_mode" if mode == "sapo" else None
        out.set("objective.aggregation", AGGREGATION[agg], why or get.source(f"{A}.loss_agg_mode"))
    if agg == "seq-mean-token-sum-norm":
        factor, budget = get(f"{A}.loss_scale_factor"), get("data.max_response_length")
        if factor != budget:
            out.differs(
                f"{A}.loss_scale_factor",
                f"{plain(factor)}: seq-mean-token-sum-norm divides by loss_scale_factor (null: each micro-batch's "
                f"padded width W), constant_norm by max_response_length {budget}: verl's loss is {budget}/"
                f"{'W' if factor is None else factor}× the contract's",
            )
    for difference in aggregation_bounds(AGGREGATION.get(agg, "")):
        out.bound(*difference)
    if agg == "token-mean" and not get("trainer.use_v1"):
        out.differs("trainer.use_v1", "false: the legacy worker takes each micro-batch's own token mean")
    out.bound("log-ratio", "verl clamps log π_θ − log π_old to ±20 (exact while the ratio stays in e^±20)")
    _correction(get, out)


def _sapo_aggregation(get: Reader, out: Mapping) -> str:
    """verl's sapo loss takes seq-mean-token-mean whatever loss_agg_mode says, while its KL loss and
    entropy bonus follow loss_agg_mode: one aggregation for every term only where they agree."""
    agg, terms = get(f"{A}.loss_agg_mode"), []
    if get(f"{A}.use_kl_loss"):
        terms.append("its KL loss")
    if get(f"{A}.entropy_coeff"):
        terms.append("its entropy bonus")
    if agg != "seq-mean-token-mean" and terms:
        out.refuse(
            f"{A}.loss_agg_mode",
            f"{agg}: verl's sapo aggregates the policy loss seq-mean-token-mean but {' and '.join(terms)} {agg} "
            "(the contract aggregates every term one way)",
        )
    return "seq-mean-token-mean"


def _correction(get: Reader, out: Mapping) -> None:
    level, threshold = get(f"{C}.rollout_is"), get(f"{C}.rollout_is_threshold")
    if get(f"{C}.rollout_rs"):
        verl_rejection.rejection(get, out)
    if not level:
        out.set("objective.correction.kind", "none", get.source(f"{C}.rollout_is"))
        return
    out.set("objective.correction.level", level, get.source(f"{C}.rollout_is"))
    if isinstance(threshold, str) and "_" in threshold:
        low, high = (float(x) for x in threshold.split("_"))
        out.set("objective.correction.kind", "mis", get.source(f"{C}.rollout_is_threshold"))
        out.set("objective.correction.low", low, get.source(f"{C}.rollout_is_threshold"))
        out.set("objective.correction.high", high, get.source(f"{C}.rollout_is_threshold"))
    else:
        out.set("objective.correction.kind", "tis", get.source(f"{C}.rollout_is"))
        out.set("objective.correction.cap", float(threshold), get.source(f"{C}.rollout_is_threshold"))


def _kl(get: Reader, out: Mapping) -> None:
    in_loss, in_reward = get(f"{A}.use_kl_loss"), get("algorithm.use_kl_in_reward")
    if in_loss and in_reward:
        out.refuse("algorithm.use_kl_in_reward", "a KL term both in the loss and in the reward")
    if not (in_loss or in_reward):
        out.set("objective.kl.coef", 0.0, get.source(f"{A}.use_kl_loss"))
    else:
        coef_key = f"{A}.kl_loss_coef" if in_loss else "algorithm.kl_ctrl.kl_coef"
        kind_key = f"{A}.kl_loss_type" if in_loss else "algorithm.kl_penalty"
        given = get(kind_key)
        kind = given[:-1] if isinstance(given, str) and given.endswith("+") else given  # k3+: k2's gradient
        out.set("objective.kl.coef", get(coef_key), get.source(coef_key))
        out.set("objective.kl.placement", "loss" if in_loss else "reward", get.source(f"{A}.use_kl_loss"))
        if kind != given and in_loss and KL.get(kind) in ("k1", "k3"):
            out.set("objective.kl.gradient", "k2", get.source(kind_key) + ": the value of its estimator, k2's gradient")
        if kind not in KL:
            out.refuse(kind_key, f"{kind}: the contract's estimators are k1, k2, k3")
        else:
            out.set("objective.kl.estimator", KL[kind], get.source(kind_key))
        if KL.get(kind) == "k3":
            out.bound(kind_key, "verl clamps k3 to [-10, 10] (exact while the per-token KL stays below 10)")
        if in_reward and get("algorithm.kl_ctrl.type") != "fixed":
            out.refuse("algorithm.kl_ctrl.type", f"{get('algorithm.kl_ctrl.type')}: an adaptive KL coefficient")
    out.set("objective.entropy_coef", float(get(f"{A}.entropy_coeff")), get.source(f"{A}.entropy_coeff"))


def _batch(get: Reader, out: Mapping, train_rows: int) -> None:
    prompts, mini = get("data.train_batch_size"), get(f"{A}.ppo_mini_batch_size")
    n = get(f"{R}.n")
    out.set("hyperparameters.group_size", n, get.source(f"{R}.n"))
    out.set("hyperparameters.prompts_per_step", prompts, get.source("data.train_batch_size"))
    minis = prompts // mini if mini and prompts % mini == 0 else 0
    if not minis:
        out.refuse(f"{A}.ppo_mini_batch_size", f"{mini} does not divide data.train_batch_size {prompts}")
    out.set("hyperparameters.mini_batches", max(minis, 1), f"data.train_batch_size {prompts} / {A}.ppo_mini_batch_size")
    if minis > 1:
        out.differs(f"{A}.ppo_mini_batch_size", MINI_BATCHES_DIFFER)
    micro = get(f"{A}.ppo_micro_batch_size_per_gpu")
    if micro and (prompts * n // max(minis, 1)) % micro == 0:
        out.set("hyperparameters.micro_batch_sequences", micro, get.source(f"{A}.ppo_micro_batch_size_per_gpu"))
    epochs = get(f"{A}.ppo_epochs")
    out.set("hyperparameters.updates_per_batch", epochs, get.source(f"{A}.ppo_epochs"))
    lag = epochs * max(minis, 1) - 1
    out.set("hyperparameters.max_policy_lag", lag, f"verl takes {lag + 1} optimizer step(s) on a batch: lag ≤ {lag}")
    steps = get("trainer.total_training_steps")
    if steps:
        out.set("hyperparameters.max_steps", steps, get.source("trainer.total_training_steps"))
    else:
        epochs_total = get("trainer.total_epochs")
        total = epochs_total * (train_rows // prompts if prompts <= train_rows else 1)
        out.set(
            "hyperparameters.max_steps", max(total, 1), f"verl trainer.total_epochs {epochs_total} over {train_rows}"
        )
    seed = get("data.seed")
    out.set("hyperparameters.seed", 42 if seed is None else seed, get.source("data.seed") + " (null: 42)")
    _overlong(get, out)
    if get("algorithm.filter_groups.enable"):
        rounds = get("algorithm.filter_groups.max_num_gen_batches")
        out.set("length.dynamic_sampling.drop_uniform_groups", True, get.source("algorithm.filter_groups.enable"))
        out.set("length.dynamic_sampling.max_rounds", rounds if rounds > 0 else 10, "filter_groups.max_num_gen_batches")
        if rounds <= 0:
            out.differs("algorithm.filter_groups.max_num_gen_batches", "0 (unbounded in verl): max_rounds 10 here")
        _filter_metric(get, out)


def _filter_metric(get: Reader, out: Mapping) -> None:
    """What verl's DAPO filter compares: `reward` (rm_scores, with the dapo manager's overlong
    penalty) or a key of the reward function's result — its `score` (before that penalty), its `acc`."""
    metric, key = get("algorithm.filter_groups.metric"), "algorithm.filter_groups.metric"
    if metric not in ("reward", "score", "acc"):
        out.refuse(key, f"{plain(metric)}: the contract compares the reward or the verifier's (reward, score, acc)")
        return
    shaped = "length.overlong_penalty" in out.values
    on = "verifier_reward" if metric != "reward" and shaped else "reward"
    out.set("length.dynamic_sampling.uniform_on", on, f"verl {key}: {metric}" + ("" if shaped else " (no shaping)"))
    if metric == "acc":
        out.differs(
            key,
            "acc: verl reads the reward function's own acc (its score where it returns a number); the contract "
            "compares the verifier's weighted reward: the same groups where that reward is the accuracy",
        )


#: the dapo reward manager's soft overlong punishment: verl 0.9.1's reward kwargs, the DAPO recipe scripts' keys
OVERLONG = (
    ("reward.reward_manager.name", "reward.reward_kwargs.overlong_buffer_cfg"),
    ("reward_model.reward_manager", "custom_reward_function.overlong_buffer"),
)


def _overlong(get: Reader, out: Mapping) -> None:
    for manager, prefix in OVERLONG:
        if not get(f"{prefix}.enable"):
            continue
        if get(manager) != "dapo":
            out.differs(f"{prefix}.enable", f"true, but only the dapo reward manager applies it ({manager}: not dapo)")
            continue
        penalty = {"buffer_tokens": int(get(f"{prefix}.len")), "factor": float(get(f"{prefix}.penalty_factor"))}
        out.set("length.overlong_penalty", penalty, f"verl {prefix}.len, .penalty_factor ({manager}: dapo)")
        return


def _sampling(get: Reader, out: Mapping) -> None:
    out.set("hyperparameters.sampling.temperature", get(f"{R}.temperature"), get.source(f"{R}.temperature"))
    out.set("hyperparameters.sampling.top_p", float(get(f"{R}.top_p")), get.source(f"{R}.top_p"))
    top_k = get(f"{R}.top_k")
    out.set("hyperparameters.sampling.top_k", 0 if top_k in (-1, None) else top_k, get.source(f"{R}.top_k"))
    engine = get(f"{R}.name")
    if engine == "vllm":
        out.set("hyperparameters.sampling.engine", "vllm", get.source(f"{R}.name") + ": colocated")
    elif engine is not None:
        out.refuse(f"{R}.name", f"{engine}: rlvr samples colocated with vLLM, or from a running SGLang server")
    out.set("length.max_prompt_tokens", get("data.max_prompt_length"), get.source("data.max_prompt_length"))
    out.set("length.max_response_tokens", get("data.max_response_length"), get.source("data.max_response_length"))
    truncation = get("data.truncation")
    if truncation not in ("error", "left"):
        out.refuse("data.truncation", f"{truncation}: the contract truncates prompts on the left or refuses them")
    else:
        out.set("length.prompt_truncation", truncation, get.source("data.truncation"))
    out.set("length.on_truncated", "keep", "verl judges a truncated response like any other")


def _optimizer(get: Reader, out: Mapping) -> None:
    o = f"{A}.optim"
    out.set("hyperparameters.optimizer.name", "adamw", f"verl {o}.optimizer: AdamW")
    out.set("hyperparameters.optimizer.lr", get(f"{o}.lr"), get.source(f"{o}.lr"))
    out.set("hyperparameters.optimizer.betas", list(get(f"{o}.betas")), get.source(f"{o}.betas"))
    out.set("hyperparameters.optimizer.weight_decay", get(f"{o}.weight_decay"), get.source(f"{o}.weight_decay"))
    out.set("hyperparameters.optimizer.grad_clip", get(f"{o}.clip_grad"), get.source(f"{o}.clip_grad"))
    kind = get(f"{o}.lr_scheduler_type")
    if kind not in ("constant", "cosine"):
        out.refuse(f"{o}.lr_scheduler_type", f"{kind}: verl's schedules here are constant and cosine")
    out.set("hyperparameters.schedule.name", kind, get.source(f"{o}.lr_scheduler_type"))
    if kind == "cosine" and get(f"{o}.min_lr_ratio"):
        out.refuse(f"{o}.min_lr_ratio", f"{get(f'{o}.min_lr_ratio')}: the contract's cosine decays to 0")
    steps = get(f"{o}.lr_warmup_steps")
    if steps is None or steps < 0:
        steps = int(get(f"{o}.lr_warmup_steps_ratio") * out.values.get("hyperparameters.max_steps", 1))
    per_batch = get(f"{A}.ppo_epochs") * out.values.get("hyperparameters.mini_batches", 1)
    out.set(
        "hyperparameters.schedule.warmup_steps",
        steps * per_batch,
        get.source(f"{o}.lr_warmup_steps")
        + (f": {steps} batches × {per_batch} optimizer steps" if per_batch > 1 else ""),
    )
    if steps:
        out.differs(f"{o}.lr_warmup_steps", "verl's warm-up is lr·s/w from step 0, the contract's lr·(s+1)/w")
    if per_batch > 1 and (steps or kind != "constant"):
        out.differs(f"{o}.lr_scheduler_type", SCHEDULE_DIFFERS.format(per_batch))
    params, compute = get(f"{A}.fsdp_config.model_dtype"), get(f"{A}.fsdp_config.dtype")
    precision = {"fp32": {"bfloat16": "bf16", "float16": "fp16", "float32": "fp32"}}.get(params, {}).get(compute)
    if precision is None:
        out.refuse(f"{A}.fsdp_config.model_dtype", f"{params} weights with {compute} compute")
    else:
        out.set("hyperparameters.precision", precision, f"verl fsdp_config model_dtype {params}, dtype {compute}")
