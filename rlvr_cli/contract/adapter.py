"""The contract's `hyperparameters.adapter`: train a LoRA adapter (through peft) instead of every
weight, and what the policy's config.json says about where one can go.

Absent, every weight of the policy trains. Present, every choice that changes what trains is
written out (rank, alpha, dropout, target modules, bias, initialisation): none has a default.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal

from pydantic import Field

from rlvr_cli.contract.layout import Layout
from rlvr_cli.contract.sections import Int, Section
from rlvr_cli.errors import RlvrError

if TYPE_CHECKING:
    from rlvr_cli.contract.models import Contract

ALL_LINEAR = "all-linear"
WEIGHTS = "adapter_model.safetensors"  # the only form an adapter's weights are read in
CONFIG = "adapter_config.json"

# never adapted: rlvr's log-prob and sampling paths read the head's and the embedding's weights
# directly, so an adapter on them would be skipped there
UNADAPTABLE = ("lm_head", "embed_tokens", "wte", "wpe", "embed_out")


class Adapter(Section):
    """A LoRA adapter over the frozen policy (peft). The reference of the KL term is then the policy
    with the adapter switched off: no second copy of the model."""

    kind: Literal["lora"] = Field(description="lora (peft's LoraConfig).")
    rank: Int = Field(ge=1, le=65536, description="r: the adapter's rank.")
    alpha: float = Field(gt=0, description="lora_alpha: the update is scaled by alpha / rank.")
    dropout: float = Field(
        ge=0, lt=1, description="lora_dropout on the adapter's input during the update (never while sampling)."
    )
    target_modules: list[str] | Literal["all-linear"] = Field(
        description="Module names (the last part of a path, e.g. [q_proj, v_proj]) or all-linear: every linear "
        "layer of the decoder (never the output head or the embeddings)."
    )
    bias: Literal["none", "all", "lora_only"] = Field(
        description="none: no bias trains; all: every bias trains; lora_only: the adapted layers' biases train. "
        "With a bias that trains, the reference is a separate frozen copy."
    )
    init: Literal["default", "gaussian"] = Field(
        description="default: A Kaiming-uniform, B zero (peft's init_lora_weights=True); gaussian: A normal "
        "(std 1/rank), B zero. Either way the adapted policy starts equal to the base."
    )
    path: str | None = Field(
        None,
        min_length=1,
        description="Start from an adapter saved by peft (adapter_config.json and adapter_model.safetensors; "
        "its base must be the policy and its settings these).",
    )
    save_merged: bool = Field(
        False, description="Also write final/merged/: the base with the adapter merged, loadable by transformers."
    )

    def describe(self) -> str:
        targets = self.target_modules if isinstance(self.target_modules, str) else ",".join(self.target_modules)
        return f"lora r={self.rank} alpha={self.alpha:g} dropout={self.dropout:g} targets={targets} bias={self.bias}"


def linear_names(config: dict[str, Any]) -> tuple[str, ...] | None:
    """The decoder's linear layer names for this config's model type (contract/layout.py), or None
    when its layout is not known here: then the loaded module names are the check."""
    try:
        layout = Layout.from_config(config)
    except RlvrError:
        return None
    return layout.names if layout.known else None


def fused_expert_names(config: dict[str, Any]) -> tuple[str, ...]:
    """The names peft fuses into a mixture's gate_up_proj (empty where it fuses none)."""
    try:
        return Layout.from_config(config).fused_expert_names
    except RlvrError:
        return ()


def layer_sides(config: dict[str, Any], every_linear: bool = False) -> dict[str, tuple[int, int]]:
    """(in, out) features of each linear layer, from config.json (empty when the model type's
    layout is not known here or config.json lacks a size). `every_linear` (all-linear): without
    the gates narrower than one attention head (Qwen2-MoE's shared_expert_gate, hidden × 1), which
    peft adapts at any rank and a user cannot leave out of all-linear."""
    try:
        layout = Layout.from_config(config)
    except RlvrError:
        return {}
    sides = layout.sides() if layout.known else {}
    if every_linear:
        sides = {name: side for name, side in sides.items() if min(side) >= layout.head_dim}
    return sides


def base_name(contract: Contract, folder: Path) -> str:
    """What an adapter's config names as its base: the policy's hub id, or its absolute folder."""
    policy = contract.artifacts.policy
    return policy.id if policy.id is not None else str((folder / policy.path).resolve())  # type: ignore[operator]


def starting_adapter_problem(contract: Contract, folder: Path) -> str | None:
    """Why the adapter folder the contract starts from cannot be used, or None."""
    spec = contract.hyperparameters.adapter
    assert spec is not None and spec.path is not None
    return adapter_folder_problem(contract, folder, folder / spec.path, spec.path)


def adapter_folder_problem(contract: Contract, folder: Path, root: Path, shown: str | None = None) -> str | None:
    """Why an adapter folder cannot be loaded over the contract's policy with its adapter settings:
    not peft's, weights only as a pickle, another base, other settings."""
    spec = contract.hyperparameters.adapter
    shown = shown or str(root)
    if not (root / CONFIG).is_file():
        return f"{shown} has no {CONFIG} (not an adapter saved by peft)"
    if not (root / WEIGHTS).is_file():
        pickled = [p.name for p in root.glob("*.bin")] + [p.name for p in root.glob("*.pt")]
        if pickled:
            return (
                f"{shown} holds its weights only as {pickled[0]} (a pickle, which can run code): it is never "
                f"loaded; convert it to {WEIGHTS} where you trust it"
            )
        return f"{shown} has no {WEIGHTS}"
    try:
        saved = json.loads((root / CONFIG).read_text(encoding="utf-8"))
    except (OSError, ValueError) as exc:
        return f"{CONFIG} cannot be read: {exc}"
    if not isinstance(saved, dict):
        return f"{CONFIG} is not a JSON object"
    if saved.get("peft_type", "LORA") != "LORA":
        return f"{shown} is a {saved.get('peft_type')} adapter, not LoRA"
    base, policy = str(saved.get("base_model_name_or_path") or ""), base_name(contract, folder)
    if base and not _same_model(base, policy):
        return f"the adapter was trained on {base}, not on the policy {policy}"
    if spec is None:
        return None
    differ = [
        f"{key} {saved.get(key)!r} (the contract says {want!r})"
        for key, want in (
            ("r", spec.rank),
            ("lora_alpha", spec.alpha),
            ("bias", spec.bias),
            ("target_modules", spec.target_modules),
        )
        if not _same_setting(saved.get(key), want)
    ]
    if differ:
        return f"the adapter's settings differ from the contract's: {'; '.join(differ)}"
    return None


def _same_model(a: str, b: str) -> bool:
    """One base named two ways: equal, or the same last path component (a local download of a hub
    id keeps the model's name as its folder name)."""
    return a == b or Path(a.rstrip("/")).name == Path(b.rstrip("/")).name


def _same_setting(saved: Any, want: Any) -> bool:
    if want == ALL_LINEAR:  # peft writes all-linear out as the layers it found
        return True
    if isinstance(saved, list | set) or isinstance(want, list):
        names = {str(n).rsplit(".", 1)[-1] for n in saved} if isinstance(saved, list | set) else {saved}
        return isinstance(want, list) and names == set(want)
    if isinstance(want, float) and isinstance(saved, int | float):
        return float(saved) == want
    return saved == want
