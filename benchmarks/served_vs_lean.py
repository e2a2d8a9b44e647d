"""Steps per second sampling in process (`engine: lean`) vs from a served engine over HTTP
(`sampling.server`: the stand-in of tests/engine/standin.py in a process of its own, speaking
vLLM's API and sampling with the same lean decode loop), so the difference is what serving costs:
one HTTP request per response, the server's batching, and the weights handed over by files after
every optimizer step.

The single-turn template (`rlvr init`: the tiny arithmetic policy, 8 prompts × 8 samples, ≤ 2 new
tokens a step), `rlvr train` as a user runs it, arms alternating. Measured from the run's own
metrics: Σ step_seconds, Σ time_generate_s (sampling, HTTP included), Σ time_engine_weights_s
(writing and loading the weights), and the whole process. Usage (from the repository root):

    .venv/bin/python benchmarks/served_vs_lean.py [--steps 50] [--repeat 3] [--max-tokens 2]
"""

from __future__ import annotations

import argparse
import json
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

SAMPLING = "sampling: {temperature: 1.0, top_p: 1.0, top_k: 0}"
RATIO = "  ratio: {level: token, denominator: trainer_recomputed}\n"


def contract(base: str, url: str | None, max_tokens: int) -> str:
    text = base.replace("max_response_tokens: 2", f"max_response_tokens: {max_tokens}")
    text = text.replace('response_length_mean, when: "> 2"', f'response_length_mean, when: "> {max_tokens}"')
    if url is None:
        return text.replace("  aggregation: ", RATIO + "  aggregation: ")
    served = SAMPLING[:-1] + f", engine: vllm, server: {{url: '{url}', model: policy}}}}"
    return text.replace(SAMPLING, served).replace("  aggregation: ", RATIO + "  aggregation: ")


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def serve(folder: Path) -> tuple[subprocess.Popen, str]:
    port = free_port()
    cmd = [sys.executable, "-m", "tests.engine.standin", "--model", str(folder / "model"), "--served", "policy"]
    proc = subprocess.Popen([*cmd, "--port", str(port)], stderr=subprocess.DEVNULL)
    import httpx

    deadline = time.monotonic() + 60
    while True:
        try:
            httpx.get(f"http://127.0.0.1:{port}/v1/models", timeout=1)
            return proc, f"http://127.0.0.1:{port}"
        except httpx.HTTPError:
            if time.monotonic() > deadline or proc.poll() is not None:
                raise RuntimeError("the stand-in server did not start") from None
            time.sleep(0.2)


def train(folder: Path, url: str | None, steps: int, run: Path, max_tokens: int) -> tuple[float, ...]:
    path = folder / "experiment.rlvr.yaml"
    path.write_text(contract((folder / "base.rlvr.yaml").read_text(), url, max_tokens))
    start = time.perf_counter()
    cmd = [sys.executable, "-m", "rlvr_cli", "train", str(path), "--run-dir", str(run), "--max-steps", str(steps)]
    done = subprocess.run(cmd, capture_output=True, text=True)
    wall = time.perf_counter() - start
    assert done.returncode == 0, done.stderr[-2000:]
    rows = [json.loads(line) for line in (run / "metrics.jsonl").read_text().splitlines()]
    handover = sum(r.get("time_engine_weights_s") or 0.0 for r in rows)
    return (sum(r["step_seconds"] for r in rows), sum(r["time_generate_s"] for r in rows), handover, wall)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--steps", type=int, default=50)
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--max-tokens", type=int, default=2)
    args = parser.parse_args()
    arms = ("lean", "served")
    found: dict[str, list[tuple[float, ...]]] = {arm: [] for arm in arms}
    with tempfile.TemporaryDirectory() as tmp:
        folder = Path(tmp) / "arith"
        subprocess.run([sys.executable, "-m", "rlvr_cli", "init", str(folder)], check=True, capture_output=True)
        (folder / "experiment.rlvr.yaml").rename(folder / "base.rlvr.yaml")
        server, url = serve(folder)
        try:
            for r in range(args.repeat):
                for arm in arms:
                    run = Path(tmp) / f"run-{r}-{arm}"
                    found[arm].append(train(folder, url if arm == "served" else None, args.steps, run, args.max_tokens))
                    s, g, h, _ = found[arm][-1]
                    print(
                        f"  {arm} pass {r + 1}: steps {s:6.2f} s, sampling {g:5.2f} s, weights {h:5.2f} s",
                        file=sys.stderr,
                    )
        finally:
            server.terminate()
            server.wait(timeout=30)
    print(f"{args.steps} steps, ≤ {args.max_tokens} new tokens, median of {args.repeat} alternating passes")
    print("| engine | steps/s | Σ step_seconds | Σ time_generate_s | Σ time_engine_weights_s | whole process |")
    print("|---|---|---|---|---|---|")
    for arm in arms:
        s, g, h, t = (statistics.median(x[i] for x in found[arm]) for i in range(4))
        name = "lean, in process" if arm == "lean" else "stand-in server over HTTP (vLLM API)"
        print(f"| {name} | {args.steps / s:.2f} | {s:.2f} s | {g:.2f} s | {h:.2f} s | {t:.1f} s |")


if __name__ == "__main__":
    main()
