"""A lean forward for the Llama family of decoders (Llama, Mistral, Qwen2, Qwen3): the same
arithmetic as transformers' modules, written as a handful of tensor operations per layer over
the model's own parameters, with a KV cache of plain tensors.

For a small model a decode step is mostly Python: transformers' forward builds masks, rotary
tables and cache objects and walks a dozen modules per layer, ~1 ms a step whatever the model
size. This forward does the work and nothing else, and computes logits for the last position
only. It reads the parameters at every call, so the weights an optimizer step wrote are the
weights it samples with. `why_not(model)` says when a model is outside what it reproduces
(another architecture, scaled RoPE, a sliding window, a non-SiLU MLP); the sampler then uses
the model's own forward. A test checks both give the same logits on every supported family.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import torch
import torch.nn.functional as F

FAMILIES = ("llama", "mistral", "qwen2", "qwen3")


def why_not(model: Any) -> str | None:
    """Why the lean forward cannot stand in for this model's own, or None when it can."""
    config = getattr(model, "config", None)
    kind = getattr(config, "model_type", None)
    if kind not in FAMILIES:
        return f"model type {kind!r} is not one of {', '.join(FAMILIES)}"
    rope = getattr(config, "rope_scaling", None) or getattr(config, "rope_parameters", None) or {}
    rope_type = rope.get("rope_type", rope.get("type", "default")) if isinstance(rope, dict) else "default"
    if rope_type not in (None, "default"):
        return f"RoPE scaling {rope_type!r}"
    if getattr(config, "hidden_act", "silu") != "silu":
        return f"activation {config.hidden_act!r}"
    if getattr(config, "pretraining_tp", 1) != 1:
        return "tensor-parallel pretraining layout (pretraining_tp > 1)"
    if getattr(config, "use_sliding_window", False) or (kind == "mistral" and getattr(config, "sliding_window", None)):
        return "sliding-window attention"
    if getattr(config, "_attn_implementation", "sdpa") not in ("sdpa", "eager"):
        return f"attention implementation {config._attn_implementation!r}"
    return None


def _rms(x: torch.Tensor, weight: torch.Tensor, eps: float) -> torch.Tensor:
    dtype = x.dtype
    h = x.to(torch.float32)
    h = h * torch.rsqrt(h.pow(2).mean(-1, keepdim=True) + eps)
    return weight * h.to(dtype)


def _rotate(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
    half = x.shape[-1] // 2
    rotated = torch.cat((-x[..., half:], x[..., :half]), dim=-1)
    return x * cos + rotated * sin


@dataclass
class Cache:
    """Keys and values per layer `(B, kv_heads, capacity, head_dim)`, allocated once, the
    first `length` slots filled; which key slots are real tokens `(B, capacity)` (left
    padding is not)."""

    keys: list[torch.Tensor]
    values: list[torch.Tensor]
    valid: torch.Tensor
    positions: torch.Tensor  # (B,) the position of each row's last token
    length: int

    def select(self, rows: torch.Tensor) -> None:
        """Keep (or repeat) these rows: finished rows leave; a shared prompt fans out."""
        self.keys = [k[rows] for k in self.keys]
        self.values = [v[rows] for v in self.values]
        self.valid, self.positions = self.valid[rows], self.positions[rows]


class Decoder:
    """`prefill(ids, attention)` → (last logits, cache); `step(tokens, cache)` → next logits."""

    def __init__(self, model: Any) -> None:
        self.model = model
        config = model.config
        self.eps = config.rms_norm_eps
        self.heads = config.num_attention_heads
        self.kv_heads = getattr(config, "num_key_value_heads", None) or self.heads
        self.head_dim = getattr(config, "head_dim", None) or config.hidden_size // self.heads
        rotary = model.model.rotary_emb
        self.inv_freq, self.rope_scale = rotary.inv_freq, float(getattr(rotary, "attention_scaling", 1.0))
        self.qk_norm = config.model_type == "qwen3"

    def _rope(self, positions: torch.Tensor, dtype: torch.dtype) -> tuple[torch.Tensor, torch.Tensor]:
        freqs = positions[..., None].float() * self.inv_freq.to(device=positions.device, dtype=torch.float)
        emb = torch.cat((freqs, freqs), dim=-1)[:, None]  # (B, 1, T, D)
        return (emb.cos() * self.rope_scale).to(dtype), (emb.sin() * self.rope_scale).to(dtype)

    def _layers(self, h: torch.Tensor, cos: Any, sin: Any, mask: torch.Tensor, cache: Cache, fresh: bool) -> Any:
        B, T, _ = h.shape
        for i, layer in enumerate(self.model.model.layers):
            attn, x = layer.self_attn, _rms(h, layer.input_layernorm.weight, self.eps)
            q = F.linear(x, attn.q_proj.weight, attn.q_proj.bias).view(B, T, self.heads, self.head_dim)
            k = F.linear(x, attn.k_proj.weight, attn.k_proj.bias).view(B, T, self.kv_heads, self.head_dim)
            v = F.linear(x, attn.v_proj.weight, attn.v_proj.bias).view(B, T, self.kv_heads, self.head_dim)
            if self.qk_norm:
                q, k = (
                    _rms(q, attn.q_norm.weight, attn.q_norm.variance_epsilon),
                    _rms(k, attn.k_norm.weight, attn.k_norm.variance_epsilon),
                )
            q, k, v = _rotate(q.transpose(1, 2), cos, sin), _rotate(k.transpose(1, 2), cos, sin), v.transpose(1, 2)
            if fresh:
                cache.keys.append(k.new_empty((B, self.kv_heads, cache.valid.size(1), self.head_dim)))
                cache.values.append(v.new_empty((B, self.kv_heads, cache.valid.size(1), self.head_dim)))
            end = cache.length + T
            cache.keys[i][:, :, cache.length : end] = k
            cache.values[i][:, :, cache.length : end] = v
            out = self._attend(q, cache.keys[i][:, :, :end], cache.values[i][:, :, :end], mask)
            h = h + F.linear(out.transpose(1, 2).reshape(B, T, -1), attn.o_proj.weight, attn.o_proj.bias)
            mlp, x = layer.mlp, _rms(h, layer.post_attention_layernorm.weight, self.eps)
            gate = F.silu(F.linear(x, mlp.gate_proj.weight, mlp.gate_proj.bias))
            up = F.linear(x, mlp.up_proj.weight, mlp.up_proj.bias)
            h = h + F.linear(gate * up, mlp.down_proj.weight, mlp.down_proj.bias)
        return h

    def _attend(self, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
        """Attention `(B, heads, T, D)`. One query per row (a decode step) is two small matmuls
        with the query heads grouped over their shared key head, cheaper than the fused kernel
        at these sizes; a prefill uses the fused kernel."""
        if q.size(2) != 1:
            return F.scaled_dot_product_attention(q, k, v, attn_mask=mask, enable_gqa=self.kv_heads != self.heads)
        B, _, _, D = q.shape
        group = self.heads // self.kv_heads
        grouped = q.reshape(B, self.kv_heads, group, D)  # heads h·group + j share key head h
        scores = torch.matmul(grouped, k.transpose(-1, -2)) * (D**-0.5)  # (B, kv, group, L)
        scores = scores.masked_fill(~mask.reshape(B, 1, 1, -1), float("-inf"))
        out = torch.matmul(torch.softmax(scores, dim=-1, dtype=torch.float32).to(q.dtype), v)  # (B, kv, group, D)
        return out.reshape(B, self.heads, 1, D)

    def _logits(self, h: torch.Tensor) -> torch.Tensor:
        last = _rms(h[:, -1], self.model.model.norm.weight, self.eps)
        head = self.model.lm_head
        return F.linear(last, head.weight, getattr(head, "bias", None)).float()  # (B, V)

    @torch.no_grad()
    def prefill(self, ids: torch.Tensor, attention: torch.Tensor, room: int = 0) -> tuple[torch.Tensor, Cache]:
        """Left-padded prompts `(B, P)` with their mask → logits of the next token `(B, V)`,
        and a cache with `room` free slots for the tokens to come."""
        positions = (attention.cumsum(dim=1) - 1).clamp(min=0)
        h = self.model.model.embed_tokens(ids)
        cos, sin = self._rope(positions, h.dtype)
        B, P = ids.shape
        causal = torch.ones(P, P, dtype=torch.bool, device=ids.device).tril()
        mask = causal[None] & attention.bool()[:, None, :]
        mask |= torch.eye(P, dtype=torch.bool, device=ids.device)[None]  # a padding query sees itself: no NaN
        valid = torch.zeros((B, P + room), dtype=torch.bool, device=ids.device)
        valid[:, :P] = attention.bool()
        cache = Cache([], [], valid, positions[:, -1], 0)
        h = self._layers(h, cos, sin, mask[:, None], cache, fresh=True)
        cache.length = P
        return self._logits(h), cache

    @torch.no_grad()
    def step(self, tokens: torch.Tensor, cache: Cache) -> torch.Tensor:
        """One new token per row `(B,)` → logits of the next `(B, V)`; the cache grows by one."""
        if cache.length == cache.valid.size(1):
            raise ValueError("the cache is full: prefill with more room")
        cache.positions = cache.positions + 1
        cache.valid[:, cache.length] = True
        h = self.model.model.embed_tokens(tokens[:, None])
        cos, sin = self._rope(cache.positions[:, None], h.dtype)
        h = self._layers(h, cos, sin, cache.valid[:, None, None, : cache.length + 1], cache, fresh=False)
        cache.length += 1
        return self._logits(h)
