"""A NeMo Gym resources server as an rlvr environment: `environment.server: nemo-gym+URL`.

NeMo Gym's resources servers speak their own HTTP protocol: a session is a signed cookie set by
`POST /seed_session` (the body is the dataset row), each tool is `POST /<tool>` with the
arguments as the JSON body, and `POST /verify` takes the row with the episode as an OpenAI
Responses object (`response.output`: function calls, their outputs, the final message) and
answers `{"reward": float, ...}`. This bridge is an rlvr `ResourcesServer` whose sessions hold
one cookie session each on the NeMo Gym server, so everything rlvr runs on its own servers —
training, the verifier and isolation audits, `tasks review` — runs on a NeMo Gym one.

- **Rows.** A task row is sent as the NeMo Gym row (`/seed_session` and `/verify` bodies); a row
  without `responses_create_params` gets `{"input": <its prompt as messages>}`.
- **Tools.** Read from the server's OpenAPI document: every `POST` route but `seed_session`,
  `verify`, `aggregate_metrics` and `close_session`, its request body's JSON schema as the parameters, its
  docstring as the description. The contract's `environment.tools` must name them.
- **Reward.** The verdict's components are `reward` (the server's reward) and every other number
  the server answers beside it; a failed `/verify` is a verifier error, never a reward of 0.
- **Snapshot.** NeMo Gym servers have none; the bridge's is the row a session was seeded with,
  so the isolation audit judges sessions by their tool outputs and verdicts, run together and
  alone, and cannot see whether verify writes to server state; the verifier audit makes no
  collateral-damage arm (it cannot show a call changed the state).
- **Not mapped.** NeMo Gym's MCP tools (`/mcp`) and `aggregate_metrics`.
"""

from __future__ import annotations

import contextlib
import json
import time
from typing import Any

from rlvr_cli.env.bridge import Bridge
from rlvr_cli.env.verdict import Verdict
from rlvr_cli.errors import RlvrError

PREFIX = "nemo-gym+"
NOT_TOOLS = {"/seed_session", "/verify", "/aggregate_metrics", "/close_session"}


def is_nemo_gym(spec: str) -> bool:
    return spec.startswith(PREFIX)


class NemoGymBridge(Bridge):
    """rlvr sessions over a NeMo Gym resources server at `url`."""

    def __init__(self, url: str, timeout_s: float = 60.0) -> None:
        super().__init__()
        import httpx

        if not url.startswith(("http://", "https://")):
            raise RlvrError(
                f"{PREFIX}{url}: a NeMo Gym resources server is named by its URL, e.g. nemo-gym+http://host:8000"
            )
        self.url, self.timeout_s = url.rstrip("/"), timeout_s
        try:
            document = httpx.get(f"{self.url}/openapi.json", timeout=timeout_s).json()
        except (httpx.HTTPError, ValueError) as error:
            raise RlvrError(f"the NeMo Gym server at {self.url} does not answer /openapi.json ({error})") from None
        self._schemas = tool_schemas(document)
        if not self._schemas:
            raise RlvrError(f"the NeMo Gym server at {self.url} offers no tool (no POST route besides seed and verify)")

    def seed(self, task: dict[str, Any]) -> Any:
        import httpx

        client = self.hold(httpx.Client(base_url=self.url, timeout=self.timeout_s))
        row = nemo_row(task)
        answer = client.post("/seed_session", json=row)
        if answer.status_code >= 400:
            raise RlvrError(f"NeMo Gym /seed_session answered HTTP {answer.status_code}: {answer.text[:300]}")
        return {"client": client, "row": row}

    def invoke(self, state: Any, name: str, arguments: dict[str, Any]) -> Any:
        answer = state["client"].post(f"/{name}", json=arguments)
        if answer.status_code >= 400:
            output: Any = f"error: {name} answered HTTP {answer.status_code}: {answer.text[:500]}"
        else:
            try:
                output = answer.json()
            except ValueError:
                output = answer.text
        return output

    def verify(self, state: Any, task: dict[str, Any], calls: list[dict[str, Any]], final_message: str) -> Verdict:
        row = state["row"]
        body = {**row, "response": responses_object(row, calls, final_message)}
        answer = state["client"].post("/verify", json=body)
        if answer.status_code >= 400:
            return Verdict(
                "verifier_error", detail=f"NeMo Gym /verify answered HTTP {answer.status_code}: {answer.text[:300]}"
            )
        result = answer.json()
        reward = result.get("reward")
        if not isinstance(reward, (int, float)) or isinstance(reward, bool):
            return Verdict("verifier_error", detail=f"NeMo Gym /verify answered no numeric reward: {str(result)[:200]}")
        numbers = {
            k: float(v)
            for k, v in result.items()
            if isinstance(v, (int, float)) and not isinstance(v, bool) and k not in row
        }
        return Verdict("ok", float(reward), {**numbers, "reward": float(reward)})

    def release(self, state: Any) -> None:
        """End the session on the server where it can be ended: `POST /close_session` (rlvr's
        own interface has it; a NeMo Gym server answers 404 and keeps its session)."""
        import httpx

        with contextlib.suppress(httpx.HTTPError):
            state["client"].post("/close_session", json={})

    def snapshot(self, state: Any) -> Any:
        """What rlvr can observe of a NeMo Gym session's state (its server has no snapshot): the
        row it was seeded with. The isolation audit then judges sessions by their tool outputs
        and verdicts, run together and alone; the verifier audit cannot prove a collateral call
        changed the state, so it makes no collateral arm (and says so)."""
        return {"row": state["row"]}


def nemo_row(task: dict[str, Any]) -> dict[str, Any]:
    """The NeMo Gym row of an rlvr task: the task itself, with `responses_create_params` made
    from its prompt when it has none."""
    if isinstance(task.get("responses_create_params"), dict):
        return dict(task)
    prompt = task.get("prompt")
    messages = prompt if isinstance(prompt, list) else [{"role": "user", "content": str(prompt or "")}]
    return {**task, "responses_create_params": {"input": messages}}


def responses_object(row: dict[str, Any], calls: list[dict[str, Any]], final_message: str) -> dict[str, Any]:
    """The episode as an OpenAI Responses object, the form NeMo Gym's /verify reads."""
    output: list[dict[str, Any]] = []
    for i, call in enumerate(calls):
        arguments = json.dumps(call.get("arguments") or {})
        output.append({"type": "function_call", "call_id": f"call_{i}", "name": call["tool"], "arguments": arguments})
        output.append({"type": "function_call_output", "call_id": f"call_{i}", "output": str(call.get("output", ""))})
    if final_message:
        text = {"type": "output_text", "text": final_message, "annotations": []}
        output.append(
            {"id": "msg_final", "type": "message", "role": "assistant", "status": "completed", "content": [text]}
        )
    params = row.get("responses_create_params") or {}
    return {
        "id": "resp_rlvr",
        "created_at": time.time(),
        "model": str(params.get("model") or "rlvr"),
        "object": "response",
        "output": output,
        "parallel_tool_calls": params.get("parallel_tool_calls", True),
        "tool_choice": params.get("tool_choice", "auto"),
        "tools": params.get("tools") or [],
        "status": "completed",
    }


def tool_schemas(document: dict[str, Any]) -> list[dict[str, Any]]:
    """OpenAI function schemas of a NeMo Gym server's tools, from its OpenAPI document."""
    components = (document.get("components") or {}).get("schemas") or {}
    out = []
    for path, methods in sorted((document.get("paths") or {}).items()):
        post = methods.get("post") if isinstance(methods, dict) else None
        if post is None or path in NOT_TOOLS or path.count("/") != 1 or path.startswith("/mcp"):
            continue
        content = ((post.get("requestBody") or {}).get("content") or {}).get("application/json") or {}
        parameters = _resolve(content.get("schema") or {"type": "object", "properties": {}}, components)
        function = {"name": path[1:], "description": (post.get("description") or post.get("summary") or "").strip()}
        out.append({"type": "function", "function": {**function, "parameters": parameters}})
    return out


def _resolve(schema: Any, components: dict[str, Any], depth: int = 0) -> Any:
    """A schema with its `$ref`s to the document's components inlined and titles dropped."""
    if depth > 16:
        return {}
    if isinstance(schema, dict):
        ref = schema.get("$ref")
        if isinstance(ref, str) and ref.startswith("#/components/schemas/"):
            return _resolve(components.get(ref.rsplit("/", 1)[-1], {}), components, depth + 1)
        shown = {k: v for k, v in schema.items() if not (k == "title" and isinstance(v, str))}
        return {k: _resolve(v, components, depth + 1) for k, v in shown.items()}
    if isinstance(schema, list):
        return [_resolve(v, components, depth + 1) for v in schema]
    return schema
