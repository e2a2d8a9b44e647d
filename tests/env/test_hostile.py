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


def test_a_server_started_for_a_run_wants_its_token() -> None:
    guarded = TestClient(create_app(FileEditServer(), token="s3cret"))
    task = {"task": {"id": "t", "target": "app.toml"}}
    assert guarded.post("/seed_session", json=task).status_code == 401
    wrong = guarded.post("/seed_session", json=task, headers={"Authorization": "Bearer nope"})
    assert wrong.status_code == 401
    right = guarded.post("/seed_session", json=task, headers={"Authorization": "Bearer s3cret"})
    assert right.status_code == 200 and right.json()["session_id"]


def test_a_huge_body_is_refused_before_it_is_read(http: TestClient) -> None:
    sid = http.post("/seed_session", json={"task": {"id": "t", "target": "app.toml"}}).json()["session_id"]
    body = {"session_id": sid, "arguments": {"path": "big.txt", "content": "x" * (2 << 20)}}
    answer = http.post("/tools/write_file", json=body)
    assert answer.status_code == 413 and "at most" in answer.json()["detail"]


def test_call_log_and_call_count_are_bounded() -> None:
    server = FileEditServer()
    server.max_calls_per_session, server.max_logged_output = 3, 10
    sid = server.seed_session({"id": "t", "target": "app.toml"})
    outputs = [server.call(sid, "read_file", {"path": "app.toml"}) for _ in range(4)]
    assert "version = 1" in outputs[0] and outputs[3].startswith("error:") and "3 tool calls" in outputs[3]
    assert all(len(c["output"]) <= 10 for c in server.session(sid).calls)
    server.close_session(sid)


def test_abandoned_sessions_expire_and_free_their_folders() -> None:
    server = FileEditServer()
    server.session_ttl_s = 0.0
    sid = server.seed_session({"id": "t", "target": "app.toml"})
    root = server.session(sid).state.root
    server.seed_session({"id": "u", "target": "app.toml"})  # the next seed sweeps the stale one
    assert not root.exists() and server.open_sessions == 1
    with pytest.raises(KeyError):
        server.call(sid, "list_files", {})


def test_close_racing_tool_calls_leaks_nothing() -> None:
    from concurrent.futures import ThreadPoolExecutor

    server = FileEditServer()
    sessions = [server.seed_session({"id": str(i), "target": "app.toml"}) for i in range(100)]
    roots = [server.session(s).state.root for s in sessions]

    def write(sid: str) -> None:
        for _ in range(5):
            try:
                server.call(sid, "write_file", {"path": "deep/er/f.txt", "content": "x"})
            except KeyError:
                return

    with ThreadPoolExecutor(max_workers=16) as pool:
        writes = [pool.submit(write, s) for s in sessions]
        closes = [pool.submit(server.close_session, s) for s in sessions]
        for f in writes + closes:
            f.result()
    assert [r for r in roots if r.exists()] == [] and server.open_sessions == 0
