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


def test_a_ramped_warm_start_takes_its_first_step_at_a_fraction_of_the_rate(tmp_path: Path) -> None:
    """`warm_up(ramp=N)`: the rate rises over the first N steps (the family benchmark's first
    phase: big first steps can keep a tiny model from ever learning to copy the tool's digit)."""
    from safetensors.torch import load_file

    from rlvr_cli.toy import tiny, warmup

    path = tmp_path / "demos.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in lookup.demonstrations(count=8, seed=3)), encoding="utf-8")
    moved = {}
    for ramp in (0, 100):
        folder = tiny.build_tiny(tmp_path / f"ramp-{ramp}", "chatml")
        before = load_file(folder / "model.safetensors")
        warmup.warm_up(folder, path, steps=1, batch=2, ramp=ramp)
        after = load_file(folder / "model.safetensors")
        moved[ramp] = max((after[k] - before[k]).abs().max().item() for k in before)
    assert moved[0] > 0 and 50 < moved[0] / moved[100] < 200, moved  # Adam's first step: ~lr, ~lr / 100
