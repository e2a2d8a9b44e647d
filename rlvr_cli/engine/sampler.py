"""The lean sampler: a decode loop of its own over the model's forward and its KV cache.

What `transformers`' `generate` pays on every token and this loop does not: a stack of logits
processors and stopping criteria, cache bookkeeping for every decoding strategy, and rows that
finished long ago still going through the model. Here one step is one forward of the
unfinished rows, one temperature / top-k / top-p filter (the same arithmetic as generate's
warpers, so the same logits give the same probabilities), one draw from a generator seeded
by the caller (the same seed and batch give the same tokens, so resume stays exact), and one
vectorised stop check; finished rows leave the batch and the cache.

Each sampled token comes with its log-prob under softmax(logits / temperature) — the
distribution the trainer's forward computes (`engine.forward.token_logprobs`), before any
top-k/top-p truncation — so the importance ratio can use it directly.
"""

from __future__ import annotations

import weakref
from typing import Any

import torch

from rlvr_cli.engine.forward import make_batch
from rlvr_cli.engine.types import NonFiniteLogits, SamplingParams


def filtered_logits(logits: torch.Tensor, temperature: float, top_k: int, top_p: float) -> torch.Tensor:
    """`(B, V)` logits scaled by the temperature with the tokens top-k and top-p exclude set
    to -inf, in the order and with the tie rules of transformers' warpers (temperature, then
    top-k keeping every token that ties the k-th, then top-p keeping at least one token)."""
    scores = logits / temperature
    if top_k and top_k > 0:
        k = min(top_k, scores.size(-1))
        kth = torch.topk(scores, k, dim=-1).values[..., -1:]
        scores = scores.masked_fill(scores < kth, float("-inf"))
    if top_p < 1.0:
        ordered, order = torch.sort(scores, descending=False, dim=-1)
        cumulative = ordered.softmax(dim=-1).cumsum(dim=-1)
        drop = cumulative <= (1 - top_p)
        drop[..., -1:] = False
        scores = scores.masked_fill(drop.scatter(-1, order, drop), float("-inf"))
    return scores


def draw(
    logits: torch.Tensor, temperature: float, top_k: int, top_p: float, generator: torch.Generator
) -> tuple[torch.Tensor, torch.Tensor]:
    """One token per row `(B,)` and its log-prob under softmax(logits / temperature) `(B,)`;
    temperature 0 is greedy (log-probs then under the untempered softmax)."""
    if temperature == 0:
        token = logits.argmax(dim=-1)
        logp = torch.log_softmax(logits, dim=-1).gather(-1, token[:, None]).squeeze(-1)
        if torch.isnan(logp).any():  # argmax takes a NaN for the largest value
            raise NonFiniteLogits("greedy decoding")
        return token, logp
    logp_all = torch.log_softmax(logits if temperature == 1 else logits / temperature, dim=-1)
    if top_k or top_p < 1.0:
        probs = torch.softmax(filtered_logits(logits, temperature, top_k, top_p), dim=-1)
    else:
        probs = logp_all.exp()
    # inverse-CDF draw: one uniform per row (torch.multinomial draws one exponential per
    # vocabulary entry, a fifth of a small model's decode step). The first entry whose
    # cumulative mass exceeds u·total is an entry with mass: u·total is kept below the total,
    # so what top-k/top-p exclude (or what underflows to 0) is never drawn.
    cdf = probs.cumsum(dim=-1, dtype=torch.float64)
    total = cdf[:, -1:]
    if not bool((total > 0).all()):  # a NaN or inf logit poisons its row's mass: NaN > 0 is false
        raise NonFiniteLogits("sampling")
    u = torch.rand((probs.size(0), 1), generator=generator, device=probs.device, dtype=torch.float64)
    point = torch.minimum(u * total, torch.nextafter(total, torch.zeros_like(total)))
    token = torch.searchsorted(cdf, point, right=True).squeeze(-1)
    return token, logp_all.gather(-1, token[:, None]).squeeze(-1)


class _ModelForward:
    """The model's own forward with its own cache: the path for models the lean forward does
    not reproduce (`engine.fused.why_not`)."""

    def __init__(self, model: Any) -> None:
        import inspect

        self.model = model
        self.cache_arg = "cache" if "cache" in inspect.signature(model.forward).parameters else "past_key_values"

    def prefill(self, ids: torch.Tensor, attention: torch.Tensor, room: int) -> tuple[torch.Tensor, Any]:
        positions = (attention.cumsum(dim=1) - 1).clamp(min=0)
        out = self.model(input_ids=ids, attention_mask=attention, position_ids=positions, use_cache=True)
        return out.logits[:, -1, :].float(), [out.past_key_values, attention]

    def step(self, tokens: torch.Tensor, state: Any) -> torch.Tensor:
        cache, attention = state
        attention = torch.cat([attention, attention.new_ones((attention.size(0), 1))], dim=1)
        state[1] = attention
        out = self.model(
            input_ids=tokens[:, None],
            attention_mask=attention,
            position_ids=attention.sum(dim=1, keepdim=True) - 1,
            use_cache=True,
            **{self.cache_arg: cache},
        )
        return out.logits[:, -1, :].float()

    def select(self, state: Any, rows: torch.Tensor) -> None:
        state[0].batch_select_indices(rows)
        state[1] = state[1][rows]

    def release(self) -> None:
        """The model's own forward keeps nothing between calls."""


_DECODERS: weakref.WeakKeyDictionary[Any, Any] = weakref.WeakKeyDictionary()


def weights_written(model: Any) -> None:
    """Tell the decoder kept for `model` (if any) that its weights changed in place."""
    decoder = _DECODERS.get(model)
    if decoder is not None:
        decoder.written()


def forget(model: Any) -> None:
    """Drop the decoder kept for `model` and its copies of the weights (they were lent)."""
    _DECODERS.pop(model, None)


def lend(model: Any, gathered: Any) -> None:
    """Build the decoder for `model` now, each decoder layer read inside `gathered(name)`, where
    its weights are whole (a sharded policy's, one layer at a time: engine/fused.py `_lent`); it
    samples with those copies until `forget`."""
    from rlvr_cli.engine.fused import Decoder

    _DECODERS[model] = Decoder(model, gathered)


class _LeanForward:
    def __init__(self, model: Any) -> None:
        from rlvr_cli.engine.fused import Decoder

        # one decoder per model, kept across calls: it re-reads the weights only after they change
        self.decoder = _DECODERS.get(model) or _DECODERS.setdefault(model, Decoder(model))

    def prefill(self, ids: torch.Tensor, attention: torch.Tensor, room: int) -> tuple[torch.Tensor, Any]:
        return self.decoder.prefill(ids, attention, room)

    def step(self, tokens: torch.Tensor, state: Any) -> torch.Tensor:
        return self.decoder.step(tokens, state)

    def select(self, state: Any, rows: torch.Tensor) -> None:
        state.select(rows)

    def release(self) -> None:
        self.decoder.release()


def forward_for(model: Any) -> _LeanForward | _ModelForward:
    """The lean forward where it reproduces the model's, the model's own elsewhere."""
    from rlvr_cli.engine.fused import why_not

    return _LeanForward(model) if why_not(model) is None else _ModelForward(model)


@torch.inference_mode()
def lean_sample(
    model: Any,
    prompts: list[list[int]],
    *,
    max_new_tokens: int,
    temperature: float,
    top_p: float,
    top_k: int,
    stop_ids: list[int],
    pad_id: int,
    seed: int,
) -> list[tuple[list[int], list[float], str]]:
    """For each prompt: the sampled ids through the first stop token, their log-probs, and
    the finish reason (`stop` or `length`)."""
    device = next(model.parameters()).device
    # each distinct prompt is read once, in order of first appearance; its rows (a GRPO group)
    # share the cache it built
    index: dict[tuple[int, ...], int] = {}
    owner = torch.tensor([index.setdefault(tuple(p), len(index)) for p in prompts], dtype=torch.long)
    distinct = [list(p) for p in index]
    batch = make_batch(distinct, [[] for _ in distinct], [[] for _ in distinct], pad_id, response_width=1)
    forward = forward_for(model)
    params = SamplingParams(max_new_tokens, temperature, top_p, top_k, tuple(stop_ids), pad_id)
    try:
        return _decode(forward, batch, owner, device, params, seed)
    finally:
        forward.release()  # casts of the weights made for this call alone are freed


def _decode(
    forward: _LeanForward | _ModelForward,
    batch: Any,
    owner: torch.Tensor,
    device: torch.device,
    params: SamplingParams,
    seed: int,
) -> list[tuple[list[int], list[float], str]]:
    """Sample for every row of `owner`, each row answering the prompt of `batch` it names."""
    P, max_new_tokens, pad_id = batch.prompt_width, params.max_new_tokens, params.pad_id
    temperature, top_p, top_k, stop_ids = params.temperature, params.top_p, params.top_k, params.stop_ids
    generator = torch.Generator(device=device)
    generator.manual_seed(seed)
    stops = torch.tensor(sorted(set(stop_ids)), dtype=torch.long, device=device)
    ids, attention = batch.input_ids[:, :P].contiguous().to(device), batch.attention_mask[:, :P].contiguous().to(device)
    logits, state = forward.prefill(ids, attention, max_new_tokens)
    n = owner.numel()
    if ids.size(0) < n:
        owner = owner.to(device)
        logits = logits[owner]
        forward.select(state, owner)
    last = max_new_tokens - 1
    rows = torch.arange(n, device=device)  # the prompt each live row answers
    tokens = torch.full((n, max_new_tokens), pad_id, dtype=torch.long, device=device)
    logps = torch.zeros((n, max_new_tokens), dtype=torch.float32, device=device)
    lengths = torch.full((n,), max_new_tokens, dtype=torch.long, device=device)  # until a row stops
    stopped = torch.zeros(n, dtype=torch.bool, device=device)
    everyone = True  # no row has finished yet: plain column writes
    for t in range(max_new_tokens):
        token, logp = draw(logits, temperature, top_k, top_p, generator)
        if everyone:
            tokens[:, t], logps[:, t] = token, logp
        else:
            tokens[rows, t], logps[rows, t] = token, logp
        done = torch.isin(token, stops)
        if bool(done.any()):  # finished rows leave the batch and the cache
            ended = rows[done]
            stopped[ended], lengths[ended] = True, t + 1
            keep = torch.nonzero(~done).squeeze(1)
            if keep.numel() == 0 or t == last:
                break
            rows, token, everyone = rows[keep], token[keep], False
            forward.select(state, keep)
        if t == last:
            break
        logits = forward.step(token, state)
    kept = lengths.tolist()
    return [
        (row[:length], logps[i, :length].tolist(), "stop" if stop else "length")
        for i, (row, length, stop) in enumerate(zip(tokens.tolist(), kept, stopped.tolist(), strict=True))
    ]
