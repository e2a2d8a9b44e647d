"""The session operations of a resources server (env/server.py) as its HTTP face answers them:
request shapes, and one function per operation that returns the answer's body or raises
`Failure` with the status and message. The single endpoints (env/app.py) and `POST /batch`
(env/batch.py) both answer through them, so an operation answers the same either way."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from pydantic import BaseModel, ConfigDict, Field

if TYPE_CHECKING:
    from rlvr_cli.env.server import ResourcesServer


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid")


class SeedRequest(_Strict):
    task: dict[str, Any]


class ToolRequest(_Strict):
    session_id: str
    arguments: dict[str, Any] = {}


class VerifyRequest(_Strict):
    session_id: str
    final_message: str = ""
    snapshots: bool = False  # also the snapshots right before and after, taken under the same lock
    log: bool = False  # also the server's own log of the session's calls, read under the same lock


class CloseRequest(_Strict):
    session_id: str


class BatchRequest(_Strict):
    ops: list[dict[str, Any]] = Field(max_length=4096)
    timeout_s: float = Field(30.0, gt=0, le=3600)  # how long any operation may take


class Failure(Exception):
    """What one request or batch operation answers instead of a result: an HTTP status and why."""

    def __init__(self, status: int, detail: str) -> None:
        super().__init__(detail)
        self.status, self.detail = status, detail


def _unknown(session_id: str) -> Failure:
    return Failure(404, f"unknown or closed session {session_id[:8]}…; seed a session first")


def seed_op(server: ResourcesServer, body: SeedRequest) -> dict[str, Any]:
    try:
        return {"session_id": server.seed_session(body.task)}
    except Exception as exc:  # a task this environment cannot seed: the caller's input, not a crash
        raise Failure(422, f"cannot seed this task: {type(exc).__name__}: {str(exc)[:500]}") from None


def tool_op(server: ResourcesServer, name: str, body: ToolRequest) -> dict[str, Any]:
    try:
        output, directive = server.call_directed(body.session_id, name, body.arguments)
    except KeyError:
        raise _unknown(body.session_id) from None
    except PermissionError:
        raise Failure(403, f"tool {name!r} is not offered to the policy") from None
    return {"output": output} if directive is None else {"output": output, "session": directive.as_json()}


def verify_op(server: ResourcesServer, body: VerifyRequest) -> dict[str, Any]:
    try:
        before, verdict, after = server.verify_observed(body.session_id, body.final_message, body.snapshots)
        calls = server.call_log(body.session_id) if body.log else None
    except KeyError:
        raise _unknown(body.session_id) from None
    except NotImplementedError:
        raise Failure(501, f"{type(server).__name__} has no snapshot(state)") from None
    except Exception as exc:  # snapshot() raised: the environment's bug, reported with what it raised
        raise Failure(500, f"snapshot raised {type(exc).__name__}: {str(exc)[:500]}") from None
    answer = verdict.as_json()
    if body.snapshots:
        answer |= {"snapshot_before": before, "snapshot_after": after}
    if calls is not None:
        answer["calls"] = calls
    return answer


def snapshot_op(server: ResourcesServer, body: CloseRequest) -> dict[str, Any]:
    try:
        return {"snapshot": server.snapshot_session(body.session_id)}
    except KeyError:
        raise _unknown(body.session_id) from None
    except NotImplementedError:
        raise Failure(501, f"{type(server).__name__} has no snapshot(state)") from None
    except Exception as exc:  # the environment's bug, reported with what it raised
        raise Failure(500, f"snapshot raised {type(exc).__name__}: {str(exc)[:500]}") from None


def close_op(server: ResourcesServer, body: CloseRequest) -> dict[str, Any]:
    try:
        server.close_session(body.session_id)
    except KeyError:
        raise _unknown(body.session_id) from None
    return {"closed": True}
