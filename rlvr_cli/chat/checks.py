"""Template traps, each a code, a severity and a message that says where.

| code   | severity | fires when |
|--------|----------|------------|
| RLT001 | error    | the template emits BOS and tokenizing with special tokens adds another |
| RLT002 | error    | an assistant turn has no stop token |
| RLT003 | error    | a stop token that ends an assistant turn is outside the loss mask |
| RLT004 | error    | a stop token is the pad token (padding would look like stopping) |
| RLT005 | warning  | `add_generation_prompt` adds nothing |
| RLT006 | error    | the generation prompt is not the start of the rendered assistant turn |
| RLT007 | error    | appending a turn changes the tokens of earlier turns (history rewriting) |
| RLT008 | warning  | a turn's text encoded on its own gives other ids than in context (retokenization drift) |
| RLT009 | warning  | the template depends on the date or time |
| RLT010 | warning  | without a system message the template still renders text of its own (a default system prompt, a date header) |
| RLT011 | error    | a system message the template cannot express (raises or drops it) |
| RLT012 | error    | the prompt exceeds max_prompt_tokens and truncation would cut the generation prompt (or is refused) |
| RLT013 | error    | the template fails to render the conversation |
| RLT014 | warning  | the template refuses a prefix of a conversation it renders whole |
| RLT015 | error    | the template drops a tool call or a tool result |
| RLT016 | warning  | the rendered conversation holds the tokenizer's unknown token (text it cannot encode) |
| RLT017 | error    | several tool calls in one turn where the family's format has one per turn |
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable, Iterator
from typing import TYPE_CHECKING

from rlvr_cli.chat.conversation import Check

if TYPE_CHECKING:
    from rlvr_cli.chat.conversation import Conversation, Rendered
    from rlvr_cli.chat.masks import Located
    from rlvr_cli.chat.render import ChatRenderer

CheckFn = Callable[["ChatRenderer", "Conversation", "Located", "Rendered"], Iterator[Check]]
CHECKS: list[CheckFn] = []
_CLOCK = re.compile(r"strftime_now|\bnow\s*\(")  # reads the clock (a date_string variable does not)
_PROBE_SYSTEM = "rlvr-probe-system"
_WINDOW = 16
_PROBE_USER = "rlvr-probe-user"


def check(fn: CheckFn) -> CheckFn:
    CHECKS.append(fn)
    return fn


def run_all(renderer: ChatRenderer, conv: Conversation, located: Located, rendered: Rendered) -> list[Check]:
    found = list(renderer.template_checks)
    for fn in CHECKS:
        found.extend(fn(renderer, conv, located, rendered))
    return found


def _turn(conv: Conversation, k: int) -> str:
    return f"turn {k} ({conv.messages[k]['role']})"


# ── per conversation ──────────────────────────────────────────────────────────────────


@check
def double_bos(renderer: ChatRenderer, conv: Conversation, located: Located, _: Rendered) -> Iterator[Check]:
    tok = renderer.tokenizer
    bos = tok.bos_token_id
    if bos is None or not located.ids or located.ids[0] != bos:
        return
    if _adds_bos(renderer):
        yield Check(
            "RLT001",
            "error",
            f"double BOS at tokens 0-1: the template already emits {tok.bos_token!r} and "
            "tokenizing with add_special_tokens=True adds another; encode rendered text "
            "with add_special_tokens=False",
        )


def _adds_bos(renderer: ChatRenderer) -> bool:
    """Whether tokenizing with add_special_tokens=True prepends BOS (asked once per renderer)."""
    if renderer.__dict__.get("_adds_bos") is None:
        tok = renderer.tokenizer
        text = tok.bos_token + "x"
        renderer.__dict__["_adds_bos"] = tok(text, add_special_tokens=True)["input_ids"][:2] == [tok.bos_token_id] * 2
    return renderer.__dict__["_adds_bos"]


@check
def stop_tokens(renderer: ChatRenderer, conv: Conversation, located: Located, rendered: Rendered) -> Iterator[Check]:
    for problem in located.problems:
        if problem.kind == "no_stop":
            yield Check(
                "RLT002",
                "error",
                f"{_turn(conv, problem.turn)} ends at token {problem.position} without a stop token "
                f"({', '.join(renderer.stop_tokens)}); the policy would never learn to stop",
            )
    stops = set(renderer.stop_ids)
    for span in rendered.spans:
        if span.part != "content" or span.end <= span.start:
            continue
        last = span.end - 1
        if rendered.input_ids[last] in stops and rendered.loss_mask[last] != 1:
            yield Check(
                "RLT003", "error", f"the stop token at {last} ending {_turn(conv, span.turn)} is outside the loss mask"
            )


@check
def generation_prompt(renderer: ChatRenderer, conv: Conversation, located: Located, _: Rendered) -> Iterator[Check]:
    for problem in located.problems:
        if problem.kind == "generation_prompt":
            yield Check(
                "RLT006",
                "error",
                f"the generation prompt (add_generation_prompt=True before {_turn(conv, problem.turn)}) "
                f"is not the start of the rendered assistant turn at token {problem.position}; "
                "the policy would be sampled from a prompt it is not trained on",
            )


@check
def history_rewriting(renderer: ChatRenderer, conv: Conversation, located: Located, _: Rendered) -> Iterator[Check]:
    for problem in located.problems:
        if problem.kind == "rewrite":
            yield Check(
                "RLT007",
                "error",
                f"history rewriting: rendering later turns changes the tokens of {_turn(conv, problem.turn)} "
                f"as it was rendered when it was the last turn; first diverging token {problem.position}. "
                "That turn is not trained in the full rendering; multi-turn episodes must keep the "
                "tokens as generated",
            )
        elif problem.kind == "context_rewrite":
            yield Check(
                "RLT007",
                "error",
                f"history rewriting: the prompt {_turn(conv, problem.turn)} was sampled from renders "
                f"differently once later turns follow; first diverging token {problem.position}. That "
                "turn is not trained in the full rendering; multi-turn episodes must keep the tokens "
                "as generated",
            )
        elif problem.kind == "split_token":
            yield Check("RLT008", "warning", f"{problem.detail}: turn boundaries and tokens disagree")


@check
def refused_prefix(renderer: ChatRenderer, conv: Conversation, located: Located, _: Rendered) -> Iterator[Check]:
    for problem in located.problems:
        if problem.kind == "refused":
            yield Check(
                "RLT014",
                "warning",
                f"{problem.detail}; {_turn(conv, problem.turn)} is not trained or not checked for rewriting",
            )


@check
def retokenization(renderer: ChatRenderer, conv: Conversation, located: Located, rendered: Rendered) -> Iterator[Check]:
    # Drift happens where a turn's text meets the template's: a special token ends every
    # pre-tokenizer run, so the turn's end is clean and its first tokens decide. The first
    # _WINDOW tokens are encoded on their own and compared (all but a cut last one).
    spans = [s for s in rendered.spans if s.part == "content" and s.end > s.start]
    ends = [min(s.end, s.start + _WINDOW) for s in spans]
    texts = [rendered.text_of(s.start, end) for s, end in zip(spans, ends, strict=True)]
    for span, end, again in zip(spans, ends, renderer.ids_of(texts), strict=True):
        ids = rendered.input_ids[span.start : end]
        if end < span.end:  # the window may cut a word: its last token is not compared
            ids, again = ids[:-1], again[: len(ids) - 1]
        if again != ids:
            at = next(
                (i for i, (a, b) in enumerate(zip(ids, again, strict=False)) if a != b), min(len(ids), len(again))
            )
            yield Check(
                "RLT008",
                "warning",
                f"retokenization drift in {_turn(conv, span.turn)}: its text encoded on its own gives "
                f"other ids than in context, from token {span.start + at}; train on sampled ids, "
                "never on re-encoded text",
            )


@check
def system_message(renderer: ChatRenderer, conv: Conversation, located: Located, _: Rendered) -> Iterator[Check]:
    for k, message in enumerate(conv.messages):
        content = message.get("content")
        if message["role"] != "system" or not content or content in located.text:
            continue
        # Not verbatim: a template may consume part of it (a mode flag such as SmolLM3's
        # /no_think) and render the rest. It is dropped only if a marker added to it never shows.
        marked = [dict(m) for m in conv.messages]
        marked[k]["content"] = f"{content} {_PROBE_SYSTEM}"
        try:
            text = renderer.compiled.text(marked, conv.tools, False)
        except Exception:
            text = ""
        if _PROBE_SYSTEM not in text:
            yield Check("RLT011", "error", f"the template drops the system message of turn {k}")


@check
def dropped_tool_traffic(
    renderer: ChatRenderer, conv: Conversation, located: Located, rendered: Rendered
) -> Iterator[Check]:
    """Tool calls and results must reach the model: a template that renders an assistant's
    `content` only (SmolLM3) trains tool turns as empty answers. Looked for in the turn's
    own tokens (a tool's name also appears in the tool list of the system prompt)."""
    for k, message in enumerate(conv.messages):
        calls = message.get("tool_calls") or []
        content = message.get("content")
        is_result = message["role"] in ("tool", "ipython") and bool(content)
        if not calls and not is_result:
            continue
        own = "".join(rendered.text_of(s.start, s.end) for s in rendered.spans if s.turn <= k <= s.last_turn)
        for item in calls:
            name = item["function"]["name"]
            if name not in own:
                yield Check("RLT015", "error", f"the template drops the tool call {name!r} of {_turn(conv, k)}")
        if is_result and content not in own and json.dumps(content, ensure_ascii=False)[1:-1] not in own:
            yield Check("RLT015", "error", f"the template drops the tool result of {_turn(conv, k)}")


@check
def prompt_length(renderer: ChatRenderer, conv: Conversation, located: Located, _: Rendered) -> Iterator[Check]:
    limit = renderer.max_prompt_tokens
    turns = sorted(located.prompts)
    if limit is None or not turns:
        return
    header, size = located.prompts[turns[-1]]  # tokens before the generated part of the last turn
    if size <= limit:
        return
    opening = size - header  # the tokens add_generation_prompt appends
    if renderer.prompt_truncation == "error":
        yield Check(
            "RLT012",
            "error",
            f"the prompt of {_turn(conv, turns[-1])} is {size} tokens, over "
            f"max_prompt_tokens={limit}; prompt_truncation: error refuses it",
        )
    elif opening > limit:
        yield Check(
            "RLT012", "error", f"left truncation to {limit} tokens would cut the {opening}-token generation prompt"
        )


@check
def unknown_token(renderer: ChatRenderer, conv: Conversation, located: Located, rendered: Rendered) -> Iterator[Check]:
    tok = renderer.tokenizer
    unk = tok.unk_token_id
    if unk is None or unk not in rendered.input_ids:
        return
    at = rendered.input_ids.index(unk)
    turn = next((s.turn for s in rendered.spans if s.start <= at < s.end), None)
    where = f"in {_turn(conv, turn)}" if turn is not None else "in text the template adds"
    pad = ", which is also the pad token" if unk == tok.pad_token_id else ""
    yield Check(
        "RLT016",
        "warning",
        f"token {at} ({where}) is the unknown token {tok.unk_token!r}{pad}, {rendered.input_ids.count(unk)} in all: "
        "the tokenizer cannot encode text the data, a tool schema or the template puts there",
    )


# ── per template (computed once per renderer) ─────────────────────────────────────────


def template_checks(renderer: ChatRenderer) -> list[Check]:
    """Checks of the template itself, whatever the conversation (the renderer caches them)."""
    return [*_pad_stop(renderer), *_clock(renderer), *_default_system(renderer), *_ignored_generation_prompt(renderer)]


def _pad_stop(renderer: ChatRenderer) -> Iterator[Check]:
    pad = renderer.tokenizer.pad_token_id
    for token, token_id in zip(renderer.stop_tokens, renderer.stop_ids, strict=True):
        if pad is not None and token_id == pad:
            yield Check(
                "RLT004",
                "error",
                f"stop token {token!r} is also the pad token; padding would look like "
                "stopping and the stop token would be masked as padding",
            )


def _clock(renderer: ChatRenderer) -> Iterator[Check]:
    match = _CLOCK.search(renderer.template)
    if match:
        yield Check(
            "RLT009",
            "warning",
            f"the template depends on the date or time ({match.group(0)!r}): the same "
            "conversation renders differently on different days",
        )


def _probe(renderer: ChatRenderer, *conversations: list[dict]) -> list[str] | None:
    try:
        return renderer.texts(list(conversations), None, add_generation_prompt=False)
    except Exception:
        return None


def _default_system(renderer: ChatRenderer) -> Iterator[Check]:
    system = {"role": "system", "content": _PROBE_SYSTEM}
    user = {"role": "user", "content": _PROBE_USER}
    texts = _probe(renderer, [user], [system], [system, user])
    if texts is None:
        return
    alone, system_only, both = texts
    if not both.startswith(system_only):
        return
    user_part = both[len(system_only) :]
    if not alone.endswith(user_part):
        return
    extra = alone[: len(alone) - len(user_part)]
    bos = renderer.tokenizer.bos_token
    if bos and extra.startswith(bos):
        extra = extra[len(bos) :]
    if extra.strip() and not _fixed_preamble(renderer, extra, system_only):
        yield Check(
            "RLT010",
            "warning",
            "without a system message the template still renders text of its own before the first turn: "
            f"{extra.strip()[:80]!r}",
        )


def _fixed_preamble(renderer: ChatRenderer, extra: str, system_only: str) -> bool:
    """Whether `extra` is only special tokens the template also opens a system message with:
    a fixed preamble in the place of BOS (GLM's `[gMASK]<sop>`), no system prompt of its own."""
    tokenizer = renderer.tokenizer
    added = getattr(tokenizer, "added_tokens_decoder", {}) or {}
    specials = {*tokenizer.all_special_tokens, *(t.content for t in added.values() if getattr(t, "special", False))}
    rest = extra.strip()
    while rest:
        token = next((t for t in sorted(specials, key=len, reverse=True) if t and rest.startswith(t)), None)
        if token is None:
            return False
        rest = rest[len(token) :].lstrip()
    return system_only.lstrip().startswith(extra.strip())


def _ignored_generation_prompt(renderer: ChatRenderer) -> Iterator[Check]:
    if renderer.probe is not None and renderer.probe[0] == renderer.probe[1]:
        yield Check(
            "RLT005",
            "warning",
            "add_generation_prompt=True adds nothing after a user turn: the template "
            "itself opens the assistant turn, so prompts and trained turns must start there",
        )


def _parallel_turns(conv: Conversation) -> list[tuple[int, int]]:
    """(turn, calls) of each assistant turn that makes more than one tool call."""
    return [
        (k, len(m.get("tool_calls") or []))
        for k, m in enumerate(conv.messages)
        if m["role"] == "assistant" and len(m.get("tool_calls") or []) > 1
    ]


def _one_call_per_turn(renderer: ChatRenderer, conv: Conversation, why: str = "") -> Check | None:
    """RLT017 when the policy's tool-call format has one call per turn and a turn makes several."""
    fmt = renderer.tool_format
    turns = _parallel_turns(conv)
    if fmt is None or fmt.parallel or not turns:
        return None
    k, n = turns[0]
    more = f" (and {len(turns) - 1} more turn(s))" if len(turns) > 1 else ""
    message = (
        f"{fmt.families} ({fmt.name} tool calls) write one tool call per turn; turn {k} makes {n}{more}: the "
        "policy cannot be trained to make them together — split them into consecutive turns"
    )
    return Check("RLT017", "error", message + (f" ({why})" if why else ""))


@check
def parallel_calls(renderer: ChatRenderer, conv: Conversation, _: Located, __: Rendered) -> Iterator[Check]:
    found = _one_call_per_turn(renderer, conv)
    if found is not None:
        yield found


def template_failure(renderer: ChatRenderer, conv: Conversation, exc: Exception) -> list[Check]:
    """The template raised: a system message it cannot express, several calls in one turn of a
    format that has one per turn (the family named), or another failure."""
    message = f"{type(exc).__name__}: {exc}"
    one = _one_call_per_turn(renderer, conv, f"the template says: {message}")
    if one is not None:
        return [one]
    has_system = any(m["role"] == "system" for m in conv.messages)
    if has_system:
        rest = [m for m in conv.messages if m["role"] != "system"]
        if rest and _probe(renderer, rest) is not None:
            return [Check("RLT011", "error", f"the template cannot express a system message ({message})")]
    return [Check("RLT013", "error", f"the template fails to render this conversation ({message})")]
