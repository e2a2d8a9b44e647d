"""Prefixes read off one instrumented rendering (chat/tracked.py) equal prefixes rendered for
real, on every published template and conversation kind, and on templates written to defeat
the reading; where the reading is not proven, rlvr renders."""

from __future__ import annotations

import random
from dataclasses import asdict

import pytest

from rlvr_cli.chat.families import CHATML, CHATML_GENERATION
from rlvr_cli.chat.render import ChatRenderer, Conversation
from tests.chat.published import FAMILIES
from tests.chat.test_published import MULTI, NO_SYSTEM, PARALLEL, REASONING, SINGLE, TOOL, TOOL_USE

NO_THINK = [{"role": "system", "content": "You are terse. /no_think"}, *MULTI[1:]]
KINDS = [
    (SINGLE, None),
    (NO_SYSTEM, None),
    (MULTI, None),
    (NO_THINK, None),
    (TOOL_USE, [TOOL]),
    (PARALLEL, [TOOL]),
    (REASONING, None),
]


def _same(tokenizer, template: str, stops: list[str], conversation: list[dict], tools: list | None) -> None:
    fast = ChatRenderer(tokenizer, template, stops).render(Conversation(conversation, tools))
    slow = ChatRenderer(tokenizer, template, stops, read_prefixes=False).render(Conversation(conversation, tools))
    assert fast.input_ids == slow.input_ids
    assert fast.loss_mask == slow.loss_mask
    assert [asdict(s) for s in fast.spans] == [asdict(s) for s in slow.spans]
    assert [asdict(c) for c in fast.checks] == [asdict(c) for c in slow.checks]


@pytest.mark.parametrize("name", sorted(FAMILIES))
def test_published_templates_read_and_rendered_prefixes_agree(published_tokenizer, name: str) -> None:
    family = FAMILIES[name]
    for conversation, tools in KINDS:
        _same(published_tokenizer(name), family.source, list(family.stops), conversation, tools)


def test_which_published_templates_are_read_off_one_rendering(published_tokenizer) -> None:
    read = {
        name
        for name, family in FAMILIES.items()
        if ChatRenderer(published_tokenizer(name), family.source, list(family.stops)).compiled.tracker is not None
    }
    # One loop over the messages, no look-ahead, a constant tail; the others look ahead
    # (loop.last, a reverse scan, a second pass over the messages) and are rendered.
    assert read == {"gemma-2", "gemma-3", "llama-3.1", "llama-3.2", "phi-3.5", "phi-4", "smollm2", "smollm3"}


def _random_conversations(seed: int, count: int) -> list[list[dict]]:
    rng = random.Random(seed)
    out = []
    for _ in range(count):
        messages = [{"role": "system", "content": "sys " * rng.randint(0, 2)}] if rng.random() < 0.5 else []
        for _ in range(rng.randint(1, 4)):
            messages.append({"role": "user", "content": rng.choice(["hi", "2+2?", " spaced ", "a\nb"])})
            messages.append({"role": "assistant", "content": rng.choice(["4", " x ", "ok\n", "<think>\nt\n</think>a"])})
        out.append(messages)
    return out


@pytest.mark.parametrize(
    "template",
    [
        CHATML,
        CHATML_GENERATION,
        # look-ahead by index: statically allowed, dynamically the next message is first asked for
        # by index, not by the loop, so those prefixes are rendered
        CHATML.replace(
            "{{- '<|im_end|>\\n' -}}",
            "{{- '<|im_end|>' + ('\\n' if messages[loop.index0 + 1] is defined else '') -}}",
        ),
        # the count of messages read before the loop: every prefix rendered
        "{{- messages | length -}}" + CHATML,
        # look-ahead through loop.last: not read off at all
        CHATML.replace("{{- '<|im_end|>\\n' -}}", "{{- '<|im_end|>' + ('' if loop.last else '\\n') -}}"),
    ],
)
def test_templates_built_to_defeat_the_reading(family_tokenizer, template: str) -> None:
    tok = family_tokenizer("chatml")
    for conversation in _random_conversations(0, 25):
        _same(tok, template, ["<|im_end|>"], conversation, None)


def test_look_ahead_templates_are_not_read(family_tokenizer) -> None:
    tok = family_tokenizer("chatml")
    last = CHATML.replace("{{- '<|im_end|>\\n' -}}", "{{- '<|im_end|>' + ('' if loop.last else '\\n') -}}")
    second_pass = "{%- for m in messages -%}{%- endfor -%}" + CHATML
    tail_reads_loop_state = (
        "{%- set ns = namespace(n=0) -%}{%- for message in messages -%}{%- set ns.n = ns.n + 1 -%}"
        "{{- message.content -}}{%- endfor -%}{{- ns.n -}}"
    )
    for template in (last, second_pass, tail_reads_loop_state):
        assert ChatRenderer(tok, template, ["<|im_end|>"]).compiled.tracker is None
    assert ChatRenderer(tok, CHATML, ["<|im_end|>"]).compiled.tracker.mode == "constant"
    # a tail that reads what the template set before the loop (from the system message) is
    # the same for every prefix of one conversation: read off, with that conversation's tail
    preamble = CHATML + "{%- if ns.skip -%}<after-system>{%- endif -%}"
    assert ChatRenderer(tok, preamble, ["<|im_end|>"]).compiled.tracker.mode == "preamble"
    tools = [{"type": "function", "function": {"name": "f", "parameters": {}}}]
    for conversation in _random_conversations(1, 25):
        _same(tok, preamble, ["<|im_end|>"], conversation, tools)
