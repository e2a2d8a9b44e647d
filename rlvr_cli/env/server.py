"""Resources servers: tool-use environments served over HTTP with state isolated per session.

The plug-in contract (docs/environments.md walks through a complete example):

    class Inventory(ResourcesServer):
        offered = ("list_items", "set_quantity")     # tools the policy is shown (None: every @tool)
        forbidden = ("remove_item",)                  # tools whose use fails the episode

        def seed(self, task) -> State: ...           # a fresh state for one session (plant task["marker"])
        @tool
        def set_quantity(self, state, item: str, quantity: int) -> str: ...
        def verify(self, state, task, calls, final_message) -> Verdict: ...   # read-only
        def snapshot(self, state) -> dict: ...        # a JSON view of the whole session state
        def release(self, state) -> None: ...         # optional: free what seed made

A tool may return `NewSession.compress(prompt, output)` or `NewSession.fork(prompt, output)`:
the episode goes on in a child session whose context is the contract's system prompt and
`prompt` — compress: in place of this one, which ends; fork: beside it, the child's final
message returned as this call's result (docs/environments.md, "Episodes of several sessions").
Every session of an episode shares this server session: its state, its log, its verdict.

Tool parameters are typed by their annotations (chat schema and validation: env/tools.py).
Per-session resources are made through `self.folder()` (a temporary directory) or
`self.hold(obj)` (anything with `close()`) inside `seed`: closing the session frees them,
whatever the state calls them, and the isolation audit checks that it did. The contract's
`environment.server` names the class (`module:Inventory`); `create_app(Inventory())` is the
FastAPI app that serves an instance:

    POST /seed_session  {"task": {...}}                          → {"session_id"}
    POST /tools/{name}  {"session_id", "arguments": {...}}       → {"output"} (+ "session": a NewSession)
    POST /verify        {"session_id", "final_message"?,         → {"status", "reward", "components", ...}
                         "snapshots"?, "log"?}                   (+ "snapshot_before", "snapshot_after"; + "calls")
    POST /snapshot      {"session_id"}                           → {"snapshot"} (501 without snapshot())
    POST /close         {"session_id"}                           → {"closed": true}
    GET  /tools                                                   → tool schemas offered to the policy
    POST /batch         {"ops": [{"op": "seed"|"tool"|"verify"|"snapshot"|"close", ...}], "timeout_s"}
                                                                  → {"results": [{"status", "body"|"detail"}]}
                        (env/batch.py: one request for a whole step's sessions)

Session ids are unguessable (`secrets.token_urlsafe`). A call for an unknown or closed
session is 404, never served from fresh default state; a tool the policy is not offered is
403; malformed requests are 422 with a message. `verify` sees the server's own log of tool
calls, not a transcript the client could forge.
"""

from __future__ import annotations

import contextlib
import inspect
import json
import re
import secrets
import shutil
import tempfile
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from rlvr_cli.env import tools as signatures
from rlvr_cli.env.app import MAX_BODY_BYTES, create_app
from rlvr_cli.env.results import DEFAULT_MAX_OUTPUT_BYTES, tool_output
from rlvr_cli.env.verdict import Verdict
from rlvr_cli.errors import RlvrError

__all__ = ["MAX_BODY_BYTES", "NewSession", "ResourcesServer", "Session", "ToolError", "create_app", "tool"]


def tool(fn: Callable[..., Any] | None = None, *, shown: dict[str, Any] | None = None) -> Any:
    """Mark a method `(self, state, **arguments) -> output` as a tool. `@tool(shown={...})`: the
    schema the policy is shown, as written (`description`, `parameters`: JSON Schema), in place
    of the one typed from the annotations (which still validate the arguments)."""

    def mark(method: Callable[..., Any]) -> Callable[..., Any]:
        method.__rlvr_tool__ = True  # type: ignore[attr-defined]
        if shown is not None:
            method.__rlvr_shown__ = signatures.checked_shown(method.__name__, shown)  # type: ignore[attr-defined]
        return method

    return mark if fn is None else mark(fn)


@dataclass(frozen=True)
class NewSession:
    """What a tool returns to continue the episode in a child session (a context of its own):
    `compress` ends this one, `fork` runs the child beside it and answers this call with the
    child's final message. `prompt`: the child's user message (the task and what to carry over);
    `output`: this call's result as the log (and, compressing, the record) holds it."""

    action: str
    prompt: str
    output: str = ""

    @classmethod
    def compress(cls, prompt: str, output: str = "context compressed") -> NewSession:
        return cls("compress", prompt, output)

    @classmethod
    def fork(cls, prompt: str, output: str = "") -> NewSession:
        return cls("fork", prompt, output)

    def as_json(self) -> dict[str, str]:
        return {"action": self.action, "prompt": self.prompt}


class ToolError(RlvrError):
    """A tool refused its arguments (bad path, missing file): the policy sees the message."""


@dataclass
class Session:
    state: Any
    task: dict[str, Any]
    calls: list[dict[str, Any]] = field(default_factory=list)
    lock: threading.Lock = field(default_factory=threading.Lock)
    touched: float = field(default_factory=time.monotonic)
    closed: bool = False
    resources: list[Any] = field(default_factory=list)  # made through folder()/hold() while seeding


class ResourcesServer:
    """Base class: per-session state, tools, and a read-only verifier."""

    #: tools offered to the policy (None: every @tool); the contract's `environment.tools`
    offered: tuple[str, ...] | None = None
    #: tools whose use fails the episode whatever the final state
    forbidden: tuple[str, ...] = ()
    #: a session untouched this long is closed (and its resources freed) at the next seed
    session_ttl_s: float | None = 3600.0
    #: tool calls one session may make; later calls are answered with a tool error
    max_calls_per_session: int = 10_000
    #: characters of each tool output kept in the session's call log (the model still gets all)
    max_logged_output: int = 65_536
    #: UTF-8 bytes of a tool's result passed on (env/results.py); more is cut with a marker.
    #: `rlvr train` sets it from the contract (`environment.max_tool_output_bytes`)
    max_output_bytes: int = DEFAULT_MAX_OUTPUT_BYTES

    def __init__(self) -> None:
        self._sessions: dict[str, Session] = {}
        self._lock = threading.Lock()
        self._seeding = threading.local()  # the resources of the session being seeded

    # ── to implement ──────────────────────────────────────────────────────────────────

    def seed(self, task: dict[str, Any]) -> Any:  # pragma: no cover - abstract
        raise NotImplementedError

    def verify(self, state: Any, task: dict[str, Any], calls: list[dict[str, Any]], final_message: str) -> Verdict:
        raise NotImplementedError  # pragma: no cover - abstract

    def release(self, state: Any) -> None:
        """Free what `seed` created beyond folder()/hold() resources (those are freed anyway)."""

    def snapshot(self, state: Any) -> Any:
        """A JSON view of the whole session state (the isolation audit compares them)."""
        raise NotImplementedError

    # ── resources a session holds ─────────────────────────────────────────────────────

    def folder(self, prefix: str = "rlvr-session-") -> Path:
        """A fresh temporary directory owned by the session being seeded; removed on close."""
        path = Path(tempfile.mkdtemp(prefix=prefix))
        self._collect(path)
        return path

    def hold(self, resource: Any) -> Any:
        """Register anything with `close()` (a file, a process, a connection) to the session
        being seeded; closed when the session closes. Returns it."""
        if not callable(getattr(resource, "close", None)):
            raise TypeError("hold() takes an object with a close() method")
        self._collect(resource)
        return resource

    def _collect(self, resource: Any) -> None:
        pending = getattr(self._seeding, "resources", None)
        if pending is None:
            raise RuntimeError("folder() and hold() are for seed(): a session's resources are made while seeding")
        pending.append(resource)

    def resources(self, session_id: str) -> list[Any]:
        """The resources a session holds (folders as paths, held objects)."""
        return list(self.session(session_id).resources)

    @staticmethod
    def free(resources: list[Any]) -> None:
        for resource in reversed(resources):
            with contextlib.suppress(Exception):
                if isinstance(resource, Path):
                    shutil.rmtree(resource, ignore_errors=True)
                else:
                    resource.close()

    # ── machinery ─────────────────────────────────────────────────────────────────────

    @classmethod
    def tools(cls) -> dict[str, Callable[..., Any]]:
        return {
            name: fn for name, fn in inspect.getmembers(cls, inspect.isfunction) if getattr(fn, "__rlvr_tool__", False)
        }

    def offered_tools(self) -> list[str]:
        names = list(self.tools())
        return [n for n in names if self.offered is None or n in self.offered or n in self.forbidden]

    def schemas(self) -> list[dict[str, Any]]:
        """OpenAI-style function schemas of the tools the policy may call, typed from annotations."""
        tools = self.tools()
        return [signatures.schema(name, tools[name]) for name in self.offered_tools()]

    def seed_session(self, task: dict[str, Any]) -> str:
        self.expire()
        session_id = secrets.token_urlsafe(24)
        self._seeding.resources = collected = []
        try:
            state = self.seed(task)
        except BaseException:
            self.free(collected)
            raise
        finally:
            self._seeding.resources = None
        with self._lock:
            self._sessions[session_id] = Session(state, task, resources=collected)
        return session_id

    def snapshot_session(self, session_id: str) -> Any:
        """The session's snapshot as JSON data; NotImplementedError without snapshot()."""
        session = self.session(session_id)
        with session.lock:
            if session.closed:
                raise KeyError(session_id)
            return self._view(session.state)

    def expire(self) -> None:
        """Close every session untouched for `session_ttl_s` (a client that died mid-episode)."""
        if self.session_ttl_s is None:
            return
        now = time.monotonic()
        with self._lock:
            stale = [sid for sid, s in self._sessions.items() if now - s.touched > self.session_ttl_s]
        for sid in stale:
            with contextlib.suppress(KeyError):
                self.close_session(sid)

    def session(self, session_id: str) -> Session:
        with self._lock:
            found = self._sessions.get(session_id)
        if found is None:
            raise KeyError(session_id)
        return found

    def call(self, session_id: str, name: str, arguments: dict[str, Any]) -> Any:
        return self.call_directed(session_id, name, arguments)[0]

    def call_directed(self, session_id: str, name: str, arguments: dict[str, Any]) -> tuple[Any, NewSession | None]:
        """The tool's result, and the child session it asks for (None: none)."""
        session = self.session(session_id)
        if name not in self.offered_tools():
            raise PermissionError(name)
        with session.lock:
            if session.closed:  # closed while this call waited for the lock
                raise KeyError(session_id)
            session.touched = time.monotonic()
            if len(session.calls) >= self.max_calls_per_session:
                return f"error: this session has made its {self.max_calls_per_session} tool calls", None
            record = {"tool": name, "arguments": arguments, "time": time.time()}
            session.calls.append(record)
            directive = None
            try:
                output = self.invoke(session.state, name, arguments)
                if isinstance(output, NewSession):
                    directive, output = _checked(name, output, self.max_output_bytes)
            except (ToolError, signatures.ToolArgumentError) as exc:
                output = f"error: {exc}"
            except Exception as exc:  # any failure of a tool is an answer the model reads, never a 500
                output = f"error: {name} failed: {type(exc).__name__}: {str(exc)[:500]}"
            output = tool_output(name, output, self.max_output_bytes)  # JSON, within the cap, or a tool error
            logged = output if isinstance(output, str) else repr(output)
            record["output"] = logged[: self.max_logged_output]
            if directive is not None:
                record["session"] = directive.action
        return output, directive

    def invoke(self, state: Any, name: str, arguments: dict[str, Any]) -> Any:
        """Run one offered tool on a session's state, its arguments checked against its signature
        (a bridge to another server dispatches elsewhere: env/nemo_gym.py)."""
        fn = self.tools()[name]
        return fn(self, state, **signatures.validate(name, fn, arguments))

    def verify_session(self, session_id: str, final_message: str = "") -> Verdict:
        return self.verify_observed(session_id, final_message, observe=False)[1]

    def verify_observed(
        self, session_id: str, final_message: str = "", observe: bool = True
    ) -> tuple[Any, Verdict, Any]:
        """(snapshot before, verdict, snapshot after), atomically under the session's lock:
        how the isolation audit proves verify read-only in one request."""
        session = self.session(session_id)
        with session.lock:
            if session.closed:
                raise KeyError(session_id)
            session.touched = time.monotonic()
            before = self._view(session.state) if observe else None
            verdict = self._judge(session, final_message)
            after = self._view(session.state) if observe else None
        return before, verdict, after

    def call_log(self, session_id: str) -> list[dict[str, Any]]:
        """The server's own log of the session's tool calls (outputs cut at max_logged_output)."""
        session = self.session(session_id)
        with session.lock:
            if session.closed:
                raise KeyError(session_id)
            return json.loads(json.dumps(session.calls, default=str))

    def _view(self, state: Any) -> Any:
        return json.loads(json.dumps(self.snapshot(state), sort_keys=True, default=str))

    def _judge(self, session: Session, final_message: str) -> Verdict:
        used = [c["tool"] for c in session.calls if c["tool"] in self.forbidden]
        try:
            verdict = Verdict.coerce(self.verify(session.state, session.task, list(session.calls), final_message))
        except Exception as exc:  # the environment's bug: an invalid verdict, never a reward
            return Verdict("verifier_error", detail=f"verify raised {type(exc).__name__}: {str(exc)[:500]}")
        if used and verdict.valid:  # the path matters: a forbidden tool fails the episode
            zero = dict.fromkeys(verdict.components, 0.0)
            return Verdict("ok", 0.0, {**zero, "forbidden_tool": 1.0}, f"forbidden tool used: {', '.join(used)}")
        return _with_path(verdict, session.task.get("trajectory"), session.calls)

    def close_session(self, session_id: str) -> None:
        with self._lock:
            session = self._sessions.pop(session_id, None)
        if session is None:
            raise KeyError(session_id)
        with session.lock:  # a tool call in flight finishes first; none starts after
            session.closed = True
            try:
                self.release(session.state)
            finally:
                self.free(session.resources)

    @property
    def open_sessions(self) -> int:
        with self._lock:
            return len(self._sessions)


def _checked(name: str, directive: NewSession, max_bytes: int) -> tuple[NewSession | None, Any]:
    """A child session's request as the environment wrote it, or a tool error saying why not."""
    if directive.action not in ("compress", "fork"):
        return None, f"error: {name} asked for a session action {directive.action!r}; one of compress, fork"
    if not isinstance(directive.prompt, str) or not directive.prompt.strip():
        return None, f"error: {name} asked for a new session without a prompt (a non-empty string)"
    if len(directive.prompt.encode("utf-8", errors="surrogatepass")) > max_bytes:
        return None, f"error: {name} asked for a new session whose prompt is over {max_bytes} bytes"
    if not isinstance(directive.output, str):
        return None, f"error: {name} asked for a new session whose output is not a string"
    return directive, directive.output


def _with_path(verdict: Verdict, spec: Any, calls: list[dict[str, Any]]) -> Verdict:
    """State AND path: with a golden path in the task (`trajectory`), a `path` component, and
    an episode off the path earns nothing (env/trajectory.py). A malformed path is the task's
    fault: a verifier_error, never a reward."""
    if spec is None or not verdict.valid:
        return verdict
    from rlvr_cli.env.trajectory import TrajectoryError, match

    try:
        ok, why = match(list(calls), spec)
    except (TrajectoryError, TypeError, ValueError, re.error) as exc:
        return Verdict("verifier_error", detail=f"the task's trajectory is malformed: {exc}")
    if ok:
        return Verdict(verdict.status, verdict.reward, {**verdict.components, "path": 1.0}, verdict.detail)
    zero = dict.fromkeys(verdict.components, 0.0)
    return Verdict("ok", 0.0, {**zero, "path": 0.0}, f"off the golden path: {why}")
