"""Building what a run is made of from the contract: models, reference, optimizer, schedule."""

from __future__ import annotations

import math
from typing import Any

import torch

from rlvr_cli.errors import RlvrError


class ModelSetup:
    """Mixed into the Trainer: loads artifacts from disk (never the network)."""

    c: Any
    folder: Any
    dtype: torch.dtype
    device: torch.device
    policy: Any
    tokenizer: Any
    optimizer: torch.optim.Optimizer

    def _artifact_path(self, ref: Any, what: str) -> str:
        if ref.path is not None:
            path = self.folder / ref.path
            if not (path / "config.json").is_file():
                raise RlvrError(f"{what} folder {path} has no config.json")
            return str(path)
        return ref.id

    def _load_model(self, source: str, revision: str | None = None) -> Any:
        from transformers import AutoModelForCausalLM

        try:
            model = AutoModelForCausalLM.from_pretrained(
                source, revision=revision, dtype=self.dtype, local_files_only=True
            )
        except (OSError, ValueError) as exc:
            raise RlvrError(f"cannot load the model at {source}: {exc}") from None
        return model.to(self.device).eval()  # eval: no dropout, rollout and update see the same network

    def _load_reference(self) -> Any | None:
        ref = self.c.artifacts.reference
        if self.c.objective.kl.coef == 0 or ref is None or ref.is_none:
            return None
        if ref.same_as_policy:
            source = self._artifact_path(self.c.artifacts.policy, "policy")
        else:
            source = self._artifact_path(ref, "reference")
        model = self._load_model(source, ref.revision)
        for p in model.parameters():
            p.requires_grad_(False)
        return model

    def _pad_id(self) -> int:
        tok = self.tokenizer
        pad = tok.pad_token_id if tok.pad_token_id is not None else tok.eos_token_id
        if pad is None:
            raise RlvrError("the tokenizer has neither a pad nor an eos token to pad with")
        return int(pad)

    def _optimizer(self) -> torch.optim.Optimizer:
        o = self.c.hyperparameters.optimizer
        params = [p for p in self.policy.parameters() if p.requires_grad]
        if o.name == "sgd":
            return torch.optim.SGD(params, lr=o.lr, weight_decay=o.weight_decay)
        cls = torch.optim.AdamW if o.name == "adamw" else torch.optim.Adam
        return cls(params, lr=o.lr, betas=tuple(o.betas), weight_decay=o.weight_decay)

    def _scheduler(self) -> torch.optim.lr_scheduler.LambdaLR:
        s = self.c.hyperparameters.schedule
        total = self.c.hyperparameters.max_steps * self.c.hyperparameters.updates_per_batch
        name, warmup = (s.name, s.warmup_steps) if s else ("constant", 0)

        def factor(step: int) -> float:
            if step < warmup:  # 1. linear warm-up
                return (step + 1) / warmup
            progress = min(1.0, (step - warmup) / max(1, total - warmup))
            if name == "linear":  # 2a. linear decay to 0
                return 1.0 - progress
            if name == "cosine":  # 2b. cosine decay to 0
                return 0.5 * (1.0 + math.cos(math.pi * progress))
            return 1.0  # 2c. constant

        return torch.optim.lr_scheduler.LambdaLR(self.optimizer, factor)
