"""The update's shared-prompt forward and backward of another revision against this checkout's,
in one process, alternating: engine/shared.py (with engine/precision.py) at REV is loaded
beside the installed one, both run the same micro-batch through the same model, and the
machine's drift between runs cancels out.

A Qwen2-architecture model per shape (random weights); G prompts × 8 responses, prompt and
response lengths drawn once per shape; one micro-batch, a loss reaching every response token;
the best and the median of the alternating repeats, and the largest difference of the two
revisions' log-probs (bf16 products round differently where the layout differs).

    .venv/bin/python benchmarks/update_revisions.py 9515856
    .venv/bin/python benchmarks/update_revisions.py 9515856 --precision fp32
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

from rlvr_cli.engine import shared
from rlvr_cli.engine.forward import make_batch
from rlvr_cli.engine.precision import autocast

SHAPES = {  # hidden, intermediate, layers, heads, KV heads; prompts, prompt and response lengths; repeats
    "toy Qwen2 128×4 (1 M), 2 × 8, prompts 18-30, responses 4-16": (128, 384, 4, 4, 2, 2, (18, 30), (4, 16), 60),
    "real Qwen2 512×8 (31 M), 2 × 8, prompts 110-300, responses 20-64": (
        512,
        2048,
        8,
        8,
        4,
        2,
        (110, 300),
        (20, 64),
        8,
    ),
    "real Qwen2 512×8 (31 M), 8 × 8, prompts 110-300, responses 20-64": (
        512,
        2048,
        8,
        8,
        4,
        8,
        (110, 300),
        (20, 64),
        4,
    ),
}


def load_revision(rev: str) -> object:
    """engine/shared.py as it was at `rev`, over engine/precision.py as it was then."""
    root = Path(__file__).resolve().parent.parent
    folder = Path(tempfile.mkdtemp())
    modules = {}
    for name in ("precision", "shared"):
        text = subprocess.run(
            ["git", "show", f"{rev}:rlvr_cli/engine/{name}.py"], cwd=root, capture_output=True, text=True, check=True
        ).stdout
        text = text.replace("from rlvr_cli.engine.precision import", "from precision_at_revision import")
        path = folder / f"{name}_at_revision.py"
        path.write_text(text)
        spec = importlib.util.spec_from_file_location(f"{name}_at_revision", path)
        module = importlib.util.module_from_spec(spec)
        sys.modules[f"{name}_at_revision"] = module  # dataclasses and the import above look it up
        spec.loader.exec_module(module)
        modules[name] = module
    return modules["shared"]


def batch(prompts: int, prompt_lengths: tuple[int, int], response_lengths: tuple[int, int]):
    g = torch.Generator().manual_seed(0)

    def draw(low: int, high: int) -> list[int]:
        return torch.randint(3, 60, (int(torch.randint(low, high + 1, (1,), generator=g)),), generator=g).tolist()

    rows = [p for p in (draw(*prompt_lengths) for _ in range(prompts)) for _ in range(8)]
    responses = [draw(*response_lengths) for _ in rows]
    return make_batch(rows, responses, [[1] * len(r) for r in responses], 0)


def compare(model: torch.nn.Module, before: object, b, compute, repeats: int) -> tuple[list[float], list[float], float]:
    weights = torch.randn(b.response_mask.shape, generator=torch.Generator().manual_seed(1)) * b.response_mask

    def run(module: object) -> torch.Tensor:
        model.zero_grad(set_to_none=True)
        with autocast(compute, "cpu"):
            logp, _ = module.shared_prompt_logprobs(model, b, 1.0)
        (logp * weights).sum().backward()
        return logp.detach()

    times: dict[str, list[float]] = {"before": [], "now": []}
    logp = {}
    for i in range(repeats + 1):
        for name, module in (("before", before), ("now", shared)):
            start = time.perf_counter()
            logp[name] = run(module)
            if i >= 1:  # the first of each: warm-up
                times[name].append(time.perf_counter() - start)
    real = b.response_mask.bool()
    return times["before"], times["now"], float((logp["now"][real] - logp["before"][real]).abs().max())


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("rev", help="the revision whose update forward is compared with this checkout's")
    parser.add_argument("--precision", choices=["bf16", "fp32"], default="bf16", help="bf16: autocast over fp32")
    args = parser.parse_args()
    torch.set_num_threads(2)
    before = load_revision(args.rev)
    compute = torch.bfloat16 if args.precision == "bf16" else None
    print(f"{args.precision}; ms of a forward and backward, best / median of alternating repeats")
    print(f"{'shape':66s} {args.rev:>17s} {'now':>17s}  best ratio  largest log-prob difference")
    for name, (hidden, inter, layers, heads, kv, prompts, p_len, r_len, repeats) in SHAPES.items():
        torch.manual_seed(0)
        model = qwen2(hidden, inter, layers, heads, kv).train()
        then, now, diff = compare(model, before, batch(prompts, p_len, r_len), compute, repeats)
        cell = [f"{min(t) * 1e3:.1f} / {statistics.median(t) * 1e3:.1f}" for t in (then, now)]
        print(f"{name:66s} {cell[0]:>17s} {cell[1]:>17s}  {min(then) / min(now):9.2f}×  {diff:.1e}")


if __name__ == "__main__":
    main()
