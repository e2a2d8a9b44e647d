"""A tool's result as the model reads it (env/results.py): what JSON cannot carry is a tool error
the model reads, on the single endpoint and in `POST /batch` alike (never an HTTP 500 that loses
the whole batch); a result over the cap is cut with a marker; and the client stops reading an
answer past its bound, so a server that does not cap cannot fill the trainer's memory."""

from __future__ import annotations

import math
from typing import Any

import pytest
from fastapi.testclient import TestClient

from rlvr_cli.env.agent import EnvClient, EnvHTTPError, load_app, serve
from rlvr_cli.env.results import output_cap, tool_output
from rlvr_cli.env.server import ResourcesServer, create_app, tool
from rlvr_cli.env.verdict import Verdict


class Odd(ResourcesServer):
    """Tools that return what JSON cannot carry, and one that returns far too much."""

    def seed(self, task: dict[str, Any]) -> dict[str, Any]:
        return {}

    @tool
    def value(self, state: dict[str, Any], kind: str) -> Any:
        """Return a value of the given kind."""
        return {
            "nan": math.nan,
            "inf": -math.inf,
            "set": {1, 2},
            "bytes": b"\x00\x01",
            "object": object(),
            "nested": {"a": [1, {"b": math.nan}]},
            "surrogate": "x\ud800y",
            "fine": {"a": [1, 2.5, "é"]},
        }[kind]

    @tool
    def flood(self, state: dict[str, Any], size: int) -> str:
        """Answer with `size` characters."""
        return "x" * size

    def verify(self, state: Any, task: dict[str, Any], calls: list[dict[str, Any]], final_message: str) -> Verdict:
        return Verdict("ok", 1.0, {"success": 1.0})


def _call(http: TestClient, name: str, arguments: dict[str, Any]) -> tuple[Any, Any]:
    """(single endpoint's output, /batch's output) of the same call in two fresh sessions."""
    sid = http.post("/seed_session", json={"task": {"id": "t"}}).json()["session_id"]
    single = http.post(f"/tools/{name}", json={"session_id": sid, "arguments": arguments})
    assert single.status_code == 200, single.text
    sid2 = http.post("/seed_session", json={"task": {"id": "t"}}).json()["session_id"]
    batch = http.post(
        "/batch", json={"ops": [{"op": "tool", "session_id": sid2, "name": name, "arguments": arguments}]}
    )
    assert batch.status_code == 200, batch.text
    (result,) = batch.json()["results"]
    assert result["status"] == 200, result
    return single.json()["output"], result["body"]["output"]


@pytest.mark.parametrize("kind", ["nan", "inf", "set", "bytes", "object", "nested"])
def test_a_non_json_result_is_a_tool_error_on_both_endpoints(kind: str) -> None:
    single, batched = _call(TestClient(create_app(Odd())), "value", {"kind": kind})
    assert single == batched
    assert single.startswith("error: value returned ") and "not JSON" in single


def test_json_results_pass_unchanged_and_lone_surrogates_become_replacement_characters() -> None:
    http = TestClient(create_app(Odd()))
    assert _call(http, "value", {"kind": "fine"}) == ({"a": [1, 2.5, "é"]},) * 2
    assert _call(http, "value", {"kind": "surrogate"}) == ("x\ufffdy",) * 2


def test_a_result_over_the_cap_is_cut_with_a_marker_on_both_endpoints() -> None:
    server = Odd()
    server.max_output_bytes = 5_000
    single, batched = _call(TestClient(create_app(server)), "flood", {"size": 3_000_000})
    assert single == batched
    assert single.startswith("x" * 5_000) and "output truncated: 3,000,000 bytes, the first 5,000 kept" in single
    assert len(single) < 5_200
    # under the cap: as it was
    assert _call(TestClient(create_app(server)), "flood", {"size": 4_000})[0] == "x" * 4_000


def test_load_app_sets_the_contracts_cap_and_the_default_follows_the_token_budget() -> None:
    app = load_app("tests.env.test_tool_results:Odd", ".", max_output_bytes=1234)
    assert app.state.server.max_output_bytes == 1234
    assert output_cap(8192) == 16 * 8192 and output_cap(16) == 4096 and output_cap(8192, 100) == 100
    cut = tool_output("t", "é" * 10, 5)  # never half a character
    assert cut.startswith("éé") and "é" * 3 not in cut and "\ufffd" not in cut


async def _foreign(scope: dict, receive: Any, send: Any) -> None:
    """A server at a URL that does not cap: it answers every request with 40 MB."""
    body = b'{"output": "' + b"y" * (40 << 20) + b'"}'
    await send({"type": "http.response.start", "status": 200, "headers": [(b"content-type", b"application/json")]})
    await send({"type": "http.response.body", "body": body})


def test_the_client_stops_reading_an_answer_over_its_bound() -> None:
    with serve(_foreign) as url:
        client = EnvClient(url, timeout_s=30, max_output_bytes=10_000)
        try:
            with pytest.raises(EnvHTTPError, match="over 1,058,576 bytes; rlvr stopped reading it"):
                client.call("s", "t", {})
        finally:
            client.close()


def test_a_dropped_connection_is_retried_for_reads_and_verifies_never_for_tool_calls(capfd: Any) -> None:
    """httpx's own transport for tests stands in for a server whose connection drops once."""
    import httpx

    from rlvr_cli.env.agent import EnvUnreachable

    seen: list[str] = []

    def handler(request: httpx.Request) -> httpx.Response:
        seen.append(request.url.path)
        if seen.count(request.url.path) == 1:
            raise httpx.RemoteProtocolError("Server disconnected without sending a response.")
        if request.url.path == "/verify":
            return httpx.Response(200, json={"status": "ok", "reward": 1.0, "components": {}})
        return httpx.Response(200, json={"results": []})

    client = EnvClient("http://127.0.0.1:9", timeout_s=5)
    client.http = httpx.Client(base_url="http://127.0.0.1:9", transport=httpx.MockTransport(handler))
    assert client.verify("s").status == "ok" and seen == ["/verify", "/verify"]
    assert "retrying in 0.2 s" in capfd.readouterr().err
    with pytest.raises(EnvUnreachable):  # a tool call could change the session twice: never sent again
        client.call("s", "open_box", {})
    assert seen.count("/tools/open_box") == 1
    ops = [{"op": "verify", "session_id": "s"}, {"op": "close", "session_id": "s"}]
    assert client._send("POST", "/batch", {"ops": ops}).status_code == 200 and seen.count("/batch") == 2
