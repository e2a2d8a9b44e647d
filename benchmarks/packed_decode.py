"""The lean sampler's decode step with its copied weights in oneDNN's packed layout against plain
`F.linear` over the same copies (engine/fused.py `packs`), in one process, alternating.

A Qwen2-architecture model per shape, 16 rows of a 250-token prompt (2 prompts × 8 samples,
their prompt shared as the trainer shares it), 32 decode steps; the best of 4 alternating
repeats each, milliseconds a step; fp32 and bf16 compute (autocast over fp32 weights). "plain"
turns the packed layout off (`fused.ONEDNN = False`), everything else equal.

    .venv/bin/python benchmarks/packed_decode.py
"""

from __future__ import annotations

import time

import torch
import transformers

import rlvr_cli.engine.fused as fused
from rlvr_cli.engine.precision import autocast

SHAPES = {  # hidden, intermediate, layers, heads, KV heads
    "toy Qwen2 128×4 (1 M)": (128, 384, 4, 4, 2),
    "real Qwen2 512×8 (31 M)": (512, 2048, 8, 8, 4),
}


def decode_ms(model: torch.nn.Module, compute: torch.dtype | None, packed: bool, steps: int = 32) -> float:
    onednn = fused.ONEDNN
    fused.ONEDNN = onednn and packed
    try:
        ids = torch.randint(4, 60, (2, 250))
        owner = torch.arange(2).repeat_interleave(8)
        with autocast(compute, "cpu"):
            decoder = fused.Decoder(model)
            _, cache = decoder.prefill(ids, torch.ones_like(ids), room=steps)
            cache.select(owner)
            tokens = torch.randint(4, 60, (16,))
            start = time.perf_counter()
            for _ in range(steps):
                decoder.step(tokens, cache)
            return (time.perf_counter() - start) / steps * 1e3
    finally:
        fused.ONEDNN = onednn


def qwen2(hidden: int, inter: int, layers: int, heads: int, kv: int) -> torch.nn.Module:
    """A Qwen2-architecture model of this shape, random weights (seed 0), a 64-token vocabulary."""
    torch.manual_seed(0)
    config = transformers.Qwen2Config(
        vocab_size=64,
        hidden_size=hidden,
        intermediate_size=inter,
        num_hidden_layers=layers,
        num_attention_heads=heads,
        num_key_value_heads=kv,
        max_position_embeddings=1024,
    )
    return transformers.Qwen2ForCausalLM(config).eval()


def main() -> None:
    torch.set_num_threads(2)
    print("| model | compute | plain ms/step | packed ms/step | plain / packed |")
    print("|---|---|---|---|---|")
    for name, (hidden, inter, layers, heads, kv) in SHAPES.items():
        model = qwen2(hidden, inter, layers, heads, kv)
        for compute in (None, torch.bfloat16):
            if compute is not None and not fused.ONEDNN_BF16:  # an AVX2-only CPU: bf16 is never packed there
                print(f"| {name} | bf16 | – | – | not packed on this CPU (oneDNN has no bf16 here) |")
                continue
            best = {True: float("inf"), False: float("inf")}
            for _ in range(4):
                for packed in (False, True):
                    best[packed] = min(best[packed], decode_ms(model, compute, packed))
            label = "bf16" if compute else "fp32"
            print(f"| {name} | {label} | {best[False]:.2f} | {best[True]:.2f} | {best[False] / best[True]:.2f}× |")


if __name__ == "__main__":
    main()
