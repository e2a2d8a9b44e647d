"""Tiny tokenizers of each template family, and a test-side tokenizer for expectations."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from rlvr_cli.chat.families import SPECIAL_TOKENS
from rlvr_cli.chat.render import ChatRenderer, Conversation, Rendered

_SPECIAL = re.compile("|".join(re.escape(t) for t in sorted(SPECIAL_TOKENS, key=len, reverse=True)))


def toks(text: str) -> list[str]:
    """Independent of rlvr: special tokens whole, every other character a token."""
    out: list[str] = []
    pos = 0
    for match in _SPECIAL.finditer(text):
        out.extend(text[pos : match.start()])
        out.append(match.group(0))
        pos = match.end()
    out.extend(text[pos:])
    return out


def expect(*segments: tuple[str, int]) -> tuple[list[str], list[int]]:
    """(text, trained) segments → expected tokens and loss mask."""
    tokens: list[str] = []
    mask: list[int] = []
    for text, trained in segments:
        pieces = toks(text)
        tokens += pieces
        mask += [trained] * len(pieces)
    return tokens, mask


@pytest.fixture(scope="session")
def family_tokenizer(tmp_path_factory: pytest.TempPathFactory):
    from rlvr_cli.toy.tiny import build_tokenizer

    cache: dict[str, object] = {}

    def get(family: str):
        if family not in cache:
            cache[family] = build_tokenizer(tmp_path_factory.mktemp(family) / "tok", family)
        return cache[family]

    return get


@pytest.fixture(scope="session")
def published_tokenizer(tmp_path_factory: pytest.TempPathFactory):
    """A tiny tokenizer with a published family's special tokens and template (tests/chat/published.py)."""
    from tests.chat.published import FAMILIES, build

    cache: dict[str, object] = {}

    def get(name: str):
        if name not in cache:
            cache[name] = build(tmp_path_factory.mktemp(name) / "tok", FAMILIES[name])
        return cache[name]

    return get


def render(
    tokenizer,
    stop: str,
    messages: list[dict],
    tools: list | None = None,
    *,
    template: str | None = None,
    max_prompt_tokens: int | None = None,
    prompt_truncation: str = "error",
) -> Rendered:
    renderer = ChatRenderer(
        tokenizer,
        template or tokenizer.chat_template,
        [stop],
        max_prompt_tokens=max_prompt_tokens,
        prompt_truncation=prompt_truncation,
    )
    return renderer.render(Conversation(messages, tools))


def codes(rendered: Rendered) -> list[str]:
    return sorted(c.code for c in rendered.checks)


def write(path: Path, text: str) -> Path:
    path.write_text(text)
    return path
