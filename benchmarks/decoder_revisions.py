"""The lean sampler's decoder of another revision against this checkout's, in one process,
alternating: engine/fused.py at REV is loaded beside the installed one, both decode the same
rows with the same model, and the machine's drift between runs cancels out.

A Qwen2-architecture model per shape (random weights), 2 prompts × 8 rows (the trainer's shared
prompt), a prefill and 15 decode steps of fixed tokens, fp32; the median of 60 alternating
repeats each (after 5 warm-up), and the largest difference of the two decoders' logits.

    .venv/bin/python benchmarks/decoder_revisions.py fe27f9e
"""

from __future__ import annotations

import argparse
import importlib.util
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import torch
from packed_decode import qwen2

import rlvr_cli.engine.fused as fused

SHAPES = {  # hidden, intermediate, layers, heads, KV heads, prompt tokens
    "toy Qwen2 128×4 (1 M), 20-token prompts": (128, 384, 4, 4, 2, 20),
    "real Qwen2 512×8 (31 M), 250-token prompts": (512, 2048, 8, 8, 4, 250),
}


def load_revision(rev: str) -> object:
    """engine/fused.py as it was at `rev`, imported as a module of its own."""
    root = Path(__file__).resolve().parent.parent
    text = subprocess.run(
        ["git", "show", f"{rev}:rlvr_cli/engine/fused.py"], cwd=root, capture_output=True, text=True, check=True
    ).stdout
    path = Path(tempfile.mkdtemp()) / "fused_at_revision.py"
    path.write_text(text)
    spec = importlib.util.spec_from_file_location("fused_at_revision", path)
    module = importlib.util.module_from_spec(spec)
    sys.modules["fused_at_revision"] = module  # dataclasses look their module up
    spec.loader.exec_module(module)
    return module


def decode(decoder: object, ids: torch.Tensor, tokens: torch.Tensor) -> torch.Tensor:
    owner = torch.arange(ids.size(0)).repeat_interleave(8)
    with torch.inference_mode():
        _, cache = decoder.prefill(ids, torch.ones_like(ids), tokens.size(1))
        cache.select(owner)
        return torch.stack([decoder.step(tokens[:, t], cache) for t in range(tokens.size(1))])


def compare(model: torch.nn.Module, before: object, prompt: int, repeats: int = 60) -> tuple[float, float, float]:
    torch.manual_seed(0)
    ids = torch.randint(4, 60, (2, prompt))
    tokens = torch.randint(4, 60, (16, 15))
    decoders = {"before": before.Decoder(model), "now": fused.Decoder(model)}
    times: dict[str, list[float]] = {name: [] for name in decoders}
    logits = {}
    for i in range(repeats + 5):
        for name, decoder in decoders.items():
            start = time.perf_counter()
            logits[name] = decode(decoder, ids, tokens)
            if i >= 5:
                times[name].append(time.perf_counter() - start)
    diff = float((logits["now"] - logits["before"]).abs().max())
    return statistics.median(times["before"]) * 1e3, statistics.median(times["now"]) * 1e3, diff


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("rev", help="the revision whose decoder is compared with this checkout's")
    args = parser.parse_args()
    before = load_revision(args.rev)
    print(f"{'shape':45s} {args.rev:>10s} ms   now ms   before / now   largest logit difference")
    for name, (hidden, inter, layers, heads, kv, prompt) in SHAPES.items():
        model = qwen2(hidden, inter, layers, heads, kv)
        was, now, diff = compare(model, before, prompt)
        print(f"{name:45s} {was:13.2f} {now:8.2f} {was / now:13.2f}×   {diff:.1e}")


if __name__ == "__main__":
    main()
