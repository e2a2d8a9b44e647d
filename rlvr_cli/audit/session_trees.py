"""The session trees of a run's episodes, rebuilt from its records alone (`rlvr audit rollouts`).

Every record is one session: `session_id` is `run/step/group/sample` for an episode's first
session and `…/sample.k` for its k-th; `parent_session_id` names the session that opened it
(by compressing or forking: its transcript's `session.opened`). A tree is sound when every
parent is a record of the same episode, each episode has one first session, no session is its
own ancestor, and each compressed session was replaced by exactly one child opened by
compression. What is not is a problem, and the audit fails."""

from __future__ import annotations

import json
from collections import Counter, defaultdict
from typing import Any


def _episode(session_id: str) -> str:
    return session_id.rsplit(".", 1)[0] if "." in session_id.rsplit("/", 1)[-1] else session_id


def trees(rows: list[dict[str, Any]]) -> dict[str, Any] | None:
    """Counts, depths, how sessions were opened, reward by sessions per episode, and problems.
    None: no record has a parent session (every episode is one session)."""
    if not any(r.get("parent_session_id") for r in rows):
        return None
    by_id = {r["session_id"]: r for r in rows}
    episodes: dict[str, list[dict[str, Any]]] = defaultdict(list)
    for row in rows:
        episodes[_episode(row["session_id"])].append(row)
    problems: list[str] = []
    depths, sizes, opened = [], [], Counter()
    by_size: dict[int, list[float]] = defaultdict(list)
    for key, members in episodes.items():
        roots = [r for r in members if not r.get("parent_session_id")]
        if len(roots) != 1:
            problems.append(f"episode {key}: {len(roots)} first sessions")
        children: dict[str, list[dict[str, Any]]] = defaultdict(list)
        for row in members:
            parent = row.get("parent_session_id")
            if parent is None:
                continue
            if parent not in by_id:
                problems.append(f"session {row['session_id']}: its parent {parent} is in no record")
            elif _episode(parent) != key:
                problems.append(f"session {row['session_id']}: its parent {parent} is another episode's")
            children[parent].append(row)
            opened[_opened(row)] += 1
        problems += _compressions(members, children)
        depth = max((_depth(r, by_id, problems) for r in members), default=0)
        depths.append(depth)
        sizes.append(len(members))
        final = [r["reward"] for r in members if _ends_episode(r, by_id) and r["reward"] is not None]
        if final:
            by_size[len(members)].append(final[0])
    return {
        "episodes": len(episodes),
        "with_several_sessions": sum(n > 1 for n in sizes),
        "sessions_per_episode": sum(sizes) / len(sizes),
        "most_sessions": max(sizes),
        "deepest": max(depths),
        "opened": dict(opened),
        "reward_by_sessions": {n: sum(v) / len(v) for n, v in sorted(by_size.items())},
        "problems": problems[:50],
    }


def _ends_episode(row: dict[str, Any], by_id: dict[str, dict[str, Any]]) -> bool:
    """The session whose end ended the episode: not compressed, and no fork in its ancestry."""
    if _ended(row) == "compressed":
        return False
    at, hops = row, 0
    while at is not None and hops <= len(by_id):
        if _opened(at) == "fork":
            return False
        at, hops = by_id.get(at.get("parent_session_id") or ""), hops + 1
    return True


def _opened(row: dict[str, Any]) -> str:
    try:
        return str(json.loads(row.get("transcript") or "{}").get("session", {}).get("opened") or "unknown")
    except (ValueError, AttributeError):
        return "unknown"


def _ended(row: dict[str, Any]) -> str:
    try:
        return str(json.loads(row.get("transcript") or "{}").get("ended", ""))
    except ValueError:
        return ""


def _compressions(members: list[dict[str, Any]], children: dict[str, list[dict[str, Any]]]) -> list[str]:
    out = []
    for row in members:
        if _ended(row) == "compressed":
            replaced = [c for c in children.get(row["session_id"], []) if _opened(c) == "compress"]
            if len(replaced) != 1:
                out.append(f"session {row['session_id']} compressed into {len(replaced)} sessions, not one")
    return out


def _depth(row: dict[str, Any], by_id: dict[str, dict[str, Any]], problems: list[str]) -> int:
    seen, depth, at = {row["session_id"]}, 0, row
    while at.get("parent_session_id") in by_id:
        at = by_id[at["parent_session_id"]]
        if at["session_id"] in seen:
            problems.append(f"session {row['session_id']}: its parents form a cycle")
            return depth
        seen.add(at["session_id"])
        depth += 1
    return depth


def lines(report: dict[str, Any] | None) -> list[str]:
    if not report:
        return []
    by = ", ".join(f"{n} session(s) {v:.3f}" for n, v in report["reward_by_sessions"].items())
    out = [
        f"session trees: {report['episodes']} episodes rebuilt from the records, {report['with_several_sessions']} "
        f"with several sessions ({report['sessions_per_episode']:.2f} per episode, at most {report['most_sessions']}, "
        f"depth up to {report['deepest']}); opened by {report['opened']}; reward by sessions: {by or 'n/a'}"
    ]
    if report["problems"]:
        out.append(f"session trees: FAILED — {len(report['problems'])} problem(s)")
        out += [f"  {p}" for p in report["problems"][:20]]
    return out
