"""What this CPU's matrix product reaches at the row counts a decode step multiplies with.

A decode step multiplies each weight matrix by one row per sequence still sampling (16 for
2 prompts × 8 samples). Whether sampling can run near the machine's peak depends on what the
GEMM reaches at those few rows, not only on memory bandwidth. This prints both: the memory
bandwidth (a 400 MB copy and sum) and GFLOP/s of `x @ W.T` for a (rows × 2048) · (2048 × 6144)
product (a 31 M-parameter layer's MLP size class) in fp32 and bf16, 1 and 2 threads.

    .venv/bin/python benchmarks/gemm_rows.py
"""

from __future__ import annotations

import time

import torch


def bandwidth() -> tuple[float, float]:
    torch.set_num_threads(2)
    a = torch.randn(100_000_000)
    b = torch.empty_like(a)
    for _ in range(2):
        b.copy_(a)
    start = time.perf_counter()
    for _ in range(5):
        b.copy_(a)
    copy = 2 * a.numel() * 4 * 5 / (time.perf_counter() - start) / 1e9
    start = time.perf_counter()
    for _ in range(5):
        a.sum()
    read = a.numel() * 4 * 5 / (time.perf_counter() - start) / 1e9
    return copy, read


def gflops(rows: int, dtype: torch.dtype, threads: int, k: int = 2048, n: int = 6144, repeat: int = 30) -> float:
    torch.set_num_threads(threads)
    weight, x = torch.randn(n, k).to(dtype), torch.randn(rows, k).to(dtype)
    for _ in range(3):
        x @ weight.t()
    start = time.perf_counter()
    for _ in range(repeat):
        x @ weight.t()
    return 2 * rows * k * n * repeat / (time.perf_counter() - start) / 1e9


def main() -> None:
    copy, read = bandwidth()
    print(f"memory: copy {copy:.1f} GB/s (read + write), sum {read:.1f} GB/s (read)")
    rows = (1, 4, 16, 32, 64, 128, 512)
    print("| dtype | threads | " + " | ".join(f"{r} rows" for r in rows) + " |")
    print("|---|---|" + "---|" * len(rows))
    for dtype in (torch.float32, torch.bfloat16):
        for threads in (1, 2):
            cells = " | ".join(f"{gflops(r, dtype, threads):.0f}" for r in rows)
            print(f"| {str(dtype).removeprefix('torch.')} | {threads} | {cells} |")


if __name__ == "__main__":
    main()
