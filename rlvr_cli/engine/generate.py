"""Sampling responses from a causal LM, and the text a verifier reads.

`generate` is the one entry point; `engine` chooses what samples (`engine/engines.py`): the
lean decode loop (`engine/sampler.py`, the default), transformers' `generate`, or vLLM.
Every engine returns the same `Generation`: the ids through the first stop token, their
log-probs under softmax(logits / temperature), and why it ended.
"""

from __future__ import annotations

from typing import Any

from rlvr_cli.engine.engines import engine_for
from rlvr_cli.engine.types import Generation, SamplingParams

__all__ = ["Generation", "generate", "response_text"]


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
    params = SamplingParams(max_new_tokens, temperature, top_p, top_k, tuple(stop_ids), pad_id)
    return engine_for(engine, model).sample(prompts, params, seed)


def response_text(tokenizer: Any, ids: list[int], finish: str) -> str:
    """What the verifier reads: the answer without its stop token."""
    return tokenizer.decode(ids[:-1] if finish == "stop" else ids, skip_special_tokens=False)
