"""Masks token for token on the published chat templates of seventeen model families.

Every expectation is written from the template's documented format (what the template
emits for each role, read off the template source), never from rlvr's output: a segment's
text is what the template renders, its flag whether the policy loss covers it. Each family
gets the conversation kinds it supports (system, several turns, tool calls single and
parallel with results, reasoning) and the ones it does not, which must be reported with
the right check, not rendered wrong.
"""

from __future__ import annotations

import datetime
import json
from pathlib import Path

import pytest

from rlvr_cli.chat.render import ChatRenderer, Conversation, Rendered
from tests.chat.published import FAMILIES, expect

TOOL = {
    "type": "function",
    "function": {
        "name": "add",
        "description": "Add two integers.",
        "parameters": {
            "type": "object",
            "properties": {"a": {"type": "integer"}, "b": {"type": "integer"}},
            "required": ["a", "b"],
        },
    },
}
SYSTEM = {"role": "system", "content": "You are terse."}
USER = {"role": "user", "content": "What is 2+3?"}
USER2 = {"role": "user", "content": "Times 4?"}
FIVE = {"role": "assistant", "content": "5"}
TWENTY = {"role": "assistant", "content": "20"}
ARGS = {"a": 2, "b": 3}
ARGS_JSON = json.dumps(ARGS)


def call(arguments=ARGS, call_id: str = "call00001") -> dict:
    return {"type": "function", "id": call_id, "function": {"name": "add", "arguments": arguments}}


def tool(content: str = "5", call_id: str = "call00001") -> dict:
    return {"role": "tool", "tool_call_id": call_id, "content": content}


SINGLE = [SYSTEM, USER, FIVE]
NO_SYSTEM = [USER, FIVE]
MULTI = [SYSTEM, USER, FIVE, USER2, TWENTY]
TOOL_USE = [SYSTEM, USER, {"role": "assistant", "content": None, "tool_calls": [call()]}, tool(), FIVE]
PARALLEL = [
    {"role": "user", "content": "2+3 and 4+5?"},
    {"role": "assistant", "content": None, "tool_calls": [call(), call({"a": 4, "b": 5}, "call00002")]},
    tool("5"),
    tool("9", "call00002"),
    {"role": "assistant", "content": "5 and 9."},
]
REASONING = [USER, {"role": "assistant", "content": "<think>\nadd them\n</think>\n\n5"}]


def render(published_tokenizer, name: str, messages: list[dict], tools: list | None = None) -> Rendered:
    family = FAMILIES[name]
    renderer = ChatRenderer(published_tokenizer(name), family.source, list(family.stops))
    return renderer.render(Conversation(messages, tools))


def check(out: Rendered, name: str, segments: list[tuple[str, int]], codes: list[str]) -> None:
    tokens, mask = expect(FAMILIES[name], *segments)
    assert "".join(out.tokens) == "".join(tokens), "rendered text differs from the template's format"
    assert out.tokens == tokens
    assert out.loss_mask == mask, _diff(out, mask)
    assert sorted(c.code for c in out.checks) == sorted(codes), [(c.code, c.message) for c in out.checks]


def _diff(out: Rendered, mask: list[int]) -> str:
    wrong = [i for i, (a, b) in enumerate(zip(out.loss_mask, mask, strict=True)) if a != b]
    return f"mask differs at tokens {wrong[:8]}: {[out.tokens[i] for i in wrong[:8]]}"


def _day(fmt: str) -> str:
    return datetime.datetime.now().strftime(fmt)


# ── ChatML families: Qwen2.5, Qwen3, SmolLM2, SmolLM3, Phi-4 ──────────────────────────

IM = "<|im_start|>"
QWEN_SYSTEM = "<|im_start|>system\nYou are Qwen, created by Alibaba Cloud. You are a helpful assistant.<|im_end|>\n"
QWEN_TOOLS = (
    "\n\n# Tools\n\nYou may call one or more functions to assist with the user query.\n\n"
    "You are provided with function signatures within <tools></tools> XML tags:\n<tools>\n"
    + json.dumps(TOOL)
    + "\n</tools>\n\nFor each function call, return a json object with function name and arguments "
    'within <tool_call></tool_call> XML tags:\n<tool_call>\n{"name": <function-name>, '
    '"arguments": <args-json-object>}\n</tool_call><|im_end|>\n'
)


def qwen_call(args: dict) -> str:
    return '<tool_call>\n{"name": "add", "arguments": ' + json.dumps(args) + "}\n</tool_call>"


def test_qwen25_single_multi_and_default_system(published_tokenizer) -> None:
    check(
        render(published_tokenizer, "qwen2.5", SINGLE),
        "qwen2.5",
        [
            ("<|im_start|>system\nYou are terse.<|im_end|>\n<|im_start|>user\nWhat is 2+3?<|im_end|>\n", 0),
            ("<|im_start|>assistant\n", 0),
            ("5<|im_end|>", 1),
            ("\n", 0),
        ],
        ["RLT010"],  # without a system message it injects "You are Qwen..."
    )
    check(
        render(published_tokenizer, "qwen2.5", MULTI),
        "qwen2.5",
        [
            ("<|im_start|>system\nYou are terse.<|im_end|>\n<|im_start|>user\nWhat is 2+3?<|im_end|>\n", 0),
            ("<|im_start|>assistant\n", 0),
            ("5<|im_end|>", 1),
            ("\n<|im_start|>user\nTimes 4?<|im_end|>\n<|im_start|>assistant\n", 0),
            ("20<|im_end|>", 1),
            ("\n", 0),
        ],
        ["RLT010"],
    )


def test_qwen25_tool_call_and_parallel_results_merge_without_alarm(published_tokenizer) -> None:
    check(
        render(published_tokenizer, "qwen2.5", TOOL_USE, [TOOL]),
        "qwen2.5",
        [
            ("<|im_start|>system\nYou are terse." + QWEN_TOOLS, 0),
            ("<|im_start|>user\nWhat is 2+3?<|im_end|>\n<|im_start|>assistant\n", 0),
            (qwen_call(ARGS) + "<|im_end|>", 1),
            ("\n<|im_start|>user\n<tool_response>\n5\n</tool_response><|im_end|>\n<|im_start|>assistant\n", 0),
            ("5<|im_end|>", 1),
            ("\n", 0),
        ],
        ["RLT010"],
    )
    out = render(published_tokenizer, "qwen2.5", PARALLEL, [TOOL])
    check(
        out,
        "qwen2.5",
        [
            (
                "<|im_start|>system\nYou are Qwen, created by Alibaba Cloud. You are a helpful assistant." + QWEN_TOOLS,
                0,
            ),
            ("<|im_start|>user\n2+3 and 4+5?<|im_end|>\n<|im_start|>assistant\n", 0),
            (qwen_call(ARGS) + "\n" + qwen_call({"a": 4, "b": 5}) + "<|im_end|>", 1),
            ("\n<|im_start|>user\n<tool_response>\n5\n</tool_response>\n<tool_response>\n9\n</tool_response>", 0),
            ("<|im_end|>\n<|im_start|>assistant\n", 0),
            ("5 and 9.<|im_end|>", 1),
            ("\n", 0),
        ],
        ["RLT010"],  # and no false "history rewritten" for the two results in one user turn
    )
    merged = [s for s in out.spans if s.role == "tool"]
    assert [(s.turn, s.last_turn, s.trainable) for s in merged] == [(2, 3, False)]


def test_qwen3_reasoning_and_its_real_rewrites(published_tokenizer) -> None:
    check(
        render(published_tokenizer, "qwen3", SINGLE),
        "qwen3",
        [
            ("<|im_start|>system\nYou are terse.<|im_end|>\n<|im_start|>user\nWhat is 2+3?<|im_end|>\n", 0),
            ("<|im_start|>assistant\n", 0),
            ("<think>\n\n</think>\n\n5<|im_end|>", 1),  # the last turn always opens a think block
            ("\n", 0),
        ],
        [],
    )
    check(
        render(published_tokenizer, "qwen3", REASONING),
        "qwen3",
        [
            ("<|im_start|>user\nWhat is 2+3?<|im_end|>\n<|im_start|>assistant\n", 0),
            ("<think>\nadd them\n</think>\n\n5<|im_end|>", 1),
            ("\n", 0),
        ],
        [],
    )
    # Several turns: an earlier turn loses its think block once a user turn follows. The
    # policy produced it with one; trained on the full rendering it would learn the other.
    out = render(published_tokenizer, "qwen3", MULTI)
    check(
        out,
        "qwen3",
        [
            ("<|im_start|>system\nYou are terse.<|im_end|>\n<|im_start|>user\nWhat is 2+3?<|im_end|>\n", 0),
            ("<|im_start|>assistant\n5<|im_end|>\n<|im_start|>user\nTimes 4?<|im_end|>\n", 0),
            ("<|im_start|>assistant\n", 0),
            ("<think>\n\n</think>\n\n20<|im_end|>", 1),
            ("\n", 0),
        ],
        ["RLT007"],
    )
    assert "turn 2 (assistant)" in out.checks[0].message


def test_qwen3_tool_calls(published_tokenizer) -> None:
    check(
        render(published_tokenizer, "qwen3", TOOL_USE[1:], [TOOL]),
        "qwen3",
        [
            ("<|im_start|>system\n" + QWEN_TOOLS.lstrip("\n"), 0),
            ("<|im_start|>user\nWhat is 2+3?<|im_end|>\n", 0),
            # a tool-calling turn after the last user query renders a think block only while last
            ("<|im_start|>assistant\n" + qwen_call(ARGS) + "<|im_end|>\n", 0),
            ("<|im_start|>user\n<tool_response>\n5\n</tool_response><|im_end|>\n<|im_start|>assistant\n", 0),
            ("<think>\n\n</think>\n\n5<|im_end|>", 1),
            ("\n", 0),
        ],
        ["RLT007"],
    )


def test_smollm2_and_phi4(published_tokenizer) -> None:
    check(
        render(published_tokenizer, "smollm2", MULTI),
        "smollm2",
        [
            ("<|im_start|>system\nYou are terse.<|im_end|>\n<|im_start|>user\nWhat is 2+3?<|im_end|>\n", 0),
            ("<|im_start|>assistant\n", 0),
            ("5<|im_end|>", 1),
            ("\n<|im_start|>user\nTimes 4?<|im_end|>\n<|im_start|>assistant\n", 0),
            ("20<|im_end|>", 1),
            ("\n", 0),
        ],
        ["RLT010"],
    )
    check(
        render(published_tokenizer, "phi-4", MULTI),
        "phi-4",
        [
            ("<|im_start|>system<|im_sep|>You are terse.<|im_end|><|im_start|>user<|im_sep|>What is 2+3?<|im_end|>", 0),
            ("<|im_start|>assistant<|im_sep|>", 0),
            ("5<|im_end|>", 1),
            ("<|im_start|>user<|im_sep|>Times 4?<|im_end|><|im_start|>assistant<|im_sep|>", 0),
            ("20<|im_end|>", 1),
        ],
        [],
    )


def smollm3_system(mode: str, instructions: str, tools: str = "None") -> str:
    return (
        "<|im_start|>system\n## Metadata\n\nKnowledge Cutoff Date: June 2025\n"
        f"Today Date: {_day('%d %B %Y')}\nReasoning Mode: {mode}\n\n## Custom Instructions\n\n"
        f"{instructions}\n\n## Tools\n\n### XML Tools\n\n{tools}\n\n### Python Tools\n\nNone\n\n<|im_end|>\n"
    )


def test_smollm3_mode_flag_in_the_system_prompt_is_no_false_alarm(published_tokenizer) -> None:
    no_think = [{"role": "system", "content": "You are terse. /no_think"}, USER, FIVE]
    check(
        render(published_tokenizer, "smollm3", no_think),
        "smollm3",
        [
            (smollm3_system("/no_think", "You are terse.") + "<|im_start|>user\nWhat is 2+3?<|im_end|>\n", 0),
            ("<|im_start|>assistant\n<think>\n\n</think>\n", 0),
            ("5<|im_end|>", 1),
            ("\n", 0),
        ],
        ["RLT009", "RLT010"],  # today's date in the system prompt; a default one without a system message
    )
    out = render(published_tokenizer, "smollm3", [SYSTEM, *REASONING])
    check(
        out,
        "smollm3",
        [
            (smollm3_system("/think", "You are terse.") + "<|im_start|>user\nWhat is 2+3?<|im_end|>\n", 0),
            ("<|im_start|>assistant\n", 0),
            ("<think>\nadd them\n</think>\n\n5<|im_end|>", 1),
            ("\n", 0),
        ],
        ["RLT009", "RLT010"],
    )


def test_smollm3_drops_tool_calls_and_says_so(published_tokenizer) -> None:
    out = render(published_tokenizer, "smollm3", TOOL_USE, [TOOL])
    assert "RLT015" in [c.code for c in out.checks]
    assert "add" in next(c.message for c in out.checks if c.code == "RLT015")


# ── Llama 3.1 / 3.2 ───────────────────────────────────────────────────────────────────

HEADER = "<|start_header_id|>{}<|end_header_id|>\n\n"


def llama_system(date: str, body: str, tools: bool = False) -> str:
    env = "Environment: ipython\n" if tools else ""
    return (
        "<|begin_of_text|>" + HEADER.format("system") + env + "Cutting Knowledge Date: December 2023\n"
        f"Today Date: {date}\n\n{body}<|eot_id|>"
    )


@pytest.mark.parametrize(("name", "date"), [("llama-3.1", "26 Jul 2024"), ("llama-3.2", None)])
def test_llama_single_multi_and_tools_in_the_first_user_message(
    published_tokenizer, name: str, date: str | None
) -> None:
    date = date or _day("%d %b %Y")
    dated = ["RLT010"] + (["RLT009"] if name == "llama-3.2" else [])
    check(
        render(published_tokenizer, name, MULTI),
        name,
        [
            (llama_system(date, "You are terse.") + HEADER.format("user") + "What is 2+3?<|eot_id|>", 0),
            (HEADER.format("assistant"), 0),
            ("5<|eot_id|>", 1),
            (HEADER.format("user") + "Times 4?<|eot_id|>" + HEADER.format("assistant"), 0),
            ("20<|eot_id|>", 1),
        ],
        dated,
    )
    # Tools go into the first user message, so a prefix holding only the system message
    # raises in the template; the whole conversation renders and trains as documented.
    tools_prompt = (
        "Given the following functions, please respond with a JSON for a function call with its proper "
        'arguments that best answers the given prompt.\n\nRespond in the format {"name": function name, '
        '"parameters": dictionary of argument name and its value}.Do not use variables.\n\n'
        + json.dumps(TOOL, indent=4)
        + "\n\n"
    )
    out = render(published_tokenizer, name, TOOL_USE, [TOOL])
    check(
        out,
        name,
        [
            (llama_system(date, "You are terse.", tools=True), 0),
            (HEADER.format("user") + tools_prompt + "What is 2+3?<|eot_id|>" + HEADER.format("assistant"), 0),
            ('{"name": "add", "parameters": ' + ARGS_JSON + "}<|eot_id|>", 1),
            (HEADER.format("ipython") + '"5"<|eot_id|>' + HEADER.format("assistant"), 0),
            ("5<|eot_id|>", 1),
        ],
        dated,
    )
    assert out.spans[0].turn == 0 and out.spans[0].last_turn == 1  # system and user render as one


def test_llama_refuses_parallel_calls_with_the_family_and_the_template_s_reason(published_tokenizer) -> None:
    out = render(published_tokenizer, "llama-3.1", PARALLEL, [TOOL])
    assert [c.code for c in out.checks] == ["RLT017"] and out.input_ids == []
    message = out.checks[0].message
    assert "Llama 3.1, 3.2, 3.3 (llama3_json tool calls) write one tool call per turn; turn 1 makes 2" in message
    assert "single tool-calls" in message  # the template's own reason


@pytest.mark.parametrize(
    ("name", "refused"), [("gpt-oss", True), ("qwen3", False), ("mistral-nemo", False), ("mistral-small-3.1", False)]
)
def test_several_calls_in_one_turn_only_where_the_format_has_them(
    published_tokenizer, name: str, refused: bool
) -> None:
    out = render(published_tokenizer, name, PARALLEL, [TOOL])
    found = [c for c in out.checks if c.code == "RLT017"]
    assert bool(found) == refused, [(c.code, c.message) for c in out.checks]
    if refused:
        assert "gpt-oss (harmony tool calls) write one tool call per turn" in found[0].message


# ── Mistral 7B v0.3 and Nemo ──────────────────────────────────────────────────────────

MISTRAL_TOOLS = (
    '{"type": "function", "function": {"name": "add", "description": "Add two integers.", "parameters": '
    + json.dumps(TOOL["function"]["parameters"])
    + "}}"
)


@pytest.mark.parametrize(("name", "sp"), [("mistral-7b-v0.3", " "), ("mistral-nemo", "")])
def test_mistral_turns_and_tool_calls(published_tokenizer, name: str, sp: str) -> None:
    multi = [USER, FIVE, USER2, TWENTY]
    check(
        render(published_tokenizer, name, multi),
        name,
        [
            (f"<s>[INST]{sp}What is 2+3?[/INST]", 0),
            (f"{sp}5</s>", 1),
            (f"[INST]{sp}Times 4?[/INST]", 0),
            (f"{sp}20</s>", 1),
        ],
        ["RLT005"],  # add_generation_prompt adds nothing: [/INST] opens the answer
    )
    conversation = [USER, {"role": "assistant", "content": None, "tool_calls": [call()]}, tool(), FIVE]
    check(
        render(published_tokenizer, name, conversation, [TOOL]),
        name,
        [
            (f"<s>[AVAILABLE_TOOLS]{sp}[" + MISTRAL_TOOLS + f"][/AVAILABLE_TOOLS][INST]{sp}What is 2+3?[/INST]", 0),
            (f'[TOOL_CALLS]{sp}[{{"name": "add", "arguments": {ARGS_JSON}, "id": "call00001"}}]</s>', 1),
            (f'[TOOL_RESULTS]{sp}{{"content": 5, "call_id": "call00001"}}[/TOOL_RESULTS]', 0),
            (f"{sp}5</s>", 1),
        ],
        ["RLT005"],
    )


@pytest.mark.parametrize("name", ["mistral-7b-v0.3", "mistral-nemo"])
def test_mistral_system_message_is_a_real_trap(published_tokenizer, name: str) -> None:
    """The system message goes into the last user message only: a conversation ending with
    an assistant turn renders without it, while that turn was sampled with it."""
    out = render(published_tokenizer, name, SINGLE)
    assert {"RLT007", "RLT011"} <= {c.code for c in out.checks}
    assert sum(out.loss_mask) == 0  # nothing trained on a prompt it was not sampled from


def test_mistral_small_renders_the_system_message_first_and_trains_the_answer(published_tokenizer) -> None:
    """Mistral Small 3.1 moved the system message to a [SYSTEM_PROMPT] block at the start: no
    trap there (unlike 7B v0.3 and Nemo), and the answer is trained through its </s>."""
    out = render(published_tokenizer, "mistral-small-3.1", SINGLE)
    assert not {"RLT007", "RLT011"} & {c.code for c in out.checks}, [(c.code, c.message) for c in out.checks]
    trained = "".join(t for t, m in zip(out.tokens, out.loss_mask, strict=True) if m)
    assert trained == SINGLE[-1]["content"] + "</s>"
    assert "".join(out.tokens).startswith("<s>[SYSTEM_PROMPT]" + SINGLE[0]["content"] + "[/SYSTEM_PROMPT][INST]")


# ── Gemma 2 / 3 ───────────────────────────────────────────────────────────────────────


def test_gemma2_multi_turn_and_no_system_role(published_tokenizer) -> None:
    check(
        render(published_tokenizer, "gemma-2", [USER, FIVE, USER2, TWENTY]),
        "gemma-2",
        [
            ("<bos><start_of_turn>user\nWhat is 2+3?<end_of_turn>\n<start_of_turn>model\n", 0),
            ("5<end_of_turn>", 1),
            ("\n<start_of_turn>user\nTimes 4?<end_of_turn>\n<start_of_turn>model\n", 0),
            ("20<end_of_turn>", 1),
            ("\n", 0),
        ],
        [],
    )
    out = render(published_tokenizer, "gemma-2", SINGLE)
    assert [c.code for c in out.checks] == ["RLT011"] and "System role not supported" in out.checks[0].message
    assert [c.code for c in render(published_tokenizer, "gemma-2", TOOL_USE[1:], [TOOL]).checks] == ["RLT013"]


def test_gemma3_folds_the_system_message_into_the_first_user_turn(published_tokenizer) -> None:
    check(
        render(published_tokenizer, "gemma-3", MULTI),
        "gemma-3",
        [
            ("<bos><start_of_turn>user\nYou are terse.\n\nWhat is 2+3?<end_of_turn>\n<start_of_turn>model\n", 0),
            ("5<end_of_turn>", 1),
            ("\n<start_of_turn>user\nTimes 4?<end_of_turn>\n<start_of_turn>model\n", 0),
            ("20<end_of_turn>", 1),
            ("\n", 0),
        ],
        [],
    )


# ── Phi-3.5: eos after the whole conversation ─────────────────────────────────────────


def test_phi35_closing_eos_does_not_defeat_prefix_location(published_tokenizer) -> None:
    check(
        render(published_tokenizer, "phi-3.5", MULTI),
        "phi-3.5",
        [
            ("<|system|>\nYou are terse.<|end|>\n<|user|>\nWhat is 2+3?<|end|>\n<|assistant|>\n", 0),
            ("5<|end|>", 1),
            ("\n<|user|>\nTimes 4?<|end|>\n<|assistant|>\n", 0),
            ("20<|end|>", 1),
            ("\n<|endoftext|>", 0),
        ],
        [],
    )


# ── DeepSeek-R1 distills: the generation prompt opens <think> ─────────────────────────

DS_BOS, DS_EOS, DS_A, DS_U = "<｜begin▁of▁sentence｜>", "<｜end▁of▁sentence｜>", "<｜Assistant｜>", "<｜User｜>"


def test_deepseek_r1_trains_the_answer_not_the_role_header(published_tokenizer) -> None:
    out = render(published_tokenizer, "deepseek-r1-distill", [SYSTEM, *REASONING])
    check(
        out,
        "deepseek-r1-distill",
        [
            (DS_BOS + "You are terse." + DS_U + "What is 2+3?", 0),
            (DS_A, 0),  # header: the prompt ends with <think>\n, the rendered turn does not
            ("\n\n5" + DS_EOS, 1),
        ],
        ["RLT006"],
    )


def test_deepseek_r1_parallel_tool_calls(published_tokenizer) -> None:
    def ds_call(args: dict) -> str:
        return (
            "<｜tool▁call▁begin｜>function<｜tool▁sep｜>add\n```json\n" + json.dumps(args) + "\n```<｜tool▁call▁end｜>"
        )

    conversation = [dict(m) for m in PARALLEL]
    conversation[1] = {
        "role": "assistant",
        "content": None,
        "tool_calls": [call(ARGS_JSON), call(json.dumps({"a": 4, "b": 5}), "call00002")],
    }
    check(
        render(published_tokenizer, "deepseek-r1-distill", conversation),
        "deepseek-r1-distill",
        [
            (DS_BOS + DS_U + "2+3 and 4+5?", 0),
            (DS_A, 0),
            ("<｜tool▁calls▁begin｜>" + ds_call(ARGS) + "\n" + ds_call({"a": 4, "b": 5}), 1),
            ("<｜tool▁calls▁end｜>" + DS_EOS, 1),
            ("<｜tool▁outputs▁begin｜><｜tool▁output▁begin｜>5<｜tool▁output▁end｜>", 0),
            ("<｜tool▁output▁begin｜>9<｜tool▁output▁end｜><｜tool▁outputs▁end｜>", 0),
            ("5 and 9." + DS_EOS, 1),  # after tool outputs the answer follows with no role header
        ],
        ["RLT006"],
    )


DS31_TOOL_USE = [
    SYSTEM,
    USER,
    {"role": "assistant", "content": None, "tool_calls": [call(ARGS_JSON)]},
    tool(),
    FIVE,
]


def test_deepseek_v31_tool_calls_and_the_answer_after_their_results(published_tokenizer) -> None:
    """V3.1 opens the non-thinking answer with `</think>` in the generation prompt, writes a call
    as NAME<｜tool▁sep｜>ARGUMENTS (no code block), and after tool outputs adds no prompt."""
    ds_call = "<｜tool▁call▁begin｜>add<｜tool▁sep｜>" + ARGS_JSON + "<｜tool▁call▁end｜>"
    check(
        render(published_tokenizer, "deepseek-v3.1", DS31_TOOL_USE),
        "deepseek-v3.1",
        [
            (DS_BOS + "You are terse." + DS_U + "What is 2+3?" + DS_A + "</think>", 0),
            ("<｜tool▁calls▁begin｜>" + ds_call + "<｜tool▁calls▁end｜>" + DS_EOS, 1),
            ("<｜tool▁output▁begin｜>5<｜tool▁output▁end｜>", 0),
            ("5" + DS_EOS, 1),
        ],
        [],
    )


# ── gpt-oss (harmony) ─────────────────────────────────────────────────────────────────


def harmony_system(tools: bool = False) -> str:
    calls = "\nCalls to these tools must go to the commentary channel: 'functions'." if tools else ""
    return (
        "<|start|>system<|message|>You are ChatGPT, a large language model trained by OpenAI.\n"
        f"Knowledge cutoff: 2024-06\nCurrent date: {_day('%Y-%m-%d')}\n\nReasoning: medium\n\n"
        f"# Valid channels: analysis, commentary, final. Channel must be included for every message.{calls}<|end|>"
    )


def test_gpt_oss_final_channel_thinking_and_tool_calls(published_tokenizer) -> None:
    thinking = [SYSTEM, USER, {"role": "assistant", "content": "5", "thinking": "add them"}]
    developer = "<|start|>developer<|message|># Instructions\n\nYou are terse.\n\n<|end|>"
    check(
        render(published_tokenizer, "gpt-oss", thinking),
        "gpt-oss",
        [
            (harmony_system() + developer + "<|start|>user<|message|>What is 2+3?<|end|>", 0),
            ("<|start|>assistant", 0),
            (
                "<|channel|>analysis<|message|>add them<|end|><|start|>assistant<|channel|>final<|message|>5<|return|>",
                1,
            ),
        ],
        ["RLT009", "RLT010"],
    )
    conversation = [USER, {"role": "assistant", "tool_calls": [call()]}, tool(), FIVE]
    namespace = (
        "# Tools\n\n## functions\n\nnamespace functions {\n\n// Add two integers.\ntype add = (_: {\n"
        "a: number,\nb: number,\n}) => any;\n\n} // namespace functions"
    )
    check(
        render(published_tokenizer, "gpt-oss", conversation, [TOOL]),
        "gpt-oss",
        [
            (harmony_system(tools=True) + "<|start|>developer<|message|>" + namespace + "<|end|>", 0),
            ("<|start|>user<|message|>What is 2+3?<|end|><|start|>assistant", 0),
            (" to=functions.add<|channel|>commentary json<|message|>" + ARGS_JSON + "<|call|>", 1),
            ('<|start|>functions.add to=assistant<|channel|>commentary<|message|>"5"<|end|><|start|>assistant', 0),
            ("<|channel|>final<|message|>5<|return|>", 1),
        ],
        ["RLT009", "RLT010"],
    )


def test_gpt_oss_multi_turn_rewrites_the_return_token(published_tokenizer) -> None:
    """An answer ends with <|return|> while it is the last turn and with <|end|> once another
    follows: the sampled ids are not what the full rendering trains."""
    out = render(published_tokenizer, "gpt-oss", [USER, FIVE, USER2, TWENTY])
    assert [c.code for c in out.checks if c.severity == "error"] == ["RLT007"]
    trained = "".join(t for t, m in zip(out.tokens, out.loss_mask, strict=True) if m)
    assert trained == "<|channel|>final<|message|>20<|return|>"


# ── GLM-4.6: a turn ends where the next one opens ─────────────────────────────────────

GLM_TOOLS = (
    "<|system|>\n# Tools\n\nYou may call one or more functions to assist with the user query.\n\n"
    "You are provided with function signatures within <tools></tools> XML tags:\n<tools>\n"
    + json.dumps(TOOL)
    + "\n</tools>\n\nFor each function call, output the function name and arguments within the following "
    "XML format:\n<tool_call>{function-name}\n<arg_key>{arg-key-1}</arg_key>\n<arg_value>{arg-value-1}</arg_value>"
    "\n<arg_key>{arg-key-2}</arg_key>\n<arg_value>{arg-value-2}</arg_value>\n...\n</tool_call>"
)
GLM_CALL = (
    "\n<tool_call>add\n<arg_key>a</arg_key>\n<arg_value>2</arg_value>\n<arg_key>b</arg_key>\n<arg_value>3</arg_value>"
    "\n</tool_call>"
)
GLM_TOOL_USE = [SYSTEM, USER, {"role": "assistant", "content": "", "tool_calls": [call()]}, tool(), FIVE]


def test_glm_trains_the_opening_of_the_next_turn_that_ends_each_answer(published_tokenizer) -> None:
    """GLM's assistant turns have no closing token: the policy stops by writing the next turn's
    opening (<|user|>, <|observation|>), so that token is the turn's last trained one. The last
    turn renders no stop (nothing follows it) and is no error; `[gMASK]<sop>` stands where BOS
    would and is no default system prompt."""
    check(
        render(published_tokenizer, "glm-4.6", MULTI),
        "glm-4.6",
        [
            ("[gMASK]<sop><|system|>\nYou are terse.<|user|>\nWhat is 2+3?<|assistant|>", 0),
            ("\n<think></think>\n5<|user|>", 1),
            ("\nTimes 4?<|assistant|>", 0),
            ("\n<think></think>\n20", 1),
        ],
        [],
    )
    check(
        render(published_tokenizer, "glm-4.6", GLM_TOOL_USE, [TOOL]),
        "glm-4.6",
        [
            ("[gMASK]<sop>" + GLM_TOOLS + "<|system|>\nYou are terse.<|user|>\nWhat is 2+3?<|assistant|>", 0),
            ("\n<think></think>" + GLM_CALL + "<|observation|>", 1),
            ("\n<tool_response>\n5\n</tool_response><|assistant|>", 0),
            ("\n<think></think>\n5", 1),
        ],
        [],
    )
    check(
        render(published_tokenizer, "glm-4.6", REASONING),
        "glm-4.6",
        [("[gMASK]<sop><|user|>\nWhat is 2+3?<|assistant|>", 0), ("\n<think>add them</think>\n5", 1)],
        [],
    )


def test_glm_without_the_openings_as_stop_tokens_never_learns_to_stop(published_tokenizer) -> None:
    """The same template with only <|endoftext|> as a stop token: no turn has one (RLT002)."""
    family = FAMILIES["glm-4.6"]
    renderer = ChatRenderer(published_tokenizer("glm-4.6"), family.source, ["<|endoftext|>"])
    out = renderer.render(Conversation(MULTI, None))
    assert sorted(c.code for c in out.checks) == ["RLT002", "RLT002"]
    trained = "".join(t for t, m in zip(out.tokens, out.loss_mask, strict=True) if m)
    assert "<|user|>" not in trained


# ── token-in/token-out: the agentic path uses the same rendering ──────────────────────


@pytest.mark.parametrize(
    ("name", "conversation", "tools"),
    [
        ("qwen2.5", PARALLEL, [TOOL]),
        ("llama-3.1", TOOL_USE, [TOOL]),
        ("phi-3.5", MULTI, None),
        ("mistral-nemo", [USER, {"role": "assistant", "content": None, "tool_calls": [call()]}, tool(), FIVE], [TOOL]),
        (
            "mistral-small-3.1",
            [USER, {"role": "assistant", "content": None, "tool_calls": [call()]}, tool(), FIVE],
            [TOOL],
        ),
        ("gemma-3", MULTI, None),
        ("glm-4.6", GLM_TOOL_USE, [TOOL]),
        ("deepseek-v3.1", DS31_TOOL_USE, [TOOL]),
        ("glm-4.6", MULTI, None),
    ],
)
def test_continuation_appends_exactly_what_the_full_rendering_holds(
    published_tokenizer, name, conversation, tools
) -> None:
    """Episode ids built turn by turn (sampled ids kept, continuation appended) equal the ids
    of the full rendering wherever the template keeps history."""
    family = FAMILIES[name]
    renderer = ChatRenderer(published_tokenizer(name), family.source, list(family.stops))
    full = renderer.render(Conversation(conversation, tools))
    turns = [k for k, m in enumerate(conversation) if m["role"] == "assistant"]
    first = turns[0]
    ids = renderer.prompt_ids(conversation[:first], tools)
    for i, k in enumerate(turns):
        content = next(s for s in full.spans if s.turn == k and s.part == "content")
        ids += full.input_ids[content.start : content.end]  # what the policy sampled
        if i + 1 < len(turns):
            ids += renderer.continuation(conversation[: k + 1], conversation[k + 1 : turns[i + 1]], tools)
    last = [s for s in full.spans if s.part == "content"][-1]
    assert ids == full.input_ids[: last.end]


def test_glm_continuation_keeps_the_opening_the_policy_did_not_write(published_tokenizer) -> None:
    """The stop the policy sampled stands for the next turn's opening only when it is that
    opening: a call turn ended with <|user|> still gets <|observation|> before the results."""
    family = FAMILIES["glm-4.6"]
    tokenizer = published_tokenizer("glm-4.6")
    renderer = ChatRenderer(tokenizer, family.source, list(family.stops))
    observation, user = tokenizer.convert_tokens_to_ids(["<|observation|>", "<|user|>"])
    turns, added = GLM_TOOL_USE[:3], [tool()]
    wrote_it = renderer.continuation(turns, added, [TOOL], observation)
    assert renderer.tokens(wrote_it)[:2] == ["\n", "<tool_response>"]  # straight into the result
    other = renderer.continuation(turns, added, [TOOL], user)
    assert other == [observation, *wrote_it]


def test_continuation_refuses_a_template_that_rewrites_history(published_tokenizer) -> None:
    family = FAMILIES["gpt-oss"]
    renderer = ChatRenderer(published_tokenizer("gpt-oss"), family.source, list(family.stops))
    with pytest.raises(ValueError, match="renders the earlier turns differently"):
        renderer.continuation([USER, FIVE], [USER2])


def test_every_stored_template_names_its_source() -> None:
    sources = (Path(__file__).parent / "templates" / "SOURCES.md").read_text(encoding="utf-8")
    for family in FAMILIES.values():
        assert f"`{family.template}`" in sources, family.template
