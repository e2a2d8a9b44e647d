"""NeMo RL's GRPO config → the contract: the `grpo`, `loss_fn` and `policy` sections of
examples/configs/grpo_math_1B.yaml and the recipes built on it (read by
interop/nemo_rl_config.py: defaults, overrides, interpolations). Both the `grpo.adv_estimator`
section and the older `grpo.normalize_rewards` / `grpo.use_leave_one_out_baseline` are read, as
NeMo RL reads them. A key a config leaves out falls back to NeMo RL's own default where NeMo RL
has one (nemo_rl_config.DEFAULTS: ClippedPGLossConfig's fields, grpo_math_1B.yaml's optional keys); a
required key left out is refused."""

from __future__ import annotations

from typing import Any

from rlvr_cli.interop import nemo_rl_config, nemo_rl_reward
from rlvr_cli.interop.common import Mapping, plain
from rlvr_cli.interop.nemo_rl_config import Reader

NAME = "NeMo RL"
G, L, P = nemo_rl_config.G, nemo_rl_config.L, nemo_rl_config.P
DEFAULTS = nemo_rl_config.DEFAULTS
KL = {"k1": "k1", "k2": "k2", "k3": "k3"}
OPTIMIZERS = {"torch.optim.AdamW": "adamw", "torch.optim.Adam": "adam"}
PRECISION = {"bfloat16": "bf16", "float16": "fp16", "float32": "fp32"}
#: what NeMo RL computes otherwise, said on import
MINI_BATCHES_DIFFER = (
    "NeMo RL's optimizer batch is train_global_batch_size consecutive sequences of the step's batch; the "
    "contract's mini-batch, every mini_batches-th group: as many groups, grouped otherwise"
)


#: NeMo RL options with no equivalent, refused when set (their defaults are off)
UNMAPPED = (
    (f"{L}.disable_ppo_ratio", "REINFORCE without the ratio"),
    (f"{L}.force_on_policy_ratio", "a ratio forced to 1"),
    (f"{L}.use_on_policy_kl_approximation", "a KL weighted by the ratio"),
    (f"{L}.use_kl_in_reward", "the KL in the reward (Reinforce++)"),
    (f"{L}.positive_example_nll_weight", "VAPO's NLL term on correct answers"),
    (f"{G}.async_grpo.enabled", "asynchronous GRPO, trajectories up to max_trajectory_age_steps old"),
    (f"{G}.seq_logprob_error_threshold", "sequences masked by their engine/trainer log-prob error"),
    (f"{G}.reward_shaping.ngram_penalty_coef", "an n-gram repetition penalty"),
    (f"{G}.invalid_action_penalty.enabled", "a penalty per invalid action or malformed thinking"),
)


def import_config(
    values: dict[str, Any],
    unresolved: dict[str, str],
    *,
    train_rows: int,
    weights: list[float],
    given: frozenset[str] = frozenset(),
) -> Mapping:
    get, out = Reader(values, unresolved), Mapping()
    for key in REQUIRED:
        if get(key) is None and key not in unresolved and key not in get.problems:
            out.refuse(key, "absent: NeMo RL requires it (give the whole config, or its defaults beside it)")
    nemo_rl_reward.advantage(get, out, weights)
    _loss(get, out)
    _batch(get, out, train_rows)
    _sampling(get, out)
    nemo_rl_reward.reward_shaping(get, out)
    _optimizer(get, out)
    for key, text in sorted(get.problems.items()):
        out.refuse(key, text)
    for key in sorted(get.read & set(unresolved)):
        out.refuse(key, f"{unresolved[key]}: an interpolation that does not resolve")
    out.unread = sorted(k for k in given if k not in get.read)
    return out


REQUIRED = (
    f"{G}.num_prompts_per_step",
    f"{G}.num_generations_per_prompt",
    f"{G}.max_num_steps",
    f"{P}.train_global_batch_size",
    f"{P}.max_total_sequence_length",
    f"{P}.precision",
    f"{P}.optimizer.name",
    f"{P}.optimizer.kwargs.lr",
)


def _loss(get: Reader, out: Mapping) -> None:
    for key, text in UNMAPPED:  # each changes the gradient: read, so that it is never silently dropped
        if get(key):
            out.refuse(key, f"{plain(get(key))}: {text}")
    mode = get(f"{G}.reward_shaping.mode")
    if get(f"{G}.reward_shaping.enabled") and mode not in (None, "response_length"):
        out.refuse(f"{G}.reward_shaping.mode", f"{mode}: a reward shaped by the reasoning's length")
    low = f"{L}.ratio_clip_min" if get.given(f"{L}.ratio_clip_min") or not get.given(f"{L}.ratio_eps_min") else None
    high = f"{L}.ratio_clip_max" if get.given(f"{L}.ratio_clip_max") or not get.given(f"{L}.ratio_eps_max") else None
    low, high = low or f"{L}.ratio_eps_min", high or f"{L}.ratio_eps_max"  # the older names
    out.set("objective.clip.low", get(low) if get(low) is not None else 0.2, get.source(low))
    out.set("objective.clip.high", get(high) if get(high) is not None else 0.2, get.source(high))
    if get(f"{L}.ratio_clip_c") is not None:
        out.set("objective.clip.dual", float(get(f"{L}.ratio_clip_c")), get.source(f"{L}.ratio_clip_c"))
    if get(f"{L}.use_cispo"):  # −sg(clip(ρ))·A·log π per token (NeMo RL refuses dual clip and sequence ratios)
        out.set("objective.clip.kind", "cispo", get.source(f"{L}.use_cispo"))
    sequence = get(f"{L}.sequence_level_importance_ratios")
    out.set(
        "objective.ratio.level",
        "sequence" if sequence else "token",
        get.source(f"{L}.sequence_level_importance_ratios"),
    )
    out.set("objective.ratio.denominator", "trainer_recomputed", "NeMo RL recomputes prev_logprobs with the trainer")
    _correction(get, out, "sequence" if sequence else "token")
    token = get(f"{L}.token_level_loss")
    out.set(
        "objective.aggregation", "token_mean" if token else "seq_mean_token_mean", get.source(f"{L}.token_level_loss")
    )
    out.set("objective.entropy_coef", 0.0, "NeMo RL's GRPO loss has no entropy bonus")
    _kl(get, out)


def _correction(get: Reader, out: Mapping, level: str) -> None:
    """NeMo RL multiplies each token's clipped loss by w = π_prev/π_generation (per answer, the
    product over its tokens, with sequence-level ratios): `tis` clamps w to [min or 0, max],
    `icepop` zeroes it outside [min, max]."""
    on, kind = get(f"{L}.use_importance_sampling_correction"), get(f"{L}.truncated_importance_sampling_type")
    source = get.source(f"{L}.use_importance_sampling_correction")
    if not on:
        out.set("objective.correction.kind", "none", source)
        return
    top, low = get(f"{L}.truncated_importance_sampling_ratio"), get(f"{L}.truncated_importance_sampling_ratio_min")
    if kind == "tis" and top is not None and not low:
        out.set("objective.correction.kind", "tis", get.source(f"{L}.truncated_importance_sampling_type"))
        out.set("objective.correction.cap", float(top), get.source(f"{L}.truncated_importance_sampling_ratio"))
    elif kind == "icepop" and top is not None and low is not None:
        out.set("objective.correction.kind", "mis", get.source(f"{L}.truncated_importance_sampling_type"))
        out.set("objective.correction.low", float(low), get.source(f"{L}.truncated_importance_sampling_ratio_min"))
        out.set("objective.correction.high", float(top), get.source(f"{L}.truncated_importance_sampling_ratio"))
    else:
        what = {None: "untruncated weights", "tis": f"weights clamped from below to {low}"}.get(kind, f"{kind}")
        what = "without truncated_importance_sampling_ratio" if kind in ("tis", "icepop") and top is None else what
        out.refuse(
            f"{L}.truncated_importance_sampling_type", f"{plain(kind)}: {what}; the contract caps (tis) or masks (mis)"
        )
        return
    out.set("objective.correction.level", level, f"{source}, at the ratio's level")


def _kl(get: Reader, out: Mapping) -> None:
    coef, kind = get(f"{L}.reference_policy_kl_penalty"), get(f"{L}.reference_policy_kl_type")
    out.set("objective.kl.coef", float(coef or 0.0), get.source(f"{L}.reference_policy_kl_penalty"))
    if not coef:
        return
    if kind not in KL:
        out.refuse(f"{L}.reference_policy_kl_type", f"{kind}: the contract's estimators are k1, k2, k3")
        return
    out.set("objective.kl.estimator", KL[kind], get.source(f"{L}.reference_policy_kl_type"))
    out.set("objective.kl.placement", "loss", "NeMo RL adds β·KL to the loss, aggregated as the loss is")
    for key, what in ((f"{L}.kl_input_clamp_value", "log-ratio"), (f"{L}.kl_output_clamp_value", "per-token KL")):
        if get(key) is not None:
            out.bound(key, f"NeMo RL clamps the {what} to ±{get(key)} (exact while it stays inside)")


def _batch(get: Reader, out: Mapping, train_rows: int) -> None:
    prompts, n = get(f"{G}.num_prompts_per_step"), get(f"{G}.num_generations_per_prompt")
    gbs = get(f"{P}.train_global_batch_size")
    if not all(isinstance(x, int) and x > 0 for x in (prompts, n, gbs)):
        return
    out.set("hyperparameters.group_size", n, get.source(f"{G}.num_generations_per_prompt"))
    out.set("hyperparameters.prompts_per_step", prompts, get.source(f"{G}.num_prompts_per_step"))
    minis = prompts * n // gbs if (prompts * n) % gbs == 0 else 0
    if not minis:
        out.refuse(f"{P}.train_global_batch_size", f"{gbs} does not divide the step's {prompts * n} sequences")
    out.set("hyperparameters.mini_batches", max(minis, 1), f"{prompts} × {n} sequences / train_global_batch_size {gbs}")
    if minis > 1:
        out.differs(f"{P}.train_global_batch_size", MINI_BATCHES_DIFFER)
    micro = get(f"{P}.train_micro_batch_size")
    if isinstance(micro, int) and micro > 0 and (prompts * n // max(minis, 1)) % micro == 0:
        out.set("hyperparameters.micro_batch_sequences", micro, get.source(f"{P}.train_micro_batch_size"))
    out.set("hyperparameters.updates_per_batch", 1, "NeMo RL's GRPO takes one pass over a batch")
    out.set("hyperparameters.max_policy_lag", max(minis, 1) - 1, f"{max(minis, 1)} optimizer step(s) on a batch")
    steps, epochs = get(f"{G}.max_num_steps"), get(f"{G}.max_num_epochs")
    by_epochs = epochs * max(train_rows // prompts, 1) if isinstance(epochs, int) else None
    total = min((x for x in (steps, by_epochs) if isinstance(x, int)), default=1)
    out.set(
        "hyperparameters.max_steps",
        total,
        f"nemo-rl {G}.max_num_steps {steps}, max_num_epochs {epochs} over {train_rows}",
    )
    out.set("hyperparameters.seed", get(f"{G}.seed"), get.source(f"{G}.seed"))
    if get(f"{G}.use_dynamic_sampling"):
        rounds = get(f"{G}.dynamic_sampling_max_gen_batches")
        out.set("length.dynamic_sampling.drop_uniform_groups", True, get.source(f"{G}.use_dynamic_sampling"))
        out.set("length.dynamic_sampling.max_rounds", rounds, get.source(f"{G}.dynamic_sampling_max_gen_batches"))
        if get(f"{G}.batch_multiplier") != 1:
            out.differs(
                f"{G}.batch_multiplier",
                f"{get(f'{G}.batch_multiplier')}: NeMo RL samples that many times num_prompts_per_step prompts a "
                "round, the contract prompts_per_step: the same kept groups, more rounds",
            )
    truncated = "exclude" if get(f"{G}.overlong_filtering") else "keep"
    out.set("length.on_truncated", truncated, get.source(f"{G}.overlong_filtering"))
    if truncated == "exclude":
        out.differs(
            f"{G}.overlong_filtering",
            "true: NeMo RL releases whose advantage estimator takes no sample mask keep a filtered response in its "
            "group's baseline and std (only its loss is masked); on_truncated: exclude leaves it out of both",
        )


def _sampling(get: Reader, out: Mapping) -> None:
    g = f"{P}.generation"
    out.set("hyperparameters.sampling.temperature", get(f"{g}.temperature"), get.source(f"{g}.temperature"))
    out.set("hyperparameters.sampling.top_p", float(get(f"{g}.top_p")), get.source(f"{g}.top_p"))
    top_k = get(f"{g}.top_k")
    out.set("hyperparameters.sampling.top_k", 0 if top_k in (-1, None) else top_k, get.source(f"{g}.top_k"))
    backend = get(f"{g}.backend")
    if backend == "vllm" and get(f"{g}.colocated.enabled"):
        out.set("hyperparameters.sampling.engine", "vllm", get.source(f"{g}.backend") + ": colocated")
    elif backend == "vllm":
        out.refuse(
            f"{g}.colocated.enabled", "false: serve vLLM yourself and name it in hyperparameters.sampling.server"
        )
    elif backend == "hf":
        out.set("hyperparameters.sampling.engine", "transformers", get.source(f"{g}.backend"))
    else:
        out.refuse(f"{g}.backend", f"{backend}: rlvr samples with vllm, sglang, transformers or its own engine")
    for key in (f"{g}.stop_token_ids", f"{g}.stop_strings"):
        if get(key):  # mostly the model's own end-of-turn token, which the contract's stop tokens name
            out.differs(key, f"{plain(get(key))}: NeMo RL also ends a response there; the contract ends it at "
                        "length.stop_tokens (the experiment's): list the same tokens there")  # fmt: skip
    total, new = get(f"{P}.max_total_sequence_length"), get(f"{g}.max_new_tokens")
    prompt = get("data.max_input_seq_length") if get.given("data.max_input_seq_length") else total
    prompt = prompt if isinstance(prompt, int) else total
    if isinstance(total, int):
        new = new if isinstance(new, int) else total
        out.set("length.max_response_tokens", new, get.source(f"{g}.max_new_tokens"))
        out.set("length.max_prompt_tokens", prompt, get.source("data.max_input_seq_length"))
        if prompt + new > total:
            out.differs(
                f"{P}.max_total_sequence_length",
                f"{total}: NeMo RL's engine holds prompt and response within it, so a response stops at {total} − "
                f"its prompt's tokens; the contract's at max_response_tokens {new}",
            )


def _optimizer(get: Reader, out: Mapping) -> None:
    if get(f"{P}.megatron_cfg.enabled"):
        out.refuse(f"{P}.megatron_cfg.enabled", "true: the Megatron backend's optimizer and schedule are not mapped")
    _adapter(get, out)
    o = f"{P}.optimizer"
    name = OPTIMIZERS.get(get(f"{o}.name"))
    if name is None:
        out.refuse(f"{o}.name", f"{get(f'{o}.name')}: the contract's optimizers are AdamW and Adam")
    out.set("hyperparameters.optimizer.name", name or "adamw", get.source(f"{o}.name"))
    out.set("hyperparameters.optimizer.lr", get(f"{o}.kwargs.lr"), get.source(f"{o}.kwargs.lr"))
    out.set("hyperparameters.optimizer.betas", list(get(f"{o}.kwargs.betas")), get.source(f"{o}.kwargs.betas"))
    decay = get(f"{o}.kwargs.weight_decay")
    out.set("hyperparameters.optimizer.weight_decay", decay, get.source(f"{o}.kwargs.weight_decay"))
    if get(f"{o}.kwargs.eps") != 1e-8:
        out.refuse(f"{o}.kwargs.eps", f"{get(f'{o}.kwargs.eps')}: the contract's Adam uses torch's 1e-8")
    clip = get(f"{P}.max_grad_norm")
    out.set(
        "hyperparameters.optimizer.grad_clip", float(clip or 0.0), get.source(f"{P}.max_grad_norm") + " (null: no clip)"
    )
    _schedule(get, out)
    precision = PRECISION.get(get(f"{P}.precision"))
    if precision is None:
        out.refuse(f"{P}.precision", f"{get(f'{P}.precision')}: not bfloat16, float16 or float32")
    else:
        out.set(
            "hyperparameters.precision", precision, get.source(f"{P}.precision") + ": fp32 weights, autocast compute"
        )


def _adapter(get: Reader, out: Mapping) -> None:
    """`policy.dtensor_cfg.lora_cfg` (NeMo RL's DTensor LoRA) as the contract's adapter: dim,
    alpha, dropout, the target modules (`match_all_linear`: every linear layer); B starts at 0 in
    both, so the first policy is the base's whatever initialises A."""
    c = f"{P}.dtensor_cfg.lora_cfg"
    if not get(f"{c}.enabled"):
        out.set("hyperparameters.adapter", None, get.source(f"{c}.enabled") + ": every weight trains")
        return
    if get(f"{c}.exclude_modules"):
        out.refuse(f"{c}.exclude_modules", f"{plain(get(f'{c}.exclude_modules'))}: list the modules to adapt instead")
    targets = "all-linear" if get(f"{c}.match_all_linear") else list(get(f"{c}.target_modules") or [])
    if not targets:
        out.refuse(f"{c}.target_modules", "empty with match_all_linear false: no module to adapt")
    dropout = float(get(f"{c}.dropout") or 0.0)
    if dropout and get(f"{c}.dropout_position") != "pre":
        out.differs(f"{c}.dropout_position", f"{get(f'{c}.dropout_position')}: NeMo RL drops out after the "
                    "adapter's product, peft (the contract) before it")  # fmt: skip
    adapter = {
        "kind": "lora", "rank": int(get(f"{c}.dim")), "alpha": float(get(f"{c}.alpha")), "dropout": dropout,
        "target_modules": targets, "bias": "none", "init": "default",
    }  # fmt: skip
    out.set("hyperparameters.adapter", adapter, f"nemo-rl {c}: dim, alpha, dropout, target modules; bias none")
    if get(f"{c}.lora_A_init") != "kaiming":
        out.differs(f"{c}.lora_A_init", f"{get(f'{c}.lora_A_init')}: A starts from another draw than peft's "
                    "(B starts at 0 in both: the same first policy)")  # fmt: skip


def _schedule(get: Reader, out: Mapping) -> None:
    """NeMo RL's scheduler list: none (constant), or a LinearLR warm-up to the full rate then
    ConstantLR at milestone W. NeMo RL steps it once a batch."""
    key = f"{P}.scheduler"
    items = get(key) or []
    named = [i for i in items if isinstance(i, dict) and "name" in i]
    kinds = [str(i["name"]).rsplit(".", 1)[-1] for i in named]
    per_batch = out.values.get("hyperparameters.mini_batches", 1)
    if not named or kinds == ["ConstantLR"]:
        out.set("hyperparameters.schedule.name", "constant", get.source(key))
        out.set("hyperparameters.schedule.warmup_steps", 0, get.source(key))
        return
    warm = named[0].get("kwargs") or {}
    if kinds != ["LinearLR", "ConstantLR"] or warm.get("end_factor", 1.0) != 1.0:
        out.refuse(key, f"{' then '.join(kinds)}: the contract's schedules are a linear warm-up, then constant")
        return
    steps, start = int(warm.get("total_iters", 5)), float(warm.get("start_factor", 1 / 3))
    out.set("hyperparameters.schedule.name", "constant", f"nemo-rl {key}: LinearLR then ConstantLR")
    out.set(
        "hyperparameters.schedule.warmup_steps",
        steps * per_batch,
        f"LinearLR total_iters {steps}" + (f": {steps} batches × {per_batch} optimizer steps" if per_batch > 1 else ""),
    )
    out.differs(
        key,
        f"NeMo RL's warm-up is lr·({start:g} + {1 - start:g}·s/{steps}) from step 0, once a batch; the contract's "
        f"lr·(s+1)/{steps * per_batch} at every optimizer step",
    )
