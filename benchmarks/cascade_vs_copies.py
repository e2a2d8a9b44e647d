"""The lean sampler's decode with a group's rows over one copy of their prompt's keys and
values (cascade attention, `engine/cascade.py`) against each row holding its own copy: the same
model, prompts and seeds, alternating runs in one process, the best of each.

    .venv/bin/python benchmarks/cascade_vs_copies.py [--precision bf16] [--groups 8] [--prompt 250]

The model is the real-shape benchmark's (Qwen2, hidden 512, 8 layers, 31 M parameters); each
group is 8 rows of one prompt; 64 new tokens, no stop token met.
"""

from __future__ import annotations

import argparse
import time

import torch


def main() -> None:
    import transformers as t

    import rlvr_cli.engine.fused as fused
    from rlvr_cli.engine.generate import generate
    from rlvr_cli.engine.precision import autocast

    parser = argparse.ArgumentParser()
    parser.add_argument("--precision", choices=["fp32", "bf16"], default="fp32")
    parser.add_argument("--groups", type=int, default=2)
    parser.add_argument("--prompt", type=int, default=250, help="prompt tokens")
    parser.add_argument("--repeat", type=int, default=4)
    args = parser.parse_args()
    torch.manual_seed(0)
    torch.set_num_threads(2)
    config = t.Qwen2Config(
        vocab_size=64,
        hidden_size=512,
        intermediate_size=2048,
        num_hidden_layers=8,
        num_attention_heads=8,
        num_key_value_heads=4,
        max_position_embeddings=1024,
    )
    model = t.Qwen2ForCausalLM(config).eval()
    prompts = [[3 + (i * 7 + j) % 50 for i in range(args.prompt)] for j in range(args.groups)]
    prompts = [p for p in prompts for _ in range(8)]
    kw = dict(max_new_tokens=64, temperature=1.0, top_p=1.0, top_k=0, stop_ids=[-1], pad_id=0, engine="lean")
    shared = fused.Cache.select

    def copies(self: fused.Cache, rows: torch.Tensor) -> None:  # every row its own copy of its prompt
        self.keys, self.values = [k[rows] for k in self.keys], [v[rows] for v in self.values]
        self.mask, self.positions = self.mask[rows], self.positions[rows]

    compute = torch.bfloat16 if args.precision == "bf16" else None
    seconds: dict[str, list[float]] = {"copies": [], "cascade": []}
    for rep in range(args.repeat):
        for name, select in (("copies", copies), ("cascade", shared)):
            fused.Cache.select = select  # type: ignore[method-assign]
            with autocast(compute, "cpu"):
                if rep == 0:
                    generate(model, prompts, seed=0, **kw)  # warm-up
                start = time.perf_counter()
                generate(model, prompts, seed=rep + 1, **kw)
                seconds[name].append(time.perf_counter() - start)
    rows = len(prompts)
    print(f"{rows} rows ({args.groups} prompts of {args.prompt} tokens × 8), 64 tokens, {args.precision}")
    for name, runs in seconds.items():
        print(f"{name:8} best {min(runs):.3f} s  (" + " / ".join(f"{s:.3f}" for s in runs) + ")")


if __name__ == "__main__":
    main()
