"""The update's forward when the samples of a group share their prompt (GRPO's case): each
distinct prompt of a micro-batch runs through the model once, and every response attends to
its prompt's keys and values. The log-probs and their gradients are those of running every
(prompt + response) row whole — the prompt's keys and values are the same tensors either way,
and autograd sums what each response sends back through them — while the prompt's share of the
matmuls is paid once per group instead of once per sample.

For the Llama family (`engine.fused.why_not`), through the model's own parameters, without
dropout or gradient checkpointing (`why_not_shared` says when not; the update then runs the
model's own forward). The update uses it only where it saves work: fewer distinct prompts
than rows. A test checks log-probs, entropies and gradients against the model's own forward
on every supported family.
"""

from __future__ import annotations

from typing import Any

import torch
import torch.nn.functional as F

from rlvr_cli.engine.forward import Batch, distinct_prompts
from rlvr_cli.engine.fused import why_not


def why_not_shared(model: Any) -> str | None:
    """Why the shared-prompt forward cannot train this model, or None when it can."""
    reason = why_not(model)
    if reason is not None:
        return reason
    checkpointing = getattr(model, "is_activation_checkpointing", None)  # transformers ≥ 5.x names it so
    if checkpointing is None:
        checkpointing = getattr(model, "is_gradient_checkpointing", False)
    if checkpointing or getattr(model, "rlvr_recomputes_layers", False):
        return "gradient checkpointing is on"
    if type(model).__name__.startswith("FSDP"):  # fully_shard's class: only its own forward gathers the weights
        return "the model is sharded (FSDP2)"
    if model.training and float(getattr(model.config, "attention_dropout", 0.0) or 0.0) > 0:
        return "attention dropout"
    return None


def shares_prompts(model: Any, batch: Batch) -> bool:
    """Whether the shared-prompt forward computes this batch: a model it trains, and fewer
    distinct prompts than rows (otherwise there is nothing to share)."""
    return (
        batch.input_ids.size(0) > 1
        and why_not_shared(model) is None
        and (len(distinct_prompts(batch)[0]) < batch.input_ids.size(0))
    )


def describe(model: Any, padding_side: str, packing: bool) -> str:
    """What computes the update's log-probs, for the plan."""
    if packing:
        return "the model's own forward over packed rows"
    if padding_side == "right":
        return "the model's own forward, responses padded on the right"
    reason = why_not_shared(model)
    if reason is None:
        return "shared prompts: each distinct prompt of a micro-batch once, its responses attending to it"
    from rlvr_cli.engine.prefix import why_not_prefix

    if why_not_prefix(model) is None:
        return (
            f"the model's own forward ({reason}), with one row per group (its prompt once, then each answer) "
            "where that costs less attention than one row per answer"
        )
    return f"the model's own forward ({reason})"


class _Shapes:
    def __init__(self, config: Any) -> None:
        self.heads = config.num_attention_heads
        self.kv = getattr(config, "num_key_value_heads", None) or self.heads
        self.dim = getattr(config, "head_dim", None) or config.hidden_size // self.heads
        self.qk_norm = config.model_type == "qwen3"


def _rotate(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
    half = x.shape[-1] // 2
    return x * cos + torch.cat((-x[..., half:], x[..., :half]), dim=-1) * sin


def _attention(
    s: _Shapes, layer: Any, h: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Queries `(N, H, L, D)`, keys and values `(N, kv, L, D)` of one layer's input, computed
    by the layer's own modules as its forward does."""
    attn, x = layer.self_attn, layer.input_layernorm(h)
    q = attn.q_proj(x).unflatten(-1, (s.heads, s.dim))
    k = attn.k_proj(x).unflatten(-1, (s.kv, s.dim))
    v = attn.v_proj(x).unflatten(-1, (s.kv, s.dim)).transpose(1, 2)
    if s.qk_norm:
        q, k = attn.q_norm(q), attn.k_norm(k)
    q, k = q.transpose(1, 2), k.transpose(1, 2)
    return _rotate(q, cos, sin), _rotate(k, cos, sin), v


def _rest(layer: Any, h: torch.Tensor, out: torch.Tensor) -> torch.Tensor:
    """The attention output projected and added, then the MLP."""
    h = h + layer.self_attn.o_proj(out.transpose(1, 2).flatten(2))
    return h + layer.mlp(layer.post_attention_layernorm(h))


def _prompts(
    model: Any, s: _Shapes, ids: torch.Tensor, attention: torch.Tensor
) -> tuple[list[tuple[torch.Tensor, torch.Tensor]], torch.Tensor]:
    """The distinct prompts `(G, P)`: every layer's keys and values, and the last position's
    final hidden state `(G, hidden)`."""
    P = ids.shape[1]
    positions = (attention.cumsum(dim=1) - 1).clamp(min=0)
    h, cache = model.model.embed_tokens(ids), []
    cos, sin = (t[:, None] for t in model.model.rotary_emb(h, positions))  # (G, 1, P, D)
    seen = torch.ones(P, P, dtype=torch.bool, device=ids.device).tril()[None] & attention.bool()[:, None, :]
    seen = (seen | torch.eye(P, dtype=torch.bool, device=ids.device)[None])[:, None]  # padding sees itself: no NaN
    for layer in model.model.layers:
        q, k, v = _attention(s, layer, h, cos, sin)
        cache.append((k, v))
        out = F.scaled_dot_product_attention(q, k, v, attn_mask=seen, enable_gqa=s.kv != s.heads)
        h = _rest(layer, h, out)
    return cache, h[:, -1]


def shared_prompt_logprobs(
    model: Any, batch: Batch, temperature: float, with_entropy: bool = False
) -> tuple[torch.Tensor, torch.Tensor | None]:
    """Log-probs `(B, T)` of the response tokens under softmax(logits / temperature), and
    optionally their entropy — what `engine.forward.token_logprobs` computes on the same batch."""
    s, P = _Shapes(model.config), batch.prompt_width
    first, owner = distinct_prompts(batch)
    prompt_mask = batch.attention_mask[:, :P]
    responses = batch.input_ids[:, P:]  # (B, T)
    B, T = responses.shape
    cache, last = _prompts(model, s, batch.input_ids[first, :P], prompt_mask[first])
    h = model.model.embed_tokens(responses)
    positions = prompt_mask.sum(dim=1, keepdim=True) + torch.arange(T, device=responses.device)  # (B, T)
    cos, sin = (t[:, None] for t in model.model.rotary_emb(h, positions))
    causal = torch.ones(T, T, dtype=torch.bool, device=responses.device).tril()[None].expand(B, T, T)
    seen = torch.cat([prompt_mask.bool()[:, None, :].expand(B, T, P), causal], dim=2)[:, None]  # (B, 1, T, P + T)
    for layer, (prompt_k, prompt_v) in zip(model.model.layers, cache, strict=True):
        q, k, v = _attention(s, layer, h, cos, sin)
        # index_select, not prompt_k[owner]: the indexing's backward (index_put_ with accumulate on
        # CPU) adds the rows of a shared prompt in an order that depends on thread timing, so two
        # identical runs on a busy machine drifted apart; index_select's backward is deterministic
        keys = torch.cat([prompt_k.index_select(0, owner), k], dim=2)
        values = torch.cat([prompt_v.index_select(0, owner), v], dim=2)
        out = F.scaled_dot_product_attention(q, keys, values, attn_mask=seen, enable_gqa=s.kv != s.heads)
        h = _rest(layer, h, out)
    norm = model.model.norm
    head = model.lm_head
    # (B, 1, V): a prompt's last position predicts token 0
    first_token = head(norm(last)).index_select(0, owner)[:, None]
    logits = torch.cat([first_token, head(norm(h[:, :-1]))], dim=1).float()  # (B, T, V)
    if temperature > 0 and temperature != 1.0:
        logits = logits / temperature
    logp_all = torch.log_softmax(logits, dim=-1)
    logp = logp_all.gather(-1, responses.unsqueeze(-1)).squeeze(-1)
    entropy = -(logp_all.exp() * logp_all).sum(dim=-1) if with_entropy else None
    return logp, entropy
