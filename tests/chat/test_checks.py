"""Each template check fires on a template built to trigger it and stays silent on a clean one."""

from __future__ import annotations

from pathlib import Path

import pytest

from rlvr_cli.chat import checks as template_checks
from rlvr_cli.chat.families import CHATML, CHATML_GENERATION
from rlvr_cli.chat.masks import locate
from rlvr_cli.chat.render import ChatRenderer, Conversation
from tests.chat.conftest import codes, expect, render

QA = [{"role": "user", "content": "1+1?"}, {"role": "assistant", "content": "2"}]
SYSTEM_QA = [{"role": "system", "content": "Be brief."}, *QA]


@pytest.mark.parametrize(
    ("family", "stop"), [("chatml", "<|im_end|>"), ("llama3", "<|eot_id|>"), ("gemma", "<end_of_turn>")]
)
def test_clean_templates_raise_no_check(family_tokenizer, family: str, stop: str) -> None:
    assert codes(render(family_tokenizer(family), stop, QA, max_prompt_tokens=500)) == []


def test_rlt001_double_bos(family_tokenizer, tmp_path: Path) -> None:
    from tokenizers.processors import TemplateProcessing

    from rlvr_cli.toy.tiny import build_tokenizer

    tok = build_tokenizer(tmp_path / "bos", "llama3")
    bos = tok.bos_token
    tok._tokenizer.post_processor = TemplateProcessing(single=f"{bos} $A", special_tokens=[(bos, tok.bos_token_id)])
    out = render(tok, "<|eot_id|>", QA)
    assert codes(out) == ["RLT001"] and "double BOS" in out.checks[0].message
    assert codes(render(family_tokenizer("llama3"), "<|eot_id|>", QA)) == []


def test_rlt002_stop_token_missing(family_tokenizer) -> None:
    out = render(family_tokenizer("chatml"), "</s>", QA)
    assert codes(out) == ["RLT002"] and "turn 1 (assistant)" in out.checks[0].message


def test_rlt003_stop_token_outside_a_generation_tag_mask(family_tokenizer) -> None:
    """Trusting `{% generation %}` tags that leave the stop token out is caught."""
    tok = family_tokenizer("chatml")
    template = CHATML_GENERATION.replace(
        "{{- '<|im_end|>' -}}{%- endgeneration -%}{{- '\\n' -}}", "{%- endgeneration -%}{{- '<|im_end|>\\n' -}}"
    )
    renderer = ChatRenderer(tok, template, ["<|im_end|>"])
    conv = Conversation(QA)
    rendered = renderer.render(conv)
    assert codes(rendered) == []  # rlvr's own mask trains the stop token
    theirs = tok.apply_chat_template(
        QA, chat_template=template, tokenize=True, return_dict=True, return_assistant_tokens_mask=True
    )["assistant_masks"]
    rendered.loss_mask = list(theirs)
    found = list(template_checks.stop_tokens(renderer, conv, locate(renderer, conv), rendered))
    assert [c.code for c in found] == ["RLT003"]


def test_rlt004_stop_token_is_pad(tmp_path: Path) -> None:
    from rlvr_cli.toy.tiny import build_tokenizer

    tok = build_tokenizer(tmp_path / "pad", "chatml")
    tok.pad_token = "<|im_end|>"
    assert "RLT004" in codes(render(tok, "<|im_end|>", QA))


def test_rlt005_generation_prompt_ignored(family_tokenizer) -> None:
    out = render(family_tokenizer("mistral"), "</s>", QA)
    assert codes(out) == ["RLT005"]


def test_rlt006_generation_prompt_differs_from_the_turn(family_tokenizer) -> None:
    template = CHATML.replace("{{- '<|im_start|>assistant\\n' -}}", "{{- '<|im_start|>model\\n' -}}")
    assert template != CHATML
    out = render(family_tokenizer("chatml"), "<|im_end|>", QA, template=template)
    assert codes(out) == ["RLT006"]


def test_rlt007_history_rewriting(family_tokenizer) -> None:
    messages = [*QA[:1], {"role": "assistant", "content": "<think>x</think>2"}, *QA]
    assert "RLT007" in codes(render(family_tokenizer("reasoning"), "<|im_end|>", messages))


def test_rlt008_turn_boundary_inside_a_token(tmp_path: Path) -> None:
    """A merge across the header/content boundary means the trained ids are not what was sampled."""
    from tokenizers import Tokenizer

    from rlvr_cli.toy.tiny import build_tokenizer

    tok = build_tokenizer(tmp_path / "merge", "chatml")
    data = tok._tokenizer.to_str()
    import json

    spec = json.loads(data)
    spec["model"]["vocab"]["\n\n"] = len(tok)
    spec["model"]["merges"] = [["\n", "\n"]]
    tok._tokenizer = Tokenizer.from_str(json.dumps(spec))
    messages = [QA[0], {"role": "assistant", "content": "\n2"}]
    out = render(tok, "<|im_end|>", messages)
    assert "RLT008" in codes(out)
    assert "RLT008" not in codes(render(tok, "<|im_end|>", QA))


def test_rlt009_date_dependent_template(family_tokenizer) -> None:
    template = "{{- 'Today: ' + strftime_now('%d %b %Y') + '\\n' -}}" + CHATML
    out = render(family_tokenizer("chatml"), "<|im_end|>", QA, template=template)
    assert codes(out) == ["RLT009", "RLT010"]  # the date line is also text no message asked for


def test_rlt010_default_system_prompt(family_tokenizer) -> None:
    inject = (
        "{%- if messages[0].role != 'system' -%}"
        "{{- '<|im_start|>system\\nYou are a helpful assistant.<|im_end|>\\n' -}}{%- endif -%}"
    )
    out = render(family_tokenizer("chatml"), "<|im_end|>", QA, template=inject + CHATML)
    assert codes(out) == ["RLT010"] and "helpful assistant" in out.checks[0].message


def test_rlt011_system_message_not_expressible(family_tokenizer) -> None:
    out = render(family_tokenizer("gemma"), "<end_of_turn>", SYSTEM_QA)
    assert codes(out) == ["RLT011"] and out.input_ids == []
    dropping = CHATML.replace(
        "{%- if not (loop.first and ns.skip) -%}",
        "{%- if not (loop.first and ns.skip) and message.role != 'system' -%}",
    )
    assert "RLT011" in codes(render(family_tokenizer("chatml"), "<|im_end|>", SYSTEM_QA, template=dropping))


def test_rlt012_prompt_too_long(family_tokenizer) -> None:
    tok = family_tokenizer("chatml")
    refused = render(tok, "<|im_end|>", QA, max_prompt_tokens=10, prompt_truncation="error")
    assert codes(refused) == ["RLT012"] and "refuses" in refused.checks[0].message
    generation_prompt = len(expect(("<|im_start|>assistant\n", 0))[0])
    cut = render(tok, "<|im_end|>", QA, max_prompt_tokens=generation_prompt - 1, prompt_truncation="left")
    assert codes(cut) == ["RLT012"] and "cut" in cut.checks[0].message
    assert codes(render(tok, "<|im_end|>", QA, max_prompt_tokens=generation_prompt, prompt_truncation="left")) == []


def test_rlt013_template_failure(family_tokenizer) -> None:
    messages = [QA[0], {"role": "tool", "content": "5"}, QA[1]]
    out = render(family_tokenizer("mistral"), "</s>", messages)
    assert "RLT013" in codes(out) and "role tool is not supported" in out.checks[-1].message


def test_rlt014_a_refused_prefix_is_reported_and_its_turn_not_trained(family_tokenizer) -> None:
    refusing = (
        CHATML + "{%- if add_generation_prompt and messages|length > 2 -%}{{ raise_exception('no') }}{%- endif -%}"
    )
    multi = [*QA, {"role": "user", "content": "2+2?"}, {"role": "assistant", "content": "4"}]
    out = render(family_tokenizer("chatml"), "<|im_end|>", multi, template=refusing)
    assert codes(out) == ["RLT014"] and "messages[:3]" in out.checks[0].message
    trained = "".join(t for t, m in zip(out.tokens, out.loss_mask, strict=True) if m)
    assert trained == "2<|im_end|>"  # turn 1 trains, turn 3 (its prompt refused) does not
    assert codes(render(family_tokenizer("chatml"), "<|im_end|>", multi)) == []


def test_rlt015_dropped_tool_result(family_tokenizer) -> None:
    call = {"type": "function", "function": {"name": "add", "arguments": {"a": 1, "b": 1}}}
    messages = [QA[0], {"role": "assistant", "content": "", "tool_calls": [call]}, {"role": "tool", "content": "2"}]
    messages.append({"role": "assistant", "content": "2"})
    dropping = CHATML.replace("{%- if not (loop.first and ns.skip) -%}", "{%- if message.role != 'tool' -%}")
    assert dropping != CHATML
    out = render(family_tokenizer("chatml"), "<|im_end|>", messages, template=dropping)
    assert codes(out) == ["RLT015"] and "tool result of turn 2" in out.checks[0].message
    assert codes(render(family_tokenizer("chatml"), "<|im_end|>", messages)) == []


def test_rlt016_a_character_the_tokenizer_cannot_encode(family_tokenizer) -> None:
    unknown = [{"role": "user", "content": "1+1 ≟"}, QA[1]]  # '≟' is no token of the tiny alphabet
    out = render(family_tokenizer("chatml"), "<|im_end|>", unknown)
    assert codes(out) == ["RLT016"] and "in turn 0 (user)" in out.checks[0].message
    assert "'<unk>'" in out.checks[0].message and "1 in all" in out.checks[0].message
    assert codes(render(family_tokenizer("chatml"), "<|im_end|>", QA)) == []


def test_a_prompt_holding_the_unknown_token_is_said_once_before_any_rollout(family_tokenizer, capsys) -> None:
    """What training and evaluations show the model: a tool schema with a character the tokenizer
    lacks would put the unknown token in every prompt; the first such prompt is named, once."""
    from types import SimpleNamespace

    from rlvr_cli.rollout.prompts import Prompts

    tokenizer = family_tokenizer("chatml")
    renderer = ChatRenderer(tokenizer, tokenizer.chat_template, ["<|im_end|>"])
    length = SimpleNamespace(max_prompt_tokens=4096, prompt_truncation="error")
    contract = SimpleNamespace(length=length, data=SimpleNamespace(hints=None))
    prompts = Prompts(contract, renderer)
    assert prompts.ids({"id": "t1", "prompt": "1+1?"}) and capsys.readouterr().err == ""
    assert tokenizer.unk_token_id in prompts.ids({"id": "t2", "prompt": "1+1 ≟"})  # shown as it is, and said:
    said = capsys.readouterr().err
    assert "warning[RLT016]: task t2: the prompt holds the unknown token '<unk>' 1 time(s)" in said
    prompts.ids({"id": "t3", "prompt": "2+2 ≟"})
    assert capsys.readouterr().err == ""  # once per run
