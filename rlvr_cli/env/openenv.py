"""An OpenEnv environment as an rlvr environment: `environment.server: openenv+URL`.

An OpenEnv server (`openenv.core.env_server.create_app`) keeps one environment per WebSocket
session (`/ws`: `reset`, `step`, `state`, `close` messages); an episode is `reset` and then
`step(action)` until `done`, each step answering an observation with a reward. This bridge is an
rlvr `ResourcesServer` whose sessions hold one OpenEnv WebSocket session each:

- **seed**: a new WebSocket session, `reset` with the task's fields (the environment's `reset`
  takes those its signature names, e.g. `seed`); the reset observation is kept in the state;
- **tools**: `step` (parameters: the environment's action schema from `/schema`, description from
  `/metadata`), answering `{observation, reward, done}`; a step after `done` is a tool error; and
  `observe`, answering the latest observation (the reset one before any step), so the policy
  can read what the episode starts from;
- **verify**: components `reward` (the last step's reward: the terminal reward of a verifiable
  task), `return` (the sum of the steps' rewards) and `done` (1 when the environment ended the
  episode); the contract weighs them;
- **snapshot**: the environment's own `state` message, beside the task the session was seeded
  with: the audits compare real state.
"""

from __future__ import annotations

import contextlib
import json
from typing import Any

from rlvr_cli.env.bridge import Bridge
from rlvr_cli.env.verdict import Verdict
from rlvr_cli.errors import RlvrError

PREFIX = "openenv+"
OBSERVE = {
    "type": "function",
    "function": {
        "name": "observe",
        "description": "The environment's latest observation (after reset, or after the last step).",
        "parameters": {"type": "object", "properties": {}},
    },
}


class _Session:
    """One OpenEnv WebSocket session: send a message, read its answer."""

    def __init__(self, url: str, timeout_s: float) -> None:
        from websockets.sync.client import connect

        self.timeout_s = timeout_s
        self.socket = connect(url, open_timeout=timeout_s, close_timeout=timeout_s)

    def ask(self, kind: str, data: dict[str, Any] | None = None) -> dict[str, Any]:
        message: dict[str, Any] = {"type": kind} if data is None else {"type": kind, "data": data}
        self.socket.send(json.dumps(message))
        answer = json.loads(self.socket.recv(timeout=self.timeout_s))
        if answer.get("type") == "error":
            raise RlvrError(f"OpenEnv answered an error to {kind}: {str(answer.get('data'))[:300]}")
        return answer.get("data") or {}

    def close(self) -> None:
        with contextlib.suppress(Exception):  # already gone: nothing to close
            self.socket.send(json.dumps({"type": "close"}))
        self.socket.close()


class OpenEnvBridge(Bridge):
    """rlvr sessions over an OpenEnv server at `url`."""

    def __init__(self, url: str, timeout_s: float = 60.0) -> None:
        super().__init__()
        import httpx

        if not url.startswith(("http://", "https://")):
            raise RlvrError(f"{PREFIX}{url}: an OpenEnv server is named by its URL, e.g. openenv+http://host:8000")
        self.url, self.timeout_s = url.rstrip("/"), timeout_s
        try:
            schema = httpx.get(f"{self.url}/schema", timeout=timeout_s).json()
            metadata = httpx.get(f"{self.url}/metadata", timeout=timeout_s).json()
        except (httpx.HTTPError, ValueError) as error:
            raise RlvrError(f"the OpenEnv server at {self.url} does not answer /schema ({error})") from None
        action = schema.get("action") if isinstance(schema, dict) else None
        if not isinstance(action, dict):
            raise RlvrError(f"the OpenEnv server at {self.url} states no action schema at /schema")
        described = str((metadata or {}).get("description") or "Take one action in the environment.")
        parameters = {k: v for k, v in action.items() if k not in ("title", "description")}
        fields = {k: v for k, v in (parameters.get("properties") or {}).items() if k != "metadata"}
        parameters["properties"] = fields  # `metadata`, every Action's own, is no part of the action
        step = {"name": "step", "description": described, "parameters": parameters}
        self._schemas = [{"type": "function", "function": step}, OBSERVE]

    def seed(self, task: dict[str, Any]) -> Any:
        ws = "ws" + self.url[len("http") :] + "/ws"
        session = self.hold(_Session(ws, self.timeout_s))
        first = session.ask("reset", {k: v for k, v in task.items() if k not in ("prompt",)})
        return {"session": session, "task": task, "latest": first, "rewards": [], "done": bool(first.get("done"))}

    def invoke(self, state: Any, name: str, arguments: dict[str, Any]) -> Any:
        if name == "observe":
            return state["latest"]
        if state["done"]:
            return "error: the episode is done; no step is taken after it"
        try:
            answer = state["session"].ask("step", arguments)
        except RlvrError as error:  # an action the environment refuses: the model reads why
            return f"error: {error}"
        state["latest"] = answer
        reward = answer.get("reward")
        state["rewards"].append(float(reward) if isinstance(reward, (int, float)) else 0.0)
        state["done"] = bool(answer.get("done"))
        return answer

    def verify(self, state: Any, task: dict[str, Any], calls: list[dict[str, Any]], final_message: str) -> Verdict:
        rewards = state["rewards"]
        last = rewards[-1] if rewards else 0.0
        components = {"reward": last, "return": float(sum(rewards)), "done": float(state["done"])}
        return Verdict("ok", last, components)

    def snapshot(self, state: Any) -> Any:
        """The environment's own state, beside the task the session was seeded with."""
        return {"task": state["task"], "state": state["session"].ask("state")}
