"""A decode step of a 377 M-parameter Llama-family model (hidden 1536, 16 layers) in bf16 on one
thread: the lean sampler reading the weights as they are against its own copies (stacked and,
on a CPU, in oneDNN's packed layout), at 8 rows (one group of 8) and 32 rows (four groups).
What a torchrun process's sampling costs a token, one group at a time or its share together
(`parallel.sample_groups`). Run: `.venv/bin/python benchmarks/decode_rows.py` (~2 minutes)."""

from __future__ import annotations

import time

import torch
from transformers import LlamaConfig, LlamaForCausalLM

import rlvr_cli.engine.fused as fused
from rlvr_cli.engine.sampler import forget, lean_sample


def per_token(model: LlamaForCausalLM, rows: int, copies: bool, tokens: int = 32) -> float:
    fused.COPY_BYTES = 1 << 40 if copies else 0  # its own copies of every weight, or none
    forget(model)
    prompts = [[5 + g] * 64 for g in range(rows // 8) for _ in range(8)]  # groups of 8 rows, 64-token prompts
    kwargs = dict(temperature=1.0, top_p=1.0, top_k=0, stop_ids=[], pad_id=0, seed=0)
    lean_sample(model, prompts, max_new_tokens=4, **kwargs)  # warm up (and make the copies)
    start = time.perf_counter()
    lean_sample(model, prompts, max_new_tokens=tokens, **kwargs)
    return (time.perf_counter() - start) / tokens * 1e3


def main() -> None:
    torch.set_num_threads(1)
    torch.manual_seed(0)
    config = LlamaConfig(
        vocab_size=64,
        hidden_size=1536,
        intermediate_size=4 * 1536,
        num_hidden_layers=16,
        num_attention_heads=12,
        num_key_value_heads=12,
        max_position_embeddings=512,
    )
    model = LlamaForCausalLM(config).to(torch.bfloat16).eval()
    print("rows  weights as they are  own copies (ms a decode step, two alternating tries each)")
    for rows in (8, 32):
        tries = [(per_token(model, rows, False), per_token(model, rows, True)) for _ in range(2)]
        plain, copied = zip(*tries, strict=True)
        print(f"{rows:>4}  {' / '.join(f'{t:.0f}' for t in plain):>19}  {' / '.join(f'{t:.0f}' for t in copied)}")


if __name__ == "__main__":
    main()
