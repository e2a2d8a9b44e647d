"""Loss masks token for token, for five template families."""

from __future__ import annotations

import json

from rlvr_cli.chat.masks import sampled_mask
from tests.chat.conftest import codes, expect, render

TOOL = {
    "type": "function",
    "function": {"name": "add", "description": "a+b", "parameters": {"type": "object", "properties": {}}},
}


def test_chatml_with_tool_calls_and_tool_results(family_tokenizer) -> None:
    tok = family_tokenizer("chatml")
    call = {"type": "function", "function": {"name": "add", "arguments": {"a": 2, "b": 3}}}
    messages = [
        {"role": "system", "content": "Use tools."},
        {"role": "user", "content": "2+3?"},
        {"role": "assistant", "content": "", "tool_calls": [call]},
        {"role": "tool", "content": "5"},
        {"role": "assistant", "content": "It is 5."},
    ]
    out = render(tok, "<|im_end|>", messages, [TOOL])
    call_json = json.dumps({"name": "add", "arguments": {"a": 2, "b": 3}})
    tokens, mask = expect(
        ("<|im_start|>system\nUse tools.\n\n# Tools\n" + json.dumps(TOOL) + "\n<|im_end|>\n", 0),
        ("<|im_start|>user\n2+3?<|im_end|>\n", 0),
        ("<|im_start|>assistant\n", 0),
        ("<tool_call>" + call_json + "</tool_call><|im_end|>", 1),
        ("\n", 0),
        ("<|im_start|>tool\n5<|im_end|>\n", 0),
        ("<|im_start|>assistant\n", 0),
        ("It is 5.<|im_end|>", 1),
        ("\n", 0),
    )
    assert out.tokens == tokens
    assert out.loss_mask == mask
    assert codes(out) == []
    roles = [(s.role, s.turn, s.part, s.trainable) for s in out.spans]
    assert ("tool", 3, "turn", False) in roles and ("assistant", 2, "content", True) in roles


def test_llama3_bos_in_template_headers_and_ipython(family_tokenizer) -> None:
    tok = family_tokenizer("llama3")
    messages = [
        {"role": "user", "content": "2+3?"},
        {"role": "assistant", "content": "calling"},
        {"role": "tool", "content": "5"},
        {"role": "assistant", "content": "5"},
    ]
    out = render(tok, "<|eot_id|>", messages)
    header = "<|start_header_id|>assistant<|end_header_id|>\n\n"
    tokens, mask = expect(
        ("<|begin_of_text|><|start_header_id|>user<|end_header_id|>\n\n2+3?<|eot_id|>", 0),
        (header, 0),
        ("calling<|eot_id|>", 1),
        ("<|start_header_id|>ipython<|end_header_id|>\n\n5<|eot_id|>", 0),
        (header, 0),
        ("5<|eot_id|>", 1),
    )
    assert (out.tokens, out.loss_mask) == (tokens, mask)
    assert codes(out) == []


def test_mistral_inst_and_eos(family_tokenizer) -> None:
    tok = family_tokenizer("mistral")
    messages = [
        {"role": "system", "content": "Be brief."},
        {"role": "user", "content": "1+1?"},
        {"role": "assistant", "content": "2"},
        {"role": "user", "content": "2+2?"},
        {"role": "assistant", "content": "4"},
    ]
    out = render(tok, "</s>", messages)
    tokens, mask = expect(
        ("<s>", 0),
        ("[INST] Be brief.\n\n1+1? [/INST]", 0),
        ("2</s>", 1),
        ("[INST] 2+2? [/INST]", 0),
        ("4</s>", 1),
    )
    assert (out.tokens, out.loss_mask) == (tokens, mask)
    assert codes(out) == ["RLT005"]  # the user turn already opens the assistant turn


def test_gemma_model_role_and_glue(family_tokenizer) -> None:
    tok = family_tokenizer("gemma")
    messages = [{"role": "user", "content": "1+1?"}, {"role": "assistant", "content": "2"}]
    out = render(tok, "<end_of_turn>", messages)
    tokens, mask = expect(
        ("<bos><start_of_turn>user\n1+1?<end_of_turn>\n", 0),
        ("<start_of_turn>model\n", 0),
        ("2<end_of_turn>", 1),
        ("\n", 0),
    )
    assert (out.tokens, out.loss_mask) == (tokens, mask)
    assert codes(out) == []


def test_reasoning_template_rewrites_history(family_tokenizer) -> None:
    tok = family_tokenizer("reasoning")
    messages = [
        {"role": "user", "content": "1+1?"},
        {"role": "assistant", "content": "<think>one and one</think>2"},
        {"role": "user", "content": "2+2?"},
        {"role": "assistant", "content": "<think>two</think>4"},
    ]
    out = render(tok, "<|im_end|>", messages)
    tokens, mask = expect(
        ("<|im_start|>user\n1+1?<|im_end|>\n", 0),
        ("<|im_start|>assistant\n2<|im_end|>\n<|im_start|>user\n2+2?<|im_end|>\n", 0),  # rewritten: not trained
        ("<|im_start|>assistant\n", 0),
        ("<think>two</think>4<|im_end|>", 1),
        ("\n", 0),
    )
    assert (out.tokens, out.loss_mask) == (tokens, mask)
    rewrite = [c for c in out.checks if c.code == "RLT007"]
    assert len(rewrite) == 1 and "turn 1 (assistant)" in rewrite[0].message
    first = len(expect(("<|im_start|>user\n1+1?<|im_end|>\n<|im_start|>assistant\n", 0))[0])
    assert f"first diverging token {first}" in rewrite[0].message


def test_a_single_answer_in_the_reasoning_template_is_clean(family_tokenizer) -> None:
    tok = family_tokenizer("reasoning")
    messages = [{"role": "user", "content": "1+1?"}, {"role": "assistant", "content": "<think>x</think>2"}]
    out = render(tok, "<|im_end|>", messages)
    trained = [t for t, m in zip(out.tokens, out.loss_mask, strict=True) if m]
    assert codes(out) == [] and trained == expect(("<think>x</think>2<|im_end|>", 1))[0]


def test_sampled_mask_stops_at_the_first_stop_token() -> None:
    assert sampled_mask([5, 6, 9, 7, 9], [9]) == ([1, 1, 1, 0, 0], "stop")
    assert sampled_mask([5, 6, 7], [9]) == ([1, 1, 1], "length")
    assert sampled_mask([9], [8, 9]) == ([1], "stop")
