"""A tool-use episode in flight, session by session, and how the resources server's answers
are read (rollout/tool_use.py runs episodes; rollout/sessions.py opens and settles sessions).

An episode is a tree of sessions (`Tree`): each session (`Episode`) is one context — its own
prompt ids, sampled and inserted ids, loss mask and log-probs — and every session of a tree
shares one server session (the environment's state, its call log, its verdict)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from rlvr_cli.env.agent import EnvHTTPError, EnvTimeout, EnvUnreachable
from rlvr_cli.env.model import CallIds
from rlvr_cli.env.verdict import Verdict


@dataclass
class Episode:
    """One session in flight: its chat so far, the ids after its prompt, and what happened."""

    task: dict[str, Any]
    group: int
    index: int
    prompt_ids: list[int]
    messages: list[dict[str, Any]]
    session: str = ""  # the server's session id (shared by every session of the tree)
    ids: list[int] = field(default_factory=list)
    mask: list[int] = field(default_factory=list)
    logp: list[float] = field(default_factory=list)
    items: list[dict[str, Any]] = field(default_factory=list)
    turns: list[dict[str, Any]] = field(default_factory=list)
    ended: str = ""
    final: str = ""
    said: str = ""  # what its latest turn said around its calls
    error: str = ""
    server_calls: list[Any] | None = None  # the server's own log of the session's calls
    call_ids: CallIds = field(default_factory=CallIds)
    hint: str | None = None
    prefix: str = ""  # the first response starts with this text (a hint as response prefix)
    # ── sessions (rollout/sessions.py) ──
    tree: Tree | None = None
    number: int = 0  # in the tree, in the order sessions were opened
    parent: Episode | None = None
    opened: str | None = None  # how its parent opened it: compress | fork
    answers: tuple[Episode, dict[str, Any]] | None = None  # a fork: the waiting session and the result it fills
    waiting: int = 0  # forks this session waits for
    held: tuple[list[dict[str, Any]], list[dict[str, Any]]] | None = None  # its calls and outputs meanwhile
    verdict: tuple[Verdict, float] | None = None  # reward.unit session: its own, when it ended

    def add(self, ids: list[int], mask: int, logp: list[float] | None = None) -> None:
        self.ids += ids
        self.mask += [mask] * len(ids)
        self.logp += logp if logp is not None else [0.0] * len(ids)


@dataclass
class Tree:
    """Every session of one episode, and its main line: the session whose end ends the episode
    (the first, then each session a compression replaced it with)."""

    sessions: list[Episode]
    main: Episode


def executed(calls: list[dict[str, Any]], outputs: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """A turn's calls as its record holds them once run (with the session each opened, if any)."""
    return [
        {"name": c["name"], "arguments": c["arguments"], "output": o["output"], "executed": True}
        | ({"opens": c["opens"]} if "opens" in c else {})
        for c, o in zip(calls, outputs, strict=True)
    ]


def results(env: Any, ops: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """One result per operation (env/batch.py); a batch that timed out or was refused as a
    whole answers every operation with its status. An unreachable server stops the run."""
    try:
        return env.client.batch(ops)  # type: ignore[no-any-return]
    except EnvUnreachable as exc:  # the run stops: say how the server ended and what it printed last
        more = env.describe()
        raise EnvUnreachable(f"{exc}; {more}" if more else str(exc)) from None
    except EnvTimeout as exc:
        return [{"status": 504, "detail": str(exc)} for _ in ops]
    except EnvHTTPError as exc:
        return [{"status": exc.status, "detail": exc.body[:300]} for _ in ops]


def failure(result: dict[str, Any]) -> str:
    return f"HTTP {result.get('status')}: {str(result.get('detail'))[:300]}"


def verdict_of(episode: Episode, result: dict[str, Any]) -> Verdict:
    if result.get("status") == 504:
        return Verdict("timeout", detail=f"verify: {result.get('detail')}")
    if result.get("status") != 200:
        return Verdict("verifier_error", detail=f"verify failed: {failure(result)}")
    data = dict(result.get("body") or {})
    calls = data.pop("calls", None)
    if calls is not None:
        episode.server_calls = calls
    try:
        return Verdict.coerce(data)
    except (ValueError, TypeError) as exc:
        return Verdict("verifier_error", detail=f"verify failed: {exc}")
