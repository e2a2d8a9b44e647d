"""Sampling responses from a causal LM, and the text a verifier reads.

`generate` samples once from a model (a model interface's reply): `engine` chooses the lean
decode loop (`engine/sampler.py`, the default) or transformers' `generate`. Runs and
evaluations hold their engine instead (`engines.PolicyEngine`, built once, given the weights
after every optimizer step); vLLM is only held that way (starting it takes seconds).
Every engine returns the same `Generation`: the ids through the first stop token, their
log-probs under softmax(logits / temperature), and why it ended.
"""

from __future__ import annotations

from typing import Any

from rlvr_cli.engine.engines import engine_for
from rlvr_cli.engine.types import Generation, SamplingParams

__all__ = ["Generation", "generate", "response_text", "sampled_text"]


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
    engine: str = "lean",
) -> list[Generation]:
    """Batched sampling; `seed` fixes the draw for exact resume (temperature 0: greedy)."""
    if engine == "vllm":
        raise ValueError("vllm is held by a PolicyEngine for a whole run, never started per call")
    params = SamplingParams(max_new_tokens, temperature, top_p, top_k, tuple(stop_ids), pad_id)
    return engine_for(engine, model).sample(prompts, params, seed)


def response_text(tokenizer: Any, ids: list[int], finish: str) -> str:
    """What the verifier reads: the answer without its stop token."""
    return tokenizer.decode(ids[:-1] if finish == "stop" else ids, skip_special_tokens=False)


def sampled_text(tokenizer: Any, ids: list[int], finish: str) -> tuple[str, str]:
    """What tool calls are parsed from: everything sampled, the stop token included (a call
    token that ends the turn is a call), and the stop token's own text (empty: no stop)."""
    whole = tokenizer.decode(ids, skip_special_tokens=False)
    return whole, tokenizer.decode(ids[-1:], skip_special_tokens=False) if finish == "stop" and ids else ""
