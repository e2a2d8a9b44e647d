"""`rlvr render` through the real command, transformers' own mask, and bad input."""

from __future__ import annotations

import itertools
import json
import shutil
from pathlib import Path

import pytest

from rlvr_cli.chat.render import ChatRenderer, Conversation
from tests.conftest import copy_experiment, rlvr

CONVERSATIONS = [
    {"messages": [{"role": "user", "content": "3+4="}, {"role": "assistant", "content": "7"}]},
    {
        "messages": [
            {"role": "system", "content": "Add."},
            {"role": "user", "content": "1+1="},
            {"role": "assistant", "content": "2"},
            {"role": "user", "content": "2+2="},
            {"role": "assistant", "content": "4"},
        ]
    },
    {
        "messages": [
            {"role": "user", "content": "x?"},
            {
                "role": "assistant",
                "content": "",
                "tool_calls": [{"type": "function", "function": {"name": "calc", "arguments": '{"q": 1}'}}],
            },
            {"role": "tool", "tool_call_id": "c1", "content": "1"},
            {"role": "assistant", "content": "1"},
        ],
        "tools": [{"type": "function", "function": {"name": "calc", "parameters": {"type": "object"}}}],
    },
]


@pytest.fixture(scope="module")
def experiment(single_turn: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    edits = [("max_prompt_tokens: 64", "max_prompt_tokens: 512")]
    folder = copy_experiment(single_turn, tmp_path_factory.mktemp("render") / "exp", edits)
    from rlvr_cli.toy.tiny import build_tiny

    shutil.rmtree(folder / "model")  # a tokenizer for every printable character: the arithmetic one has no
    build_tiny(folder / "model", "chatml")  # capitals or JSON braces, which its conversations hold (RLT016)
    (folder / "conversations.jsonl").write_text("".join(json.dumps(c) + "\n" for c in CONVERSATIONS))
    return folder


def test_render_json_matches_the_interface(experiment: Path) -> None:
    run = rlvr(
        "render",
        experiment / "experiment.rlvr.yaml",
        "--conversations",
        experiment / "conversations.jsonl",
        "--format",
        "json",
    )
    assert run.code == 0, run.stderr
    data = run.json()
    assert len(data) == 3
    for item in data:
        assert set(item) == {"input_ids", "tokens", "loss_mask", "spans", "checks"}
        assert len(item["input_ids"]) == len(item["tokens"]) == len(item["loss_mask"])
        for span in item["spans"]:
            assert {"role", "turn", "start", "end", "trainable"} <= set(span)
            assert all(item["loss_mask"][i] == int(span["trainable"]) for i in range(span["start"], span["end"]))
        covered = sorted((s["start"], s["end"]) for s in item["spans"])
        assert covered[0][0] == 0 and covered[-1][1] == len(item["input_ids"])
        assert all(a[1] == b[0] for a, b in itertools.pairwise(covered))
    trained = ["".join(t for t, m in zip(d["tokens"], d["loss_mask"], strict=True) if m) for d in data]
    assert trained[0] == "7<|im_end|>"
    assert trained[1] == "2<|im_end|>4<|im_end|>"
    assert trained[2].startswith("<tool_call>") and trained[2].endswith("1<|im_end|>")


def test_render_text_shows_spans_legend_and_checks(experiment: Path) -> None:
    run = rlvr("render", experiment / "experiment.rlvr.yaml", "-c", experiment / "conversations.jsonl")
    assert run.code == 0
    assert "legend:" in run.stdout
    assert "[turn 1 assistant content, tokens 23-25, trained]" in run.stdout
    assert "[turn 1 assistant glue, tokens 25-26, not trained]" in run.stdout


def test_render_exits_1_on_an_error_check(experiment: Path, tmp_path: Path) -> None:
    folder = tmp_path / "exp"
    shutil.copytree(experiment, folder)
    contract = folder / "experiment.rlvr.yaml"
    contract.write_text(contract.read_text().replace("max_prompt_tokens: 512", "max_prompt_tokens: 12"))
    run = rlvr("render", contract, "-c", folder / "conversations.jsonl")
    assert run.code == 1 and "error[RLT012]" in run.stdout


@pytest.mark.parametrize(
    ("line", "words"),
    [
        ('{"messages": [{"role": "robot", "content": "x"}]}', "unknown role 'robot'"),
        ('{"messages": []}', "the conversation is empty"),
        ('{"messages": [{"role": "user", "content": "x"}', "not JSON"),
        ('{"messages": [{"role": "user", "content": 5}]}', "content must be a string"),
        ('["not", "an", "object"]', "expected an object"),
    ],
)
def test_bad_conversations_name_the_line(tmp_path: Path, line: str, words: str) -> None:
    from rlvr_cli.chat.conversation import RenderError, read_conversations

    bad = tmp_path / "bad.jsonl"
    bad.write_text(json.dumps(CONVERSATIONS[0]) + "\n" + line + "\n")
    with pytest.raises(RenderError) as refused:
        read_conversations(bad)
    assert "bad.jsonl:2" in str(refused.value) and words in str(refused.value)


def test_a_malformed_file_is_refused_before_the_model_loads(experiment: Path, tmp_path: Path) -> None:
    bad = tmp_path / "bad.jsonl"
    bad.write_text('{"messages": [{"role": "user", "content": "x"}\n')
    (tmp_path / "exp").mkdir()
    run = rlvr("render", experiment / "experiment.rlvr.yaml", "-c", bad)
    assert run.code == 1 and "bad.jsonl:1: not JSON" in run.stderr and "Traceback" not in run.stderr


def test_missing_files_are_usage_errors(experiment: Path, tmp_path: Path) -> None:
    run = rlvr("render", experiment / "experiment.rlvr.yaml", "-c", tmp_path / "none.jsonl")
    assert run.code == 2 and "no such conversations file" in run.stderr
    folder = tmp_path / "exp"
    shutil.copytree(experiment, folder)
    shutil.rmtree(folder / "model")
    run = rlvr("render", folder / "experiment.rlvr.yaml", "-c", folder / "conversations.jsonl")
    assert run.code == 2 and "tokenizer folder" in run.stderr and "Traceback" not in run.stderr
    assert rlvr("render", tmp_path / "nope.rlvr.yaml", "-c", folder / "conversations.jsonl").code == 2


def test_agrees_with_transformers_assistant_mask_on_generation_tags(family_tokenizer) -> None:
    """On a template with {% generation %} tags, rlvr's prefix-derived mask equals transformers'."""
    from rlvr_cli.chat.families import CHATML_GENERATION

    tok = family_tokenizer("chatml")
    renderer = ChatRenderer(tok, CHATML_GENERATION, ["<|im_end|>"])
    for conv in CONVERSATIONS:
        ours = renderer.render(Conversation(conv["messages"], conv.get("tools")))
        theirs = tok.apply_chat_template(
            conv["messages"],
            tools=conv.get("tools"),
            chat_template=CHATML_GENERATION,
            tokenize=True,
            return_dict=True,
            return_assistant_tokens_mask=True,
        )
        assert ours.input_ids == list(theirs["input_ids"])
        assert ours.loss_mask == list(theirs["assistant_masks"])


def test_render_with_a_published_template_file(experiment: Path, tmp_path: Path) -> None:
    """The contract names Qwen2.5's published template; parallel tool results render as one
    untrained span and nothing is reported as rewritten (exit 0)."""
    folder = tmp_path / "exp"
    shutil.copytree(experiment, folder)
    shutil.copy(Path(__file__).parent / "templates" / "qwen2.5.jinja", folder / "qwen2.5.jinja")
    contract = folder / "experiment.rlvr.yaml"
    text = contract.read_text().replace("chat_template: native", "chat_template: qwen2.5.jinja")
    contract.write_text(text.replace("max_prompt_tokens: 512", "max_prompt_tokens: 1024"))
    call = {"type": "function", "function": {"name": "calc", "arguments": {"q": 1}}}
    conversation = {
        "messages": [
            {"role": "user", "content": "x and y?"},
            {"role": "assistant", "content": None, "tool_calls": [call, call]},
            {"role": "tool", "content": "1"},
            {"role": "tool", "content": "2"},
            {"role": "assistant", "content": "1 and 2"},
        ],
        "tools": [{"type": "function", "function": {"name": "calc", "parameters": {"type": "object"}}}],
    }
    (folder / "parallel.jsonl").write_text(json.dumps(conversation) + "\n")
    run = rlvr("render", contract, "-c", folder / "parallel.jsonl")
    assert run.code == 0, run.stdout + run.stderr
    assert "turns 2-3 from tool turn" in run.stdout and "error[" not in run.stdout
    data = rlvr("render", contract, "-c", folder / "parallel.jsonl", "--format", "json").json()[0]
    trained = "".join(t for t, m in zip(data["tokens"], data["loss_mask"], strict=True) if m)
    assert trained.endswith("1 and 2<|im_end|>") and "tool_response" not in trained
