"""A checkpoint's weights into the run's policy, whichever way the run that wrote it held them.

A checkpoint holds the weights whole (`model/` in safetensors, or `adapter/` in peft's format:
written by one process, or by ddp where every process holds the whole model) or in shards
(`shards/`, DCP: written by fsdp2, train/shards.py). Each loads into either kind of run, so a
run may move between one GPU and a cluster (`parallel.strategy` may change on resume,
train/resume_changes.py):
- whole into whole: the tensors as they are (`load_whole`);
- whole into shards: the main process reads the tensors and the optimizer state, and every
  process keeps its shard of each (`read_for_shards`, then `shards.into_shards`);
- shards into whole, or into another number of shards: each process reads its part (`shards.load`).
Whatever the source, a tensor of another shape, or one holding NaN or infinity, is refused
with the reason: resuming it could only crash or train on garbage.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import torch

from rlvr_cli.errors import RlvrError
from rlvr_cli.train import lora
from rlvr_cli.train.setup import Setup


def load_whole(setup: Setup, path: Path) -> None:
    """Whole weights into a policy that holds them whole: the adapter alone for an adapter run."""
    if _adapter(setup, path):
        lora.load_weights(setup.peft_model, path / "adapter", f"checkpoint {path.name}")
        return
    weights = _whole_weights(setup, path)
    missing, unexpected = setup.policy.load_state_dict(weights, strict=False)
    if unexpected or [m for m in missing if "lm_head" not in m]:
        raise RlvrError(f"checkpoint {path.name} does not fit the policy (missing {missing}, unexpected {unexpected})")
    if setup.policy.config.tie_word_embeddings:
        setup.policy.tie_weights()


def read_for_shards(setup: Setup, path: Path) -> dict[str, torch.Tensor]:
    """Whole weights for a sharded policy, checked, named as the policy names its tensors (an
    adapter's as they sit in the model peft adapted)."""
    if _adapter(setup, path):
        name = f"checkpoint {path.name}"
        return lora.by_policy_name(setup.peft_model, lora.read_weights(setup.peft_model, path / "adapter", name))
    weights = _whole_weights(setup, path)
    missing = [k for k in setup.policy.state_dict() if k not in weights and "lm_head" not in k]
    if missing:
        raise RlvrError(f"checkpoint {path.name} does not fit the policy (missing {missing[:3]})")
    return weights


def _adapter(setup: Setup, path: Path) -> bool:
    """Whether the checkpoint holds an adapter alone (`adapter/`), refusing one that holds what
    the contract does not train."""
    if setup.peft_model is None and not (path / "adapter").is_dir():
        return False
    if setup.peft_model is None:
        raise RlvrError(f"checkpoint {path.name} holds an adapter, but the contract trains every weight")
    if not (path / "adapter").is_dir():
        raise RlvrError(f"checkpoint {path.name} holds whole weights, but the contract trains an adapter")
    return True


def _whole_weights(setup: Setup, path: Path) -> dict[str, torch.Tensor]:
    from safetensors.torch import load_file

    weights = {}
    for file in sorted((path / "model").glob("*.safetensors")):
        try:
            weights.update(load_file(file))
        except Exception as exc:  # a file safetensors cannot read: foreign or damaged, never a crash
            raise RlvrError(f"checkpoint {path.name}: {file.name} cannot be read as safetensors ({exc})") from None
    refuse_foreign(weights, setup.policy.state_dict(), path.name)
    return weights


def refuse_foreign(weights: dict[str, torch.Tensor], own: dict[str, Any], name: str) -> None:
    """Weights of another shape (another model's checkpoint) or holding NaN or infinity (a run
    that diverged) are refused with the reason. `own`'s tensors may be shards: their shape is
    the whole tensor's."""
    wrong = [
        f"{k} {tuple(v.shape)} (the policy's is {tuple(own[k].shape)})"
        for k, v in weights.items()
        if k in own and v.shape != own[k].shape
    ]
    if wrong:
        more = f" and {len(wrong) - 2} more" if len(wrong) > 2 else ""
        raise RlvrError(f"checkpoint {name} is not of this policy: {'; '.join(wrong[:2])}{more}")
    bad = [k for k, v in weights.items() if v.is_floating_point() and not bool(torch.isfinite(v).all())]
    if bad:
        more = f" and {len(bad) - 1} more" if len(bad) > 1 else ""
        raise RlvrError(
            f"checkpoint {name}: {bad[0]}{more} hold(s) NaN or infinity; it is not resumed "
            "(resume an earlier checkpoint: remove this one, or start a new run)"
        )


def refuse_nonfinite_state(blob: dict[str, Any], name: str) -> None:
    """Optimizer moments holding NaN or infinity would poison the next update."""
    state = (blob.get("optimizer") or {}).get("state") or {}
    for moments in state.values():
        for key, value in moments.items() if isinstance(moments, dict) else ():
            if isinstance(value, torch.Tensor) and value.is_floating_point() and not bool(torch.isfinite(value).all()):
                raise RlvrError(
                    f"checkpoint {name}: the optimizer state ({key}) holds NaN or infinity; it is not resumed"
                )
