"""Prefix renderings read off one instrumented rendering, where the template provably allows it.

Locating turns needs `messages[:k]` rendered for several k (chat/masks.py). For a template of
the common shape — one loop over the messages, nothing after it but text that depends on
`add_generation_prompt` and constants — the rendering of `messages[:k]` is the full
rendering up to the moment the loop asks for message k, followed by that constant tail.
This module proves both halves before using them:

- statically, on the template's syntax tree (`eligible`): exactly one loop over the
  messages (or over a `messages[i:]` slice), never `loop.last`/`loop.length`/`loop.revindex`
  /`loop.nextitem` in it (they read ahead), the messages used otherwise only by index, no
  `add_generation_prompt` before the loop ends, and a tail that reads nothing the template
  assigns;
- dynamically, per conversation (`render`): the messages are a tracking sequence that notes,
  for every index, how much text had been produced when it was first asked for and how
  (iterated by that loop, indexed, or counted). A prefix is read off only where the loop's
  own iteration was the first to ask for message k; anything else (a look-ahead by index,
  `messages|length`, a negative index) makes the caller render that prefix for real.

The two tails (with and without the generation prompt) are taken once from a one-message
probe rendered the same way.
"""

from __future__ import annotations

import itertools
from collections.abc import Iterator, Sequence
from typing import Any

from jinja2 import nodes

_LOOK_AHEAD = {"last", "length", "revindex", "revindex0", "nextitem", "changed"}
_PROBE = [{"role": "user", "content": "rlvr-probe-user"}]


class _Log:
    """Positions are counted in output chunks while rendering (the chunks produced before
    the read) and turned into characters once the rendering is done (`settle`)."""

    def __init__(self, parts: list[str]) -> None:
        self.parts = parts
        self.first: dict[int, tuple[int, str]] = {}  # index → (text length, how) when first asked for
        self.counted = False  # the length (or everything) was asked for: no later first-asks count
        self.exhausted: int | None = None

    def touch(self, index: int, how: str) -> None:
        if not self.counted and index not in self.first:
            self.first[index] = (len(self.parts), how)

    def settle(self) -> None:
        ends = [0, *itertools.accumulate(len(part) for part in self.parts)]
        self.first = {index: (ends[chunk], how) for index, (chunk, how) in self.first.items()}
        if self.exhausted is not None:
            self.exhausted = ends[self.exhausted]

    def everything(self) -> None:
        self.counted = True


class _Messages(Sequence):
    """The messages as a read-only sequence that logs how each one is reached."""

    def __init__(self, items: list[Any], log: _Log, base: int = 0) -> None:
        self._items = items
        self._log = log
        self._base = base

    def __len__(self) -> int:
        self._log.everything()
        return len(self._items)

    def __bool__(self) -> bool:
        self._log.touch(self._base, "index")
        return bool(self._items)

    def __getitem__(self, key: Any) -> Any:
        if isinstance(key, slice):
            if key.step is None and key.stop is None and (key.start is None or key.start >= 0):
                start = key.start or 0
                return _Messages(self._items[start:], self._log, self._base + start)
            self._log.everything()
            return list(self._items[key])
        if not isinstance(key, int) or key < 0:
            self._log.everything()
            return self._items[key]
        self._log.touch(self._base + key, "index")
        return self._items[key]

    def __iter__(self) -> Iterator[Any]:
        for i, item in enumerate(self._items):
            self._log.touch(self._base + i, "iter")
            yield item
        self._log.exhausted = len(self._log.parts)
        self._log.everything()

    def __reversed__(self) -> Iterator[Any]:
        self._log.everything()
        return reversed(self._items)


def _walk(
    node: nodes.Node, parents: tuple[nodes.Node, ...] = ()
) -> Iterator[tuple[nodes.Node, tuple[nodes.Node, ...]]]:
    """Every node with its ancestors, nearest last."""
    yield node, parents
    for child in node.iter_child_nodes():
        yield from _walk(child, (*parents, node))


def _derived(tree: nodes.Template) -> set[str]:
    """`messages` and names assigned it, or a `messages[i:]` slice of it (or of another such name)."""
    names = {"messages"}
    changed = True
    while changed:
        changed = False
        for node in tree.find_all(nodes.Assign):
            value = node.node
            alias = isinstance(value, nodes.Name) and value.name in names
            tail = (
                isinstance(value, nodes.Getitem)
                and isinstance(value.node, nodes.Name)
                and value.node.name in names
                and _tail_slice(value.arg)
            )
            if isinstance(node.target, nodes.Name) and node.target.name not in names and (alias or tail):
                names.add(node.target.name)
                changed = True
    return names


def _tail_slice(arg: nodes.Node) -> bool:
    if not isinstance(arg, nodes.Slice) or arg.stop is not None or arg.step is not None:
        return False
    return arg.start is None or (isinstance(arg.start, nodes.Const) and isinstance(arg.start.value, int))


def eligible(environment: Any, source: str) -> str | None:
    """How prefix renderings may be read off one rendering of this template: "constant" (the
    text after the loop is the same for every conversation), "preamble" (it depends only on
    what the template set before the loop, so it is the same for every prefix of one
    conversation), or None (render them)."""
    try:
        tree = environment.parse(source)
    except Exception:
        return None
    derived = _derived(tree)
    loops = [f for f in tree.find_all(nodes.For) if _names(f.iter) & derived]
    if len(loops) != 1 or loops[0] not in tree.body:
        return None
    main = loops[0]
    if not (isinstance(main.iter, nodes.Name) and main.iter.name in derived) or main.else_ or main.test:
        return None
    if main.recursive or not _loop_var_safe(main) or not _uses_safe(tree, main, derived):
        return None
    index = tree.body.index(main)
    if any("add_generation_prompt" in _names(n) for n in tree.body[: index + 1]):
        return None
    tail = tree.body[index + 1 :]
    tail_names = set().union(*(_names(n) for n in tail)) if tail else set()
    changing = _stored(main) | {m.name for m in tree.find_all(nodes.Macro)} | derived | {"loop"}
    if tail_names & changing:
        return None
    before = set().union(*(_stored(n) for n in tree.body[:index])) if index else set()
    own = set().union(*(_stored(n) for n in tail)) if tail else set()
    return "preamble" if tail_names & (before - own) else "constant"


def _stored(node: nodes.Node) -> set[str]:
    """Names a node assigns, namespaces it writes into included."""
    found = {n.name for n in node.find_all(nodes.Name) if n.ctx == "store"}
    found |= {n.name for n in node.find_all(nodes.NSRef)}
    if isinstance(node, nodes.Assign | nodes.AssignBlock) and isinstance(node.target, nodes.Name):
        found.add(node.target.name)
    return found


def _names(node: nodes.Node) -> set[str]:
    found = {n.name for n in node.find_all(nodes.Name)}
    if isinstance(node, nodes.Name):
        found.add(node.name)
    return found


def _loop_var_safe(main: nodes.For) -> bool:
    """The main loop never reads ahead through `loop` (a nested loop's own `loop` is its own)."""
    for node, parents in _walk(main):
        if isinstance(node, nodes.Name) and node.name == "loop":
            if any(isinstance(p, nodes.For) for p in parents[1:]):
                continue  # inside a nested loop: that loop's variable
            if not isinstance(parents[-1], nodes.Getattr) or parents[-1].attr in _LOOK_AHEAD:
                return False
    return True


def _truth_test(node: nodes.Node, parents: tuple[nodes.Node, ...]) -> bool:
    """The node is only ever coerced to a bool: an `if`/conditional test, possibly through
    `not`/`and`/`or` (whose value, inside a test, is coerced too)."""
    child = node
    for parent in reversed(parents):
        if isinstance(parent, (nodes.If, nodes.CondExpr)):
            return child is parent.test
        if not isinstance(parent, (nodes.Not, nodes.And, nodes.Or)):
            return False
        child = parent
    return False


def _uses_safe(tree: nodes.Template, main: nodes.For, derived: set[str]) -> bool:
    """Every read of the messages is the main loop's iteration, an index, a tail slice
    assigned to a name, an `is defined` test or a truth test: nothing else can iterate them."""
    for node, parents in _walk(tree):
        if not (isinstance(node, nodes.Name) and node.name in derived and node.ctx == "load"):
            continue
        parent = parents[-1]
        if parent is main and node is main.iter:
            continue
        indexed = isinstance(parent, nodes.Getitem) and parent.node is node
        if indexed and (not isinstance(parent.arg, nodes.Slice) or _tail_slice(parent.arg)):
            continue
        if isinstance(parent, nodes.Test) and parent.name in ("defined", "undefined"):
            continue
        if isinstance(parent, nodes.Assign) and parent.node is node and isinstance(parent.target, nodes.Name):
            continue  # an alias, itself tracked as derived
        if isinstance(parent, nodes.Filter) and parent.node is node and parent.name in ("length", "count"):
            continue  # len(): counts as reading every message
        if _truth_test(node, parents):
            continue  # the sequence's __bool__: an index-0 read
        return False
    return True


class TrackedRender:
    """Renders a conversation once and answers for its prefixes where it can."""

    def __init__(self, compiled: Any, render_kwargs: dict[str, Any], mode: str) -> None:
        self._compiled = compiled
        self._kwargs = render_kwargs
        self.mode = mode
        self.tails = self._tails(_PROBE, None, "")
        self.usable = self.tails is not None or mode == "preamble"

    def tails_of(self, chat: list[dict[str, Any]], tools: Any, full: str, log: _Log) -> tuple[str, str] | None:
        """The tails for this conversation: the template's constant ones, or (preamble mode)
        the full rendering's own and one more rendering's with the generation prompt."""
        if self.mode == "constant":
            return self.tails
        if log.exhausted is None:
            return None
        try:
            return self._tails(chat, tools, full[log.exhausted :])
        except Exception:
            return None

    def run(self, chat: list[dict[str, Any]], tools: Any, generation: bool) -> tuple[str, _Log]:
        parts: list[str] = []
        log = _Log(parts)
        stream = self._compiled.generate(
            messages=_Messages(chat, log), tools=tools, documents=None, add_generation_prompt=generation, **self._kwargs
        )
        append = parts.append
        for chunk in stream:  # a read during the next chunk sees the chunks before it
            append(chunk)
        log.settle()
        return "".join(parts), log

    def _tails(self, chat: list[dict[str, Any]], tools: Any, plain_tail: str) -> tuple[str, str] | None:
        """(tail without, tail with the generation prompt) after the loop, or None."""
        try:
            out = []
            for generation in (False, True):
                if not generation and plain_tail:
                    out.append(plain_tail)
                    continue
                text, log = self.run(chat, tools, generation)
                if log.exhausted is None:
                    return None
                out.append(text[log.exhausted :])
        except Exception:
            return None
        return out[0], out[1]


def prefix_at(log: _Log, full: str, count: int, tails: tuple[str, str], generation: bool) -> str | None:
    """messages[:count] rendered, read off the full rendering, or None where unproven."""
    seen = log.first.get(count)
    if seen is None or seen[1] != "iter":
        return None
    return full[: seen[0]] + tails[generation]
