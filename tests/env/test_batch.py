"""`POST /batch` (env/batch.py): many session operations in one request, each answered as its
single endpoint would answer it; one session's operations in order; a hung tool answered 504
without holding the batch; and `EnvClient.batch` against a server that has no /batch."""

from __future__ import annotations

import threading
import time
from typing import Any

import pytest
from fastapi.testclient import TestClient

from rlvr_cli.env.agent import EnvClient, serve
from rlvr_cli.env.builtin.lookup import LookupServer
from rlvr_cli.env.server import ResourcesServer, ToolError, create_app, tool
from rlvr_cli.env.verdict import Verdict

BOX = {"id": "box-1", "prompt": "What is in box 1?", "secret": "4"}


class Slow(ResourcesServer):
    """A tool that hangs until released, and one that answers."""

    gate = threading.Event()

    def seed(self, task: dict[str, Any]) -> dict[str, Any]:
        return {"n": 0}

    @tool
    def hang(self, state: dict[str, Any]) -> str:
        """Never answers in time."""
        self.gate.wait(30)
        return "late"

    @tool
    def bump(self, state: dict[str, Any]) -> str:
        """Count."""
        state["n"] += 1
        if state["n"] > 2:
            raise ToolError("enough")
        return str(state["n"])

    def verify(self, state: Any, task: dict[str, Any], calls: list[dict[str, Any]], final_message: str) -> Verdict:
        return Verdict("ok", float(state["n"]), {"n": float(state["n"])})


def batch(http: TestClient, ops: list[dict[str, Any]], timeout_s: float = 10) -> list[dict[str, Any]]:
    response = http.post("/batch", json={"ops": ops, "timeout_s": timeout_s})
    assert response.status_code == 200, response.text
    return response.json()["results"]


def test_each_result_is_what_the_single_endpoint_answers() -> None:
    http = TestClient(create_app(LookupServer()))
    seeded = batch(http, [{"op": "seed", "task": BOX}, {"op": "seed", "task": {"id": "no-secret"}}])
    assert seeded[0]["status"] == 200 and seeded[1]["status"] == 422
    assert seeded[1]["detail"] == http.post("/seed_session", json={"task": {"id": "no-secret"}}).json()["detail"]
    sid = seeded[0]["body"]["session_id"]
    single = http.post("/seed_session", json={"task": BOX}).json()["session_id"]
    ops = [
        {"op": "tool", "session_id": sid, "name": "open_box", "arguments": {}},
        {"op": "tool", "session_id": sid, "name": "shell", "arguments": {}},
        {"op": "tool", "session_id": "nobody", "name": "open_box", "arguments": {}},
        {"op": "tool", "session_id": sid, "name": "open_box", "arguments": {"extra": 1}},
        {"op": "verify", "session_id": sid, "final_message": "4", "log": True},
        {"op": "close", "session_id": sid},
        {"op": "verify", "session_id": sid},
        {"op": "launch", "session_id": sid},
        {"session_id": sid},
        {"op": "tool", "session_id": sid},
    ]
    results = batch(http, ops)
    assert [r["status"] for r in results] == [200, 403, 404, 200, 200, 200, 404, 422, 422, 422]
    assert results[0]["body"] == {"output": "4"}
    assert results[3]["body"]["output"].startswith("error:")  # a bad argument is the tool's answer, as alone
    verdict = results[4]["body"]
    assert verdict["reward"] == 1.0 and [c["tool"] for c in verdict["calls"]] == ["open_box", "open_box"]
    for op, result in ((ops[1], results[1]), (ops[2], results[2])):
        alone = http.post(f"/tools/{op['name']}", json={"session_id": single if op is ops[1] else "nobody"})
        assert alone.status_code == result["status"] and alone.json()["detail"] == result["detail"]
    assert "unknown operation 'launch'" in results[7]["detail"] and "'name'" in results[9]["detail"]


def test_one_sessions_operations_run_in_order_and_sessions_run_together() -> None:
    http = TestClient(create_app(Slow()))
    a, b = (batch(http, [{"op": "seed", "task": {}}])[0]["body"]["session_id"] for _ in range(2))
    bumps = [{"op": "tool", "session_id": s, "name": "bump", "arguments": {}} for s in (a, b, a, b, a)]
    results = batch(http, [*bumps, {"op": "verify", "session_id": a}, {"op": "close", "session_id": a}])
    assert [r["body"]["output"] for r in results[:5]] == ["1", "1", "2", "2", "error: enough"]
    assert results[5]["body"]["reward"] == 3.0 and results[6]["body"] == {"closed": True}


def test_an_operation_that_raises_is_a_500_and_its_session_goes_on() -> None:
    class Broken(Slow):
        def verify(self, state: Any, task: dict[str, Any], calls: list[dict[str, Any]], final_message: str) -> Verdict:
            raise RuntimeError("verifier bug")

        def snapshot(self, state: Any) -> Any:
            raise RuntimeError("snapshot bug")

    http = TestClient(create_app(Broken()))
    sid = batch(http, [{"op": "seed", "task": {}}])[0]["body"]["session_id"]
    ops = [{"op": "snapshot", "session_id": sid}, {"op": "close", "session_id": sid}]
    results = batch(http, ops)
    assert [r["status"] for r in results] == [500, 200] and "snapshot bug" in results[0]["detail"]


def test_a_hung_tool_is_a_504_and_the_rest_of_the_batch_is_answered() -> None:
    Slow.gate.clear()
    http = TestClient(create_app(Slow()))
    a, b = (batch(http, [{"op": "seed", "task": {}}])[0]["body"]["session_id"] for _ in range(2))
    start = time.perf_counter()
    ops = [
        {"op": "tool", "session_id": a, "name": "hang", "arguments": {}},
        {"op": "verify", "session_id": a},  # waits for its session: late too
        {"op": "tool", "session_id": b, "name": "bump", "arguments": {}},
    ]
    results = batch(http, ops, timeout_s=1.0)
    took = time.perf_counter() - start
    Slow.gate.set()
    assert [r["status"] for r in results] == [504, 504, 200] and took < 5, (results, took)
    assert "no answer within 1.0 s" in results[0]["detail"]


def test_a_batch_over_the_limits_is_refused_whole() -> None:
    http = TestClient(create_app(LookupServer()))
    too_many = http.post("/batch", json={"ops": [{"op": "seed", "task": BOX}] * 4097})
    assert too_many.status_code == 422
    assert http.post("/batch", json={"ops": [], "timeout_s": 0}).status_code == 422
    assert http.post("/batch", json={"ops": "seed"}).status_code == 422


def test_the_client_falls_back_to_single_requests_without_batch() -> None:
    """A server reached at its URL may implement only the single endpoints."""
    inner = create_app(LookupServer())

    async def app(scope: dict, receive: Any, send: Any) -> None:  # every route but /batch
        if scope["type"] == "http" and scope["path"] == "/batch":
            await send({"type": "http.response.start", "status": 404, "headers": []})
            await send({"type": "http.response.body", "body": b""})
            return
        await inner(scope, receive, send)

    with serve(app) as url:
        client = EnvClient(url, timeout_s=5)
        seeded = client.batch([{"op": "seed", "task": BOX}])
        sid = seeded[0]["body"]["session_id"]
        results = client.batch(
            [
                {"op": "tool", "session_id": sid, "name": "open_box", "arguments": {}},
                {"op": "verify", "session_id": sid, "final_message": "4"},
                {"op": "close", "session_id": sid},
                {"op": "close", "session_id": sid},
            ]
        )
        assert client.batches is False
        assert [r["status"] for r in results] == [200, 200, 200, 404]
        assert results[0]["body"]["output"] == "4" and results[1]["body"]["reward"] == 1.0


@pytest.mark.parametrize("timeout", [0.5])
def test_the_client_gives_each_operation_its_timeout(timeout: float) -> None:
    Slow.gate.clear()
    with serve(create_app(Slow())) as url:
        client = EnvClient(url, timeout_s=timeout)
        sid = client.seed({})
        start = time.perf_counter()
        results = client.batch([{"op": "tool", "session_id": sid, "name": "hang", "arguments": {}}])
        Slow.gate.set()
        assert results[0]["status"] == 504 and time.perf_counter() - start < 5
