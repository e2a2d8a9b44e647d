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

from dataclasses import dataclass
from typing import Any

import torch

from rlvr_cli.engine import ragged, two_part
from rlvr_cli.engine.forward import Batch, distinct_prompts
from rlvr_cli.engine.fused import why_not
from rlvr_cli.engine.limits import in_two_parts
from rlvr_cli.engine.precision import attention as attend


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
    if type(model).__name__.startswith("FSDP") and not hasattr(model, UNIT):  # only forward methods gather
        return "the model is sharded (FSDP2) without the shared forward registered on its units"
    if model.training and float(getattr(model.config, "attention_dropout", 0.0) or 0.0) > 0:
        return "attention dropout"
    return None


def shares_prompts(model: Any, batch: Batch) -> bool:
    """Whether the shared-prompt forward computes this batch: a model it trains, every row with a
    prompt token (the last one predicts the response's first), and fewer distinct prompts than
    rows (otherwise there is nothing to share)."""
    return (
        batch.input_ids.size(0) > 1
        and why_not_shared(model) is None
        and bool(batch.attention_mask[:, : batch.prompt_width].any(dim=1).all())
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
        self.per_token = ragged.token_macs(config, self.heads, self.kv, self.dim)  # a token's multiply-adds


def _rotate(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
    half = x.shape[-1] // 2
    return x * cos + torch.cat((-x[..., half:], x[..., :half]), dim=-1) * sin


def _attention(
    s: _Shapes, layer: Any, h: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Queries `(..., H, D)`, keys and values `(..., kv, D)` of one layer's input `(..., hidden)`,
    computed by the layer's own modules as its forward does, the queries and keys rotated by
    `cos`/`sin` `(..., 1, D)`."""
    attn, x = layer.self_attn, layer.input_layernorm(h)
    q = attn.q_proj(x).unflatten(-1, (s.heads, s.dim))
    k = attn.k_proj(x).unflatten(-1, (s.kv, s.dim))
    v = attn.v_proj(x).unflatten(-1, (s.kv, s.dim))
    if s.qk_norm:
        q, k = attn.q_norm(q), attn.k_norm(k)
    return _rotate(q, cos, sin), _rotate(k, cos, sin), v


def _rest(layer: Any, h: torch.Tensor, out: torch.Tensor) -> torch.Tensor:
    """The attention output `(..., H·D)` projected and added, then the MLP."""
    h = h + layer.self_attn.o_proj(out)
    return h + layer.mlp(layer.post_attention_layernorm(h))


UNIT = "rlvr_shared_forward"  # the forward method FSDP2 runs its hooks around (`register_units`)


def register_units(model: Any, layers: list[Any]) -> None:
    """Let the shared-prompt forward train a model sharded by FSDP2 (`fully_shard` on `model` and
    on each of its decoder `layers`): a unit gathers its weights only in a forward method, so the
    whole forward (on `model`, whose unit holds the embeddings, final norm and head) and each
    layer's step (on the layer's unit) become forward methods of their units
    (`register_fsdp_forward_method`): gathered before, resharded after, gradients reduced in the
    backward, as the model's own forward does. Every process calls the units in the same order as
    the model's own forward, so a process running that one instead stays in step."""
    import types

    from torch.distributed.fsdp import register_fsdp_forward_method

    if why_not(model) is not None:
        return
    for layer in layers:
        setattr(layer, UNIT, types.MethodType(_layer_step, layer))
        register_fsdp_forward_method(layer, UNIT)
    setattr(model, UNIT, types.MethodType(_shared, model))
    register_fsdp_forward_method(model, UNIT)


def shared_prompt_logprobs(
    model: Any, batch: Batch, temperature: float, with_entropy: bool = False
) -> tuple[torch.Tensor, torch.Tensor | None]:
    """Log-probs `(B, T)` of the response tokens under softmax(logits / temperature), and
    optionally their entropy — what `engine.forward.token_logprobs` computes on the same batch
    (0 where a row has no token).

    The distinct prompts' real tokens `(m)` and the responses' real tokens `(n)`, padding left
    out, run as one flattened `(m + n, hidden)` tensor through every matrix product, norm and
    MLP: one call of each per layer, not one for the prompts and one for the responses. Only
    attention splits them: each prompt attends causally to itself (in one padded call, or each
    alone where padding would cost more), each response to its prompt's keys and values and its
    own earlier tokens: as rows `(B, T)` over copies of their prompt's keys, where a response's
    queries never reach its padding and the padding's own results are dropped; or, on a CPU where
    the copies would be large, in two parts that need no copy (engine/two_part.py)."""
    sharded = getattr(model, UNIT, None)
    if sharded is not None:
        return sharded(batch, temperature, with_entropy)
    return _shared(model, batch, temperature, with_entropy)


@dataclass
class _Rows:
    """What every layer's attention needs to split the flattened tokens: the `m` tokens of `G`
    distinct prompts (each one's `lengths` there; their places in a `(G, P)` layout left-padded
    to the widest, `slots`, None where they are that layout already), then the responses' real
    tokens (`real`, row-major in `(B, T)`), each response's prompt (`owner`), and who sees whom
    (`seen`; and `seen_prompt` where the prompts attend in one padded call)."""

    shapes: _Shapes
    m: int
    lengths: list[int]
    slots: torch.Tensor | None
    G: int
    P: int
    B: int
    T: int
    real: torch.Tensor
    owner: torch.Tensor
    seen: torch.Tensor
    seen_prompt: torch.Tensor | None
    one_call: bool
    two_part: two_part.Rows | None = None  # the responses attend in two parts (engine/two_part.py)

    def rows(self, x: torch.Tensor) -> torch.Tensor:  # (n, heads, D) → (B, heads, T, D), padding zero
        full = x.new_zeros(self.B * self.T, *x.shape[1:]).index_copy(0, self.real, x)
        return full.unflatten(0, (self.B, self.T)).transpose(1, 2)

    def prompts(self, x: torch.Tensor) -> torch.Tensor:  # (m, heads, D) → (G, heads, P, D), padding zero
        if self.slots is not None:
            x = x.new_zeros(self.G * self.P, *x.shape[1:]).index_copy(0, self.slots, x)
        return x.unflatten(0, (self.G, self.P)).transpose(1, 2)


#: the prompts attend in one padded call unless that computes 5/4 of the pairs they need and at
#: least this many query-key pairs times heads; then each prompt attends alone, in its own causal
#: call (8 prompts of 120-280 tokens, 8 heads of 64, fp32: a layer's forward and backward of the
#: prompts' attention 37 -> 20 ms, best of 10)
ONE_CALL_PAIRS = 1 << 20

#: the prompts' padding leaves every matrix product where it is worth this many multiply-adds a
#: forward (padding tokens × the model's per token) or where the prompts attend alone or the
#: responses in two parts; below, gathering the real tokens costs more than the padding (1 M
#: parameters, 2 prompts of 18-30 tokens: 25 against 24 ms a forward and backward)
COMPACT_MACS = 1 << 27


def _layout(
    batch: Batch, first: torch.Tensor, owner: torch.Tensor, s: _Shapes
) -> tuple[_Rows, torch.Tensor, torch.Tensor]:
    """The split of a batch's tokens, where the distinct prompts' tokens are in the batch `(m,)`,
    and their positions `(m,)`: their real tokens only, or each prompt as wide as the widest,
    left padding included, where leaving the padding out would save less than it costs."""
    width = batch.prompt_width
    own_mask = batch.attention_mask[first, :width].bool()  # (G, width), left-padded
    counts = own_mask.sum(dim=1)
    lengths = counts.tolist()
    G, P = len(lengths), max(lengths)
    responses = batch.input_ids[:, width:]
    B, T = responses.shape
    device = own_mask.device
    real = batch.attention_mask[:, width:].flatten().nonzero().squeeze(1)  # (n,) the tokens, row-major
    padded, needed = G * P * P, sum(n * n for n in lengths)
    one_call = 4 * padded <= 5 * needed or padded * s.heads < ONE_CALL_PAIRS
    two = device.type == "cpu" and in_two_parts(B, G, s.kv, P, s.dim) and two_part.available()
    if (G * P - sum(lengths)) * s.per_token >= COMPACT_MACS or not one_call or two:
        at = own_mask.flatten().nonzero().squeeze(1)  # the distinct prompts' real tokens, row-major
        positions = (own_mask.cumsum(dim=1) - 1).flatten().index_select(0, at)  # each one's place in its prompt
        slots = None
        if min(lengths) != P:  # their places in a (G, P) layout, left-padded to the widest
            group = torch.div(at, width, rounding_mode="floor")
            slots = group * P + (P - counts).index_select(0, group) + positions
        spans = lengths
    else:  # (G, P): the real tokens are the last P of each row
        at = (torch.arange(G, device=device)[:, None] * width + torch.arange(width - P, width, device=device)).flatten()
        positions = (own_mask[:, width - P :].cumsum(dim=1) - 1).clamp(min=0).flatten()
        slots, spans = None, [P] * G
    keys = torch.arange(P, device=device)[None] >= (P - counts)[:, None]  # (G, P) each prompt's real keys
    causal = torch.ones(T, T, dtype=torch.bool, device=device).tril()[None].expand(B, T, T)
    seen = torch.cat([keys.index_select(0, owner)[:, None, :].expand(B, T, P), causal], dim=2)[:, None]
    seen_prompt = None
    if one_call and min(lengths) != P:
        seen_prompt = torch.ones(P, P, dtype=torch.bool, device=device).tril()[None] & keys[:, None, :]
        seen_prompt = (seen_prompt | torch.eye(P, dtype=torch.bool, device=device)[None])[:, None]  # no NaN rows
    split = _Rows(s, at.numel(), spans, slots, G, P, B, T, real, owner, seen, seen_prompt, one_call)
    if two:
        split.two_part = two_part.Rows(real, owner, B, T, lengths)
    return split, at, positions


def _shared(
    model: Any, batch: Batch, temperature: float, with_entropy: bool
) -> tuple[torch.Tensor, torch.Tensor | None]:
    s, width = _Shapes(model.config), batch.prompt_width
    first, owner = distinct_prompts(batch)
    split, at, prompt_positions = _layout(batch, first, owner, s)
    responses = batch.input_ids[:, width:]  # (B, T)
    ids = batch.input_ids[first, :width].flatten().index_select(0, at)
    h = model.model.embed_tokens(torch.cat([ids, responses.flatten().index_select(0, split.real)]))
    positions = batch.attention_mask[:, :width].sum(dim=1, keepdim=True) + torch.arange(split.T, device=h.device)
    positions = torch.cat([prompt_positions, positions.flatten().index_select(0, split.real)])
    cos, sin = (t[0][:, None] for t in model.model.rotary_emb(h, positions[None]))  # (m + n, 1, D)
    for layer in model.model.layers:
        step = getattr(layer, UNIT, None)  # sharded: the layer's unit gathers its weights around it
        h = step(h, cos, sin, split) if step is not None else _layer_step(layer, h, cos, sin, split)
    if split.m == split.G * split.P:  # every prompt P wide: its last token is its last row
        last = h[: split.m].unflatten(0, (split.G, split.P))[:, -1]
    else:
        last = h.index_select(0, torch.tensor(split.lengths, device=h.device).cumsum(0) - 1)
    return _read_out(model, last, h[split.m :], owner, responses, split.real, temperature, with_entropy)


def _prompt_attention(
    split: _Rows, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, gqa: bool
) -> tuple[torch.Tensor, tuple[torch.Tensor, torch.Tensor] | None]:
    """Each prompt's tokens attending causally to their own prompt: `(m, H·D)`, and the prompts'
    keys and values `(G, kv, P, D)` where they were laid out for it."""
    H, D = split.shapes.heads, split.shapes.dim
    if split.one_call:
        pq, pk, pv = (split.prompts(t) for t in (q, k, v))  # (G, heads, P, D)
        out = attend(pq, pk, pv, split.seen_prompt, gqa, causal=True).transpose(1, 2).reshape(-1, H * D)
        return (out if split.slots is None else out.index_select(0, split.slots)), (pk, pv)
    outs, start = [], 0
    for n in split.lengths:
        one = (t[start : start + n].transpose(0, 1)[None] for t in (q, k, v))  # (1, heads, n, D)
        outs.append(attend(*one, None, gqa, causal=True)[0].transpose(0, 1).reshape(n, H * D))
        start += n
    return torch.cat(outs), None


def _layer_step(layer: Any, h: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor, split: _Rows) -> torch.Tensor:
    """One decoder layer over the flattened tokens `h` `(m + n, hidden)`."""
    s, m = split.shapes, split.m
    gqa = s.kv != s.heads
    q, k, v = _attention(s, layer, h, cos, sin)  # (m + n, heads, D)
    prompt_out, laid_out = _prompt_attention(split, q[:m], k[:m], v[:m], gqa)
    if split.two_part is not None:
        out = two_part.attend(split.two_part, q[m:], k[m:], v[m:], k[:m], v[:m]).flatten(1)  # (n, H·D)
        out = out if torch.is_autocast_enabled("cpu") else out.to(q.dtype)
        return _rest(layer, h, torch.cat([prompt_out, out]))
    prompt_k, prompt_v = laid_out or (split.prompts(k[:m]), split.prompts(v[:m]))
    # index_select, not prompt_k[owner]: the indexing's backward (index_put_ with accumulate on
    # CPU) adds the rows of a shared prompt in an order that depends on thread timing, so two
    # identical runs on a busy machine drifted apart; index_select's backward is deterministic
    keys = torch.cat([prompt_k.index_select(0, split.owner), split.rows(k[m:])], dim=2)
    values = torch.cat([prompt_v.index_select(0, split.owner), split.rows(v[m:])], dim=2)
    out = attend(split.rows(q[m:]), keys, values, split.seen, gqa)  # (B, H, T, D)
    out = out.transpose(1, 2).flatten(2).flatten(0, 1).index_select(0, split.real)
    return _rest(layer, h, torch.cat([prompt_out, out]))


def _read_out(
    model: Any,
    last: torch.Tensor,
    h: torch.Tensor,
    owner: torch.Tensor,
    responses: torch.Tensor,
    real: torch.Tensor,
    temperature: float,
    with_entropy: bool,
) -> tuple[torch.Tensor, torch.Tensor | None]:
    """Log-probs (and entropies) `(B, T)`: token 0 from its prompt's last position `last`
    `(G, hidden)`, token t + 1 from the flattened response token t `h` `(n, hidden)`."""
    B, T = responses.shape
    head, norm = model.lm_head, model.model.norm
    nxt = responses.roll(-1, dims=1).flatten().index_select(0, real)  # the token each position predicts
    out: list[tuple[torch.Tensor, torch.Tensor | None]] = []
    for hidden, targets in ((last, None), (h, nxt)):
        logits = head(norm(hidden)).float()
        if temperature > 0 and temperature != 1.0:
            logits = logits / temperature
        logp_all = torch.log_softmax(logits, dim=-1)
        if targets is None:  # a prompt's last position predicts token 0 of each of its responses
            logp_all, targets = logp_all.index_select(0, owner), responses[:, 0]
        logp = logp_all.gather(-1, targets[:, None]).squeeze(-1)
        out.append((logp, -(logp_all.exp() * logp_all).sum(dim=-1) if with_entropy else None))

    def place(first: torch.Tensor, rest: torch.Tensor) -> torch.Tensor:
        shifted = rest.new_zeros(B * T).index_copy(0, real, rest).view(B, T)  # [b, t]: of token t + 1
        return torch.cat([first[:, None], shifted[:, :-1]], dim=1)

    (first_logp, first_ent), (logp, entropy) = out
    return place(first_logp, logp), (place(first_ent, entropy) if with_entropy else None)
