"""Hostile input to a resources server: paths from the task and from tool calls stay inside the
session, and no tool failure becomes an HTTP 500."""

from __future__ import annotations

from pathlib import Path

import pytest
from fastapi.testclient import TestClient

from rlvr_cli.env.builtin.file_edit import FileEditServer
from rlvr_cli.env.server import create_app


@pytest.fixture
def http() -> TestClient:
    return TestClient(create_app(FileEditServer()))


@pytest.mark.parametrize("target", ["../../escaped.txt", "../x", "/tmp/rlvr-escape-absolute.txt", "~/x", "a\x00b"])
def test_a_task_cannot_seed_files_outside_its_session(
    http: TestClient, target: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import tempfile

    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))  # session folders are made here
    seeded = http.post("/seed_session", json={"task": {"id": "t", "target": target}})
    assert seeded.status_code == 422 and "cannot seed" in seeded.json()["detail"]
    assert list(tmp_path.iterdir()) == []  # nothing written, no session folder leaked
    assert not Path("/tmp/rlvr-escape-absolute.txt").exists()


def test_a_long_path_is_a_tool_error_not_a_500(http: TestClient) -> None:
    sid = http.post("/seed_session", json={"task": {"id": "t", "target": "app.toml"}}).json()["session_id"]
    for path in ("a" * 300, "d/" * 200 + "f"):
        answer = http.post("/tools/write_file", json={"session_id": sid, "arguments": {"path": path, "content": "x"}})
        assert answer.status_code == 200 and answer.json()["output"].startswith("error:")
    assert http.post("/close", json={"session_id": sid}).json() == {"closed": True}


class Crashes(FileEditServer):
    offered = ("list_files", "explode")

    from rlvr_cli.env.server import tool

    @tool
    def explode(self, state: object) -> str:
        """A tool with a bug."""
        raise RuntimeError("boom")

    def verify(self, state, task, calls, final_message):  # type: ignore[no-untyped-def]
        raise ZeroDivisionError("verify bug")


def test_a_crashing_tool_and_a_crashing_verify_are_answers_not_500s() -> None:
    http = TestClient(create_app(Crashes()))
    sid = http.post("/seed_session", json={"task": {"id": "t", "target": "app.toml"}}).json()["session_id"]
    answer = http.post("/tools/explode", json={"session_id": sid, "arguments": {}})
    assert answer.status_code == 200 and "RuntimeError: boom" in answer.json()["output"]
    verdict = http.post("/verify", json={"session_id": sid}).json()
    assert verdict["status"] == "verifier_error" and "ZeroDivisionError" in verdict["detail"]
    assert verdict["reward"] is None
