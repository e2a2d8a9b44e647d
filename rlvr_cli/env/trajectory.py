"""Trajectory matching: did the episode take an acceptable path, not only reach the right state?

A task may carry a golden path in its `trajectory` field; the resources server then checks the
session's own call log against it after `verify` (state AND path), adding a `path` component:

    {"trajectory": {
        "order": "strict",                       # strict | partial | unordered
        "calls": [
            {"tool": "lookup", "args": {"sku": {"exact": "A1"}}},
            {"tool": "reserve", "args": {"qty": {"tolerance": [5, 0.01]}, "note": {"regex": "^ok"}, "by": "any"},
             "after": [0]},                      # partial order: steps that must come first
            {"tool": "notify", "optional": true}
        ]}}

Argument matchers: `{"exact": v}` (equal JSON values), `{"tolerance": [x, eps]}` (a number within
eps of x), `{"regex": pattern}` (the text matches from its start), `"any"` (present, any value).
Arguments the step does not name are not checked. Every required step is matched by its own call;
calls the path does not name are allowed (looking things up is not a fault) — tools an episode
must not touch are the server's `forbidden` tools. `strict`: matched calls in the steps' order;
`partial`: each step after the steps its `after` lists; `unordered`: any order.
"""

from __future__ import annotations

import math
import re
from typing import Any


class TrajectoryError(ValueError):
    """The golden path itself is malformed (the task's fault, not the policy's)."""


def _arg_ok(matcher: Any, present: bool, value: Any) -> bool:
    if not present:
        return False
    if matcher == "any":
        return True
    if not isinstance(matcher, dict) or len(matcher) != 1:
        raise TrajectoryError(f"an argument matcher is 'any' or one of exact/tolerance/regex, not {matcher!r}")
    ((kind, expected),) = matcher.items()
    if kind == "exact":
        return bool(value == expected)
    if kind == "tolerance":
        target, eps = expected
        return (
            isinstance(value, (int, float))
            and not isinstance(value, bool)
            and math.isfinite(value)
            and abs(value - target) <= eps
        )
    if kind == "regex":
        return isinstance(value, str) and re.match(expected, value) is not None
    raise TrajectoryError(f"unknown argument matcher {kind!r}")


def _step_ok(step: dict[str, Any], call: dict[str, Any]) -> bool:
    if call.get("tool") != step.get("tool"):
        return False
    arguments = call.get("arguments") or {}
    return all(_arg_ok(m, name in arguments, arguments.get(name)) for name, m in (step.get("args") or {}).items())


def match(calls: list[dict[str, Any]], spec: dict[str, Any]) -> tuple[bool, str]:
    """(whether the calls follow the golden path, why not)."""
    order = spec.get("order", "strict")
    steps = spec.get("calls")
    if order not in ("strict", "partial", "unordered") or not isinstance(steps, list) or not steps:
        raise TrajectoryError("a trajectory needs 'order' (strict | partial | unordered) and a list of 'calls'")
    candidates = [[i for i, call in enumerate(calls) if _step_ok(step, call)] for step in steps]
    assignment = _assign(steps, candidates, order, 0, {}, set())
    if assignment is not None:
        return True, ""
    missing = [s["tool"] for s, c in zip(steps, candidates, strict=True) if not c and not s.get("optional")]
    if missing:
        return False, f"required step(s) not taken: {', '.join(missing)}"
    return False, f"the required steps were not taken in the {order} order the path asks for"


def _assign(
    steps: list[dict[str, Any]], candidates: list[list[int]], order: str, k: int, chosen: dict[int, int], used: set[int]
) -> dict[int, int] | None:
    """Depth-first: a distinct call for every required step (optional ones where they fit),
    respecting the order. Paths are short; the search is small."""
    if k == len(steps):
        return dict(chosen)
    options: list[int | None] = [i for i in candidates[k] if i not in used and _fits(steps, chosen, order, k, i)]
    if steps[k].get("optional"):
        options.append(None)
    for i in options:
        if i is not None:
            chosen[k] = i
            used.add(i)
        found = _assign(steps, candidates, order, k + 1, chosen, used)
        if i is not None:
            del chosen[k]
            used.discard(i)
        if found is not None:
            return found
    return None


def _fits(steps: list[dict[str, Any]], chosen: dict[int, int], order: str, k: int, index: int) -> bool:
    if order == "strict":
        return all(index > chosen[j] for j in chosen if j < k)
    if order == "partial":
        return all(j not in chosen or index > chosen[j] for j in steps[k].get("after", []))
    return True
