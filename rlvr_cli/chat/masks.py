"""Where each turn's tokens are, and which of them the policy loss covers.

Loss mask: 1 on assistant content through its first stop token; 0 on system, user and tool
tokens, on template glue after the stop token, on padding, and after termination or
truncation. `locate` works on a rendered conversation; `sampled_mask` builds the mask of a
training episode from the token ids that were actually sampled.
"""

from __future__ import annotations

import bisect
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from rlvr_cli.chat.conversation import Rendered, Span

if TYPE_CHECKING:
    from rlvr_cli.chat.conversation import Conversation
    from rlvr_cli.chat.render import ChatRenderer


@dataclass
class Problem:
    """Something `locate` noticed that a check reports: kind, turn, token position, detail."""

    kind: str  # rewrite | generation_prompt | no_stop | split_token
    turn: int
    position: int
    detail: str = ""


@dataclass
class Located:
    text: str
    ids: list[int]
    offsets: list[tuple[int, int]]
    spans: list[Span]
    plain: list[str]  # plain[k]: messages[:k+1] rendered without a generation prompt
    generation: dict[int, str]  # turn → messages[:turn] rendered with the generation prompt
    problems: list[Problem] = field(default_factory=list)


class _Tokens:
    """Maps character boundaries of the full text to token indices."""

    def __init__(self, offsets: Sequence[tuple[int, int]], length: int) -> None:
        self.starts = [start for start, _ in offsets]
        self.offsets = offsets
        self.length = length

    def at(self, char: int) -> tuple[int, bool]:
        """First token starting at or after `char`; False when `char` falls inside a token."""
        index = bisect.bisect_left(self.starts, char)
        inside = index > 0 and self.offsets[index - 1][1] > char and char < self.length
        return index, not inside


def common_prefix(a: str, b: str) -> int:
    n = min(len(a), len(b))
    i = 0
    while i < n and a[i] == b[i]:
        i += 1
    return i


def locate(renderer: ChatRenderer, conversation: Conversation) -> Located:
    """Render growing prefixes, compare them with the full rendering, and cut it into spans."""
    messages, tools = conversation.messages, conversation.tools
    n = len(messages)
    plain = renderer.texts([messages[: k + 1] for k in range(n)], tools, add_generation_prompt=False)
    turns = [k for k, m in enumerate(messages) if m["role"] == "assistant"]
    gen_texts = renderer.texts([messages[:k] for k in turns], tools, add_generation_prompt=True)
    generation = dict(zip(turns, gen_texts, strict=True))
    full = plain[-1]
    ids, offsets = renderer.encode(full)
    located = Located(full, ids, offsets, [], plain, generation)
    tokens = _Tokens(offsets, len(full))
    bounds = _boundaries(located, tokens)
    k = 0
    while k < n:
        nxt = next(j for j in range(k + 1, n + 1) if bounds[j] is not None)
        start, end = bounds[k], bounds[nxt]
        if nxt == k + 1:
            located.spans.extend(_turn_spans(renderer, located, tokens, k, messages[k]["role"], start, end))
        else:  # turns k..nxt-1 were rewritten by later turns: nothing in them is trained
            located.spans.append(Span(messages[k]["role"], k, start, end, False, "rewritten"))
        k = nxt
    return located


def _boundaries(located: Located, tokens: _Tokens) -> list[int | None]:
    """Token index where turn k starts, or None where the prefix was rewritten."""
    full = located.text
    bounds: list[int | None] = [0]
    for k, prefix in enumerate(located.plain):
        if full.startswith(prefix):
            index, aligned = tokens.at(len(prefix))
            if not aligned:
                located.problems.append(
                    Problem("split_token", k, index - 1, f"the end of turn {k} falls inside token {index - 1}")
                )
            bounds.append(index)
        else:
            diverge = common_prefix(prefix, full)
            located.problems.append(Problem("rewrite", k, tokens.at(diverge)[0] - (not tokens.at(diverge)[1])))
            bounds.append(None)
    bounds[-1] = len(located.ids)  # the full rendering always ends the last turn
    return bounds


def _turn_spans(
    renderer: ChatRenderer, located: Located, tokens: _Tokens, k: int, role: str, start: int, end: int
) -> list[Span]:
    if role != "assistant":
        return [Span(role, k, start, end, False, "turn")]
    prompt = located.generation[k]
    first_char = len(located.plain[k - 1]) if k > 0 else 0
    head = start
    if located.text.startswith(prompt) and first_char <= len(prompt) <= len(located.plain[k]):
        index, aligned = tokens.at(len(prompt))
        head = min(max(index, start), end)
        if not aligned:
            located.problems.append(
                Problem("split_token", k, index - 1, f"the generation prompt of turn {k} ends inside token {index - 1}")
            )
    else:
        located.problems.append(Problem("generation_prompt", k, start))
    stops = set(renderer.stop_ids)
    stop = next((i for i in range(head, end) if located.ids[i] in stops), None)
    if stop is None:
        located.problems.append(Problem("no_stop", k, end))
        stop = end - 1
    spans = []
    if head > start:
        spans.append(Span(role, k, start, head, False, "header"))
    spans.append(Span(role, k, head, stop + 1, True, "content"))
    if end > stop + 1:
        spans.append(Span(role, k, stop + 1, end, False, "glue"))
    return spans


def to_rendered(renderer: ChatRenderer, located: Located) -> Rendered:
    mask = [0] * len(located.ids)
    for span in located.spans:
        if span.trainable:
            mask[span.start : span.end] = [1] * (span.end - span.start)
    tokens = renderer.tokens(located.ids)
    return Rendered(located.ids, tokens, mask, located.spans, [], located.text, located.offsets)


def sampled_mask(sampled: Sequence[int], stop_ids: Sequence[int]) -> tuple[list[int], str]:
    """Mask of one sampled response, from the ids as generated (never re-encoded text):
    1 through the first stop token and 0 after it. Returns the mask and the finish reason,
    `stop` or `length` (no stop token: truncated at the limit)."""
    stops = set(stop_ids)
    for i, token in enumerate(sampled):
        if token in stops:
            return [1] * (i + 1) + [0] * (len(sampled) - i - 1), "stop"
    return [1] * len(sampled), "length"
