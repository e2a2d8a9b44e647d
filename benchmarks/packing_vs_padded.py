"""Update forward + backward: packed rows (length.packing) against the padded rectangle.

Two shapes, on the same tiny Llama-architecture model: the CPU example's (prompts of ~20
tokens, 2-token answers: nothing to gain) and a longer-response variant (answers of 1 to 256
tokens, as reasoning RL produces). Reports trained tokens per second and the ratio.

    .venv/bin/python benchmarks/packing_vs_padded.py
"""

from __future__ import annotations

import argparse
import random
import tempfile
import time
from pathlib import Path

import torch

from rlvr_cli.engine.forward import make_batch, token_logprobs
from rlvr_cli.engine.packed import PackedBatch, packed_logprobs
from rlvr_cli.toy.tiny import build_tiny


def shapes(name: str, n: int, rng: random.Random) -> tuple[list, list, list]:
    if name == "cpu-example":
        prompts = [[rng.randrange(5, 60) for _ in range(rng.randrange(18, 24))] for _ in range(n)]
        responses = [[rng.randrange(5, 60) for _ in range(2)] for _ in range(n)]
    else:
        prompts = [[rng.randrange(5, 60) for _ in range(rng.randrange(20, 60))] for _ in range(n)]
        responses = [
            [rng.randrange(5, 60) for _ in range(int(rng.paretovariate(1.2) * 16) % 256 + 1)] for _ in range(n)
        ]
    return prompts, responses, [[1] * len(r) for r in responses]


def timed(step, repeats: int) -> float:
    step()  # warm-up
    start = time.perf_counter()
    for _ in range(repeats):
        step()
    return (time.perf_counter() - start) / repeats


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--sequences", type=int, default=16)
    parser.add_argument("--repeats", type=int, default=5)
    args = parser.parse_args()
    torch.manual_seed(0)
    from transformers import AutoModelForCausalLM

    folder = build_tiny(Path(tempfile.mkdtemp()) / "m", "chatml", hidden=256, layers=4)
    model = AutoModelForCausalLM.from_pretrained(folder).train(False)
    for name in ("cpu-example", "long-responses"):
        prompts, responses, masks = shapes(name, args.sequences, random.Random(1))
        tokens = sum(len(r) for r in responses)
        batch = make_batch(prompts, responses, masks, 0)
        packed = PackedBatch.of(prompts, responses, masks, 0)

        def padded(batch=batch) -> None:
            model.zero_grad()
            logp, _ = token_logprobs(model, batch, 1.0)
            (logp * batch.response_mask).sum().backward()

        def packed_step(packed=packed) -> None:
            model.zero_grad()
            logp, _ = packed_logprobs(model, packed, 1.0)
            (logp * packed.response_mask).sum().backward()

        a, b = timed(padded, args.repeats), timed(packed_step, args.repeats)
        cells = batch.input_ids.numel()
        rows = sum(len(p.input_ids) for p in packed.packs)
        print(
            f"{name:<15} padded {tokens / a:8.0f} tok/s ({cells} cells)   packed {tokens / b:8.0f} tok/s "
            f"({rows} cells in {len(packed.packs)} rows)   ratio {a / b:.2f}x"
        )


if __name__ == "__main__":
    main()
