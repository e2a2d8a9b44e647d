"""`rlvr serve CONTRACT --interface nemo-gym`: an rlvr resources server (the tool-use template's
file-edit server) with NeMo Gym's interface, driven by the NeMo Gym client of the published
`verifiers` package (its `NeMoGymTaskset`: seed, direct tool calls with its cookie session, its
own Responses object for /verify) on the rows `--rows` wrote: the right edit earns 1, collateral
damage and a forbidden tool earn 0, concurrent sessions stay apart. Round trip: rlvr's own
`nemo-gym+URL` bridge on the served interface passes the isolation audit. Bad requests are refused."""

from __future__ import annotations

import asyncio
import contextlib
import json
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from rlvr_cli.env.agent import free_port
from tests.conftest import copy_experiment, edit, rlvr
from tests.env import peer_server

CONTRACT = "experiment.rlvr.yaml"
EDIT = {"path": "config/app.toml", "old": "version = 1", "new": "version = 2"}


@contextlib.contextmanager
def serving(folder: Path, *more: str) -> Iterator[tuple[str, subprocess.Popen]]:
    port = free_port()
    command = [sys.executable, "-m", "rlvr_cli", "serve", str(folder), "--port", str(port), *more]
    proc = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    url = f"http://127.0.0.1:{port}"
    try:
        for _ in range(200):
            with contextlib.suppress(httpx.HTTPError):
                if httpx.get(f"{url}/openapi.json", timeout=1).status_code == 200:
                    break
            assert proc.poll() is None, proc.stderr.read() if proc.stderr else ""
            time.sleep(0.1)
        yield url, proc
    finally:
        if proc.poll() is None:
            proc.send_signal(signal.SIGINT)
            proc.wait(20)


def episode(url: str, rows: Path, calls: list[tuple[str, dict]], index: int = 0) -> tuple[float, dict]:
    """One episode through verifiers' NeMo Gym task: (its reward, the metrics it recorded)."""
    import verifiers.v1 as vf
    from verifiers.v1.tasksets.nemo_gym.taskset import NeMoGymConfig, NeMoGymTaskConfig, NeMoGymTaskset
    from verifiers.v1.tasksets.nemo_gym.toolset import NeMoGymState

    taskset = NeMoGymTaskset(NeMoGymConfig(dataset=rows, task=NeMoGymTaskConfig(resources_url=url)))
    task = list(taskset)[index]
    trace = vf.Trace(task=vf.TraceTask(type="NeMoGymTask", data=task.data), agent=vf.AgentInfo(config=vf.AgentConfig()))
    trace.state = NeMoGymState()

    async def run() -> float:
        await task.setup(trace, None)  # type: ignore[arg-type]
        nodes = [vf.MessageNode(message=vf.UserMessage(content=task.data.prompt_text))]
        for i, (name, arguments) in enumerate(calls):
            answer = await trace.state.post(name, arguments)
            call = vf.ToolCall(id=f"c{i}", name=name, arguments=json.dumps(arguments))
            nodes.append(
                vf.MessageNode(parent=len(nodes) - 1, sampled=True, message=vf.AssistantMessage(tool_calls=[call]))
            )
            nodes.append(
                vf.MessageNode(parent=len(nodes) - 1, message=vf.ToolMessage(tool_call_id=f"c{i}", content=answer.text))
            )
        nodes.append(vf.MessageNode(parent=len(nodes) - 1, sampled=True, message=vf.AssistantMessage(content="Done.")))
        trace.nodes = nodes
        return await task.nemo_gym(trace)

    return asyncio.run(run()), dict(trace.metrics)


@pytest.fixture
def agent(tool_use: Path, tmp_path: Path) -> Path:
    return copy_experiment(tool_use, tmp_path / "agent")


def test_verifiers_nemo_gym_client_trains_on_an_rlvr_server(agent: Path, tmp_path: Path) -> None:
    rows = tmp_path / "rows"
    with serving(agent, "--rows", str(rows)) as (url, proc):
        train = rows / "train.jsonl"
        first = json.loads(train.read_text().splitlines()[0])
        tools = {t["name"] for t in first["responses_create_params"]["tools"]}
        assert {"replace_in_file", "write_file", "delete_file"} <= tools and not (rows / "sealed_eval.jsonl").exists()
        reward, metrics = episode(url, train, [("replace_in_file", EDIT)])
        assert reward == 1.0 and metrics == {"success": 1.0, "target_set": 1.0, "others_intact": 1.0}
        clobber = ("write_file", {"path": "config/app.toml", "content": "version = 2\n"})
        assert episode(url, train, [clobber])[0] == 0.0  # collateral damage
        assert episode(url, train, [("delete_file", {"path": "README.md"}), ("replace_in_file", EDIT)])[0] == 0.0
        assert episode(url, train, [])[0] == 0.0  # "Done." without doing it

        bare = httpx.post(f"{url}/replace_in_file", json=EDIT)  # no session cookie
        assert bare.status_code == 404 and "seed_session" in bare.text
        one, two = httpx.Client(base_url=url), httpx.Client(base_url=url)
        for client in (one, two):
            assert client.post("/seed_session", json=first).status_code == 200
        assert one.post("/replace_in_file", json=EDIT).text == "replaced in config/app.toml"
        assert two.post("/replace_in_file", json=EDIT).text == "replaced in config/app.toml"  # its own files
        verdict = one.post("/verify", json={**first, "response": {"output": []}}).json()
        assert verdict["reward"] == 1.0 and verdict["success"] == 1.0
        assert one.post("/verify", json=first).status_code == 404  # verify ended the session

        contract = agent / CONTRACT
        # NeMo Gym's interface has no forbidden tools: the served server still fails an episode that uses one
        every = ["delete_file", "list_files", "read_file", "replace_in_file", "write_file"]
        peer_server.bridged(agent, f"nemo-gym+{url}", every, reward=None)
        audited = rlvr("audit", "isolation", contract, "--sessions", "8", timeout=600)  # round trip
        assert audited.code == 0, audited.stdout[-2000:] + audited.stderr[-2000:]
    assert proc.returncode == 0  # Ctrl-C stops it cleanly


def test_serve_refuses_what_it_cannot_serve(single_turn: Path, agent: Path) -> None:
    done = rlvr("serve", single_turn, "--port", str(free_port()))
    assert done.code == 2 and "tool_use" in done.stderr
    other = rlvr("serve", agent, "--interface", "openenv", "--port", str(free_port()))
    assert other.code == 2 and "nemo-gym" in other.stderr
    edit(agent, "server: rlvr_cli.env.builtin.file_edit:FileEditServer", "server: nemo-gym+http://127.0.0.1:9")
    bridged = rlvr("serve", agent, "--port", str(free_port()))
    assert bridged.code == 2 and "served already" in bridged.stderr
    assert "Traceback" not in done.stderr + other.stderr + bridged.stderr


def test_a_verdict_without_a_reward_is_an_error_not_zero(agent: Path) -> None:
    edit(
        agent,
        "components: [{name: success, weight: 1.0}]",
        "components: [{name: success, weight: 1.0}, {name: style, weight: 0.5}]",
    )
    row = json.loads((agent / "data" / "train.jsonl").read_text().splitlines()[0])
    with serving(agent) as (url, _), httpx.Client(base_url=url) as client:
        assert client.post("/seed_session", json=row).status_code == 200
        answer = client.post("/verify", json={**row, "response": {"output": []}})
    assert answer.status_code == 500 and "lacks component 'style'" in answer.text
