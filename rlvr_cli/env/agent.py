"""The agent loop in OpenAI Responses API item shapes, and a client for resources servers.

model call → `function_call` items → routed to the server → `function_call_output`
items appended → … until the model answers with a message and no tool call, or
`max_steps` model calls were made. Steps, calls, outputs and the verdict form the
transcript.
"""

from __future__ import annotations

import contextlib
import json
import socket
import sys
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

from rlvr_cli.env.verdict import Verdict
from rlvr_cli.errors import RlvrError


@dataclass(frozen=True)
class Endpoint:
    """Where a resources server answers, and the bearer token it asks for (None: none)."""

    url: str
    token: str | None = None
    server: Any = field(default=None, compare=False, repr=False)  # the in-process ResourcesServer, if any
    child: Any = field(default=None, compare=False, repr=False)  # the child process serving it (env/process.py)

    def __str__(self) -> str:
        return self.url


class EnvClient:
    """HTTP client of one resources server. Answers are read as a stream and refused past a
    bound (`max_output_bytes` per tool result, plus room for the envelope, per operation), so a
    server that answers 30 MB cannot fill the trainer's memory."""

    ENVELOPE_BYTES = 1 << 20  # a verdict, snapshots, the call log: what an answer holds beside results
    UNBOUNDED_OUTPUT_BYTES = 64 << 20  # per operation, for clients given no cap (the audits)

    def __init__(self, endpoint: str | Endpoint, timeout_s: float = 30.0, max_output_bytes: int | None = None) -> None:
        import httpx

        endpoint = endpoint if isinstance(endpoint, Endpoint) else Endpoint(endpoint)
        headers = {"Authorization": f"Bearer {endpoint.token}"} if endpoint.token else {}
        self.http = httpx.Client(base_url=endpoint.url, timeout=timeout_s, headers=headers)
        self.batches: bool | None = None  # does the server take POST /batch (None: not asked yet)
        self.per_op_bytes = (max_output_bytes or self.UNBOUNDED_OUTPUT_BYTES) + self.ENVELOPE_BYTES

    def close(self) -> None:
        self.http.close()

    def _send(
        self, method: str, path: str, body: dict[str, Any] | None = None, timeout: float | None = None, ops: int = 1
    ) -> Any:
        """The response; a call past the timeout is EnvTimeout (that call's failure), a server
        that cannot be reached at all is EnvUnreachable (the run's), an answer over the bound
        EnvHTTPError. A dropped connection of an idempotent request is tried again (twice, said
        on stderr) before the server counts as unreachable."""
        retries = iter(RETRY_AFTER_S if _idempotent(method, path, body) else ())
        while True:
            try:
                return self._read(method, path, body, timeout, ops)
            except EnvUnreachable as exc:
                pause = next(retries, None)
                if pause is None:
                    raise
                print(f"rlvr: {path}: {exc}; retrying in {pause} s (a read, a verify or a close)", file=sys.stderr)
                time.sleep(pause)

    def _read(self, method: str, path: str, body: dict[str, Any] | None, timeout: float | None, ops: int) -> Any:
        """One request, its answer read as a stream up to the bound."""
        import httpx

        limit = self.per_op_bytes * max(1, ops)
        extra = {} if timeout is None else {"timeout": timeout}
        try:
            with self.http.stream(method, path, json=body, **extra) as response:
                data = bytearray()
                for chunk in response.iter_bytes():
                    data += chunk
                    if len(data) > limit:
                        raise EnvHTTPError(
                            502, f"{path}: the server's answer is over {limit:,} bytes; rlvr stopped reading it"
                        )
                kind = response.headers.get("content-type", "application/json")
                return httpx.Response(response.status_code, headers={"content-type": kind}, content=bytes(data))
        except httpx.TimeoutException:
            raise EnvTimeout(path, self.http.timeout.read) from None
        except httpx.TransportError as exc:
            raise EnvUnreachable(f"the resources server at {self.http.base_url} is unreachable ({exc})") from None

    def _post(self, path: str, body: dict[str, Any]) -> Any:
        response = self._send("POST", path, body)
        if response.status_code >= 400:
            raise EnvHTTPError(response.status_code, response.text)
        return response.json()

    def tools(self) -> list[dict[str, Any]]:
        response = self._send("GET", "/tools")
        if response.status_code >= 400:
            raise EnvHTTPError(response.status_code, response.text)
        return response.json()

    def check_declaration(self, tools: list[str] | None, forbidden: list[str] | None) -> None:
        """The contract's `environment.tools` / `forbidden_tools` must be what the server offers
        and forbids: a mismatch (DeclarationMismatch, naming every key that differs and how) is
        an error before any episode, never a silent difference."""
        answer = self._send("GET", "/declaration")
        if answer.status_code == 404:  # a server that is not a ResourcesServer cannot say; nothing to compare
            return
        if answer.status_code >= 400:
            raise EnvHTTPError(answer.status_code, answer.text)
        declared = answer.json()
        differences = []
        for key, stated in (("forbidden_tools", forbidden), ("tools", tools)):
            theirs = sorted(declared.get(key, []))
            if stated is not None and sorted(stated) != theirs:
                differences.append(f"environment.{key} is {sorted(stated)} but {_difference(key, stated, theirs)}")
        if differences:
            raise DeclarationMismatch("; ".join(differences))

    def seed(self, task: dict[str, Any]) -> str:
        return self._post("/seed_session", {"task": task})["session_id"]

    def call(self, session_id: str, name: str, arguments: dict[str, Any]) -> Any:
        return self._post(f"/tools/{name}", {"session_id": session_id, "arguments": arguments})["output"]

    def verify(self, session_id: str, final_message: str = "") -> Verdict:
        data = self._post("/verify", {"session_id": session_id, "final_message": final_message})
        return Verdict.coerce(data)

    def verify_logged(self, session_id: str, final_message: str = "") -> tuple[Verdict, list[Any] | None]:
        """The verdict and the server's own log of the session's calls (None from a server that
        does not keep one)."""
        data = self._post("/verify", {"session_id": session_id, "final_message": final_message, "log": True})
        calls = data.pop("calls", None) if isinstance(data, dict) else None
        return Verdict.coerce(data), calls

    def verify_observed(self, session_id: str, final_message: str = "") -> tuple[Any, Verdict, Any]:
        """(snapshot before, verdict, snapshot after) in one request."""
        data = self._post("/verify", {"session_id": session_id, "final_message": final_message, "snapshots": True})
        before, after = data.pop("snapshot_before", None), data.pop("snapshot_after", None)
        return before, Verdict.coerce(data), after

    def snapshot(self, session_id: str) -> Any:
        return self._post("/snapshot", {"session_id": session_id})["snapshot"]

    def close_session(self, session_id: str) -> None:
        self._post("/close", {"session_id": session_id})

    def batch(self, ops: list[dict[str, Any]]) -> list[dict[str, Any]]:
        """Many operations in one request (`POST /batch`, env/batch.py): one result per op,
        `{"status": 200, "body": ...}` or `{"status": N, "detail": ...}`; each op may take the
        client's timeout. A server without /batch gets them one request at a time."""
        if not ops:
            return []
        if self.batches is not False:
            timeout = self.http.timeout.read or 30.0
            response = self._send(
                "POST", "/batch", {"ops": ops, "timeout_s": timeout}, timeout=timeout + 30, ops=len(ops)
            )
            if response.status_code not in (404, 405):
                if response.status_code >= 400:
                    raise EnvHTTPError(response.status_code, response.text)
                self.batches = True
                return response.json()["results"]
            self.batches = False
        return [self._single(op) for op in ops]

    def _single(self, op: dict[str, Any]) -> dict[str, Any]:
        fields = {k: v for k, v in op.items() if k not in ("op", "name")}
        path = {"seed": "/seed_session", "verify": "/verify", "snapshot": "/snapshot", "close": "/close"}.get(
            op["op"], f"/tools/{op.get('name')}"
        )
        try:
            return {"status": 200, "body": self._post(path, fields)}
        except EnvTimeout as exc:
            return {"status": 504, "detail": str(exc)}
        except EnvHTTPError as exc:
            return {"status": exc.status, "detail": exc.body}


RETRY_AFTER_S = (0.2, 1.0)  # a dropped connection of an idempotent request: tried again after these pauses
IDEMPOTENT = {"/verify", "/snapshot", "/close"}  # verify is read-only; a close twice is a 404, harmless


def _idempotent(method: str, path: str, body: dict[str, Any] | None) -> bool:
    """Whether sending the request again cannot change the server's state twice: reads,
    verifies, snapshots and closes (and batches of nothing else); never a seed or a tool call."""
    if method == "GET" or path in IDEMPOTENT:
        return True
    ops = (body or {}).get("ops") if path == "/batch" else None
    return isinstance(ops, list) and all(
        isinstance(o, dict) and o.get("op") in ("verify", "snapshot", "close") for o in ops
    )


def _difference(key: str, stated: list[str], theirs: list[str]) -> str:
    verb, also = ("forbid", "forbids") if key == "forbidden_tools" else ("offer", "offers")
    extra, missing = sorted(set(stated) - set(theirs)), sorted(set(theirs) - set(stated))
    parts = [
        f"the server does not {verb} {extra}" if extra else "",
        f"the server also {also} {missing}" if missing else "",
    ]
    return "; ".join(p for p in parts if p)


class DeclarationMismatch(RlvrError):
    """The contract's tool lists are not what the server declares (the contract's to fix)."""


class EnvHTTPError(RlvrError):
    def __init__(self, status: int, body: str) -> None:
        super().__init__(f"HTTP {status}: {body[:300]}")
        self.status = status
        self.body = body


class EnvTimeout(EnvHTTPError):
    """One request got no answer in time (a hung tool): a tool error, or a timeout verdict."""

    def __init__(self, path: str, seconds: float | None) -> None:
        RlvrError.__init__(self, f"{path}: no answer within {seconds} s")
        self.status, self.body = 0, "timeout"


class EnvUnreachable(RlvrError):
    """The server cannot be reached at all: no episode can go on, so the run stops."""


@dataclass
class Transcript:
    task: dict[str, Any]
    session_id: str = ""
    steps: list[dict[str, Any]] = field(default_factory=list)
    final_message: str = ""
    verdict: Verdict | None = None

    def as_json(self) -> dict[str, Any]:
        verdict = None if self.verdict is None else self.verdict.as_json()
        return {
            "task_id": self.task.get("id"),
            "steps": self.steps,
            "final_message": self.final_message,
            "verdict": verdict,
        }


def run_episode(
    model: Any, client: EnvClient, task: dict[str, Any], max_steps: int, tools: list[dict[str, Any]] | None = None
) -> Transcript:
    """One episode: seed, loop model ↔ tools, verify, close (always)."""
    transcript = Transcript(task)
    transcript.session_id = client.seed(task)
    items: list[dict[str, Any]] = [{"type": "message", "role": "user", "content": str(task.get("prompt", ""))}]
    tools = tools if tools is not None else client.tools()
    try:
        for _ in range(max_steps):
            output = model.respond(items, tools)
            calls = [i for i in output if i.get("type") == "function_call"]
            step: dict[str, Any] = {"model_output": output, "tool_outputs": []}
            transcript.steps.append(step)
            items += output
            for call in calls:
                result = call_tool(client, transcript.session_id, call)
                step["tool_outputs"].append(result)
                items.append(result)
            if not calls:
                transcript.final_message = "".join(
                    str(i.get("content", "")) for i in output if i.get("type") == "message"
                )
                break
        try:
            transcript.verdict = client.verify(transcript.session_id, transcript.final_message)
        except (EnvHTTPError, ValueError, TypeError) as exc:
            transcript.verdict = Verdict("verifier_error", detail=str(exc))
    finally:
        with contextlib.suppress(EnvHTTPError):
            client.close_session(transcript.session_id)
    return transcript


def call_tool(client: EnvClient, session_id: str, call: dict[str, Any]) -> dict[str, Any]:
    try:
        arguments = call.get("arguments") or "{}"
        arguments = json.loads(arguments) if isinstance(arguments, str) else arguments
        output = client.call(session_id, call["name"], arguments)
    except (json.JSONDecodeError, EnvHTTPError) as exc:
        output = f"error: {exc}"
    return {
        "type": "function_call_output",
        "call_id": call.get("call_id", ""),
        "output": output if isinstance(output, str) else json.dumps(output),
    }


# ── serving an app for the duration of a command ──────────────────────────────────────


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


@contextlib.contextmanager
def serve(app: Any) -> Iterator[str]:
    """Run an ASGI app under uvicorn on 127.0.0.1 in a thread; yields its base URL."""
    import uvicorn

    port = free_port()
    config = uvicorn.Config(app, host="127.0.0.1", port=port, log_level="error", access_log=False)
    server = uvicorn.Server(config)
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    deadline = time.monotonic() + 20
    while not server.started:
        if time.monotonic() > deadline or not thread.is_alive():
            raise RlvrError("the resources server did not start")
        time.sleep(0.02)
    try:
        yield f"http://127.0.0.1:{port}"
    finally:
        server.should_exit = True
        thread.join(10)


def load_app(spec: str, folder: Any, token: str | None = None, max_output_bytes: int | None = None) -> Any:
    """`environment.server` resolved from the contract's folder (or installed packages): a
    `ResourcesServer` subclass (instantiated here), an instance, or an ASGI app as is.
    `max_output_bytes` caps each tool result (env/results.py) of a ResourcesServer."""
    import sys

    from rlvr_cli.env.nemo_gym import PREFIX, NemoGymBridge
    from rlvr_cli.env.openenv import PREFIX as OPENENV
    from rlvr_cli.env.openenv import OpenEnvBridge
    from rlvr_cli.env.server import ResourcesServer, create_app
    from rlvr_cli.env.verifier_pool import import_entry

    if spec.startswith((PREFIX, OPENENV)):  # NeMo Gym or OpenEnv at a URL, behind rlvr's own interface
        nemo = spec.startswith(PREFIX)
        bridge = NemoGymBridge(spec[len(PREFIX) :]) if nemo else OpenEnvBridge(spec[len(OPENENV) :])
        if max_output_bytes is not None:
            bridge.max_output_bytes = max_output_bytes
        return create_app(bridge, token=token)
    if spec.partition(":")[0].split(".")[0] in sys.stdlib_module_names:
        raise RlvrError(f"{spec} is in the standard library; the resources server is your own code")
    try:
        found = import_entry(spec, folder)
    except (ImportError, AttributeError) as exc:
        raise RlvrError(f"cannot load the resources server {spec}: {exc}") from None
    if isinstance(found, type) and issubclass(found, ResourcesServer):
        found = found()
    if not isinstance(found, ResourcesServer) and not (callable(found) and not isinstance(found, type)):
        raise RlvrError(
            f"{spec} is a {type(found).__name__}, not a ResourcesServer subclass, an instance of one or an ASGI app"
        )
    if isinstance(found, ResourcesServer) and max_output_bytes is not None:
        found.max_output_bytes = max_output_bytes
    if isinstance(found, ResourcesServer):
        return create_app(found, token=token)
    from rlvr_cli.env.app import guard

    return guard(found, token)  # an ASGI app of the user's own: the same token and body limit


@contextlib.contextmanager
def environment(spec: str, folder: Any) -> Iterator[Endpoint]:
    """The endpoint of `environment.server`: a URL as is (with the token in RLVR_ENV_TOKEN, if
    set), or `module:Class` served here on 127.0.0.1 behind a fresh per-run bearer token."""
    import os
    import secrets

    if spec.startswith(("http://", "https://")):
        yield Endpoint(spec.rstrip("/"), os.environ.get("RLVR_ENV_TOKEN") or None)
        return
    token = secrets.token_urlsafe(24)
    app = load_app(spec, folder, token=token)
    with serve(app) as url:
        yield Endpoint(url, token, getattr(app.state, "server", None))
