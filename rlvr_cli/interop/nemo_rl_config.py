"""A NeMo RL config as NeMo RL reads it: the files its `defaults:` names (one path or a list,
relative to the file that names them) merged under it, the command line's `key=value`
overrides on top, then OmegaConf's interpolations — `${policy.max_total_sequence_length}`
and the `${mul:a, b}` (`div`, `add`, `max`, `min`) resolvers its configs use. Values are
returned as dotted keys; an interpolation that cannot be resolved is kept as its text and
named, so the mapping refuses only what it reads."""

from __future__ import annotations

import math
from collections.abc import Callable
from pathlib import Path
from typing import Any

from rlvr_cli.errors import RlvrError
from rlvr_cli.interop.common import flat, plain, typed

#: the resolvers NeMo RL registers with OmegaConf that its configs use
RESOLVERS: dict[str, Callable[[list[float]], float]] = {
    "mul": lambda a: math.prod(a),
    "div": lambda a: a[0] / a[1],
    "add": lambda a: sum(a),
    "max": lambda a: max(a),
    "min": lambda a: min(a),
}
MAX_DEPTH = 32
#: the longest string an interpolation may build: a config that doubles a value at each level would
#: otherwise take the machine's memory (values are untrusted input)
MAX_CHARS = 100_000

G, L, P = "grpo", "loss_fn", "policy"
#: NeMo RL's defaults for the optional keys interop/nemo_rl_map.py reads (ClippedPGLossConfig's
#: fields, grpo_math_1B.yaml's optional keys)
DEFAULTS: dict[str, Any] = {
    f"{G}.max_num_epochs": 1,
    f"{G}.seed": 42,
    f"{G}.normalize_rewards": True,
    f"{G}.use_leave_one_out_baseline": False,
    f"{G}.overlong_filtering": False,
    f"{G}.use_dynamic_sampling": False,
    f"{G}.dynamic_sampling_max_gen_batches": 10,
    f"{G}.batch_multiplier": 1,
    f"{G}.adv_estimator.minus_baseline": True,
    f"{G}.reward_shaping.enabled": False,
    f"{G}.reward_shaping.stop_properly_penalty_coef": None,
    f"{G}.reward_scaling.enabled": False,
    f"{L}.reference_policy_kl_penalty": 0.01,
    f"{L}.reference_policy_kl_type": "k3",
    f"{L}.kl_input_clamp_value": 20.0,
    f"{L}.kl_output_clamp_value": 10.0,
    f"{L}.use_kl_in_reward": False,
    f"{L}.ratio_clip_c": None,
    f"{L}.disable_ppo_ratio": False,
    f"{L}.token_level_loss": True,
    f"{L}.sequence_level_importance_ratios": False,
    f"{L}.use_importance_sampling_correction": False,
    f"{L}.truncated_importance_sampling_type": None,
    f"{L}.truncated_importance_sampling_ratio": None,
    f"{L}.truncated_importance_sampling_ratio_min": None,
    f"{L}.use_on_policy_kl_approximation": False,
    f"{L}.force_on_policy_ratio": False,
    f"{L}.use_cispo": False,
    f"{L}.positive_example_nll_weight": 0.0,
    f"{P}.megatron_cfg.enabled": False,
    f"{P}.dtensor_cfg.lora_cfg.enabled": False,
    f"{P}.dtensor_cfg.lora_cfg.match_all_linear": True,
    f"{P}.dtensor_cfg.lora_cfg.dim": 8,
    f"{P}.dtensor_cfg.lora_cfg.alpha": 32,
    f"{P}.dtensor_cfg.lora_cfg.dropout": 0.0,
    f"{P}.dtensor_cfg.lora_cfg.dropout_position": "post",
    f"{P}.dtensor_cfg.lora_cfg.lora_A_init": "xavier",
    f"{P}.max_grad_norm": None,
    f"{P}.scheduler": None,
    f"{P}.generation.backend": "vllm",
    f"{P}.generation.colocated.enabled": True,
    f"{P}.generation.temperature": 1.0,
    f"{P}.generation.top_p": 1.0,
    f"{P}.generation.top_k": None,
    f"{P}.generation.stop_token_ids": None,
    f"{P}.generation.stop_strings": None,
    f"{P}.optimizer.kwargs.betas": [0.9, 0.999],
    f"{P}.optimizer.kwargs.eps": 1e-8,
    f"{P}.optimizer.kwargs.weight_decay": 0.0,
}


class Unresolved(Exception):
    """An interpolation names a key that is not there, a resolver NeMo RL's configs do not
    use, or itself."""


def load(path: Path, read: Callable[[Path], dict[str, Any]], overrides: dict[str, Any]) -> tuple[dict, dict]:
    """(values by dotted key, {key: text} of the interpolations left unresolved)."""
    merged = _chain(path, read, ())
    values = flat(merged)
    values.update(overrides)
    resolved, unresolved, memo = {}, {}, {}
    for key, value in values.items():
        try:
            resolved[key] = _value(value, _Values(values, memo), 0)
        except Unresolved as why:
            unresolved[key] = f"{str(value)[:200]} ({why})"
    return resolved, unresolved


class _Values:
    """The config's values with each interpolated key resolved once (a key named a thousand
    times is resolved once, not a thousand times)."""

    def __init__(self, values: dict[str, Any], memo: dict[str, Any]) -> None:
        self.values, self.memo = values, memo

    def __contains__(self, key: str) -> bool:
        return key in self.values

    def resolved(self, key: str, depth: int) -> Any:
        if key not in self.memo:
            self.memo[key] = _value(self.values[key], self, depth)
        return self.memo[key]


def _chain(path: Path, read: Callable[[Path], dict[str, Any]], seen: tuple[Path, ...]) -> dict[str, Any]:
    where = path.resolve()
    if where in seen:
        raise RlvrError(f"{path}: its defaults come back to it ({' → '.join(p.name for p in (*seen, where))})")
    if not path.is_file():
        named_by = f" (the defaults of {seen[-1]})" if seen else ""
        raise RlvrError(f"{path}{named_by}: no such file; NeMo RL resolves defaults beside the file that names them")
    data = dict(read(path))
    parents = data.pop("defaults", None)
    if parents is None:
        parents = []
    elif isinstance(parents, str):
        parents = [parents]
    elif not isinstance(parents, list) or not all(isinstance(p, str) for p in parents):
        raise RlvrError(f"{path}: defaults must be a path or a list of paths, not {parents!r}")
    merged: dict[str, Any] = {}
    for parent in parents:
        merged = _merge(merged, _chain(path.parent / parent, read, (*seen, where)))
    return _merge(merged, data)


def _merge(base: dict[str, Any], over: dict[str, Any]) -> dict[str, Any]:
    """OmegaConf.merge for plain data: mappings merge key by key, anything else replaces."""
    out = dict(base)
    for key, value in over.items():
        if isinstance(value, dict) and isinstance(out.get(key), dict):
            out[key] = _merge(out[key], value)
        else:
            out[key] = value
    return out


def _value(value: Any, values: _Values, depth: int) -> Any:
    if not isinstance(value, str) or "${" not in value:
        return value
    if depth > MAX_DEPTH:
        raise Unresolved("interpolations nested too deep, or a cycle")
    whole, end = _interpolation(value, 0, values, depth) if value.startswith("${") else (None, -1)
    if end == len(value):
        return whole  # the whole string is one interpolation: its value keeps its type
    out, i, size = [], 0, 0
    while i < len(value):
        if value.startswith("${", i):
            part, i = _interpolation(value, i, values, depth)
            out.append(str(part))
        else:
            out.append(value[i])
            i += 1
        size += len(out[-1])
        if size > MAX_CHARS:
            raise Unresolved(f"builds a string longer than {MAX_CHARS:,} characters")
    return "".join(out)


def _interpolation(text: str, start: int, values: _Values, depth: int) -> tuple[Any, int]:
    """The value of the `${...}` opening at `start`, and the index after its closing brace."""
    level, i = 0, start
    while i < len(text):
        if text.startswith("${", i):
            level, i = level + 1, i + 2
            continue
        if text[i] == "}":
            level -= 1
            if level == 0:
                return _evaluate(text[start + 2 : i].strip(), values, depth), i + 1
        i += 1
    raise Unresolved("no closing brace")


def _evaluate(inner: str, values: _Values, depth: int) -> Any:
    name, sep, args = inner.partition(":")
    if sep and "${" not in name and "." not in name:
        if name not in RESOLVERS:
            raise Unresolved(f"the resolver {name!r}")
        numbers = [_number(_value(arg.strip(), values, depth + 1)) for arg in _split(args)]
        result = RESOLVERS[name](numbers)
        return int(result) if float(result).is_integer() and name != "div" else result
    if inner not in values:
        raise Unresolved(f"no key {inner}")
    return values.resolved(inner, depth + 1)


def _split(args: str) -> list[str]:
    """The resolver's arguments: split at the commas outside nested interpolations."""
    parts, level, current = [], 0, ""
    for i, char in enumerate(args):
        if args.startswith("${", i):
            level += 1
        elif char == "}":
            level -= 1
        if char == "," and level == 0:
            parts.append(current)
            current = ""
        else:
            current += char
    return [*parts, current]


def _number(value: Any) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float, str)):
        raise Unresolved(f"{value!r} is not a number")
    try:
        return float(value)
    except ValueError:
        raise Unresolved(f"{value!r} is not a number") from None


#: the kind of value each key the mapping computes with must hold
KINDS: dict[str, str] = {
    **dict.fromkeys(
        (
            *(f"{G}.{k}" for k in ("num_prompts_per_step", "num_generations_per_prompt", "max_num_steps")),
            *(f"{G}.{k}" for k in ("max_num_epochs", "seed", "dynamic_sampling_max_gen_batches")),
            f"{G}.reward_shaping.overlong_buffer_length",
            f"{G}.reward_shaping.max_response_length",
            *(f"{P}.{k}" for k in ("train_global_batch_size", "train_micro_batch_size", "max_total_sequence_length")),
            f"{P}.generation.max_new_tokens",
            f"{P}.generation.top_k",
            f"{P}.dtensor_cfg.lora_cfg.dim",
            "data.max_input_seq_length",
        ),
        "an integer",
    ),
    **dict.fromkeys(
        (
            *(f"{G}.reward_scaling.{k}" for k in ("source_min", "source_max", "target_min", "target_max")),
            f"{G}.reward_shaping.overlong_buffer_penalty",
            f"{G}.reward_shaping.stop_properly_penalty_coef",
            f"{G}.batch_multiplier",  # NotRequired[float] in NeMo RL's GRPOConfig (ProRLv2's recipe: 1.5)
            *(
                f"{L}.{k}"
                for k in ("ratio_clip_min", "ratio_clip_max", "ratio_eps_min", "ratio_eps_max", "ratio_clip_c")
            ),
            *(f"{L}.{k}" for k in ("reference_policy_kl_penalty", "kl_input_clamp_value", "kl_output_clamp_value")),
            *(f"{L}.truncated_importance_sampling_{k}" for k in ("ratio", "ratio_min")),
            *(f"{P}.generation.{k}" for k in ("temperature", "top_p")),
            *(f"{P}.optimizer.kwargs.{k}" for k in ("lr", "weight_decay", "eps")),
            f"{P}.max_grad_norm",
            *(f"{P}.dtensor_cfg.lora_cfg.{k}" for k in ("alpha", "dropout")),
        ),
        "a number",
    ),
    **dict.fromkeys(
        (
            *(
                f"{s}.{k}"
                for s in (G, f"{G}.adv_estimator")
                for k in ("normalize_rewards", "use_leave_one_out_baseline")
            ),
            *(f"{G}.{k}" for k in ("overlong_filtering", "use_dynamic_sampling")),
            *(f"{G}.{k}.enabled" for k in ("reward_shaping", "reward_scaling")),
            *(f"{L}.{k}" for k in ("token_level_loss", "sequence_level_importance_ratios")),
            f"{L}.use_importance_sampling_correction",
            *(f"{P}.{k}.enabled" for k in ("megatron_cfg", "dtensor_cfg.lora_cfg", "generation.colocated")),
            f"{P}.dtensor_cfg.lora_cfg.match_all_linear",
        ),
        "true or false",
    ),
    f"{P}.optimizer.kwargs.betas": "two numbers",
    f"{P}.dtensor_cfg.lora_cfg.target_modules": "a list of names",
    f"{P}.dtensor_cfg.lora_cfg.exclude_modules": "a list of names",
    f"{P}.scheduler": "a list of schedulers",
}


class Reader:
    """The config's values as the mapping reads them: NeMo RL's default where a key is left out,
    and a value of the wrong type (a foreign config is untrusted input) recorded as a problem,
    the default read in its place."""

    def __init__(self, values: dict[str, Any], unresolved: dict[str, str]) -> None:
        self.values, self.unresolved, self.read = values, unresolved, set()
        self.problems: dict[str, str] = {}

    def __call__(self, key: str) -> Any:
        self.read.add(key)
        value = self.values[key] if key in self.values else DEFAULTS.get(key)
        kind = KINDS.get(key)
        if value is None or kind is None:
            return value
        checked = typed(value, kind)
        if checked is None:
            self.problems[key] = f"{plain(value)}: not {kind}"
            return DEFAULTS.get(key)
        return checked

    def given(self, key: str) -> bool:
        return key in self.values

    def source(self, key: str) -> str:
        return f"nemo-rl {key}: {plain(self(key))}" + ("" if self.given(key) else " (NeMo RL's default)")
