"""An rlvr resources server with NeMo Gym's interface (`rlvr serve CONTRACT --interface
nemo-gym`), so NeMo Gym rollout collection, NeMo RL and `verifiers`' NeMo Gym taskset can train
and evaluate on an environment written (and audited) for rlvr:

- `POST /seed_session` with a dataset row: a new rlvr session seeded with the row (the task's own
  fields beside `responses_create_params`), its id in the `rlvr_session` cookie;
- `POST /<tool>` with the arguments as the body: the tool on that session (a string result as
  text, anything else as JSON; a tool error is the `error: ...` text the model reads, a tool not
  offered is 403, no session 404);
- `POST /verify` with the row and the episode's Responses object: the server's verify judges the
  session with the last assistant message's text as the final message; the answer is the body
  with `reward` and each component beside it. An invalid verdict (the verifier failed) is HTTP 500,
  never a reward of 0. The session is closed after it;
- `POST /close_session` (rlvr's own, not NeMo Gym's): closes a session that will not be verified
  (rlvr's `nemo-gym+URL` bridge calls it), else it is freed after `session_ttl_s`;
- `/openapi.json` lists each offered tool's route with its JSON schema; `rows()` writes tasks as
  NeMo Gym rows (the prompt as `input`, the tools in Responses form)."""

from __future__ import annotations

import json
from typing import Any

from fastapi import FastAPI, Request
from fastapi.responses import JSONResponse, PlainTextResponse
from starlette.concurrency import run_in_threadpool

from rlvr_cli.env.server import ResourcesServer

COOKIE = "rlvr_session"


def nemo_gym_app(server: ResourcesServer, weigh: Any = None) -> Any:
    """The app; `weigh`: the verdict's reward (the contract's weighted sum; default the server's)."""
    app = FastAPI(title=f"{type(server).__name__} (rlvr, NeMo Gym interface)")
    app.state.server = server

    def session(request: Request) -> str | None:
        sid = request.cookies.get(COOKIE)
        try:
            server.session(sid or "")
        except KeyError:
            return None
        return sid

    def missing() -> Any:
        message = "no rlvr session: POST /seed_session first, and send its cookie"
        return JSONResponse({"detail": message}, status_code=404)

    @app.post("/seed_session")
    def seed_session(row: dict[str, Any]) -> Any:
        try:
            sid = server.seed_session(task_of(row))
        except Exception as error:  # the task cannot be seeded: the caller's row
            return JSONResponse({"detail": f"seed failed: {type(error).__name__}: {error}"}, status_code=422)
        answer = JSONResponse({})
        answer.set_cookie(COOKIE, sid, httponly=True, samesite="strict")
        return answer

    @app.post("/verify")
    def verify(request: Request, body: dict[str, Any]) -> Any:
        sid = session(request)
        if sid is None:
            return missing()
        verdict = server.verify_session(sid, final_text(body.get("response")))
        server.close_session(sid)
        return _judged(verdict, weigh, body)

    @app.post("/close_session")
    def close_session(request: Request) -> Any:
        """rlvr's extension: end a session that will not be verified (NeMo Gym has no close; an
        unverified session is otherwise freed only after `session_ttl_s`)."""
        sid = session(request)
        if sid is None:
            return missing()
        server.close_session(sid)
        return {}

    for schema in server.schemas():
        function = schema["function"]
        app.add_api_route(
            f"/{function['name']}",
            _tool_route(server, function["name"], session, missing),
            methods=["POST"],
            description=function.get("description") or "",
            openapi_extra={
                "requestBody": {"content": {"application/json": {"schema": function.get("parameters") or {}}}}
            },
        )
    return app


def _judged(verdict: Any, weigh: Any, body: dict[str, Any]) -> Any:
    """/verify's answer: the body with the reward and the components, or HTTP 500 without a reward."""
    reward, detail = verdict.reward, f"{verdict.status} ({verdict.detail})"
    if weigh is not None and verdict.valid:
        try:
            reward = weigh(verdict)
        except KeyError as lacking:  # a component the contract weighs is missing: no reward
            reward, detail = None, f"the verdict lacks component {lacking}"
    if not verdict.valid or reward is None:
        return JSONResponse({"detail": f"verify: {detail}"}, status_code=500)
    return {**body, **verdict.components, "reward": float(reward)}


def _tool_route(server: ResourcesServer, name: str, session: Any, missing: Any) -> Any:
    async def route(request: Request) -> Any:
        sid = session(request)
        if sid is None:
            return missing()
        try:
            arguments = await request.json()
        except ValueError:
            arguments = {}
        if not isinstance(arguments, dict):
            return JSONResponse({"detail": "the arguments are a JSON object"}, status_code=422)

        try:
            output = await run_in_threadpool(server.call, sid, name, arguments)
        except PermissionError:
            return JSONResponse({"detail": f"tool {name!r} is not offered"}, status_code=403)
        except KeyError:
            return missing()
        return PlainTextResponse(output) if isinstance(output, str) else JSONResponse(output)

    route.__name__ = f"tool_{name}"
    return route


def task_of(row: dict[str, Any]) -> dict[str, Any]:
    """The rlvr task a NeMo Gym row holds: its own fields, the prompt from its input if absent."""
    task = dict(row)
    if "prompt" not in task:
        params = task.get("responses_create_params") or {}
        task["prompt"] = params.get("input", "")
    return task


def final_text(response: Any) -> str:
    """The text of the last assistant message of a Responses object ("" without one)."""
    items = response.get("output") if isinstance(response, dict) else None
    for item in reversed(items if isinstance(items, list) else []):
        if isinstance(item, dict) and item.get("type") == "message":
            parts = item.get("content")
            if isinstance(parts, str):
                return parts
            return "".join(str(p.get("text", "")) for p in parts or [] if isinstance(p, dict))
    return ""


def rows(tasks: list[dict[str, Any]], schemas: list[dict[str, Any]]) -> str:
    """Tasks as NeMo Gym dataset rows (JSONL): each task's fields, with `responses_create_params`
    holding its prompt as `input` and the offered tools in Responses form."""
    tools = [{"type": "function", "strict": False, **s["function"]} for s in schemas]
    out = []
    for task in tasks:
        prompt = task.get("prompt")
        messages = prompt if isinstance(prompt, list) else [{"role": "user", "content": str(prompt or "")}]
        out.append({**task, "responses_create_params": {"input": messages, "tools": tools}})
    return "".join(json.dumps(r, ensure_ascii=False) + "\n" for r in out)
