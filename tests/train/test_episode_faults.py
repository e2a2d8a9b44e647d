"""Faults in tool-use episodes: a tool that hangs, a tool result larger than the token budget and a
malformed tool call each give a recorded outcome, never a hang; a resources server that dies
mid-run stops `rlvr train` with a clear error and an exit code, keeping what was written."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest

from rlvr_cli.env.agent import free_port
from tests.conftest import copy_experiment, edit, rlvr, spawn_rlvr
from tests.train.test_episodes import CONTRACT, _setup, play

pytestmark = pytest.mark.slow  # end-to-end runs: `make test` runs them, `make test-fast` does not

SERVER = '''
import time
from rlvr_cli.env.server import ResourcesServer, tool
from rlvr_cli.env.verdict import Verdict


class Faulty(ResourcesServer):
    offered = ("stall", "flood", "ping")
    forbidden = ()

    def seed(self, task):
        return {}

    @tool
    def stall(self, state) -> str:
        """Never answers in time."""
        time.sleep(4)
        return "late"

    @tool
    def flood(self, state) -> str:
        """Answers with more text than any context holds."""
        return "x" * 200_000

    @tool
    def ping(self, state) -> str:
        """Answers at once."""
        return "pong"

    def verify(self, state, task, calls, final_message):
        done = float(final_message.strip() == "done")
        return Verdict("ok", done, {"success": done})
'''


def call(name: str) -> str:
    return f'<tool_call>{{"name": "{name}", "arguments": {{}}}}</tool_call>'


@pytest.fixture(scope="module")
def faulty(tmp_path_factory: pytest.TempPathFactory) -> Path:
    folder = tmp_path_factory.mktemp("faults") / "agent"
    made = rlvr("init", folder, "--template", "tool-use")
    assert made.code == 0, made.stderr
    (folder / "faulty.py").write_text(SERVER)
    edit(folder, "server: rlvr_cli.env.builtin.file_edit:FileEditServer", "server: faulty:Faulty")
    edit(folder, "tools: [list_files, read_file, write_file, replace_in_file]", "tools: [stall, flood, ping]")
    edit(folder, "forbidden_tools: [delete_file]", "forbidden_tools: []")
    text = (folder / CONTRACT).read_text()
    start = text.index("  timeout_s:", text.index("environment:"))
    end = text.index("\n", start)
    (folder / CONTRACT).write_text(text[:start] + "  timeout_s: 1" + text[end:])
    return folder


def _episode(folder: Path, script: list[str], monkeypatch: pytest.MonkeyPatch, budget: int = 1024) -> Any:
    setup = _setup(folder, budget=budget)
    (sample,), _ = play(setup, folder, setup.train_tasks[0], [script], monkeypatch)
    return sample


def test_a_hung_tool_is_a_tool_error_and_the_episode_goes_on(faulty: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    start = time.monotonic()
    sample = _episode(faulty, [call("stall"), "done"], monkeypatch)
    (turn, last) = sample.transcript["turns"]
    assert "no answer within" in turn["tool_calls"][0]["output"]
    assert last["text"] == "done"
    # the hung call still holds its session, so verifying it times out too: a recorded timeout
    # verdict (excluded by on_invalid), never a reward and never a hang
    assert sample.verdict.status == "timeout" and not sample.kept and sample.reason == "timeout"
    assert time.monotonic() - start < 30


def test_a_tool_result_over_the_budget_ends_the_episode_on_the_budget(
    faulty: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    sample = _episode(faulty, [call("flood"), "done"], monkeypatch, budget=2048)
    assert sample.transcript["ended"] == "budget" and sample.finish == "length"
    assert len(sample.response_ids) <= 2048


def test_a_malformed_tool_call_is_the_models_text_not_a_call(faulty: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    sample = _episode(faulty, ['<tool_call>{"name": "ping", "arguments": </tool_call>'], monkeypatch)
    assert sample.transcript["calls"] == 0 and sample.transcript["ended"] == "answer"
    assert sample.verdict is not None and sample.verdict.status == "ok" and sample.reward == 0.0


DYING = """
import os, sys, uvicorn
sys.path.insert(0, {folder!r})
from faulty import Faulty
from rlvr_cli.env.server import create_app

inner = create_app(Faulty())
seen = [0]

async def app(scope, receive, send):  # the whole server process dies after {after} requests
    if scope["type"] == "http":
        seen[0] += 1
        if seen[0] > {after}:
            os._exit(1)
    await inner(scope, receive, send)

uvicorn.run(app, host="127.0.0.1", port={port}, log_level="error")
"""


def test_a_server_that_dies_mid_run_stops_the_run_with_a_clear_error(faulty: Path, tmp_path: Path) -> None:
    exp = copy_experiment(faulty, tmp_path / "exp")
    port = free_port()
    script = tmp_path / "dying.py"
    script.write_text(DYING.format(folder=str(exp), after=12, port=port))  # a step is ~4 batched requests
    server = subprocess.Popen([sys.executable, str(script)], env={**os.environ, "PYTHONPATH": str(Path.cwd())})
    try:
        for _ in range(100):
            try:
                import httpx

                httpx.get(f"http://127.0.0.1:{port}/tools", timeout=1)
                break
            except httpx.HTTPError:
                time.sleep(0.1)
        edit(exp, "server: faulty:Faulty", f"server: http://127.0.0.1:{port}")
        run = rlvr("train", exp / CONTRACT, "--max-steps", "5", "--run-dir", exp / "run", timeout=600)
    finally:
        server.kill()
    assert run.code not in (0, None) and "unreachable" in run.stderr and "Traceback" not in run.stderr, run.stderr
    status = json.loads((exp / "run" / "status.json").read_text())
    assert status["state"] == "failed" and "unreachable" in status["reason"]
    steps = [json.loads(line)["step"] for line in (exp / "run" / "metrics.jsonl").read_text().splitlines()]
    assert steps and steps[0] == 0  # what was finished before the server died is kept


ONCE = '''
import os
from pathlib import Path
from faulty import Faulty


class DiesOnce(Faulty):
    """Dies (exit 3) at its {after}th seed, once: a marker beside it says it already did."""

    seeds = 0

    def seed(self, task):
        DiesOnce.seeds += 1
        marker = Path(__file__).with_name("died")
        if DiesOnce.seeds == {after} and not marker.exists():
            marker.touch()
            print("out of memory in the environment, going down", flush=True)
            os._exit(3)
        return super().seed(task)
'''


def test_a_server_child_that_dies_is_described_logged_and_the_run_resumes_from_that_step(
    faulty: Path, tmp_path: Path
) -> None:
    exp = copy_experiment(faulty, tmp_path / "exp")
    (exp / "once.py").write_text(ONCE.replace("{after}", "24"))  # 16 sessions a step: it dies in step 1
    edit(exp, "server: faulty:Faulty", "server: once:DiesOnce")
    run = rlvr("train", exp / CONTRACT, "--max-steps", "2", "--run-dir", exp / "run", timeout=600)
    assert run.code == 1 and "unreachable" in run.stderr and "Traceback" not in run.stderr, run.stderr[-2000:]
    assert "the resources server exited with code 3" in run.stderr and "going down" in run.stderr
    log = (exp / "run" / "env-server.log").read_text()
    assert "going down" in log and "exited with code 3" in log
    status = json.loads((exp / "run" / "status.json").read_text())
    assert status["state"] == "failed" and "checkpoint step-1" in status["next"]
    resumed = rlvr("train", exp / CONTRACT, "--max-steps", "2", "--run-dir", exp / "run", "--auto", timeout=600)
    assert resumed.code == 0, resumed.stderr[-2000:]
    straight = rlvr("train", exp / CONTRACT, "--max-steps", "2", "--run-dir", exp / "straight", timeout=600)
    assert straight.code == 0  # the marker is there now: the same server, never dying
    from safetensors.torch import load_file

    a, b = (load_file(exp / d / "final" / "model.safetensors") for d in ("run", "straight"))
    assert a.keys() == b.keys() and all(bool((a[k] == b[k]).all()) for k in a)
    metrics = [json.loads(line)["step"] for line in (exp / "run" / "metrics.jsonl").read_text().splitlines()]
    assert metrics == [0, 1]


HANGS = """
import time
from faulty import Faulty


class HangsOnSeed(Faulty):
    def seed(self, task):
        time.sleep(120)
        return super().seed(task)
"""


def test_sigterm_while_the_server_hangs_stops_the_run_at_once(faulty: Path, tmp_path: Path) -> None:
    import signal

    exp = copy_experiment(faulty, tmp_path / "exp")
    (exp / "hangs.py").write_text(HANGS)
    edit(exp, "server: faulty:Faulty", "server: hangs:HangsOnSeed")
    proc = spawn_rlvr("train", exp / CONTRACT, "--run-dir", exp / "run", stderr=subprocess.PIPE, text=True)
    status_file = exp / "run" / "status.json"
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline and not (status_file.is_file() and "running" in status_file.read_text()):
        time.sleep(0.2)
    time.sleep(2)  # the first /batch of seeds is waiting on the server now
    sent = time.monotonic()
    proc.send_signal(signal.SIGTERM)
    code = proc.wait(60)
    assert code == 143 and time.monotonic() - sent < 15, proc.stderr.read()[-2000:]  # type: ignore[union-attr]
    status = json.loads(status_file.read_text())
    assert status["state"] == "paused" and "SIGTERM" in status["reason"]
