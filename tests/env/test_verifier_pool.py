"""The verifier's worker (env/verifier_pool.py) answers a batch in few messages; each call is
still bounded by `timeout_s` from its own start, and a call that hangs or kills the worker gets
that verdict itself while every other call of the batch gets its own, the ones finished but not
yet sent when the worker was killed included."""

from __future__ import annotations

import time
from pathlib import Path

import pytest

from rlvr_cli.env.verifier_pool import VerifierPool

VERIFIER = """
import os, time

def verify(task, response):
    if response == "hang":
        time.sleep(60)
    if response == "die":
        os._exit(3)
    if response.startswith("sleep "):
        time.sleep(float(response.split()[1]))
        response = task["answer"]
    right = float(response == task["answer"])
    return {"status": "ok", "reward": right, "components": {"correct": right}}
"""


@pytest.fixture
def folder(tmp_path: Path) -> Path:
    (tmp_path / "pool_verifier.py").write_text(VERIFIER)
    return tmp_path


def verdicts(folder: Path, responses: list[str], timeout_s: float) -> list[tuple[str, float | None, float, str]]:
    task = {"id": "t", "answer": "4"}
    with VerifierPool("pool_verifier:verify", folder, timeout_s) as pool:
        return [(v.status, v.reward, s, v.detail or "") for v, s in pool.verify_many([(task, r) for r in responses])]


def test_a_hung_and_a_dying_call_get_their_own_verdicts_and_the_rest_theirs(folder: Path) -> None:
    responses = ["4", "5", "4", "hang", "4", "5", "die", "4"] + ["4", "5"] * 40
    started = time.monotonic()
    got = verdicts(folder, responses, timeout_s=1.0)
    took = time.monotonic() - started
    assert [g[0] for g in got[:8]] == ["ok", "ok", "ok", "timeout", "ok", "ok", "verifier_error", "ok"]
    assert "exited with code 3" in got[6][3] and "within 1.0 s" in got[3][3]
    # the calls finished before the hang and the death were held by the killed workers: asked again
    expected = [1.0, 0.0, 1.0, None, 1.0, 0.0, None, 1.0] + [1.0, 0.0] * 40
    assert [g[1] for g in got] == expected
    assert 1.0 <= got[3][2] < 2.0  # the hung call was timed from its own start, once
    assert took < 8.0  # the hang cost one timeout, not one per retry


def test_each_call_is_bounded_from_its_own_start(folder: Path) -> None:
    # four calls of 0.5 s each take 2 s together, past the bound, and each is within it
    assert [g[0] for g in verdicts(folder, ["sleep 0.5"] * 4, timeout_s=1.0)] == ["ok"] * 4
    # paired: a single call past the bound is a timeout
    assert [g[0] for g in verdicts(folder, ["4", "sleep 1.6", "4"], timeout_s=1.0)] == ["ok", "timeout", "ok"]
