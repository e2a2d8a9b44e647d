"""transformers' `generate` as a rollout engine: its raw logits turned into log-probs."""

from __future__ import annotations

from typing import Any

import torch

from rlvr_cli.chat.masks import sampled_mask
from rlvr_cli.engine.forward import make_batch
from rlvr_cli.engine.types import Generation, NonFiniteLogits, SamplingParams


@torch.no_grad()
def transformers_generate(model: Any, prompts: list[list[int]], params: SamplingParams, seed: int) -> list[Generation]:
    """transformers' `generate` with the KV cache, its raw logits turned into log-probs."""
    batch = make_batch(prompts, [[] for _ in prompts], [[] for _ in prompts], params.pad_id, response_width=1)
    P = batch.prompt_width
    device = next(model.parameters()).device
    input_ids, attention = batch.input_ids[:, :P].to(device), batch.attention_mask[:, :P].to(device)
    torch.manual_seed(seed)  # seeds every device
    greedy = params.temperature == 0
    try:
        out = _generate(model, input_ids, attention, params, greedy)
    except RuntimeError as exc:
        if "inf" in str(exc) and "nan" in str(exc):  # "probability tensor contains either `inf`, `nan` or ..."
            raise NonFiniteLogits("transformers' generate") from None
        raise
    sequences = out.sequences[:, P:]
    logits = torch.stack(out.logits, dim=1).float()  # (B, T, V)
    scale = params.temperature if params.temperature > 0 else 1.0
    logps = torch.log_softmax(logits / scale, dim=-1).gather(-1, sequences[..., None]).squeeze(-1)
    if torch.isnan(logps).any():
        raise NonFiniteLogits("transformers' generate")
    results = []
    for row, lp in zip(sequences.tolist(), logps.tolist(), strict=True):
        mask, finish = sampled_mask(row, list(params.stop_ids))
        kept = sum(mask)  # through the first stop token, or every token when truncated
        results.append(Generation(row[:kept], mask[:kept], finish, seed, lp[:kept]))
    return results


def _generate(
    model: Any, input_ids: torch.Tensor, attention: torch.Tensor, params: SamplingParams, greedy: bool
) -> Any:
    """Only what the contract says: `generate` fills every setting it is not given from the
    model's generation_config.json (Qwen2.5-Instruct's sets top_k 20 and repetition_penalty 1.05),
    so for the call the model's is replaced by transformers' own defaults, which sample from the
    distribution unchanged."""
    from transformers import GenerationConfig

    own, model.generation_config = model.generation_config, GenerationConfig()
    try:
        return _call_generate(model, input_ids, attention, params, greedy)
    finally:
        model.generation_config = own


def _call_generate(
    model: Any, input_ids: torch.Tensor, attention: torch.Tensor, params: SamplingParams, greedy: bool
) -> Any:
    return model.generate(
        input_ids=input_ids,
        attention_mask=attention,
        max_new_tokens=params.max_new_tokens,
        do_sample=not greedy,
        temperature=None if greedy else params.temperature,
        top_p=None if greedy else params.top_p,
        top_k=(params.top_k or None) if not greedy else None,
        eos_token_id=list(params.stop_ids),
        pad_token_id=params.pad_id,
        use_cache=True,
        output_logits=True,
        return_dict_in_generate=True,
    )
