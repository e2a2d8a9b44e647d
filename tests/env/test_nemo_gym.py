"""A NeMo Gym resources server as an rlvr environment (`environment.server: nemo-gym+URL`): one
of the published nemo-gym package's own example servers (its stateful counter, sessions kept in
its signed cookie), served by NeMo Gym's own Python (`.venv-nemo`, built by `make install`), with
its own example rows, through `rlvr validate --deep`, `rlvr audit verifier`, `rlvr audit
isolation` and a few `rlvr train` steps; and a dead server is a clear error."""

from __future__ import annotations

import contextlib
import json
from collections.abc import Iterator
from pathlib import Path

import pytest

from rlvr_cli.env.agent import free_port
from tests.conftest import edit, rlvr
from tests.env import peer_server

ROOT = Path(__file__).resolve().parents[2]
NEMO = ROOT / ".venv-nemo" / "bin" / "python"
SERVE = Path(__file__).with_name("nemo") / "serve.py"
COUNTER = "resources_servers.example_session_state_mgmt.app:StatefulCounterResourcesServer"
CONTRACT = "experiment.rlvr.yaml"
pytestmark = pytest.mark.skipif(not NEMO.exists(), reason="NeMo Gym's environment .venv-nemo is built by make install")


def served(spec: str) -> contextlib.AbstractContextManager[str]:
    """A NeMo Gym resources server class served by NeMo Gym's own Python; its URL."""
    return peer_server.served([str(NEMO), str(SERVE), spec], "/openapi.json")


@pytest.fixture(scope="module")
def nemo_url() -> Iterator[str]:
    with served(COUNTER) as url:
        yield url


def rows(start: int, n: int) -> list[dict]:
    """Rows in NeMo Gym's own form (its example.jsonl), with an id and the prompt rlvr renders."""
    out = []
    for i in range(start, start + n):
        a, b, initial = i + 1, i * 7 % 5 + 1, i % 7
        text = f"add {a} then add {b} then get the count"
        params = {"input": [{"role": "user", "content": text}]}
        out.append(
            {
                "id": f"count-{i}",
                "prompt": params["input"],
                "responses_create_params": params,
                "expected_count": initial + a + b,
                "initial_count": initial,
            }
        )
    return out


@pytest.fixture
def exp(tool_use: Path, tiny_chatml: Path, tmp_path: Path, nemo_url: str) -> Path:
    calls = lambda *steps: [[{"type": "function_call", "name": n, "arguments": a}] for n, a in steps]  # noqa: E731
    done = [[{"type": "message", "role": "assistant", "content": "The count is 2."}]]
    both = [("increment_counter", {"count": 1}), ("increment_counter", {"count": 1})]  # count-0: 0 + 1 + 1
    candidates = {
        "candidates": [
            {
                "name": "add both, then read",
                "task": "count-0",
                "kind": "correct",
                "expected": "accept",
                "trajectory": calls(*both, ("get_counter_value", {})) + done,
            },
            {
                "name": "add only the first",
                "task": "count-0",
                "kind": "wrong",
                "expected": "reject",
                "trajectory": calls(("increment_counter", {"count": 1})) + done,
            },
        ]
    }
    tools = ["get_counter_value", "increment_counter"]
    server = f"nemo-gym+{nemo_url}"
    return peer_server.experiment(
        tool_use, tiny_chatml, tmp_path / "agent", server, tools, rows, candidates["candidates"]
    )


def test_a_nemo_gym_server_is_validated_audited_and_trained_on(exp: Path) -> None:
    run = peer_server.validate_audit_train(exp)
    assert (run / "final").is_dir()
    steps = [json.loads(line) for line in (run / "metrics.jsonl").read_text().splitlines()]
    assert len(steps) == 2 and steps[-1]["total_verifier_calls"] == 32  # every episode judged by NeMo Gym's verify
    records = rlvr("audit", "rollouts", run, "--format", "json", timeout=600)
    assert records.code in (0, 1), records.stderr[-2000:]


def test_shared_state_in_a_nemo_gym_server_is_found(exp: Path, nemo_url: str) -> None:
    """The paired failure: the same counter kept once for all sessions fails the isolation audit."""
    with served("leaky:SharedCounterResourcesServer") as leaky:
        edit(exp, f"server: nemo-gym+{nemo_url}", f"server: nemo-gym+{leaky}")
        done = rlvr("audit", "isolation", exp / CONTRACT, "--sessions", "8", timeout=600)
    assert done.code == 1, done.stdout[-3000:] + done.stderr[-2000:]
    assert "gets ok (reward 1) alone but ok (reward 0) among" in done.stdout and "share state" in done.stdout


def test_a_nemo_gym_server_that_is_down_is_a_clear_error(exp: Path, nemo_url: str) -> None:
    edit(exp, f"server: nemo-gym+{nemo_url}", f"server: nemo-gym+http://127.0.0.1:{free_port()}")
    done = rlvr("audit", "isolation", exp / CONTRACT, "--sessions", "2", timeout=300)
    assert done.code == 1 and "Traceback" not in done.stderr, (done.code, done.stderr[-500:])
    assert "does not answer /openapi.json" in done.stdout + done.stderr
