"""Resources-server throughput: seed → tool → verify → close under N concurrent sessions,
next to a bare FastAPI endpoint answering the same four requests (the ceiling of the stack).

Both apps run under uvicorn on 127.0.0.1 in a subprocess; the load comes from one asyncio
client with N sessions in flight. Usage:

    .venv/bin/python benchmarks/sessions_vs_bare_fastapi.py [--sessions 200] [--rounds 3]
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import subprocess
import sys
import time

BARE = """
from fastapi import FastAPI
app = FastAPI()

@app.post("/seed_session")
def seed(body: dict) -> dict:
    return {"session_id": "s"}

@app.post("/tools/{name}")
def tool(name: str, body: dict) -> dict:
    return {"output": "ok"}

@app.post("/verify")
def verify(body: dict) -> dict:
    return {"status": "ok", "reward": 1.0, "components": {}, "detail": None}

@app.post("/close")
def close(body: dict) -> dict:
    return {"closed": True}
"""
TASK = {"id": "bench", "prompt": "Set version to 2", "target": "config/app.toml"}


async def session(client, latencies: list[float]) -> None:
    start = time.perf_counter()
    sid = (await client.post("/seed_session", json={"task": TASK})).json()["session_id"]
    await client.post(
        "/tools/replace_in_file",
        json={"session_id": sid, "arguments": {"path": "config/app.toml", "old": "version = 1", "new": "version = 2"}},
    )
    await client.post("/verify", json={"session_id": sid})
    await client.post("/close", json={"session_id": sid})
    latencies.append(time.perf_counter() - start)


async def load(url: str, sessions: int) -> tuple[float, list[float]]:
    import httpx

    limits = httpx.Limits(max_connections=sessions, max_keepalive_connections=sessions)
    async with httpx.AsyncClient(base_url=url, limits=limits, timeout=60) as client:
        latencies: list[float] = []
        start = time.perf_counter()
        await asyncio.gather(*(session(client, latencies) for _ in range(sessions)))
        return time.perf_counter() - start, latencies


def serve(module: str, port: int) -> subprocess.Popen:
    proc = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "uvicorn",
            module,
            "--host",
            "127.0.0.1",
            "--port",
            str(port),
            "--log-level",
            "error",
            "--no-access-log",
        ],
        cwd=sys.path[0],
    )
    import httpx

    for _ in range(200):
        try:
            httpx.get(f"http://127.0.0.1:{port}/docs", timeout=0.5)
            return proc
        except httpx.HTTPError:
            time.sleep(0.05)
    proc.kill()
    raise SystemExit(f"{module} did not start")


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--sessions", type=int, default=200)
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args()
    import pathlib
    import tempfile

    folder = pathlib.Path(tempfile.mkdtemp())
    (folder / "bare_app.py").write_text(BARE)
    (folder / "rlvr_app.py").write_text(
        "from rlvr_cli.env.builtin.file_edit import FileEditServer\n"
        "from rlvr_cli.env.server import create_app\n\n"
        "app = create_app(FileEditServer())\n"
    )
    sys.path.insert(0, str(folder))
    results = {}
    for name, module, port in (
        ("rlvr file_edit", "rlvr_app:app", 8731),
        ("bare FastAPI", "bare_app:app", 8732),
    ):
        proc = serve(module, port)
        try:
            runs = [asyncio.run(load(f"http://127.0.0.1:{port}", args.sessions)) for _ in range(args.rounds)]
        finally:
            proc.kill()
        wall, latencies = min(runs, key=lambda r: r[0])
        latencies.sort()
        results[name] = (
            args.sessions / wall,
            statistics.median(latencies),
            latencies[int(0.99 * (len(latencies) - 1))],
        )
    print(f"{args.sessions} concurrent sessions, 4 requests each (seed, tool, verify, close), best of {args.rounds}")
    for name, (rate, p50, p99) in results.items():
        print(f"{name:16} {rate:8.1f} sessions/s   p50 {p50 * 1000:7.1f} ms   p99 {p99 * 1000:7.1f} ms")
    ours, bare = results["rlvr file_edit"][0], results["bare FastAPI"][0]
    print(f"ratio rlvr / bare FastAPI: {ours / bare:.2f}")


if __name__ == "__main__":
    main()
