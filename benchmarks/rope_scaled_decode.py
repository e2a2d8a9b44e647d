"""Sampling a Llama 3.x-shaped model (RoPE `llama3`: frequencies rescaled when the model is
built) with the lean decoder, against the model's own forward, which it sampled through while
any scaled RoPE sent it there. Random weights, the same prompts, seed and new tokens; tokens a
second (best of --repeat), one process.

    .venv/bin/python benchmarks/rope_scaled_decode.py [--repeat 3] [--threads 2]
"""

from __future__ import annotations

import argparse
import time

import torch


def model() -> torch.nn.Module:
    import transformers as t

    torch.manual_seed(0)
    rope = {
        "rope_type": "llama3",
        "factor": 32.0,
        "low_freq_factor": 1.0,
        "high_freq_factor": 4.0,
        "original_max_position_embeddings": 8192,
    }
    config = t.LlamaConfig(
        vocab_size=8192,
        hidden_size=512,
        intermediate_size=1536,
        num_hidden_layers=4,
        num_attention_heads=8,
        num_key_value_heads=2,
        max_position_embeddings=131072,
        rope_theta=500000.0,
        rope_scaling=rope,
        tie_word_embeddings=True,
    )
    return t.LlamaForCausalLM(config).eval()


def rate(policy: torch.nn.Module, prompts: list[list[int]], new: int, repeat: int) -> tuple[float, list]:
    from rlvr_cli.engine.generate import generate

    best, out = float("inf"), []
    for _ in range(repeat):
        start = time.perf_counter()
        out = generate(
            policy, prompts, max_new_tokens=new, temperature=1.0, top_p=1.0, top_k=0, stop_ids=[], pad_id=0, seed=1
        )
        best = min(best, time.perf_counter() - start)
    return len(prompts) * new / best, [g.response_ids for g in out]


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--threads", type=int, default=2)
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    import rlvr_cli.engine.fused as fused

    policy = model()
    assert fused.why_not(policy) is None
    for rows, prompt, new in [(16, 64, 64), (64, 64, 64)]:
        prompts = [[(7 * r + i) % 8000 + 10 for i in range(prompt)] for r in range(rows)]
        lean, lean_ids = rate(policy, prompts, new, args.repeat)
        kept = fused.STATIC_ROPE
        fused.STATIC_ROPE = (None, "default")  # what it did before: the model's own forward
        try:
            own, own_ids = rate(policy, prompts, new, args.repeat)
        finally:
            fused.STATIC_ROPE = kept
        same = sum(a == b for a, b in zip(lean_ids, own_ids, strict=True))
        print(
            f"{rows} rows x {prompt}+{new} tokens: lean decoder {lean:,.0f} tokens/s, model's own forward "
            f"{own:,.0f} tokens/s ({lean / own:.2f}x); {same}/{rows} rows drew the same tokens"
        )


if __name__ == "__main__":
    main()
