"""Isolation audit wall time vs the same number of plain episodes' round trips.

Both against the built-in `file_edit` resources server, served the way `rlvr audit isolation`
serves it (uvicorn on 127.0.0.1 in this process, bearer token), 32 client threads, the tool
calls of the tool-use template's candidates. Plain: every session does seed → its candidate's
tool calls → verify → close. Audit: `rlvr audit isolation` with the same number of sessions
(calibration, markers, interleaved replay, verify with snapshots, re-seed, close checks,
disk scan). Usage:

    .venv/bin/python benchmarks/isolation_overhead.py [--sessions 200] [--repeat 3]
"""

from __future__ import annotations

import argparse
import subprocess
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from rlvr_cli.audit.isolation import run_isolation, traffic
from rlvr_cli.audit.verifier import all_tasks, load_candidates
from rlvr_cli.contract import load
from rlvr_cli.env.agent import EnvClient, environment


def plain(contract, folder: Path, sessions: int) -> float:
    plan = traffic(load_candidates(folder / "audit" / "candidates.yaml"), all_tasks(contract, folder))
    with environment(contract.environment.server, folder) as endpoint:
        client = EnvClient(endpoint, timeout_s=30)

        def episode(i: int) -> None:
            task, calls = plan[i % len(plan)]
            sid = client.seed(task)
            for name, arguments in calls:
                client.call(sid, name, arguments)
            client.verify(sid, "")
            client.close_session(sid)

        start = time.perf_counter()
        with ThreadPoolExecutor(max_workers=min(sessions, 32)) as pool:
            list(pool.map(episode, range(sessions)))
        elapsed = time.perf_counter() - start
        client.close()
    return elapsed


def audited(contract, folder: Path, sessions: int) -> float:
    start = time.perf_counter()
    report = run_isolation(contract, folder, sessions, folder / "audit" / "candidates.yaml")
    elapsed = time.perf_counter() - start
    assert report.ok, report.findings
    return elapsed


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--sessions", type=int, default=200)
    parser.add_argument("--repeat", type=int, default=3)
    args = parser.parse_args()
    folder = Path(tempfile.mkdtemp()) / "agent"
    rlvr = Path(sys.executable).parent / "rlvr"
    subprocess.run([rlvr, "init", folder, "--template", "tool-use", "--no-model"], check=True, capture_output=True)
    contract = load(folder / "experiment.rlvr.yaml")
    plain(contract, folder, 8), audited(contract, folder, 8)  # warm imports and the server
    t_plain = min(plain(contract, folder, args.sessions) for _ in range(args.repeat))
    t_audit = min(audited(contract, folder, args.sessions) for _ in range(args.repeat))
    print(f"sessions: {args.sessions}, best of {args.repeat}")
    print(f"plain seed → tools → verify → close: {t_plain:6.2f} s")
    print(f"rlvr audit isolation:                {t_audit:6.2f} s")
    print(f"audit overhead (audit / plain):      {t_audit / t_plain:.2f}x")


if __name__ == "__main__":
    main()
