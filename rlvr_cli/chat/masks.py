"""Where each turn's tokens are, and which of them the policy loss covers.

Loss mask: 1 on assistant content through its first stop token (where the turn renders none and
the next turn opens with one, GLM's `<|observation|>`, through that token); 0 on system, user and tool
tokens, on template glue after the stop token, on padding, and after termination or
truncation.

`locate` renders the whole conversation once and, for every assistant turn k, two prefixes:
`messages[:k]` with the generation prompt (what the policy was sampled from) and
`messages[:k+1]` without it (the turn as it was when it was the last one). Turn k is trained
from the end of its generation prompt through its first stop token when both prefixes line
up with the full rendering; otherwise the template rewrote history (or opens the turn with
something it never renders) and the turn is reported, not trained. Turns are never found by
searching for a message's content. Other turns are cut apart by rendering their prefixes
too; a prefix the template refuses, or that later turns rewrite, merges those
(untrained) turns into one span. `sampled_mask` builds the mask of a training episode from
the token ids that were actually sampled.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from rlvr_cli.chat import tracked
from rlvr_cli.chat.conversation import Offsets, Rendered, Span

if TYPE_CHECKING:
    from rlvr_cli.chat.conversation import Conversation
    from rlvr_cli.chat.render import ChatRenderer


@dataclass
class Problem:
    """Something `locate` noticed that a check reports: kind, turn, token position, detail."""

    kind: str  # rewrite | context_rewrite | generation_prompt | no_stop | split_token | refused
    turn: int
    position: int
    detail: str = ""


@dataclass
class Located:
    text: str
    ids: list[int]
    offsets: Offsets
    spans: list[Span] = field(default_factory=list)
    prompts: dict[int, tuple[int, int]] = field(default_factory=dict)  # turn → (header start, generated start)
    problems: list[Problem] = field(default_factory=list)


class _Tokens:
    """Maps character boundaries of the full text to token indices."""

    def __init__(self, offsets: Offsets, length: int) -> None:
        self.offsets = offsets
        self.length = length

    def at(self, char: int) -> tuple[int, bool]:
        """First token starting at or after `char`; False when `char` falls inside a token."""
        return self.offsets.at(char, self.length)


def _first_of(ids: list[int], wanted: Sequence[int], start: int, end: int) -> int | None:
    """Index of the first of `wanted` in ids[start:end], or None."""
    found = None
    for token in wanted:
        try:
            found = ids.index(token, start, end if found is None else found)
        except ValueError:
            continue
    return found


def common_prefix(a: str, b: str) -> int:
    n = min(len(a), len(b))
    if a[:n] == b[:n]:
        return n
    lo, hi = 0, n  # a[:lo] == b[:lo], a[:hi] != b[:hi]
    while hi - lo > 1:
        mid = (lo + hi) // 2
        if a[lo:mid] == b[lo:mid]:
            lo = mid
        else:
            hi = mid
    return lo


class _Locator:
    """One conversation's location state: the full rendering and a cursor through it."""

    def __init__(self, renderer: ChatRenderer, conversation: Conversation) -> None:
        self.renderer = renderer
        self.messages = conversation.messages
        self.tools = conversation.tools
        template = renderer.compiled
        self.chat = template.prepare(self.messages)
        self._keys: tuple[str, list[str]] | None = None
        self._tails: tuple[str, ...] | None = None
        self.log = None  # with a tracker: how the rendering reached each message (chat/tracked.py)
        if template.tracker is not None:
            full, self.log = template.tracker.run(self.chat, self.tools, False)  # a failure: the caller's
        else:
            full = template.cached(self.chat, self.keys(), len(self.chat), self.tools, False)
        ids, offsets = renderer.encode_offsets(full)
        self.out = Located(full, ids, offsets)
        self.tokens = _Tokens(offsets, len(full))
        self.opening, self.closing = renderer.opening_closing

    # ── rendering and positions ──────────────────────────────────────────────────────

    def keys(self) -> tuple[str, list[str]]:
        """The prefix cache's keys, computed on the first real render."""
        if self._keys is None:
            self._keys = self.renderer.compiled.keys(self.chat, self.tools)
        return self._keys

    def prefix(self, count: int, generation: bool, turn: int, report: bool = True) -> str | None:
        """messages[:count] rendered, or None (reported) when the template refuses it."""
        if self.log is not None:
            if self._tails is None:
                tracker = self.renderer.compiled.tracker
                self._tails = tracker.tails_of(self.chat, self.tools, self.out.text, self.log) or ()
            if self._tails:
                read = tracked.prefix_at(self.log, self.out.text, count, self._tails, generation)
                if read is not None:
                    return read
        try:
            return self.renderer.compiled.cached(self.chat, self.keys(), count, self.tools, generation)
        except Exception as exc:
            if not report:
                return None
            what = "with the generation prompt" if generation else "as the last turn"
            detail = f"the template refuses messages[:{count}] {what} ({type(exc).__name__}: {exc})"
            self.out.problems.append(Problem("refused", turn, self.token(0, turn), detail))
            return None

    def lines_up(self, prefix: str) -> int | None:
        """Where `prefix` ends in the full text (its closing taken off if it has one), or None."""
        full = self.out.text
        if full.startswith(prefix):
            return len(prefix)
        if self.closing and prefix.endswith(self.closing) and full.startswith(prefix[: -len(self.closing)]):
            return len(prefix) - len(self.closing)
        return None

    def diverge(self, prefix: str) -> int:
        """Token index where `prefix` and the full rendering first differ."""
        char = common_prefix(prefix, self.out.text)
        index, aligned = self.tokens.at(char)
        return index - (not aligned)

    def token(self, char: int, turn: int, what: str = "") -> int:
        index, aligned = self.tokens.at(char)
        if not aligned and what:
            self.out.problems.append(
                Problem("split_token", turn, index - 1, f"{what} of turn {turn} falls inside token {index - 1}")
            )
        return index

    # ── the walk ─────────────────────────────────────────────────────────────────────

    def run(self) -> Located:
        start_char, first = 0, 0  # the region not yet given spans: chars from start_char, turns from first
        for k, message in enumerate(self.messages):
            if message["role"] != "assistant":
                continue
            found = self.assistant(k)
            if found is None:
                continue  # not located: stays in the region, untrained
            header, head, end = found
            if first == k:  # nothing between the previous turn and this one: the header takes the gap
                header = start_char
            self.context(start_char, header, first, k)
            start_char, first = self.turn_spans(k, header, head, end), k + 1
        self.context(start_char, len(self.out.text), first, len(self.messages))
        return self.out

    def assistant(self, k: int) -> tuple[int, int, int] | None:
        """(header, generated start, end) in chars for assistant turn k, or None."""
        gen = self.prefix(k, True, k)
        if gen is None:
            return None
        body = len(gen) - len(self.opening) if self.opening and gen.endswith(self.opening) else None
        if body is None:  # a generation prompt that varies (SmolLM3's /no_think): where turn k-1 ends
            before = self.prefix(k, False, k, report=False) if k else ""
            end = None if before is None else self.lines_up(before)
            body = end if end is not None and end <= len(gen) else len(gen)
        if self.out.text.startswith(gen):
            head = len(gen)
        else:
            char = common_prefix(gen, self.out.text)
            if char < body:  # earlier turns render differently once this one follows
                self.out.problems.append(Problem("context_rewrite", k, self.diverge(gen)))
                return None
            self.out.problems.append(Problem("generation_prompt", k, self.diverge(gen)))
            index, aligned = self.tokens.at(char)
            head = char if aligned else self.out.offsets[index - 1][0]  # texts part inside a token
        if k == len(self.messages) - 1:
            return body, head, len(self.out.text)
        plain = self.prefix(k + 1, False, k)
        if plain is None:
            return body, head, -1  # end unknown: the content ends at its stop token
        end = self.lines_up(plain)
        if end is None or end < head:
            self.out.problems.append(Problem("rewrite", k, self.diverge(plain)))
            return None
        return body, head, end

    def turn_spans(self, k: int, header_char: int, head_char: int, end_char: int) -> int:
        """Spans of assistant turn k; returns the character where the next turn's region starts."""
        header = self.token(header_char, k, "the start")
        head = self.token(head_char, k, "the generation prompt's end")
        end = len(self.out.ids) if end_char < 0 else self.token(end_char, k, "the end")
        ids = self.out.ids
        limit = len(ids) if end_char < 0 else end
        stop = _first_of(ids, self.renderer.stop_ids, head, limit)
        if stop is None and limit < len(ids) and ids[limit] in self.renderer.stop_ids:
            # the turn ends where the next one opens, with a stop token (GLM's <|user|>, <|observation|>):
            # the policy stopped by writing that token, so it is the turn's last trained token
            stop = end = limit
            end_char = self.out.offsets[limit][1]
        elif stop is None:
            if limit < len(ids) or not self.next_opens_with_stop():  # (last turn: its stop would open the next)
                self.out.problems.append(Problem("no_stop", k, limit))
            stop = limit - 1
        if end_char < 0:
            end = stop + 1
        self.out.prompts[k] = (header, head)
        spans = self.out.spans
        if head > header:
            spans.append(Span("assistant", k, header, head, False, "header"))
        spans.append(Span("assistant", k, head, stop + 1, True, "content"))
        if end > stop + 1:
            spans.append(Span("assistant", k, stop + 1, end, False, "glue"))
        return end_char

    def next_opens_with_stop(self) -> bool:
        """Whether a user (or tool) turn after this conversation would open with a stop token: a
        template whose turns end where the next opens (GLM) renders no stop after the last turn."""
        for probe in ({"role": "user", "content": "rlvr-probe"}, {"role": "tool", "content": "rlvr-probe"}):
            try:  # (a user turn after a reasoning turn makes GLM drop its reasoning: then a tool turn)
                text = self.renderer.compiled.text([*self.messages, probe], self.tools, False)
            except Exception:
                continue
            if text.startswith(self.out.text):
                ids = self.renderer.ids_of([text[len(self.out.text) :]])[0]
                return bool(ids) and ids[0] in self.renderer.stop_ids
        return False

    def context(self, start_char: int, end_char: int, first: int, stop: int) -> None:
        """Untrained spans for turns first..stop-1 between two located points."""
        if first >= stop:
            if end_char > start_char and self.out.spans:  # trailing text after the last turn
                last = self.out.spans[-1]
                last.end = self.token(end_char, last.turn)
            return
        bounds: list[int | None] = [start_char]
        turns = list(range(first, stop))
        known = start_char
        for j in turns[:-1]:  # display only: a refused or rewritten prefix merges turns, silently
            text = self.prefix(j + 1, False, j, report=False)
            cut = None if text is None else self.lines_up(text)
            if cut is not None and not known <= cut <= end_char:
                cut = None
            known = cut if cut is not None else known
            bounds.append(cut)
        bounds.append(end_char)
        self.group_spans(turns, bounds)

    def group_spans(self, turns: list[int], bounds: list[int | None]) -> None:
        """Spans for turns whose boundaries are known; a run of unknown boundaries merges."""
        i = 0
        while i < len(turns):
            j = next(x for x in range(i + 1, len(bounds)) if bounds[x] is not None)
            group = turns[i:j]
            start = self.token(bounds[i], group[0])  # type: ignore[arg-type]
            end = self.token(bounds[j], group[-1])  # type: ignore[arg-type]
            roles = [self.messages[t]["role"] for t in group]
            part = "rewritten" if "assistant" in roles else "turn"
            self.out.spans.append(Span(roles[0], group[0], start, end, False, part, group[-1]))
            i = j


def locate(renderer: ChatRenderer, conversation: Conversation) -> Located:
    """Render the conversation and its prefixes and cut the full rendering into spans."""
    return _Locator(renderer, conversation).run()


def to_rendered(renderer: ChatRenderer, located: Located) -> Rendered:
    mask = [0] * len(located.ids)
    for span in located.spans:
        if span.trainable:
            mask[span.start : span.end] = [1] * (span.end - span.start)
    tokens = renderer.tokens(located.ids)
    return Rendered(located.ids, tokens, mask, located.spans, [], located.text, located.offsets)


def continuation(
    renderer: ChatRenderer,
    messages: list[dict[str, Any]],
    added: list[dict[str, Any]],
    tools: list[dict] | None,
    sampled_stop: int | None = None,
) -> list[int]:
    """Token ids to append after an assistant turn's stop token so that the episode reads
    as the template renders `messages + added` with the generation prompt: the glue after
    the stop token, the added (tool, user) turns and the next generation prompt.

    Token-in/token-out: the sampled ids stay as sampled; only the text after the last stop
    token is rendered and tokenized (a special token ends a pre-tokenizer run, so tokenizing
    after it matches tokenizing the whole). A template whose turns end where the next one
    opens with a stop token (GLM: `<|observation|>`) renders no stop in the turn: the stop
    the policy sampled (`sampled_stop`, when given) is that opening, which is not appended
    again. Raises ValueError where the template does not keep `messages` as a prefix
    (history rewriting) or the turn has no stop token."""
    template = renderer.compiled
    try:
        before = template.text(messages, tools, False)
        after = template.text(messages + added, tools, True)
    except Exception as exc:  # the template refuses what the model wrote (Mistral: a call id not of 9 characters)
        raise ValueError(f"the chat template refuses the turns: {type(exc).__name__}: {str(exc)[:300]}") from None
    closing = renderer.opening_closing[1]
    if not after.startswith(before):
        if closing and before.endswith(closing) and after.startswith(before[: -len(closing)]):
            before = before[: -len(closing)]
        else:
            raise ValueError("the template renders the earlier turns differently once the new turns follow")
    turn = common_prefix(_opened(renderer, messages, tools), before)  # the last turn starts here: its stop after
    ids, offsets = renderer.encode(before)
    stops = set(renderer.stop_ids)
    last = next((i for i in range(len(ids) - 1, -1, -1) if ids[i] in stops and offsets[i][0] >= turn), None)
    if last is not None:
        return renderer.encode(before[offsets[last][1] :] + after[len(before) :])[0]
    glue = renderer.encode(after[len(before) :])[0]
    if glue and glue[0] in stops:  # the next turn opens with a stop token: the policy wrote it to end its turn
        return glue[1:] if sampled_stop in (None, glue[0]) else glue
    raise ValueError("the last assistant turn has no stop token")


def _opened(renderer: ChatRenderer, messages: list[dict[str, Any]], tools: list[dict] | None) -> str:
    """The prompt the last assistant turn of `messages` was sampled from; '' when unknown."""
    if not messages or messages[-1]["role"] != "assistant":
        return ""
    try:
        return renderer.compiled.text(messages[:-1], tools, True)
    except Exception:  # a prefix the template refuses: the whole rendering is searched
        return ""


def sampled_mask(sampled: Sequence[int], stop_ids: Sequence[int]) -> tuple[list[int], str]:
    """Mask of one sampled response, from the ids as generated (never re-encoded text):
    1 through the first stop token and 0 after it. Returns the mask and the finish reason,
    `stop` or `length` (no stop token: truncated at the limit)."""
    stops = set(stop_ids)
    for i, token in enumerate(sampled):
        if token in stops:
            return [1] * (i + 1) + [0] * (len(sampled) - i - 1), "stop"
    return [1] * len(sampled), "length"
