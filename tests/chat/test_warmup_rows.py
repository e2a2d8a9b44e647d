"""A warm start's rows (toy/warmup.py `training_rows`): what `rlvr render` trains, and the same
assistant tokens after a shorter context when the tool schemas are left out."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from rlvr_cli.chat.conversation import RenderError
from rlvr_cli.chat.render import ChatRenderer
from rlvr_cli.env.builtin import lookup
from rlvr_cli.toy.warmup import training_rows

TEMPLATES = Path(__file__).parent / "templates"


def assistant_tokens(row: tuple[list[int], list[int]]) -> list[int]:
    ids, mask = row
    return [t for t, m in zip(ids, mask, strict=True) if m]


@pytest.mark.parametrize("template", ["llama-3.1.jinja", "mistral-nemo.jinja", "qwen3.jinja", "gpt-oss.jinja"])
def test_rows_without_schemas_train_the_same_tokens_after_a_shorter_context(tmp_path: Path, template: str) -> None:
    from rlvr_cli.toy.tiny import build_tokenizer

    rows = lookup.demonstrations(count=20, seed=3, look=1.0)  # their call ids suit Mistral's template too
    path = tmp_path / "demos.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in rows), encoding="utf-8")
    tokenizer = build_tokenizer(tmp_path / "tok", "chatml")
    renderer = ChatRenderer(tokenizer, (TEMPLATES / template).read_text(encoding="utf-8"), [tokenizer.eos_token])
    full, short = training_rows(renderer, path), training_rows(renderer, path, schemas=False)
    assert len(full) == len(short) == 20
    for long_row, short_row in zip(full, short, strict=True):
        assert assistant_tokens(short_row) == assistant_tokens(long_row)  # the same call, copy and answer
        assert len(short_row[0]) < len(long_row[0]) - 40  # without the tool preamble
        assert tokenizer.decode(long_row[0]).count("open_box") > tokenizer.decode(short_row[0]).count("open_box")


def test_a_conversation_with_nothing_to_learn_is_refused_with_its_line(tmp_path: Path) -> None:
    from rlvr_cli.chat.families import CHATML
    from rlvr_cli.toy.tiny import build_tokenizer

    path = tmp_path / "demos.jsonl"
    path.write_text(json.dumps({"messages": [{"role": "user", "content": "hi"}]}) + "\n", encoding="utf-8")
    tokenizer = build_tokenizer(tmp_path / "tok", "chatml")
    with pytest.raises(RenderError, match=r"demos.jsonl:1: no assistant token"):
        training_rows(ChatRenderer(tokenizer, CHATML, [tokenizer.eos_token]), path, schemas=False)
