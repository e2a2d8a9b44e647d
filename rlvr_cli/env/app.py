"""The HTTP face of a resources server (env/server.py): the bearer-token and
body-size guard, and the routes `create_app` mounts."""

from __future__ import annotations

import secrets
from typing import TYPE_CHECKING, Any

from rlvr_cli.env.batch import run_batch
from rlvr_cli.env.ops import (
    BatchRequest,
    CloseRequest,
    Failure,
    SeedRequest,
    ToolRequest,
    VerifyRequest,
    close_op,
    seed_op,
    snapshot_op,
    tool_op,
    verify_op,
)

if TYPE_CHECKING:
    from rlvr_cli.env.server import ResourcesServer


MAX_BODY_BYTES = 1 << 20


def guard(app: Any, token: str | None, max_body: int = MAX_BODY_BYTES) -> Any:
    """Any ASGI app behind the run's bearer token and the body-size limit."""
    return _Guard(app, token, max_body)


class _Guard:
    """ASGI wrapper: a request without the run's bearer token is 401; a body over the limit 413."""

    def __init__(self, app: Any, token: str | None, max_body: int) -> None:
        self.app, self.token, self.max_body = app, token, max_body
        self.state = getattr(app, "state", None)

    async def __call__(self, scope: dict, receive: Any, send: Any) -> None:
        if scope["type"] == "http":
            headers = dict(scope.get("headers") or [])
            if self.token and not secrets.compare_digest(
                headers.get(b"authorization", b""), f"Bearer {self.token}".encode()
            ):
                return await _answer(send, 401, "missing or wrong bearer token for this resources server")
            length = headers.get(b"content-length")
            if length is not None and (not length.isdigit() or int(length) > self.max_body):
                return await _answer(send, 413, f"request bodies are at most {self.max_body} bytes")
        await self.app(scope, receive, send)


async def _answer(send: Any, status: int, detail: str) -> None:
    import json

    body = json.dumps({"detail": detail}).encode()
    await send({"type": "http.response.start", "status": status, "headers": [(b"content-type", b"application/json")]})
    await send({"type": "http.response.body", "body": body})


def create_app(server: ResourcesServer, token: str | None = None, max_body_bytes: int = MAX_BODY_BYTES) -> Any:
    """A FastAPI app serving `server`; with `token`, every request must carry it as a bearer token."""
    from fastapi import FastAPI, HTTPException

    app = FastAPI(title=type(server).__name__)
    app.state.server = server
    _routes(app, server, HTTPException)
    return _Guard(app, token, max_body_bytes)


def _routes(app: Any, server: ResourcesServer, HTTPException: Any) -> None:
    _info_routes(app, server)
    _session_routes(app, server, HTTPException)


def _info_routes(app: Any, server: ResourcesServer) -> None:
    @app.get("/tools")
    def list_tools() -> list[dict[str, Any]]:
        return server.schemas()

    @app.get("/declaration")
    def declaration() -> dict[str, list[str]]:
        """What the server offers the policy and what it forbids: checked against the contract."""
        forbidden = [n for n in server.offered_tools() if n in server.forbidden]
        return {"tools": [n for n in server.offered_tools() if n not in forbidden], "forbidden_tools": forbidden}


def _session_routes(app: Any, server: ResourcesServer, HTTPException: Any) -> None:
    def answer(op: Any, *args: Any) -> dict[str, Any]:
        try:
            return op(server, *args)
        except Failure as failure:
            raise HTTPException(failure.status, failure.detail) from None

    @app.post("/seed_session")
    def seed_session(body: SeedRequest) -> dict[str, Any]:
        return answer(seed_op, body)

    @app.post("/tools/{name}")
    def call_tool(name: str, body: ToolRequest) -> dict[str, Any]:
        return answer(tool_op, name, body)

    @app.post("/verify")
    def verify(body: VerifyRequest) -> dict[str, Any]:
        return answer(verify_op, body)

    @app.post("/snapshot")
    def snapshot(body: CloseRequest) -> dict[str, Any]:
        return answer(snapshot_op, body)

    @app.post("/close")
    def close(body: CloseRequest) -> dict[str, Any]:
        return answer(close_op, body)

    @app.post("/batch")
    def batch(body: BatchRequest) -> Any:
        from fastapi.responses import JSONResponse

        # a Response as is: no response-model pass over every result (the results are JSON already)
        return JSONResponse({"results": run_batch(server, body.ops, body.timeout_s)})
