"""The plug-in contract a stranger writes against: typed tool parameters, snapshot, and the
resources a session registers, freed on close whatever the state calls them."""

from __future__ import annotations

import enum
import sys
from pathlib import Path
from typing import Literal

import pytest
from fastapi.testclient import TestClient
from pydantic import BaseModel

from rlvr_cli.env.server import ResourcesServer, create_app, tool
from rlvr_cli.env.verdict import Verdict

sys.path.insert(0, str(Path(__file__).parent))
from domains import Bank, Inventory


class Color(enum.Enum):
    RED = "red"
    BLUE = "blue"


class Box(BaseModel):
    width: int
    label: str = ""


class Typed(ResourcesServer):
    def seed(self, task):
        folder = self.folder()
        handle = self.hold(open(folder / "log.txt", "w"))  # noqa: SIM115 - held: closed on close
        return {"folder": folder, "handle": handle, "calls": []}

    @tool
    def everything(
        self,
        state,
        count: int,
        ratio: float,
        flag: bool,
        mode: Literal["fast", "slow"],
        color: Color,
        tags: list[str],
        box: Box,
        note: str | None = None,
    ) -> str:
        """Take every kind of parameter."""
        state["calls"].append([count, ratio, flag, mode, color.value, tags, box.width, note])
        return f"{count} {type(ratio).__name__} {flag} {mode} {color.value} {tags} {box.width} {note}"

    def verify(self, state, task, calls, final_message):
        return Verdict("ok", 1.0, {"success": 1.0})

    def snapshot(self, state):
        return {"calls": state["calls"]}


def _schema(server: ResourcesServer, name: str) -> dict:
    return next(
        s["function"] for s in TestClient(create_app(server)).get("/tools").json() if s["function"]["name"] == name
    )


def test_schemas_are_typed_from_annotations() -> None:
    params = _schema(Typed(), "everything")["parameters"]
    props = params["properties"]
    assert props["count"] == {"type": "integer"} and props["ratio"] == {"type": "number"}
    assert props["flag"] == {"type": "boolean"} and props["mode"] == {"enum": ["fast", "slow"], "type": "string"}
    assert props["tags"] == {"items": {"type": "string"}, "type": "array"}
    assert "$ref" in props["color"] and "$ref" in props["box"] and set(params["$defs"]) == {"Color", "Box"}
    assert sorted(params["required"]) == ["box", "color", "count", "flag", "mode", "ratio", "tags"]
    assert _schema(Inventory(), "set_quantity")["parameters"]["properties"]["quantity"] == {"type": "integer"}
    account = _schema(Bank(), "balance")["parameters"]["properties"]["account"]
    assert account["enum"] == ["alice", "bob", "carol"]  # from `from __future__ import annotations` code


def test_arguments_are_validated_before_the_tool_runs() -> None:
    http = TestClient(create_app(Typed()))
    sid = http.post("/seed_session", json={"task": {"id": "t"}}).json()["session_id"]
    good = {"count": 3, "ratio": 1, "flag": True, "mode": "fast", "color": "red", "tags": ["a"], "box": {"width": 2}}
    out = http.post("/tools/everything", json={"session_id": sid, "arguments": good}).json()["output"]
    assert out == "3 float True fast red ['a'] 2 None"  # typed: 1 became 1.0, "red" a Color, the box a Box
    for bad, words in [
        ({**good, "count": "many"}, "count: Input should be a valid integer"),
        ({**good, "mode": "medium"}, "mode: Input should be 'fast' or 'slow'"),
        ({**good, "box": {"label": "x"}}, "box.width: Field required"),
        ({**good, "extra": 1}, "extra: Extra inputs are not permitted"),
        ({k: v for k, v in good.items() if k != "tags"}, "tags: Field required"),
    ]:
        answer = http.post("/tools/everything", json={"session_id": sid, "arguments": bad})
        assert answer.status_code == 200  # a tool error the model reads, not an HTTP failure
        assert (
            answer.json()["output"].startswith("error: bad arguments for everything: ")
            and words in answer.json()["output"]
        )
    snapshot = http.post("/snapshot", json={"session_id": sid}).json()["snapshot"]
    assert len(snapshot["calls"]) == 1  # no bad call reached the tool


def test_registered_resources_are_freed_on_close_and_on_a_failed_seed() -> None:
    server = Typed()
    http = TestClient(create_app(server))
    sid = http.post("/seed_session", json={"task": {"id": "t"}}).json()["session_id"]
    folder, handle = server.resources(sid)
    assert folder.is_dir() and not handle.closed
    assert http.post("/close", json={"session_id": sid}).json() == {"closed": True}
    assert not folder.exists() and handle.closed
    assert http.post("/snapshot", json={"session_id": sid}).status_code == 404

    class FailsLate(Typed):
        def seed(self, task):
            self.made = self.folder()
            raise ValueError("no such task")

    failing = FailsLate()
    answer = TestClient(create_app(failing)).post("/seed_session", json={"task": {"id": "t"}})
    assert answer.status_code == 422 and not failing.made.exists()


def test_snapshot_is_501_when_the_environment_has_none() -> None:
    class NoSnapshot(Typed):
        snapshot = ResourcesServer.snapshot

    http = TestClient(create_app(NoSnapshot()))
    sid = http.post("/seed_session", json={"task": {"id": "t"}}).json()["session_id"]
    answer = http.post("/snapshot", json={"session_id": sid})
    assert answer.status_code == 501 and "no snapshot" in answer.json()["detail"]


class Shown(ResourcesServer):
    """A tool whose schema is written for the policy (short, in the words of its prompts)."""

    @tool(shown={"description": "Look a word up.", "parameters": {"type": "object", "properties": {"w": {}}}})
    def lookup(self, state, w: str) -> str:
        return w.upper()

    def seed(self, task):
        return {}

    def verify(self, state, task, calls, final_message):
        return Verdict("ok", 1.0, {"success": 1.0})


def test_a_tool_schema_written_for_the_policy_is_shown_as_written_and_arguments_still_validate() -> None:
    assert _schema(Shown(), "lookup") == {
        "name": "lookup",
        "description": "Look a word up.",
        "parameters": {"type": "object", "properties": {"w": {}}},
    }
    http = TestClient(create_app(Shown()))
    sid = http.post("/seed_session", json={"task": {"id": "t"}}).json()["session_id"]
    assert http.post("/tools/lookup", json={"session_id": sid, "arguments": {"w": "ab"}}).json()["output"] == "AB"
    bad = http.post("/tools/lookup", json={"session_id": sid, "arguments": {"w": 3}}).json()["output"]
    assert bad.startswith("error: bad arguments for lookup: w:")  # the annotations still type the call
    with pytest.raises(TypeError, match="shown= takes a mapping of 'description' and 'parameters'"):
        tool(shown={"name": "x"})(lambda self, state: "")
    with pytest.raises(TypeError, match="type 'object'"):
        tool(shown={"parameters": {"type": "string"}})(lambda self, state: "")
