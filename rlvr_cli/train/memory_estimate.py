"""`rlvr plan`: memory per device for a contract, from the model's config.json on disk.

Terms (bytes): policy parameters, gradients and optimizer state (sharded N ways with
FSDP), the frozen reference (only when kl.coef > 0), the rollout KV cache at the
contract's group size and lengths, training activations for one micro-batch, and the
logits of that micro-batch (kept in fp32 for the log-softmax). The activation term follows
Korthikanti et al. 2022 (https://arxiv.org/abs/2205.05198): ≈ 34·s·b·h·L bytes at 16-bit
(doubled at fp32) with memory-efficient attention (PyTorch SDPA), which never materializes
the 5·a·s²·b·L attention scores; no activation recomputation.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from rlvr_cli.contract.models import Contract
from rlvr_cli.errors import RlvrError, UsageProblem

GIB = 1024**3
BYTES = {"fp32": 4, "bf16": 2, "fp16": 2}
OPTIMIZER_STATES = {"adamw": 2, "adam": 2, "sgd": 0}


@dataclass
class ModelShape:
    vocab: int
    hidden: int
    layers: int
    heads: int
    kv_heads: int
    intermediate: int
    tied: bool

    @classmethod
    def from_config(cls, config: dict[str, Any]) -> ModelShape:
        try:
            hidden = int(config["hidden_size"])
            heads = int(config["num_attention_heads"])
            return cls(
                vocab=int(config["vocab_size"]),
                hidden=hidden,
                layers=int(config["num_hidden_layers"]),
                heads=heads,
                kv_heads=int(config.get("num_key_value_heads") or heads),
                intermediate=int(config.get("intermediate_size") or 4 * hidden),
                tied=bool(config.get("tie_word_embeddings", False)),
            )
        except (KeyError, TypeError, ValueError) as exc:
            raise RlvrError(f"config.json lacks a field the estimate needs: {exc}") from None

    @property
    def head_dim(self) -> int:
        return self.hidden // self.heads

    @property
    def parameters(self) -> int:
        """Llama-style decoder: attention q/k/v/o, gated MLP, two norms per layer."""
        h, kv = self.hidden, self.kv_heads * self.head_dim
        per_layer = 2 * h * h + 2 * h * kv + 3 * h * self.intermediate + 2 * h
        embeddings = self.vocab * h * (1 if self.tied else 2)
        return self.layers * per_layer + embeddings + h


def load_shape(contract: Contract, folder: Path) -> ModelShape:
    policy = contract.artifacts.policy
    if policy.path is None:
        raise UsageProblem("rlvr plan reads the model's config.json from disk; artifacts.policy is a hub id")
    path = folder / policy.path / "config.json"
    if not path.is_file():
        raise UsageProblem(f"{path} does not exist")
    return ModelShape.from_config(json.loads(path.read_text(encoding="utf-8")))


def estimate(contract: Contract, shape: ModelShape, devices: int = 1) -> dict[str, float]:
    """Bytes per device for each term."""
    hp, length = contract.hyperparameters, contract.length
    b = BYTES[hp.precision]
    params = shape.parameters
    shard = max(devices, 1)
    seq = length.max_prompt_tokens + length.max_response_tokens
    rollouts = hp.prompts_per_step * hp.group_size / shard
    micro = hp.micro_batch_sequences or hp.prompts_per_step * hp.group_size
    micro = min(micro, rollouts) if devices > 1 else micro
    activation_factor = 34 * (2 if b == 4 else 1)
    return {
        "policy parameters": params * b / shard,
        "gradients": params * b / shard,
        "optimizer state": params * b * OPTIMIZER_STATES[hp.optimizer.name] / shard,
        "reference": params * b / shard if contract.objective.kl.coef > 0 else 0.0,
        "rollout KV cache": 2 * shape.layers * shape.kv_heads * shape.head_dim * b * seq * rollouts,
        "activations": seq * micro * shape.hidden * shape.layers * activation_factor,
        "logits": 2 * micro * length.max_response_tokens * shape.vocab * 4,
    }


def advice(terms: dict[str, float], budget: float | None, precision: str, devices: int) -> list[str]:
    """What to change when the total exceeds the budget, starting with the dominant term."""
    total = sum(terms.values())
    if budget is None or total <= budget:
        return []
    top = max(terms, key=terms.get)  # type: ignore[arg-type]
    tips = {
        "activations": "lower hyperparameters.micro_batch_sequences (activations scale with it)",
        "logits": "lower micro_batch_sequences or max_response_tokens (logits are fp32, B×T×V)",
        "rollout KV cache": "generate the group in chunks, or lower max_response_tokens / group_size",
        "optimizer state": "shard with FSDP over more GPUs",
        "policy parameters": "shard with FSDP over more GPUs",
        "gradients": "shard with FSDP over more GPUs",
        "reference": "kl.coef = 0 removes the reference; or shard it with FSDP",
    }
    out = [f"{top} dominates: {tips[top]}"]
    if precision == "fp32":
        out.append("bf16 precision halves parameters, gradients, optimizer state and the KV cache")
    out.append(
        f"{'more GPUs divide' if devices > 1 else 'sharding over N GPUs divides'} the parameter terms and "
        f"the KV cache (now {total / GIB:.2f} GiB > {budget / GIB:.2f} GiB)"
    )
    return out


def plan_table(contract: Contract, shape: ModelShape, devices: int, memory_gib: float | None) -> tuple[str, bool]:
    terms = estimate(contract, shape, devices)
    total = sum(terms.values())
    budget = memory_gib * GIB if memory_gib else None
    lines = [
        f"model: {shape.parameters / 1e6:,.2f} M parameters ({shape.layers} layers, hidden {shape.hidden}, "
        f"{shape.heads}/{shape.kv_heads} heads, vocab {shape.vocab}); {contract.hyperparameters.precision}; "
        f"{devices} device(s){' with FSDP sharding' if devices > 1 else ''}",
        f"{'term':<22}{'per device':>14}{'share':>8}",
    ]
    for name, value in sorted(terms.items(), key=lambda kv: -kv[1]):
        lines.append(f"{name:<22}{_fmt(value):>14}{value / total:>8.0%}")
    lines.append(f"{'total':<22}{_fmt(total):>14}")
    fits = budget is None or total <= budget
    if budget is not None:
        lines.append(f"{'fits' if fits else 'does NOT fit'} in {memory_gib:g} GiB per device")
    lines += [f"  - {tip}" for tip in advice(terms, budget, contract.hyperparameters.precision, devices)]
    return "\n".join(lines), fits


def _fmt(value: float) -> str:
    return f"{value / GIB:.2f} GiB" if value >= GIB else f"{value / 1024**2:.1f} MiB"
