"""An OpenEnv environment as an rlvr environment (`environment.server: openenv+URL`): a small
environment written for the published `openenv-core` package (tests/env/openenv/guess.py),
served as OpenEnv serves one, by OpenEnv's own Python (`.venv-openenv`, built by `make install`),
through `rlvr validate --deep`, `rlvr audit verifier`, `rlvr audit isolation` and a few `rlvr
train` steps; the same environment with one target for every session fails the isolation audit."""

from __future__ import annotations

import contextlib
import json
import shutil
from collections.abc import Iterator
from pathlib import Path

import pytest

from rlvr_cli.env.agent import free_port
from tests.conftest import copy_experiment, edit, rlvr
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
    folder = copy_experiment(tool_use, tmp_path / "agent")
    shutil.copytree(tiny_chatml, folder / "model")
    edit(folder, "server: rlvr_cli.env.builtin.file_edit:FileEditServer", f"server: openenv+{openenv_url}")
    edit(folder, "tools: [list_files, read_file, write_file, replace_in_file]", "tools: [observe, step]")
    edit(folder, "forbidden_tools: [delete_file]", "forbidden_tools: []")
    edit(folder, "components: [{name: success, weight: 1.0}]", "components: [{name: reward, weight: 1.0}]")
    edit(folder, "max_steps: 50", "max_steps: 2")
    splits = {"all": tasks(0, 24), "train": tasks(0, 16), "holdout": tasks(16, 4), "sealed_eval": tasks(20, 4)}
    for name, found in splits.items():
        (folder / "data" / f"{name}.jsonl").write_text("".join(json.dumps(r) + "\n" for r in found))
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
    (folder / "audit" / "candidates.yaml").write_text(json.dumps({"candidates": candidates}))
    return folder


def test_an_openenv_environment_is_validated_audited_and_trained_on(exp: Path) -> None:
    assert rlvr("validate", "--deep", exp / CONTRACT).code == 0
    audit = rlvr("audit", "verifier", exp / CONTRACT, "--format", "json", timeout=600)
    assert audit.code == 0, audit.stdout[-3000:] + audit.stderr[-2000:]
    report = json.loads(audit.stdout)
    kinds = {o["kind"] for o in report["outcomes"]}
    assert report["disagreements"] == 0 and {"correct", "wrong", "no_op_claim"} <= kinds
    isolation = rlvr("audit", "isolation", exp / CONTRACT, "--sessions", "8", timeout=600)
    assert isolation.code == 0, isolation.stdout[-3000:] + isolation.stderr[-2000:]
    run = exp / "run"
    trained = rlvr("train", exp / CONTRACT, "--run-dir", run, timeout=900)
    assert trained.code == 0, trained.stderr[-3000:]
    steps = [json.loads(line) for line in (run / "metrics.jsonl").read_text().splitlines()]
    assert [m["verifier_error_rate"] for m in steps] == [0.0, 0.0] and steps[-1]["total_verifier_calls"] == 32


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
