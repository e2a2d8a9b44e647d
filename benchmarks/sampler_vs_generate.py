"""The lean sampler against transformers' `generate`: the same model, prompts, sampling
parameters and number of new tokens, tokens generated per second (best of --repeat).

    .venv/bin/python benchmarks/sampler_vs_generate.py [--repeat 5]

Models: the tiny Llama-architecture model the CPU examples train (hidden 64, 2 layers) and
a Qwen2-architecture model (hidden 256, 4 layers, 8 heads, 2 KV heads), both random weights;
batches of 2 prompts × 8 samples and 8 × 8, 16 new tokens, temperature 1, no stop token met
(every row runs to the limit, as in the generation-bound GRPO shape).
"""

from __future__ import annotations

import argparse
import tempfile
import time
import warnings
from pathlib import Path

import torch

warnings.filterwarnings("ignore")


def models() -> dict[str, torch.nn.Module]:
    import transformers as t
    from transformers import AutoModelForCausalLM

    from rlvr_cli.toy.tiny import ARITHMETIC, build_tiny

    folder = Path(tempfile.mkdtemp()) / "tiny"
    build_tiny(folder, "chatml", alphabet=ARITHMETIC)
    torch.manual_seed(0)
    qwen = t.Qwen2Config(
        vocab_size=4096,
        hidden_size=256,
        intermediate_size=768,
        num_hidden_layers=4,
        num_attention_heads=8,
        num_key_value_heads=2,
        max_position_embeddings=512,
    )
    return {
        "tiny llama (64×2)": AutoModelForCausalLM.from_pretrained(folder).eval(),
        "qwen2 (256×4)": t.Qwen2ForCausalLM(qwen).eval(),
    }


def rate(model: torch.nn.Module, prompts: list[list[int]], engine: str, repeat: int) -> float:
    from rlvr_cli.engine.generate import generate

    kw = dict(max_new_tokens=16, temperature=1.0, top_p=1.0, top_k=0, stop_ids=[-1], pad_id=0, engine=engine)
    generate(model, prompts, seed=0, **kw)  # warm-up
    best = 0.0
    for i in range(repeat):
        start = time.perf_counter()
        out = generate(model, prompts, seed=i + 1, **kw)
        seconds = time.perf_counter() - start
        best = max(best, sum(len(g.response_ids) for g in out) / seconds)
    return best


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--repeat", type=int, default=5)
    args = parser.parse_args()
    torch.set_num_threads(2)
    print(f"torch {torch.__version__}, {torch.get_num_threads()} threads\n")
    print("| model | batch | generate tok/s | lean tok/s | lean / generate |\n|---|---|---|---|---|")
    for name, model in models().items():
        for prompts_n in (2, 8):
            prompts = [[5 + (i % 7), 6, 7, 8, 9 + (i % 3)] for i in range(prompts_n) for _ in range(8)]
            ref = rate(model, prompts, "transformers", args.repeat)
            lean = rate(model, prompts, "lean", args.repeat)
            print(f"| {name} | {prompts_n} × 8 | {ref:,.0f} | {lean:,.0f} | **{lean / ref:.2f}×** |")


if __name__ == "__main__":
    main()
