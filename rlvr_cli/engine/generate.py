"""Sampling responses from a causal LM with the KV cache, and the text a verifier reads."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import torch

from rlvr_cli.chat.masks import sampled_mask
from rlvr_cli.engine.forward import make_batch


@dataclass
class Generation:
    """One sampled response, trimmed after its first stop token."""

    response_ids: list[int]
    mask: list[int]
    finish: str  # stop | length
    seed: int


@torch.no_grad()
def generate(
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
) -> list[Generation]:
    """Batched sampling with the KV cache; `seed` fixes the draw for exact resume."""
    batch = make_batch(prompts, [[] for _ in prompts], [[] for _ in prompts], pad_id, response_width=1)
    P = batch.prompt_width
    device = next(model.parameters()).device
    input_ids, attention = batch.input_ids[:, :P].to(device), batch.attention_mask[:, :P].to(device)
    torch.manual_seed(seed)  # seeds every device
    greedy = temperature == 0
    out = model.generate(
        input_ids=input_ids,
        attention_mask=attention,
        max_new_tokens=max_new_tokens,
        do_sample=not greedy,
        temperature=None if greedy else temperature,
        top_p=None if greedy else top_p,
        top_k=(top_k or None) if not greedy else None,
        eos_token_id=list(stop_ids),
        pad_token_id=pad_id,
        use_cache=True,
    )
    results = []
    for row in out[:, P:].tolist():
        mask, finish = sampled_mask(row, stop_ids)
        kept = sum(mask)  # through the first stop token, or every token when truncated
        results.append(Generation(row[:kept], mask[:kept], finish, seed))
    return results


def response_text(tokenizer: Any, ids: list[int], finish: str) -> str:
    """What the verifier reads: the answer without its stop token."""
    return tokenizer.decode(ids[:-1] if finish == "stop" else ids, skip_special_tokens=False)
