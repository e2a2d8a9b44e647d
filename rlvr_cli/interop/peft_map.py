"""peft's LoraConfig keywords (what GRPOTrainer's `peft_config` is built from, and what
`rlvr export --to trl` writes as peft_config.yaml) → the contract's `hyperparameters.adapter`.

Every keyword is read: the ones the contract states map to its keys; any other keyword set away
from peft's own default (rank-stabilised scaling, DoRA, layer patterns, modules saved whole…)
is refused, naming it, since the contract's adapter is plain LoRA and would train something else.
TRL's own `use_peft` and `lora_*` options (its ModelConfig) map the same way
(`model_config_adapter`).
"""

from __future__ import annotations

from typing import Any

from rlvr_cli.interop.common import Mapping, plain, typed

#: LoraConfig keywords the contract states, and their peft defaults
STATED = {
    "r": 8,
    "lora_alpha": 8,
    "lora_dropout": 0.0,
    "target_modules": None,
    "bias": "none",
    "init_lora_weights": True,
}
INIT = {True: "default", "gaussian": "gaussian"}
#: keywords that say where the adapter came from or how it runs, not what trains; and
#: fan_in_fan_out, which peft sets by the layer it adapts (GPT-2's Conv1D) whatever is written
IGNORED = {
    "task_type",
    "peft_type",
    "peft_version",
    "auto_mapping",
    "base_model_name_or_path",
    "revision",
    "inference_mode",
    "runtime_config",
    "megatron_core",
    "fan_in_fan_out",
}


def adapter(peft: dict[str, Any], out: Mapping, source: str, model_type: str | None) -> None:
    """The adapter `peft` trains, set on `out`, or each keyword the contract cannot state refused."""
    for key, value in sorted(peft.items()):
        if key in STATED or key in IGNORED:
            continue
        default = _peft_default(key)
        if default is _UNKNOWN:
            out.refuse(f"peft {key}", f"{plain(value)}: not a LoraConfig keyword peft {_peft_version()} knows")
        elif value != default and not (value in (None, [], {}) and default in (None, [], {})):
            out.refuse(
                f"peft {key}",
                f"{plain(value)}: the contract's adapter is plain LoRA (peft's default: {plain(default)})",
            )
    if peft.get("task_type", "CAUSAL_LM") != "CAUSAL_LM":
        out.refuse("peft task_type", f"{plain(peft['task_type'])}: the policy is a causal language model")
    init = peft.get("init_lora_weights", STATED["init_lora_weights"])
    if init not in INIT:
        out.refuse("peft init_lora_weights", f"{plain(init)}: the contract starts B at zero (default) or gaussian")
    bias = peft.get("bias", STATED["bias"])
    if bias not in ("none", "all", "lora_only"):
        out.refuse("peft bias", f"{plain(bias)}: none, all or lora_only")
    for key, kind in (("r", "an integer"), ("lora_alpha", "a number"), ("lora_dropout", "a number")):
        if key in peft and typed(peft[key], kind) is None:  # a foreign file is untrusted input
            out.refuse(f"peft {key}", f"{plain(peft[key])}: not {kind}")
    targets = peft.get("target_modules")
    if targets is not None and not (isinstance(targets, str) or (isinstance(targets, list) and all(
            isinstance(t, str) for t in targets))):  # fmt: skip
        out.refuse("peft target_modules", f"{plain(targets)}: not a module name or a list of them")
        return
    if targets is None:
        targets = peft_default_targets(model_type)
        if targets is None:
            out.refuse("peft target_modules", f"unset: peft has no default for {model_type!r}; name the layers")
    elif isinstance(targets, str) and targets != "all-linear":  # peft matches a string as a regex on full paths
        out.refuse("peft target_modules", f"{targets!r}: a regular expression over module paths; list module names")
    if out.refused or targets is None or init not in INIT:
        return
    value = {
        "kind": "lora",
        "rank": peft.get("r", STATED["r"]),
        "alpha": float(peft.get("lora_alpha", STATED["lora_alpha"])),
        "dropout": float(peft.get("lora_dropout", STATED["lora_dropout"])),
        "target_modules": targets if isinstance(targets, str) else list(targets),
        "bias": bias,
        "init": INIT[init],
    }
    given = ", ".join(f"{k}: {plain(peft[k])}" for k in STATED if k in peft)
    out.set("hyperparameters.adapter", value, f"{source}: {given} (peft's defaults for the rest)")


def peft_default_targets(model_type: str | None) -> list[str] | None:
    """The layers peft adapts when none are named (its table by model type), or None."""
    try:
        from peft.utils.constants import TRANSFORMERS_MODELS_TO_LORA_TARGET_MODULES_MAPPING as table
    except ImportError:
        return None
    found = table.get(model_type or "")
    return list(found) if found else None


_UNKNOWN = object()


def _peft_default(key: str) -> Any:
    """peft's own default for a LoraConfig keyword, or _UNKNOWN (no such keyword, or no peft)."""
    import dataclasses

    try:
        from peft import LoraConfig
    except ImportError:
        return _UNKNOWN
    for f in dataclasses.fields(LoraConfig):
        if f.name == key:
            if f.default is not dataclasses.MISSING:
                return f.default
            if f.default_factory is not dataclasses.MISSING:
                return f.default_factory()
    return _UNKNOWN


def _peft_version() -> str:
    try:
        import peft
    except ImportError:
        return "(not installed: pip install 'rlvr-cli[lora]')"
    return str(peft.__version__)


#: TRL ModelConfig options that, set away from their default, the contract's plain LoRA cannot state
MODEL_CONFIG_NO_EQUIVALENT = {
    "use_rslora": "rank-stabilised scaling (alpha / √r)",
    "use_dora": "DoRA (weight-decomposed adapters)",
    "lora_modules_to_save": "whole modules trained beside the adapter",
    "lora_target_parameters": "adapters on parameters (MoE experts)",
}


def model_config_adapter(get: Any, out: Mapping, model_type: str | None, defaults: dict[str, Any]) -> None:
    """TRL's ModelConfig: `use_peft` and its `lora_*` options (`get`, TRL's reader over `defaults`)
    as TRL's get_peft_config passes them to peft (bias none, peft's default initialisation);
    without use_peft every weight trains."""
    if not get("use_peft"):
        out.set("hyperparameters.adapter", None, get.source("use_peft"))
        return
    for key, what in MODEL_CONFIG_NO_EQUIVALENT.items():
        if get(key) not in (defaults[key], None, []):
            out.refuse(key, f"{plain(get(key))}: {what}; the contract's adapter is plain LoRA")
    if get("lora_task_type") != "CAUSAL_LM":
        out.refuse("lora_task_type", f"{plain(get('lora_task_type'))}: the policy is a causal language model")
    targets = get("lora_target_modules")
    if targets is None:
        targets = peft_default_targets(model_type)
        if targets is None:
            out.refuse(
                "lora_target_modules",
                f"unset: peft then picks the layers by model type, and has no default for {model_type!r}; "
                "write them out (all-linear or a list of module names)",
            )
            return
    elif isinstance(targets, str) and targets != "all-linear":  # peft matches a string as a regex on full names
        out.refuse("lora_target_modules", f"{targets!r}: a regular expression over module paths; list module names")
        return
    adapter = {
        "kind": "lora",
        "rank": get("lora_r"),
        "alpha": float(get("lora_alpha")),
        "dropout": float(get("lora_dropout")),
        "target_modules": targets if isinstance(targets, str) else list(targets),
        "bias": "none",
        "init": "default",
    }
    names = ", ".join(
        get.source(k) for k in ("use_peft", "lora_r", "lora_alpha", "lora_dropout", "lora_target_modules")
    )
    out.set("hyperparameters.adapter", adapter, names + "; bias none and peft's initialisation, as get_peft_config")
