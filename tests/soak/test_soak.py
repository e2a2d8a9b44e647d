"""Soak: 200 steps of the lookup example against a resources server that misbehaves, with the
trainer SIGKILLed every ~20 steps and relaunched with `--auto`, as a scheduler would.

The server (`chaos.py`, below) answers `open_box` for some boxes with NaN, a set, bytes or 2 MB
of text, hangs for others (past the contract's `timeout_s`), and dies once (exit 3) in the middle
of a step. Its faults are keyed on the box, so they are deterministic: the run must end with the
same weights and the same records as a straight run against the same server that never dies and
is never killed, and every episode must be recorded exactly once.

Not part of `make test` (about 7 minutes on 2 cores): `make soak` runs it.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pyarrow.parquet as pq
import pytest
import torch
from safetensors.torch import load_file

from tests.conftest import rlvr

pytestmark = pytest.mark.soak

CONTRACT = "experiment.rlvr.yaml"
STEPS = 200
KILL_EVERY = 20

CHAOS = '''
import os
import time
import zlib
from pathlib import Path

from rlvr_cli.env.builtin.lookup import LookupServer
from rlvr_cli.env.server import tool


class ChaosLookup(LookupServer):
    """The lookup server with faults keyed on the box: deterministic whatever the timing."""

    seeds = 0

    def seed(self, task):
        ChaosLookup.seeds += 1
        marker = Path(__file__).with_name("died")
        if ChaosLookup.seeds == 300 and not marker.exists():  # once, in the middle of a step
            marker.touch()
            print("chaos: the server goes down now", flush=True)
            os._exit(3)
        box = super().seed(task)
        box.fault = zlib.crc32(task["id"].encode()) % 97
        return box

    @tool
    def open_box(self, state) -> str:
        """Open the box and read the digit inside."""
        fault = state.fault
        if fault == 0:
            time.sleep(30)  # hangs past timeout_s: a tool error, then a timeout verdict
        if 1 <= fault <= 4:
            return float("nan")
        if 5 <= fault <= 8:
            return state.secret + "x" * 2_000_000
        if 9 <= fault <= 12:
            return {state.secret}
        if 13 <= fault <= 16:
            return state.secret.encode()
        return state.secret
'''


def _experiment(root: Path) -> Path:
    folder = root / "lookup"
    made = rlvr("init", folder, "--template", "lookup", timeout=600)
    assert made.code == 0, made.stderr
    (folder / "chaos.py").write_text(CHAOS)
    text = (folder / CONTRACT).read_text()
    for old, new in [
        ("server: rlvr_cli.env.builtin.lookup:LookupServer", "server: chaos:ChaosLookup"),
        ("  timeout_s: 10\n", "  timeout_s: 2\n"),
        ("  max_steps: 60\n", f"  max_steps: {STEPS}\n"),
        ("  every_steps: 20\n", "  every_steps: 10\n"),
        # the hanging boxes are timeout verdicts by design: the rule that watches for a broken verifier
        # would (rightly) abort both runs at the same step
        ('metric: verifier_error_rate, when: "> 0.05"', 'metric: verifier_error_rate, when: "> 0.5"'),
    ]:
        assert old in text, old
        text = text.replace(old, new)
    (folder / CONTRACT).write_text(text)
    return folder


def _steps(run_dir: Path) -> int:
    metrics = run_dir / "metrics.jsonl"
    return len(metrics.read_text().splitlines()) if metrics.is_file() else 0


def _chaotic_run(folder: Path, run_dir: Path) -> list[str]:
    """Relaunch `rlvr train --auto` until it finishes, SIGKILLing it every ~20 steps; what happened."""
    events, next_kill = [], KILL_EVERY
    for _ in range(40):
        proc = subprocess.Popen(
            [sys.executable, "-m", "rlvr_cli", "train", str(folder / CONTRACT), "--run-dir", str(run_dir), "--auto"],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.PIPE,
            text=True,
        )
        while proc.poll() is None:
            if _steps(run_dir) >= next_kill and next_kill < STEPS:
                os.kill(proc.pid, signal.SIGKILL)
                proc.wait()
                events.append(f"SIGKILL at {_steps(run_dir)} steps")
                next_kill += KILL_EVERY
                break
            time.sleep(0.2)
        if proc.returncode == 0:
            events.append("finished")
            return events
        if proc.returncode != -signal.SIGKILL:
            tail = proc.stderr.read()[-400:]  # type: ignore[union-attr]
            events.append(f"exit {proc.returncode} at {_steps(run_dir)} steps: {tail.strip().splitlines()[-1]}")
            assert proc.returncode == 1, events  # only the server's death may stop it: never a pause or abort
    raise AssertionError(f"the run never finished: {events}")


def _episodes(run_dir: Path) -> list[tuple]:
    manifest = json.loads((run_dir / "records" / "manifest.json").read_text())["shards"]
    rows = [r for s in manifest for r in pq.read_table(run_dir / "records" / s["file"]).to_pylist()]
    return sorted((r["step"], r["round"], r["group"], r["sample"], tuple(r["response_ids"]), r["reward"]) for r in rows)


def test_a_chaotic_server_and_sigkills_end_where_a_straight_run_ends(tmp_path: Path) -> None:
    import shutil

    folder = _experiment(tmp_path)
    calm = shutil.copytree(folder, tmp_path / "calm")
    (calm / "died").touch()  # the straight run's server never dies
    straight = subprocess.Popen(
        [sys.executable, "-m", "rlvr_cli", "train", str(calm / CONTRACT), "--run-dir", str(tmp_path / "straight")],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
    )
    events = _chaotic_run(folder, tmp_path / "chaos")
    assert straight.wait(3600) == 0, straight.stderr.read()[-2000:]  # type: ignore[union-attr]
    print("\n".join(events))
    assert any("SIGKILL" in e for e in events) and any("exit 1" in e and "exited with code 3" in e for e in events)
    assert "chaos: the server goes down now" in (tmp_path / "chaos" / "env-server.log").read_text()
    chaos, clean = _episodes(tmp_path / "chaos"), _episodes(tmp_path / "straight")
    assert len(chaos) == STEPS * 64 and len(set(e[:4] for e in chaos)) == len(chaos)  # each episode once
    assert chaos == clean
    a, b = (load_file(tmp_path / d / "final" / "model.safetensors") for d in ("chaos", "straight"))
    assert a.keys() == b.keys() and all(torch.equal(a[k], b[k]) for k in a)
    faults = [json.loads(line) for line in (tmp_path / "chaos" / "metrics.jsonl").read_text().splitlines()]
    assert len(faults) == STEPS
