"""RLV305: a LoRA adapter that does not fit the policy, checked against the policy's config.json
(the one file these rules read: a few kilobytes, so `validate` stays fast). A config.json that is
missing or unreadable is RLV901's finding under `validate --deep`, not this rule's.

`adapter_findings_loaded` checks the same names against the modules of the model built from its
config on the meta device (no weights read): `validate --deep` and every training start run it.
"""

from __future__ import annotations

import difflib
import json
import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from rlvr_cli.contract.adapter import (
    ALL_LINEAR,
    UNADAPTABLE,
    fused_expert_names,
    layer_sides,
    linear_names,
    starting_adapter_problem,
)
from rlvr_cli.contract.diagnostics import Finding, error
from rlvr_cli.contract.models import Contract
from rlvr_cli.contract.rules import rule

WHERE = ("hyperparameters", "adapter")
QUANT_DTYPE_KEYS = ("bnb_4bit_compute_dtype", "compute_dtype", "torch_dtype")


def policy_config(c: Contract, folder: Path) -> dict[str, Any] | None:
    """The policy's config.json as a dict, or None when it is not a readable local file."""
    if c.artifacts.policy.path is None:
        return None
    try:
        data = json.loads((folder / c.artifacts.policy.path / "config.json").read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    return data if isinstance(data, dict) else None


@rule
def rlv305_adapter(c: Contract, folder: Path) -> Iterator[Finding]:
    config = policy_config(c, folder)
    adapter = c.hyperparameters.adapter
    if config is None:
        return
    yield from _quantised(c, config)
    if adapter is None:
        return
    names = linear_names(config)
    if names is not None:
        yield from target_findings(adapter.target_modules, names, str(config.get("model_type")))
    yield from _half_fused(adapter.target_modules, fused_expert_names(config))
    sides = layer_sides(config, every_linear=adapter.target_modules == ALL_LINEAR)
    targets = names if adapter.target_modules == ALL_LINEAR else adapter.target_modules
    for name in targets or ():
        if name in sides and adapter.rank > min(sides[name]):
            a, b = sides[name]
            yield error(
                "RLV305",
                (*WHERE, "rank"),
                f"rank {adapter.rank} exceeds {name}'s smaller side ({a}×{b}): the adapter cannot use more than "
                f"{min(sides[name])} dimensions there (lower the rank, or leave {name} out)",
            )
            return


def target_findings(targets: list[str] | str, names: tuple[str, ...] | set[str], what: str) -> Iterator[Finding]:
    """Each named target the model lacks, with the nearest name it has; the head and embeddings."""
    if targets == ALL_LINEAR:
        return
    known = sorted(names)
    for i, name in enumerate(targets):
        where = (*WHERE, "target_modules", i)
        if name in UNADAPTABLE:
            yield error(
                "RLV305",
                where,
                f"{name} cannot be adapted: rlvr's log-prob and sampling paths read the output head's and the "
                "embeddings' weights directly, so an adapter there would be skipped; adapt the decoder's linear layers",
            )
        elif name not in names:
            near = difflib.get_close_matches(name, known, n=1)
            hint = f"did you mean '{near[0]}'? " if near else ""
            yield error(
                "RLV305",
                where,
                f"target module '{name}' matches no linear layer of the policy ({what}); {hint}its layers: "
                f"{', '.join(known)} (or all-linear)",
            )


def _half_fused(targets: list[str] | str, fused: tuple[str, ...]) -> Iterator[Finding]:
    """One of the two names peft fuses into the experts' gate_up_proj without the other: peft
    refuses it when the adapter is built (transformers 5 holds the two as one weight)."""
    if targets == ALL_LINEAR or not fused:
        return
    named = [name for name in fused if name in targets]
    if len(named) == 1:
        other = next(name for name in fused if name != named[0])
        yield error(
            "RLV305",
            (*WHERE, "target_modules", list(targets).index(named[0])),
            f"'{named[0]}' and '{other}' are one weight in this mixture's experts (gate_up_proj, transformers 5): "
            f"peft adapts both or neither; add '{other}' or leave '{named[0]}' out",
        )


def _quantised(c: Contract, config: dict[str, Any]) -> Iterator[Finding]:
    quant = config.get("quantization_config")
    if not isinstance(quant, dict):
        return
    method = quant.get("quant_method", "quantised")
    if c.hyperparameters.adapter is None:
        yield error(
            "RLV305",
            ("artifacts", "policy"),
            f"the policy's weights are {method}-quantised (config.json quantization_config): they cannot be "
            "trained; train an adapter over them (hyperparameters.adapter)",
        )
        return
    wanted = next((str(quant[k]).removeprefix("torch.") for k in QUANT_DTYPE_KEYS if quant.get(k)), None)
    compute = {"bf16": "bfloat16", "fp16": "float16", "fp32": "float32"}[c.hyperparameters.dtypes.compute]
    if wanted is not None and wanted != compute:
        yield error(
            "RLV305",
            ("hyperparameters", "precision"),
            f"the policy is {method}-quantised to compute in {wanted}, but the contract computes in {compute}: "
            f"the adapter would train against other numbers than the base gives (set the compute dtype to {wanted})",
        )


def adapter_findings_loaded(c: Contract, folder: Path) -> Iterator[Finding]:
    """The targets against the module names of the model built from config.json on the meta
    device (any architecture transformers knows), and a starting adapter's folder."""
    adapter = c.hyperparameters.adapter
    if adapter is None or c.artifacts.policy.path is None:
        return
    names = loaded_linear_names(folder / c.artifacts.policy.path)
    if names is not None:
        yield from target_findings(adapter.target_modules, names, "its loaded modules")
    if adapter.path is not None:
        problem = starting_adapter_problem(c, folder)
        if problem:
            yield error("RLV305", (*WHERE, "path"), problem)


def built_linear_names(model_folder: str | Path) -> list[str]:
    """Last name parts of every linear layer (the output head aside) of the model transformers
    builds from this folder's config.json on the meta device: no weights read, no code of the
    folder's run (no remote code). Imports torch and transformers."""
    import torch
    from transformers import AutoConfig, AutoModelForCausalLM
    from transformers.pytorch_utils import Conv1D

    config = AutoConfig.from_pretrained(model_folder, local_files_only=True)
    with torch.device("meta"):
        model = AutoModelForCausalLM.from_config(config)
    head = model.get_output_embeddings()
    linear = [n for n, m in model.named_modules() if isinstance(m, torch.nn.Linear | Conv1D) and m is not head]
    names = {n.rsplit(".", 1)[-1] for n in linear}
    try:  # peft maps a mixture's older linear names onto its experts and router (transformers 5)
        from peft.utils import transformers_weight_conversion as moe

        pattern = moe._MODEL_TO_CONVERSION_PATTERN.get(config.model_type)
        names |= set(moe._MOE_TARGET_MODULE_MAPPING.get(pattern) or ())
    except (ImportError, AttributeError):
        pass
    return sorted(names)


_PROBE = "import json, sys\nfrom rlvr_cli.contract.rules_adapter import built_linear_names\n"
_PROBE += "print(json.dumps(built_linear_names(sys.argv[1])))\n"


def loaded_linear_names(model_folder: Path) -> set[str] | None:
    """`built_linear_names`, or None when the model cannot be built (RLV901 says why when it is
    loaded). In this process where transformers is imported already (`train`); otherwise in a child
    process, so that `validate --deep` itself never imports torch or transformers."""
    import subprocess
    import sys

    if "transformers" in sys.modules:
        try:
            return set(built_linear_names(model_folder))
        except Exception:  # any config transformers cannot build: the same as the child's failure
            return None
    here = str(Path(__file__).resolve().parents[2])  # this rlvr_cli, installed or not
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(p for p in (here, os.environ.get("PYTHONPATH")) if p)}
    try:
        done = subprocess.run(
            [sys.executable, "-c", _PROBE, str(model_folder)], capture_output=True, text=True, timeout=120, env=env
        )
        return set(json.loads(done.stdout.strip().splitlines()[-1])) if done.returncode == 0 else None
    except (OSError, subprocess.SubprocessError, ValueError, IndexError):
        return None
