"""An OpenEnv environment as an rlvr environment (`environment.server: openenv+URL`): a small
environment written for the published `openenv-core` package (tests/env/openenv/guess.py),
served as OpenEnv serves one, by OpenEnv's own Python (`.venv-openenv`, built by `make install`),
through `rlvr validate --deep`, `rlvr audit verifier`, `rlvr audit isolation` and a few `rlvr
train` steps; the same environment with one target for every session fails the isolation audit."""

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
OPENENV = ROOT / ".venv-openenv" / "bin" / "python"
GUESS = Path(__file__).with_name("openenv") / "guess.py"
CONTRACT = "experiment.rlvr.yaml"
pytestmark = pytest.mark.skipif(
    not OPENENV.exists(), reason="OpenEnv's environment .venv-openenv is built by make install"
)


def served(*mode: str) -> contextlib.AbstractContextManager[str]:
    """The guess environment served by OpenEnv's own Python (`shared`: one target for all)."""
    return peer_server.served([str(OPENENV), str(GUESS), *mode], "/health")


@pytest.fixture(scope="module")
def openenv_url() -> Iterator[str]:
    with served() as url:
        yield url


def tasks(start: int, n: int) -> list[dict]:
    return [
        {
            "id": f"guess-{i}",
            "prompt": f"Guess the hidden number (it is {i * 7 % 100}): call step.",
            "target": i * 7 % 100,
        }
        for i in range(start, start + n)
    ]


@pytest.fixture
def exp(tool_use: Path, tiny_chatml: Path, tmp_path: Path, openenv_url: str) -> Path:
    step = lambda guess: [[{"type": "function_call", "name": "step", "arguments": {"guess": guess}}]]  # noqa: E731
    done = [[{"type": "message", "role": "assistant", "content": "Found it."}]]
    candidates = [
        {
            "name": "the number",
            "task": "guess-1",
            "kind": "correct",
            "expected": "accept",
            "trajectory": step(7) + done,
        },
        {"name": "a near miss", "task": "guess-1", "kind": "wrong", "expected": "reject", "trajectory": step(8) + done},
        {"name": "another number", "task": "guess-2", "kind": "correct", "expected": "accept", "trajectory": step(14)},
    ]
    server = f"openenv+{openenv_url}"
    return peer_server.experiment(
        tool_use, tiny_chatml, tmp_path / "agent", server, ["observe", "step"], tasks, candidates
    )


def test_an_openenv_environment_is_validated_audited_and_trained_on(exp: Path) -> None:
    run = peer_server.validate_audit_train(exp)
    steps = [json.loads(line) for line in (run / "metrics.jsonl").read_text().splitlines()]
    assert len(steps) == 2 and steps[-1]["total_verifier_calls"] == 32


def test_shared_state_in_an_openenv_environment_is_found(exp: Path, openenv_url: str) -> None:
    with served("shared") as shared:
        edit(exp, f"server: openenv+{openenv_url}", f"server: openenv+{shared}")
        done = rlvr("audit", "isolation", exp / CONTRACT, "--sessions", "8", timeout=600)
    assert done.code == 1, done.stdout[-3000:] + done.stderr[-2000:]
    assert "share state" in done.stdout


def test_an_openenv_server_that_is_down_is_a_clear_error(exp: Path, openenv_url: str) -> None:
    edit(exp, f"server: openenv+{openenv_url}", f"server: openenv+http://127.0.0.1:{free_port()}")
    done = rlvr("audit", "isolation", exp / CONTRACT, "--sessions", "2", timeout=300)
    assert done.code == 1 and "does not answer /schema" in done.stdout + done.stderr and "Traceback" not in done.stderr
