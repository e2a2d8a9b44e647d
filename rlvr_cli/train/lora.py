"""LoRA adapters through peft: attach one to the policy as the contract writes it, switch it off for
the reference, save and restore only its weights, and check an adapter folder from elsewhere.

The policy stays the transformers model it was (peft replaces its targeted linear layers in place),
so every forward, the fused sampler included, runs the adapted network; `peft_model` is the handle
peft's own operations need (saving, switching the adapter off, merging).

An adapter folder is read only from `adapter_model.safetensors`: a folder holding only the pickle
format (`adapter_model.bin`) is refused and never loaded, as a pickle can run code.
"""

from __future__ import annotations

import contextlib
import warnings
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import torch

from rlvr_cli.contract.adapter import WEIGHTS, Adapter, base_name, starting_adapter_problem
from rlvr_cli.contract.models import Contract
from rlvr_cli.errors import RlvrError


def _peft() -> Any:
    try:
        import peft
    except ImportError:
        raise RlvrError("hyperparameters.adapter needs peft: pip install 'rlvr-cli[lora]'") from None
    return peft


def lora_config(spec: Adapter, base: str) -> Any:
    peft = _peft()
    targets = spec.target_modules if isinstance(spec.target_modules, str) else list(spec.target_modules)
    return peft.LoraConfig(
        r=spec.rank,
        lora_alpha=spec.alpha,
        lora_dropout=spec.dropout,
        target_modules=targets,
        bias=spec.bias,
        init_lora_weights=True if spec.init == "default" else "gaussian",
        task_type="CAUSAL_LM",
        base_model_name_or_path=base,
    )


def attach(policy: Any, contract: Contract, folder: Path, load: bool = True) -> Any:
    """Wrap `policy` (modified in place) with the contract's adapter; the base's weights are frozen,
    the adapter's (and the biases `bias` names) train, in `precision.params` (fp32 unless the
    contract writes out pure bf16). A starting adapter is loaded from safetensors only, and only
    with `load` (a model on the meta device, which receives its weights from the main process,
    reads none). Returns peft's model."""
    spec = contract.hyperparameters.adapter
    assert spec is not None
    peft = _peft()
    try:
        with warnings.catch_warnings():  # peft calls a transformers property deprecated in favour of another
            warnings.simplefilter("ignore", FutureWarning)
            model = peft.get_peft_model(policy, lora_config(spec, base_name(contract, folder)))
    except ValueError as exc:  # a target peft cannot find or adapt
        raise RlvrError(f"hyperparameters.adapter does not fit the policy: {exc}") from None
    model.eval()  # peft's new layers start in training mode: their dropout acts only inside `dropout_on`
    if contract.hyperparameters.dtypes.params == "bf16":  # pure bf16, as written (peft makes adapters fp32)
        for parameter in model.parameters():
            if parameter.requires_grad:
                parameter.data = parameter.data.to(torch.bfloat16)
    if spec.path is not None and load:
        problem = starting_adapter_problem(contract, folder)
        if problem:
            raise RlvrError(f"hyperparameters.adapter.path: {problem}")
        load_weights(model, folder / spec.path, f"adapter {spec.path}")
    return model


def state(model: Any) -> dict[str, torch.Tensor]:
    """The adapter's weights (and trained biases) as peft saves them. Of a sharded policy, their
    names and whole shapes only (tensors on the meta device): peft ≥ 0.22 would otherwise gather
    each shard, a collective, where rlvr asks on one process (a checkpoint read by the main one)."""
    own = model.state_dict()
    if any(_sharded(tensor) for tensor in own.values()):
        own = {k: torch.empty(v.shape, dtype=v.dtype, device="meta") if _sharded(v) else v for k, v in own.items()}
        return _peft().get_peft_model_state_dict(model, state_dict=own)
    return _peft().get_peft_model_state_dict(model)


def _sharded(tensor: Any) -> bool:
    from torch.distributed.tensor import DTensor

    return isinstance(tensor, DTensor)


def saved_names(model: Any) -> list[str]:
    """The names in `model.state_dict()` of the tensors peft saves (`state` strips the adapter's
    name from them): what a sharded policy gathers to save its adapter."""
    adapter = model.active_adapter
    kept = set(state(model))
    return [k for k in model.state_dict() if k in kept or k.replace(f".{adapter}", "") in kept]


def load_weights(model: Any, root: Path, name: str) -> None:
    """Restore adapter weights from `root/adapter_model.safetensors`, refusing another shape, a
    missing or unknown tensor, or NaN and infinity, with the reason."""
    _peft().set_peft_model_state_dict(model, read_weights(model, root, name))


def read_weights(model: Any, root: Path, name: str) -> dict[str, torch.Tensor]:
    """`root/adapter_model.safetensors` under peft's names, checked as `load_weights` says."""
    from safetensors.torch import load_file

    try:
        weights = load_file(root / WEIGHTS)
    except Exception as exc:  # a file safetensors cannot read: foreign or damaged
        raise RlvrError(f"{name}: {WEIGHTS} cannot be read as safetensors ({exc})") from None
    own = state(model)
    wrong = [
        f"{k} {tuple(v.shape)} (this adapter's is {tuple(own[k].shape)})"
        for k, v in weights.items()
        if k in own and v.shape != own[k].shape
    ]
    unknown, missing = sorted(set(weights) - set(own)), sorted(set(own) - set(weights))
    if wrong or unknown or missing:
        what = wrong[:2] or [f"unexpected {unknown[:2]}" if unknown else f"missing {missing[:2]}"]
        raise RlvrError(f"{name} does not fit the policy's adapter: {'; '.join(what)}")
    bad = [k for k, v in weights.items() if v.is_floating_point() and not bool(torch.isfinite(v).all())]
    if bad:
        raise RlvrError(f"{name}: {bad[0]} holds NaN or infinity; it is not loaded")
    return weights


def by_policy_name(model: Any, weights: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    """peft's saved names → the names the adapted policy (the model peft wraps) gives them."""
    adapter, wrapped = model.active_adapter, "base_model.model."
    return {
        key.removeprefix(wrapped): weights[key.replace(f".{adapter}", "")]
        for key in model.state_dict()
        if key.replace(f".{adapter}", "") in weights
    }


def save(model: Any, root: Path, whole: dict[str, torch.Tensor] | None = None) -> None:
    """peft's own format: adapter_config.json and adapter_model.safetensors. `whole`: the adapter's
    tensors gathered from a sharded policy, under the names of `model.state_dict()`."""
    model.save_pretrained(root, safe_serialization=True, **({"state_dict": whole} if whole is not None else {}))
    (root / "README.md").unlink(missing_ok=True)  # peft's model card template: not rlvr's to write


@contextlib.contextmanager
def switched_off(model: Any) -> Iterator[None]:
    """The base model alone: the reference of the KL term, with no second copy in memory."""
    with model.disable_adapter():
        yield


@contextlib.contextmanager
def dropout_on(model: Any | None) -> Iterator[None]:
    """The adapter's dropout, active during the update's forward only (the policy is otherwise in
    eval mode: sampling and log-probs of the rollout see no dropout)."""
    layers = (
        [] if model is None else [m for n, m in model.named_modules() if n.rsplit(".", 2)[-2:-1] == ["lora_dropout"]]
    )
    for m in layers:
        m.train()
    try:
        yield
    finally:
        for m in layers:
            m.eval()
