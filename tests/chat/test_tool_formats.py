"""Tool-call formats on the published templates of their families (tests/chat/templates): the
format is detected from the template, and what the template renders as an assistant's call —
what a model of that family samples — is read back as the same call, with the message around
it; text that is not a well-formed call is no call."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from rlvr_cli.chat.render import ChatRenderer
from rlvr_cli.chat.tool_formats import FORMATS, detect
from rlvr_cli.env.model import CallIds, parse_completion, to_chat

TEMPLATES = Path(__file__).parent / "templates"
#: template file → the format its family writes calls in
FAMILIES = {
    "qwen2.5.jinja": "hermes",
    "qwen3.jinja": "hermes",
    "llama-3.1.jinja": "llama3_json",
    "llama-3.2.jinja": "llama3_json",
    "mistral-7b-v0.3.jinja": "mistral",
    "mistral-nemo.jinja": "mistral",
    "mistral-small-3.1.jinja": "mistral",
    "gpt-oss.jinja": "harmony",
    "deepseek-r1-distill.jinja": "deepseek",
    "deepseek-v3.1.jinja": "deepseek",
    "glm-4.6.jinja": "glm",
    "qwen3-coder.jinja": "qwen_xml",
}
TOOLS = [
    {
        "type": "function",
        "function": {
            "name": "lookup",
            "description": "Look a word up.",
            "parameters": {"type": "object", "properties": {"word": {"type": "string"}}, "required": ["word"]},
        },
    }
]
USER = {"role": "user", "content": "what is a cat?"}


@pytest.fixture(scope="module")
def tokenizer(tmp_path_factory: pytest.TempPathFactory):  # type: ignore[no-untyped-def]
    from rlvr_cli.toy.tiny import build_tokenizer

    return build_tokenizer(tmp_path_factory.mktemp("formats"), "chatml")


def sampled(tokenizer, template: str, calls: list[dict], fmt_name: str) -> str:  # type: ignore[no-untyped-def]
    """What the template renders after the generation prompt for an assistant turn of `calls`."""
    renderer = ChatRenderer(tokenizer, template, [tokenizer.eos_token])
    fmt = FORMATS[fmt_name]
    items = [
        {
            "type": "function_call",
            "call_id": c.get("id", "call_0"),
            "name": c["name"],
            "arguments": json.dumps(c["args"]),
        }
        for c in calls
    ]
    turn = to_chat(items, fmt.arguments)
    prompt = renderer.compiled.text([USER], TOOLS, True)
    whole = renderer.compiled.text([USER, *turn], TOOLS, False)
    if whole.startswith(prompt):
        return whole[len(prompt) :]
    common = next((i for i, (a, b) in enumerate(zip(prompt, whole, strict=False)) if a != b), len(prompt))
    while common and whole[common - 1] != ">":  # DeepSeek's generation prompt opens <think>: back to a tag's end
        common -= 1
    assert prompt.endswith("<think>\n") and common >= len(prompt) - len("<think>\n"), (prompt[-80:], whole[-200:])
    return whole[common:]


@pytest.mark.parametrize(("name", "expected"), sorted(FAMILIES.items()))
def test_each_published_template_is_read_in_its_familys_format(tokenizer, name: str, expected: str) -> None:  # type: ignore[no-untyped-def]
    template = (TEMPLATES / name).read_text()
    fmt = detect(template)
    assert fmt is not None and fmt.name == expected
    call = {"name": "lookup", "args": {"word": "cat"}, "id": "a1b2c3d4e"}  # 9 characters: Mistral's rule
    text = sampled(tokenizer, template, [call], expected)
    items = parse_completion(text, CallIds(), fmt=fmt, schemas=TOOLS)
    calls = [i for i in items if i["type"] == "function_call"]
    assert [(c["name"], json.loads(c["arguments"])) for c in calls] == [("lookup", {"word": "cat"})], text
    if expected == "mistral":
        assert calls[0]["call_id"] == "a1b2c3d4e"  # the id the model wrote is the one its result answers


@pytest.mark.parametrize(
    ("name", "expected"),
    [
        ("qwen3.jinja", "hermes"),
        ("mistral-nemo.jinja", "mistral"),
        ("glm-4.6.jinja", "glm"),
        ("qwen3-coder.jinja", "qwen_xml"),
    ],
)
def test_formats_with_parallel_calls_read_every_call_of_a_turn(tokenizer, name: str, expected: str) -> None:  # type: ignore[no-untyped-def]
    calls = [{"name": "lookup", "args": {"word": w}, "id": f"{w}abcdef"[:9].ljust(9, "x")} for w in ("cat", "dog")]
    text = sampled(tokenizer, (TEMPLATES / name).read_text(), calls, expected)
    items = parse_completion(text, CallIds(), fmt=FORMATS[expected])
    assert [json.loads(i["arguments"])["word"] for i in items if i["type"] == "function_call"] == ["cat", "dog"]


@pytest.mark.parametrize(
    ("fmt", "text", "message"),
    [
        (
            "hermes",
            'Let me check. <tool_call>{"name": "lookup", "arguments": {"word": "x"}}</tool_call>',
            "Let me check.",
        ),
        ("llama3_json", '<|python_tag|>{"name": "lookup", "parameters": {"word": "x"}}<|eom_id|>', ""),
        (
            "mistral",
            'Checking.[TOOL_CALLS][{"name": "lookup", "arguments": {"word": "x"}, "id": "abcdefghi"}]</s>',
            "Checking.",
        ),
        (
            "harmony",
            "<|channel|>analysis<|message|>need it<|end|><|start|>assistant to=functions.lookup<|channel|>commentary "
            '<|constrain|>json<|message|>{"word": "x"}<|call|>',
            "",
        ),
        (
            "deepseek",
            "Sure.<｜tool▁calls▁begin｜><｜tool▁call▁begin｜>function<｜tool▁sep｜>lookup\n```json\n"
            '{"word": "x"}\n```<｜tool▁call▁end｜><｜tool▁calls▁end｜><｜end▁of▁sentence｜>',
            "Sure.",
        ),
        (
            "glm",
            "<think>look it up</think>\nLet me check.\n<tool_call>lookup\n<arg_key>word</arg_key>\n<arg_value>x"
            "</arg_value>\n</tool_call>",
            "<think>look it up</think>\nLet me check.",
        ),
        (
            "qwen_xml",
            "Let me check.\n<tool_call>\n<function=lookup>\n<parameter=word>\nx\n</parameter>\n</function>"
            "\n</tool_call>",
            "Let me check.",
        ),
    ],
)
def test_a_call_as_sampled_and_the_message_around_it(fmt: str, text: str, message: str) -> None:
    items = parse_completion(text, CallIds(), fmt=FORMATS[fmt])
    calls = [i for i in items if i["type"] == "function_call"]
    said = "".join(i["content"] for i in items if i["type"] == "message")
    assert [(c["name"], json.loads(c["arguments"])) for c in calls] == [("lookup", {"word": "x"})]
    assert said == message


@pytest.mark.parametrize(
    ("fmt", "text"),
    [
        ("hermes", '<tool_call>{"name": "lookup", "arguments": </tool_call>'),
        ("llama3_json", '{"name": "lookup", "parameters": {"word": '),
        ("llama3_json", "The answer is {braces} in text."),
        ("mistral", "[TOOL_CALLS][{not json}]"),
        ("harmony", "to=functions.lookup<|channel|>commentary json<|message|>{not json<|call|>"),
        (
            "deepseek",
            "<｜tool▁calls▁begin｜><｜tool▁call▁begin｜>function<｜tool▁sep｜>lookup\n```json\n{x\n```<｜tool▁call▁end｜>",
        ),
        ("harmony", "<|channel|>final<|message|>A cat is an animal.<|return|>"),
        ("glm", "<tool_call>lookup\n<arg_key>word</arg_key>\n<arg_value>x</tool_call>"),
        ("glm", "<tool_call>\n<arg_key>word</arg_key>\n<arg_value>x</arg_value>\n</tool_call>"),
        ("qwen_xml", "<tool_call>\n<function=lookup>\n<parameter=word>\nx\n</function>\n</tool_call>"),
        ("qwen_xml", "<tool_call>\n<function=lookup>\nword: x\n</function>\n</tool_call>"),
    ],
)
def test_text_that_is_not_a_well_formed_call_is_no_call(fmt: str, text: str) -> None:
    items = parse_completion(text, CallIds(), fmt=FORMATS[fmt])
    assert [i for i in items if i["type"] == "function_call"] == []
    assert items[0]["type"] == "message" and items[0]["content"]


def test_glm_values_are_read_as_the_tools_schema_types_them() -> None:
    """GLM writes a value bare (a string as it is, anything else as JSON): `5` is the number 5
    for an integer argument and the text "5" for a string one, as the tool's schema says."""
    schema = {
        "type": "function",
        "function": {
            "name": "put",
            "parameters": {
                "type": "object",
                "properties": {
                    "key": {"type": "string"},
                    "count": {"type": "integer"},
                    "flags": {"type": "array"},
                    "note": {"type": ["string", "null"]},
                },
            },
        },
    }
    text = "".join(
        f"<arg_key>{k}</arg_key>\n<arg_value>{v}</arg_value>\n"
        for k, v in [("key", "5"), ("count", "5"), ("flags", '["a", 1]'), ("note", "null"), ("other", "true")]
    )
    text = f"<tool_call>put\n{text}</tool_call>"
    (typed,) = [i for i in parse_completion(text, CallIds(), fmt=FORMATS["glm"], schemas=[schema]) if "name" in i]
    assert json.loads(typed["arguments"]) == {"key": "5", "count": 5, "flags": ["a", 1], "note": None, "other": True}
    (bare,) = [i for i in parse_completion(text, CallIds(), fmt=FORMATS["glm"]) if "name" in i]
    assert json.loads(bare["arguments"])["key"] == 5  # without the schema the text's own reading


@pytest.mark.parametrize("fmt", sorted(FORMATS))
def test_a_call_nested_deeper_than_the_json_parser_goes_is_no_call_and_no_crash(fmt: str) -> None:
    """Model output is untrusted: a policy that writes `[` for thousands of tokens inside a call
    made json's parser raise RecursionError, which stopped the run."""
    deep = "[" * 20_000
    text = {
        "hermes": f"<tool_call>{deep}</tool_call>",
        "llama3_json": '{"name": "lookup", "parameters": ' + deep,
        "mistral": f"[TOOL_CALLS]{deep}",
        "harmony": f" to=functions.lookup<|channel|>commentary json<|message|>{deep}<|call|>",
        "deepseek": f"<｜tool▁calls▁begin｜><｜tool▁call▁begin｜>lookup<｜tool▁sep｜>{deep}<｜tool▁call▁end｜>",
        "glm": f"<tool_call>lookup\n<arg_key>word</arg_key>\n<arg_value>{deep}</arg_value>\n</tool_call>",
        "qwen_xml": f"<tool_call>\n<function=lookup>\n<parameter=word>\n{deep}\n</parameter>\n</function>\n"
        "</tool_call>",
    }[fmt]
    items = parse_completion(text, CallIds(), fmt=FORMATS[fmt], schemas=TOOLS)
    for call in (i for i in items if i["type"] == "function_call"):  # the formats that write values bare
        assert json.loads(call["arguments"]) == {"word": deep}  # the text as written


def test_qwen_xml_values_are_read_as_the_tools_schema_types_them() -> None:
    """Qwen3-Coder's template writes a value with Python's `str` (`True`, `{'a': 1}`): read as a
    literal where JSON fails, and as the text written where the schema says string."""
    schema = {
        "type": "function",
        "function": {
            "name": "put",
            "parameters": {"type": "object", "properties": {"key": {"type": "string"}, "flag": {"type": "boolean"}}},
        },
    }
    values = [("key", "007"), ("flag", "True"), ("spec", "{'a': 1, 'b': [2, None]}"), ("huge", "[" * 20_000)]
    text = "".join(f"<parameter={k}>\n{v}\n</parameter>\n" for k, v in values)
    text = f"<tool_call>\n<function=put>\n{text}</function>\n</tool_call>"
    (call,) = [i for i in parse_completion(text, CallIds(), fmt=FORMATS["qwen_xml"], schemas=[schema]) if "name" in i]
    args = json.loads(call["arguments"])
    assert (args["key"], args["flag"], args["spec"]) == ("007", True, {"a": 1, "b": [2, None]})
    assert args["huge"] == "[" * 20_000  # too long to read as a literal: the text as written


def test_a_template_that_renders_no_known_format_is_none_and_a_tool_use_run_is_refused(tokenizer) -> None:  # type: ignore[no-untyped-def]
    from types import SimpleNamespace

    from rlvr_cli.errors import RlvrError
    from rlvr_cli.rollout.tool_use import ToolUse

    plain = "{% for m in messages %}{{ m.role }}: {{ m.content }}\n{% endfor %}"
    assert detect(plain) is None and detect((TEMPLATES / "gemma-2.jinja").read_text()) is None
    renderer = ChatRenderer(tokenizer, plain, [tokenizer.eos_token])
    with pytest.raises(RlvrError, match=r"renders no tool-call format rlvr reads .*set environment\.tool_format"):
        ToolUse.of(SimpleNamespace(), renderer, None, SimpleNamespace(schemas=[]))  # type: ignore[arg-type]
    named = ChatRenderer(tokenizer, plain, [tokenizer.eos_token], tool_format="llama3_json")
    assert named.tool_format is FORMATS["llama3_json"]  # the contract's word over the template's
