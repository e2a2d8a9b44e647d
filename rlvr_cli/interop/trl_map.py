"""TRL's GRPOConfig (1.16) ⇄ the contract. Every option that changes the gradient is read
with its 1.16 default when the config leaves it out; the numbers TRL fixes in code (the std's
n − 1, the 1e-4 added to it) are written out as the contract's own keys. tests/interop checks
this table against the installed GRPOConfig's defaults."""

from __future__ import annotations

import math
from typing import Any

from rlvr_cli.interop import peft_map, trl_clip
from rlvr_cli.interop.common import Mapping, kind_of, plain, typed

VERSION = "1.16"
#: GRPOConfig 1.16's defaults for every option the mapping reads
DEFAULTS: dict[str, Any] = {
    "num_generations": 8,
    "per_device_train_batch_size": 8,
    "gradient_accumulation_steps": 1,
    "steps_per_generation": None,
    "num_iterations": 1,
    "num_train_epochs": 3.0,
    "max_steps": -1,
    "learning_rate": 1e-6,
    "adam_beta1": 0.9,
    "adam_beta2": 0.999,
    "adam_epsilon": 1e-8,
    "weight_decay": 0.0,
    "max_grad_norm": 1.0,
    "optim": "adamw_torch_fused",
    "lr_scheduler_type": "linear",
    "warmup_steps": 0,
    "seed": 42,
    "bf16": None,  # None: True where the device supports bf16
    "fp16": False,
    "temperature": 1.0,
    "top_p": 1.0,
    "top_k": 0,
    "min_p": None,
    "repetition_penalty": 1.0,
    "generation_kwargs": None,
    "max_completion_length": 512,
    "mask_truncated_completions": False,
    "use_vllm": False,
    "vllm_mode": "colocate",
    "vllm_server_base_url": None,
    "vllm_server_host": "0.0.0.0",
    "vllm_server_port": 8000,
    "vllm_importance_sampling_correction": True,
    "vllm_importance_sampling_mode": "sequence_mask",
    "vllm_importance_sampling_clip_min": None,
    "vllm_importance_sampling_clip_max": 3.0,
    "beta": 0.0,
    "use_bias_correction_kl": True,
    "epsilon": 0.2,
    "epsilon_high": None,
    "delta": None,
    "sapo_temperature_pos": 1.0,
    "sapo_temperature_neg": 1.05,
    "vespo_k_pos": 2.0,
    "vespo_lambda_pos": 3.0,
    "vespo_k_neg": 3.0,
    "vespo_lambda_neg": 2.0,
    "importance_sampling_level": "token",
    "loss_type": "dapo",
    "scale_rewards": "group",
    "multi_objective_aggregation": "sum_then_normalize",
    "reward_weights": None,
    "top_entropy_quantile": 1.0,
    "off_policy_mask_threshold": None,
    "entropy_coef": 0.0,
    "use_adaptive_entropy": False,
    "sync_ref_model": False,
}
#: TRL's ModelConfig (1.16) defaults for the options that say what trains: `trl grpo --config`
#: reads them from the same YAML, and `get_peft_config` turns them into peft's LoraConfig
PEFT_DEFAULTS: dict[str, Any] = {
    "use_peft": False,
    "lora_r": 16,
    "lora_alpha": 32,
    "lora_dropout": 0.05,
    "lora_target_modules": None,
    "lora_target_parameters": None,
    "lora_modules_to_save": None,
    "lora_task_type": "CAUSAL_LM",
    "use_rslora": False,
    "use_dora": False,
}

#: TRL's loss_type → the contract's aggregation of the same number (tests/train/test_peers.py)
AGGREGATION = {
    **dict.fromkeys(("bnpo", "dapo", "cispo", "vespo"), "token_mean"),  # trl normalises cispo's and vespo's as dapo's
    **dict.fromkeys(("grpo", "sapo"), "seq_mean_token_mean"),  # each answer's token mean, then the batch's mean
    "luspo": "seq_mean_token_sum",  # each answer's token sum, then the batch's mean (LUSPO)
    "dr_grpo": "constant_norm",
}
#: what trl computes otherwise, said on import and on export
MINI_BATCHES_DIFFER = (
    "trl shuffles a generation's completions before cutting it into steps_per_generation parts, so a group "
    "trains over several optimizer steps; the contract's mini-batches hold whole groups"
)
SCALE = {"group": "group_std", "batch": "batch_std", "none": "none", True: "group_std", False: "none"}
#: options that, set away from their default, have no equivalent in the contract
NO_EQUIVALENT = {
    "min_p": "min-p sampling",
    "generation_kwargs": "extra generation arguments",
    "use_adaptive_entropy": "an adaptive entropy coefficient",
    "sync_ref_model": "a reference model synced to the policy (the contract's reference is frozen)",
}


#: options whose kind their default does not say (an integer, or either of two kinds)
KINDS: dict[str, str | None] = {
    **dict.fromkeys(("num_generations", "per_device_train_batch_size", "gradient_accumulation_steps"), "an integer"),
    **dict.fromkeys(("steps_per_generation", "num_iterations", "max_steps", "seed", "top_k"), "an integer"),
    **dict.fromkeys(("max_completion_length", "vllm_server_port", "lora_r"), "an integer"),
    **dict.fromkeys(("scale_rewards", "bf16"), None),  # a name or true/false; true, false or null
}


class Reader:
    """The config's values over 1.16's defaults, each read once: what is left unread is listed;
    a value of the wrong kind (a foreign config is untrusted input) is a problem the import
    refuses, the default read in its place."""

    def __init__(self, config: dict[str, Any], defaults: dict[str, Any] | None = None) -> None:
        self.config, self.read, self.problems = config, set(), {}
        self.defaults = DEFAULTS if defaults is None else defaults  # another trainer's config (RLOOConfig)

    def __call__(self, key: str) -> Any:
        self.read.add(key)
        default = self.defaults.get(key, PEFT_DEFAULTS.get(key))
        value = self.config.get(key, default)
        kind = KINDS[key] if key in KINDS else kind_of(default)
        if value is None or kind is None or typed(value, kind) is not None:
            return value if value is None or kind is None else typed(value, kind)
        self.problems[key] = f"{plain(value)}: not {kind}"
        return default

    def source(self, key: str) -> str:
        given = key in self.config
        return f"trl {key}: {plain(self(key))}" + ("" if given else f" ({VERSION} default)")

    def unread(self) -> list[str]:
        return sorted(k for k in self.config if k not in self.read)


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
    """The contract's values for a GRPOConfig (its keys over 1.16's defaults), and the adapter
    its ModelConfig options (`use_peft`, `lora_*`) train, or `peft`'s LoraConfig keywords
    (GRPOTrainer's peft_config, with where they were read)."""
    get, out = Reader(config), Mapping()
    for key, what in NO_EQUIVALENT.items():
        if get(key) != DEFAULTS[key] and not (key == "generation_kwargs" and not get(key)):
            out.refuse(key, f"{plain(get(key))}: {what}")
    batch(get, out, train_rows, processes)
    _objective(get, out, components)
    return finish(get, out, policy, model_type, peft)


def finish(
    get: Reader, out: Mapping, policy: str, model_type: str | None, peft: tuple[dict[str, Any], str] | None
) -> Mapping:
    """What GRPOConfig and RLOOConfig share past the objective: sampling, the optimizer, the
    adapter; then each value of the wrong kind refused, and what was never read listed."""
    _sampling(get, out, policy)
    _optimizer(get, out)
    if peft is None:
        peft_map.model_config_adapter(get, out, model_type, PEFT_DEFAULTS)
    elif get("use_peft"):
        out.refuse("use_peft", f"true, and {peft[1]} too: say which adapter trains (one of them)")
    else:
        peft_map.adapter(peft[0], out, peft[1], model_type)
    for key, text in sorted(get.problems.items()):
        out.refuse(key, text)
    out.unread = get.unread()
    return out


def batch(get: Reader, out: Mapping, train_rows: int, processes: int) -> None:
    k, micro, accumulate = (
        get("num_generations"),
        get("per_device_train_batch_size"),
        get("gradient_accumulation_steps"),
    )
    minis = _mini_batches(get, out, accumulate)
    sequences = micro * accumulate * processes * minis  # what one generation samples
    out.set("hyperparameters.group_size", k, get.source("num_generations"))
    if sequences % (k * minis):
        out.refuse("per_device_train_batch_size", f"{sequences // minis} completions a step: not whole groups of {k}")
        return
    prompts = sequences // k
    out.set(
        "hyperparameters.prompts_per_step",
        prompts,
        f"per_device_train_batch_size {micro} × gradient_accumulation_steps {accumulate} × {minis} mini-batch(es) "
        f"× {processes} process(es) / num_generations {k}",
    )
    out.set("hyperparameters.micro_batch_sequences", micro, get.source("per_device_train_batch_size"))
    passes = get("num_iterations")
    out.set("hyperparameters.updates_per_batch", passes, get.source("num_iterations"))
    per_batch = passes * minis
    out.set("hyperparameters.max_policy_lag", per_batch - 1, f"trl takes {per_batch} optimizer step(s) on a batch")
    steps = get("max_steps")
    if steps is not None and steps > 0:
        if steps % per_batch:
            out.refuse("max_steps", f"{steps} optimizer steps are not whole batches of {per_batch} optimizer steps")
        out.set("hyperparameters.max_steps", max(steps // per_batch, 1), f"trl max_steps {steps} / {per_batch}")
    else:
        epochs = get("num_train_epochs")
        batches = math.ceil(epochs * math.ceil(train_rows / prompts))
        out.set("hyperparameters.max_steps", batches, f"trl num_train_epochs {epochs} over {train_rows} prompts")
    out.set("hyperparameters.seed", get("seed"), get.source("seed"))


def _mini_batches(get: Reader, out: Mapping, accumulate: int) -> int:
    """Optimizer steps one generation takes: steps_per_generation / gradient_accumulation_steps."""
    per_generation = get("steps_per_generation") or accumulate
    if per_generation % accumulate:
        out.refuse("steps_per_generation", f"{per_generation}: not a multiple of gradient_accumulation_steps")
        return 1
    minis = per_generation // accumulate
    out.set("hyperparameters.mini_batches", minis, f"steps_per_generation {per_generation} / {accumulate}")
    if minis > 1:
        out.differs("steps_per_generation", MINI_BATCHES_DIFFER)
    return minis


def _objective(get: Reader, out: Mapping, components: int) -> None:
    loss_type = get("loss_type")
    if loss_type not in AGGREGATION:
        out.refuse(
            "loss_type",
            f"{loss_type}: not a loss the contract states (grpo, bnpo, dapo, dr_grpo, cispo, sapo, luspo, vespo)",
        )
    else:
        out.set("objective.aggregation", AGGREGATION[loss_type], get.source("loss_type"))
        if loss_type == "bnpo" and get("gradient_accumulation_steps") > 1:
            out.differs(
                "loss_type",
                "bnpo averages each micro-batch's tokens, then the micro-batches; token_mean divides by the whole "
                "batch's token count: equal only when every micro-batch holds as many tokens",
            )
    if get("multi_objective_aggregation") != "sum_then_normalize":
        out.refuse("multi_objective_aggregation", "normalize_then_sum: each reward function normalised apart")
    scale = SCALE.get(get("scale_rewards"))
    if scale is None:
        out.refuse("scale_rewards", f"{plain(get('scale_rewards'))}: not group, batch or none")
        scale = "none"
    out.set("objective.advantage.baseline", "group_mean", "trl: the group's mean (nan-aware)")
    out.set("objective.advantage.scale", scale, get.source("scale_rewards"))
    if scale != "none":
        out.set("objective.advantage.std", "sample", "trl nanstd divides by n − 1 (not an option)")
        out.set("objective.advantage.epsilon", 1e-4, "trl adds 1e-4 to the std (not an option)")
    trl_clip.clip(get, out, loss_type)
    if loss_type != "vespo":  # vespo's ratio is the answer's likelihood ratio (trl_clip)
        out.set("objective.ratio.level", get("importance_sampling_level"), get.source("importance_sampling_level"))
    out.set("objective.ratio.denominator", "trainer_recomputed", "trl recomputes π_old with the trainer")
    _kl(get, out)
    _correction(get, out)
    trl_clip.off_policy_mask(get, out)
    trl_clip.entropy_mask(get, out)
    weights = get("reward_weights")
    if weights is not None:
        if len(weights) != components:
            out.refuse("reward_weights", f"{len(weights)} weights for the contract's {components} components")
        else:
            out.set("objective.reward.weights", list(weights), get.source("reward_weights"))
    else:
        out.comments["objective.reward.weights"] = (
            f"trl reward_weights: null ({VERSION} default: 1.0 for each reward function); the contract's weights kept"
        )


def _kl(get: Reader, out: Mapping) -> None:
    beta = get("beta")
    out.set("objective.kl.coef", beta, get.source("beta"))
    if beta > 0:
        out.set("objective.kl.estimator", "k3", "trl: k3 (not an option)")
        out.set("objective.kl.placement", "loss", "trl: in the loss (not an option)")
        if get("use_bias_correction_kl"):  # false: no weight (what an absent kl.weight means)
            out.set("objective.kl.weight", "ratio", get.source("use_bias_correction_kl") + ": k3 × π_θ/π_old")
    coef = get("entropy_coef")
    out.set("objective.entropy_coef", coef, get.source("entropy_coef"))
    if coef > 0 and get("loss_type") != "dapo":
        out.differs(
            "entropy_coef", "trl's bonus is each micro-batch's token mean; the contract's uses the loss's aggregation"
        )


def _correction(get: Reader, out: Mapping) -> None:
    if not (get("use_vllm") and get("vllm_importance_sampling_correction")):
        out.set("objective.correction.kind", "none", "trl corrects only samples from vLLM")
        return
    mode = get("vllm_importance_sampling_mode")
    level, kind = mode.split("_")
    low, high = get("vllm_importance_sampling_clip_min"), get("vllm_importance_sampling_clip_max")
    out.set("objective.correction.level", level, get.source("vllm_importance_sampling_mode"))
    if kind == "truncate":
        out.set("objective.correction.kind", "tis", get.source("vllm_importance_sampling_mode"))
        out.set("objective.correction.cap", high, get.source("vllm_importance_sampling_clip_max"))
        if low is not None:
            out.refuse("vllm_importance_sampling_clip_min", f"{low}: truncation from below")
    else:
        out.set("objective.correction.kind", "mis", get.source("vllm_importance_sampling_mode"))
        out.set(
            "objective.correction.low", 0.0 if low is None else low, get.source("vllm_importance_sampling_clip_min")
        )
        out.set(
            "objective.correction.high",
            math.inf if high is None else high,
            get.source("vllm_importance_sampling_clip_max"),
        )


def _sampling(get: Reader, out: Mapping, policy: str) -> None:
    for key in ("temperature", "top_p", "top_k"):
        out.set(f"hyperparameters.sampling.{key}", get(key), get.source(key))
    if get("repetition_penalty") != 1.0:
        out.refuse("repetition_penalty", f"{get('repetition_penalty')}: a repetition penalty changes the distribution")
    if get("use_vllm"):
        out.set("hyperparameters.sampling.engine", "vllm", get.source("use_vllm"))
        if get("vllm_mode") == "server":
            url = get("vllm_server_base_url") or f"http://{get('vllm_server_host')}:{get('vllm_server_port')}"
            out.set("hyperparameters.sampling.server.url", url, get.source("vllm_mode"))
            out.set("hyperparameters.sampling.server.model", policy, "the name trl's vllm-serve was given: the policy")
    else:
        out.set("hyperparameters.sampling.engine", "transformers", get.source("use_vllm") + ": model.generate")
    out.set("length.max_response_tokens", get("max_completion_length"), get.source("max_completion_length"))
    masked = get("mask_truncated_completions")
    out.set("length.on_truncated", "exclude" if masked else "keep", get.source("mask_truncated_completions"))
    if masked:
        out.differs(
            "mask_truncated_completions",
            "trl leaves a truncated completion in its group's mean and std (only its loss is masked); "
            "on_truncated: exclude leaves it out of both",
        )


def _optimizer(get: Reader, out: Mapping) -> None:
    optim = str(get("optim"))
    name = "adamw" if optim.startswith("adamw") else "sgd" if optim == "sgd" else None
    if name is None:
        out.refuse("optim", f"{optim}: the contract's optimizers are adamw, adam and sgd")
        name = "adamw"
    out.set("hyperparameters.optimizer.name", name, get.source("optim"))
    out.set("hyperparameters.optimizer.lr", get("learning_rate"), get.source("learning_rate"))
    out.set("hyperparameters.optimizer.betas", [get("adam_beta1"), get("adam_beta2")], "trl adam_beta1, adam_beta2")
    out.set("hyperparameters.optimizer.weight_decay", get("weight_decay"), get.source("weight_decay"))
    out.set("hyperparameters.optimizer.grad_clip", get("max_grad_norm"), get.source("max_grad_norm"))
    if get("adam_epsilon") != 1e-8:
        out.refuse("adam_epsilon", f"{get('adam_epsilon')}: the contract's Adam uses torch's 1e-8")
    _schedule(get, out)
    bf16, fp16 = get("bf16"), get("fp16")
    precision = "fp16" if fp16 else "fp32" if bf16 is False else "bf16"
    note = get.source("bf16") + (" (null: true where the device has bf16)" if bf16 is None else "")
    out.set("hyperparameters.precision", precision, note + "; fp32 master weights, autocast compute")


def _schedule(get: Reader, out: Mapping) -> None:
    kind = str(get("lr_scheduler_type"))
    name = {"linear": "linear", "cosine": "cosine", "constant": "constant", "constant_with_warmup": "constant"}.get(
        kind
    )
    if name is None:
        out.refuse("lr_scheduler_type", f"{kind}: the contract's schedules are constant, linear and cosine")
        name = "constant"
    out.set("hyperparameters.schedule.name", name, get.source("lr_scheduler_type"))
    steps, ratio = get("warmup_steps"), get("warmup_ratio")
    total = (
        out.values.get("hyperparameters.max_steps", 1)
        * get("num_iterations")
        * out.values.get("hyperparameters.mini_batches", 1)
    )
    warmup = math.ceil(total * steps) if 0 < steps < 1 else int(steps)
    if ratio:
        warmup = math.ceil(total * ratio)
    if kind == "constant":
        warmup = 0
    out.set("hyperparameters.schedule.warmup_steps", warmup, get.source("warmup_steps"))
    if warmup:
        out.differs(
            "warmup_steps",
            "transformers warms up as lr·s/w from step 0 (the first step at lr 0); the contract's warm-up is "
            "lr·(s+1)/w, one step ahead; after the warm-up both are the same",
        )
