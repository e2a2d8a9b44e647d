"""verl 0.9.1's ppo_trainer config as the mapping reads it (interop/verl_map.py): the dotted keys
of the config with the command line's overrides on top, verl's default for every key the
mapping reads, and the kind of value each must hold — a value of the wrong kind (a foreign
config is untrusted input) is a problem the import refuses, never an exception."""

from __future__ import annotations

from typing import Any

from rlvr_cli.interop.common import flat, kind_of, plain, typed

VERSION = "0.9.1"
A = "actor_rollout_ref.actor"
R = "actor_rollout_ref.rollout"
C = "algorithm.rollout_correction"
M = "actor_rollout_ref.model"
#: verl 0.9.1's defaults for every key the mapping reads (dotted paths of ppo_trainer)
DEFAULTS: dict[str, Any] = {
    "algorithm.adv_estimator": "gae",
    "algorithm.norm_adv_by_std_in_grpo": True,
    "algorithm.use_kl_in_reward": False,
    "algorithm.kl_penalty": "kl",
    "algorithm.kl_ctrl.type": "fixed",
    "algorithm.kl_ctrl.kl_coef": 0.001,
    "algorithm.filter_groups.enable": False,
    "algorithm.filter_groups.max_num_gen_batches": 0,
    "algorithm.filter_groups.metric": "reward",
    f"{C}.rollout_is": None,
    f"{C}.rollout_is_threshold": 2.0,
    f"{C}.rollout_rs": None,
    f"{C}.rollout_rs_threshold": None,
    f"{C}.bypass_mode": False,
    f"{A}.use_kl_loss": False,
    f"{A}.kl_loss_coef": 0.001,
    f"{A}.kl_loss_type": "low_var_kl",
    f"{A}.clip_ratio": 0.2,
    f"{A}.clip_ratio_low": 0.2,
    f"{A}.clip_ratio_high": 0.2,
    f"{A}.clip_ratio_c": 3.0,
    f"{A}.tau_pos": 1.0,
    f"{A}.tau_neg": 1.05,
    f"{A}.policy_loss.loss_mode": "vanilla",
    f"{A}.loss_agg_mode": "token-mean",
    f"{A}.loss_scale_factor": None,
    f"{A}.entropy_coeff": 0,
    f"{A}.ppo_epochs": 1,
    f"{A}.ppo_mini_batch_size": 256,
    f"{A}.ppo_micro_batch_size_per_gpu": None,
    f"{A}.use_dynamic_bsz": False,
    f"{A}.optim.lr": 1e-6,
    f"{A}.optim.betas": [0.9, 0.999],
    f"{A}.optim.weight_decay": 0.01,
    f"{A}.optim.clip_grad": 1.0,
    f"{A}.optim.lr_warmup_steps": -1,
    f"{A}.optim.lr_warmup_steps_ratio": 0.0,
    f"{A}.optim.lr_scheduler_type": "constant",
    f"{A}.optim.min_lr_ratio": 0.0,
    f"{A}.fsdp_config.model_dtype": "fp32",
    f"{A}.fsdp_config.dtype": "bfloat16",
    f"{M}.lora_rank": 0,
    f"{M}.lora_alpha": 16,
    f"{M}.target_modules": "all-linear",
    f"{M}.exclude_modules": None,
    f"{M}.lora_adapter_path": None,
    f"{R}.n": 1,
    f"{R}.name": "???",
    f"{R}.temperature": 1.0,
    f"{R}.top_p": 1,
    f"{R}.top_k": -1,
    "data.train_batch_size": 1024,
    "data.max_prompt_length": 512,
    "data.max_response_length": 512,
    "data.truncation": "error",
    "data.seed": None,
    "trainer.total_training_steps": None,
    "trainer.total_epochs": 30,
    "trainer.use_v1": True,
}


def settings(config: dict[str, Any], extra: dict[str, Any]) -> dict[str, Any]:
    """The config's dotted keys with the overrides on top; interpolations (`${...}`) and
    Hydra's `???` count as unset."""
    values = {k: v for k, v in flat(config).items() if not (isinstance(v, str) and v.startswith("${"))}
    values.update(extra)
    return values


#: keys whose kind their default does not say (an integer, a pair, either of two kinds)
KINDS: dict[str, str | None] = {
    **dict.fromkeys(
        (f"{R}.n", f"{R}.top_k", f"{M}.lora_rank", f"{A}.ppo_epochs", f"{A}.ppo_mini_batch_size"), "an integer"
    ),
    **dict.fromkeys((f"{A}.ppo_micro_batch_size_per_gpu", f"{A}.optim.lr_warmup_steps", "data.seed"), "an integer"),
    **dict.fromkeys(("data.train_batch_size", "data.max_prompt_length", "data.max_response_length"), "an integer"),
    **dict.fromkeys(("trainer.total_training_steps", "trainer.total_epochs"), "an integer"),
    "algorithm.filter_groups.max_num_gen_batches": "an integer",
    f"{A}.optim.betas": "two numbers",
    f"{A}.loss_scale_factor": "a number",
    f"{C}.rollout_is_threshold": None,  # a number, or "low_high"
    f"{M}.target_modules": None,  # all-linear, or a list
}


class Reader:
    """verl's values with its defaults; a value of the wrong kind (a foreign config is untrusted
    input) is recorded as a problem and the default read in its place."""

    def __init__(self, values: dict[str, Any]) -> None:
        self.values, self.read, self.problems = values, set(), {}

    def __call__(self, key: str) -> Any:
        self.read.add(key)
        value = self.values.get(key, DEFAULTS.get(key))
        kind = KINDS[key] if key in KINDS else kind_of(DEFAULTS.get(key))
        if value is None or value == "???" or kind is None:
            return None if value == "???" else value
        if typed(value, kind) is None:
            self.problems[key] = f"{plain(value)}: not {kind}"
            return None if DEFAULTS.get(key) == "???" else DEFAULTS.get(key)
        return typed(value, kind)

    def source(self, key: str) -> str:
        given = key in self.values
        return f"verl {key}: {plain(self(key))}" + ("" if given else f" ({VERSION} default)")
