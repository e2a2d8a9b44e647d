"""The lean sampler in mixed precision (fp32 weights, bf16 compute) on a model too large for its
lasting copies (`COPY_BYTES`): the weights cast once per sampling call (what it does) against
cast again at every decode step (what autocast does when the decoder reads the fp32 weights as
they are: its behaviour before 2026-12-06), and against weights already held in bf16 (no cast
at all: the floor). Same prompts, seed and tokens; seconds per call, best of `--repeat`; one
thread, as each process of the FSDP2 vs DDP benchmark has.

Run: `.venv/bin/python benchmarks/sampler_cast.py [--repeat 3] [--model 1024x12]` (~2 minutes).
`--transformers`: the same through the `transformers` engine (the model's own forward and
`generate`), whose projections' weights are cast once a call too (engine/precision.py
`weights_cast_for_call`), against `generate` under autocast alone.
"""

from __future__ import annotations

import argparse
import tempfile
import time
from pathlib import Path

import torch


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--model", default="1024x12", help="HIDDENxLAYERS of the tiny Qwen2-style model")
    parser.add_argument("--rows", type=int, default=32)
    parser.add_argument("--tokens", type=int, default=32)
    parser.add_argument("--transformers", action="store_true", help="the transformers engine instead")
    args = parser.parse_args()
    torch.set_num_threads(1)
    from transformers import AutoModelForCausalLM

    import rlvr_cli.engine.fused as fused
    from rlvr_cli.engine.precision import autocast
    from rlvr_cli.engine.sampler import lean_sample
    from rlvr_cli.toy.tiny import build_tiny

    hidden, layers = map(int, args.model.split("x"))
    prompts = [[5 + (i // 8) + j % 50 for j in range(60)] for i in range(args.rows)]  # groups of 8 rows

    def timed(model: torch.nn.Module, compute: torch.dtype | None) -> tuple[float, list[list[int]]]:
        best, tokens = float("inf"), []
        for _ in range(args.repeat):
            start = time.perf_counter()
            with autocast(compute, "cpu"):
                rows = lean_sample(
                    model, prompts, max_new_tokens=args.tokens, temperature=1.0, top_p=1.0, top_k=0,
                    stop_ids=[], pad_id=0, seed=1,
                )  # fmt: skip
            best, tokens = min(best, time.perf_counter() - start), [r[0] for r in rows]
        return best, tokens

    with tempfile.TemporaryDirectory() as tmp:
        build_tiny(Path(tmp) / "model", hidden=hidden, layers=layers)
        model = AutoModelForCausalLM.from_pretrained(Path(tmp) / "model").eval()
        floor = AutoModelForCausalLM.from_pretrained(Path(tmp) / "model", dtype=torch.bfloat16).eval()
    linear = sum(m.weight.numel() * 4 for m in model.modules() if isinstance(m, torch.nn.Linear))
    print(
        f"{sum(p.numel() for p in model.parameters()) / 1e6:.0f} M parameters; linear weights {linear / 2**20:.0f} MiB"
    )
    print(f"fp32 over COPY_BYTES ({fused.COPY_BYTES / 2**20:.0f} MiB): {linear > fused.COPY_BYTES}")
    if args.transformers:
        own_forward(args, model, floor, prompts)
        return
    once, a = timed(model, torch.bfloat16)
    original = fused._Linear.__init__

    def as_they_are(self: object, modules: list, copy: bool, dtype: torch.dtype | None = None) -> None:
        original(self, modules, False, dtype)  # no copy: autocast casts each weight at each step

    fused._Linear.__init__ = as_they_are  # type: ignore[method-assign]
    try:
        per_step, b = timed(model, torch.bfloat16)
    finally:
        fused._Linear.__init__ = original  # type: ignore[method-assign]
    bf16, _ = timed(floor, None)
    print(f"{args.rows} rows x {args.tokens} new tokens, best of {args.repeat}, 1 thread:")
    print(f"  cast once a call (rlvr)      {once:6.2f} s")
    print(f"  cast at every decode step    {per_step:6.2f} s  ({per_step / once:.2f}x)")
    print(f"  bf16 weights, no cast        {bf16:6.2f} s")
    print(f"  same tokens, cast once vs every step: {a == b}")


def own_forward(args: argparse.Namespace, model: torch.nn.Module, floor: torch.nn.Module, prompts: list) -> None:
    from rlvr_cli.engine.engines import PolicyEngine
    from rlvr_cli.engine.hf import transformers_generate
    from rlvr_cli.engine.precision import autocast
    from rlvr_cli.engine.types import SamplingParams

    params = SamplingParams(args.tokens, 1.0, 1.0, 0, (), 0)

    def timed(call: object) -> tuple[float, list[list[int]]]:
        best, tokens = float("inf"), []
        for _ in range(args.repeat):
            start = time.perf_counter()
            rows = call()  # type: ignore[operator]
            best, tokens = min(best, time.perf_counter() - start), [g.response_ids for g in rows]
        return best, tokens

    def per_step() -> list:
        with autocast(torch.bfloat16, "cpu"):
            return transformers_generate(model, prompts, params, 1)

    engine = PolicyEngine.of("transformers", model, compute=torch.bfloat16)
    once, a = timed(lambda: engine.sample(prompts, params, 1, 0))
    every, b = timed(per_step)
    bf16, _ = timed(lambda: PolicyEngine.of("transformers", floor).sample(prompts, params, 1, 0))
    print(f"transformers engine, {args.rows} rows x {args.tokens} new tokens, best of {args.repeat}, 1 thread:")
    print(f"  cast once a call (rlvr)      {once:6.2f} s")
    print(f"  cast at every decode step    {every:6.2f} s  ({every / once:.2f}x)")
    print(f"  bf16 weights, no cast        {bf16:6.2f} s")
    print(f"  same tokens, cast once vs every step: {a == b}")


if __name__ == "__main__":
    main()
