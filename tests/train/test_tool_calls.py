"""Tool calls as sampled: a call whose closing token is also the turn's stop token is a call; a
call whose result cannot fit the token budget left is not run (unless the environment says
`calls_without_room: execute`, and then the record says its result was never seen); the calls
of an episode's last model turn are parsed but not run, and its text before the call is the
final message verify receives; the records and `rlvr audit rollouts` count parsed and executed
calls apart."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from rlvr_cli.engine.types import Generation
from tests.conftest import rlvr
from tests.train.test_episodes import FIX, READ, Scripted, _setup, play


@pytest.fixture(scope="module")
def agent(tmp_path_factory: pytest.TempPathFactory) -> Path:
    folder = tmp_path_factory.mktemp("calls") / "agent"
    made = rlvr("init", folder, "--template", "tool-use")
    assert made.code == 0, made.stderr
    return folder


class EndsOnItsCall(Scripted):
    """Each turn's last token closes its call and is a stop token (as a model whose call turn
    ends on `</tool_call>` when that token stops the turn)."""

    def sample(self, prompts: list[list[int]], params: Any, seed: int) -> list[Generation]:
        turn, self.turn = self.turn, self.turn + 1
        out = []
        for r, _ in enumerate(prompts):
            script = self.scripts[r % len(self.scripts)]
            ids = self.tok.encode(script[min(turn, len(script) - 1)], add_special_tokens=False)
            out.append(Generation(ids, [1] * len(ids), "stop", seed, [-0.5] * len(ids)))
        return out


def test_a_call_that_ends_its_turn_on_a_stop_token_is_a_call(agent: Path) -> None:
    from rlvr_cli.engine.engines import PolicyEngine
    from rlvr_cli.env.tool_env import ToolEnv
    from rlvr_cli.rollout.base import Draw
    from rlvr_cli.rollout.tool_use import ToolUse

    setup = _setup(agent)
    closing = setup.tokenizer.encode(READ, add_special_tokens=False)[-1]  # the token that closes a call
    assert closing == setup.tokenizer.encode(FIX, add_special_tokens=False)[-1]
    setup.renderer.stop_ids = [*setup.renderer.stop_ids, closing]  # it also ends the turn
    task = next(t for t in setup.train_tasks if t["id"] == "edit-app-config")
    with ToolEnv(setup.contract, agent) as env:
        engine = PolicyEngine(EndsOnItsCall(setup, [[READ, FIX, "Set version to 2<|im_end|>"]]))
        (sample,) = ToolUse.of(setup.contract, setup.renderer, engine, env).sample([task], Draw(group_size=1, seed=1))
    turns = sample.transcript["turns"]
    assert [t["calls"] for t in turns[:2]] == [1, 1], turns  # the stop token closed each call: both are calls
    assert [c["tool"] for c in sample.transcript["server_calls"]] == ["read_file", "replace_in_file"]
    assert sample.transcript["executed_calls"] == 2 and sample.reward == 1.0


def test_a_call_with_no_room_for_its_result_is_not_run_unless_the_environment_says_so(agent: Path) -> None:
    setup = _setup(agent)
    call = len(setup.tokenizer.encode(READ, add_special_tokens=False)) + 1  # and its stop token
    setup = _setup(agent, budget=call + 2)  # room for the call, not for the template's tool-result glue
    task = next(t for t in setup.train_tasks if t["id"] == "edit-app-config")
    (skipped,), _ = play(setup, agent, task, [[READ, "Done."]])
    assert skipped.transcript["ended"] == "budget" and skipped.finish == "length"
    assert skipped.transcript["calls"] == 1 and skipped.transcript["executed_calls"] == 0
    [call] = skipped.transcript["turns"][0]["tool_calls"]
    assert call["executed"] is False and "no room" in call["why"] and call["output"] is None
    assert skipped.transcript["server_calls"] == []  # the server never ran it

    environment = setup.contract.environment.model_copy(update={"calls_without_room": "execute"})
    setup.contract = setup.contract.model_copy(update={"environment": environment})
    (executed,), _ = play(setup, agent, task, [[READ, "Done."]])
    assert executed.transcript["executed_calls"] == 1 and executed.transcript["ended"] == "budget"
    assert [c["tool"] for c in executed.transcript["server_calls"]] == ["read_file"]
    assert executed.transcript["turns"][0]["results_seen"] is False  # run for its effects, never read


def test_the_last_turns_calls_are_parsed_not_run_and_its_text_is_the_final_message(agent: Path) -> None:
    setup = _setup(agent, budget=4096)
    steps = setup.contract.environment.max_steps
    task = next(t for t in setup.train_tasks if t["id"] == "edit-app-config")
    (sample,), _ = play(setup, agent, task, [["Reading. " + READ]])  # reads every turn
    assert sample.transcript["ended"] == "max_steps"
    assert sample.transcript["calls"] == steps and sample.transcript["executed_calls"] == steps - 1
    assert sample.text == "Reading."  # what verify received as the final message
    last = sample.transcript["turns"][-1]["tool_calls"]
    assert [c["executed"] for c in last] == [False] and last[0]["why"] == "max_steps"


@pytest.mark.parametrize("field", ["max_tool_output_bytes", "calls_without_room", "tool_format"])
def test_a_tool_result_key_in_a_single_turn_contract_is_refused(tmp_path: Path, field: str) -> None:
    import yaml

    from rlvr_cli.contract.load import check_file
    from tests.conftest import EXAMPLES

    data = yaml.safe_load((EXAMPLES / "coverage" / "every-key.rlvr.yaml").read_text())
    assert data["environment"]["kind"] == "single_turn"
    data["environment"][field] = {"max_tool_output_bytes": 1024, "calls_without_room": "execute"}.get(field, "mistral")
    (tmp_path / "c.rlvr.yaml").write_text(yaml.safe_dump(data, sort_keys=False))
    found = [(d.code, d.path) for d in check_file(tmp_path / "c.rlvr.yaml").diagnostics if d.severity == "error"]
    assert found == [("RLV003", f"environment.{field}")]


MISTRAL_READ = '[TOOL_CALLS][{"name": "read_file", "arguments": {"path": "config/app.toml"}, "id": "r3adf1le0"}]'
MISTRAL_FIX = (
    '[TOOL_CALLS][{"name": "replace_in_file", "arguments": {"path": "config/app.toml", "old": "version = 1", '
    '"new": "version = 2"}, "id": "f1xvers10"}]'
)
# Qwen3 in thinking mode, each turn as its template renders it back (a think block, then the call)
QWEN3_READ = (
    '<think>\nRead it first.\n</think>\n\n<tool_call>\n{"name": "read_file", "arguments": {"path": "config/app.toml"}}'
    "\n</tool_call>"
)
QWEN3_FIX = (
    '<think>\nNow fix it.\n</think>\n\n<tool_call>\n{"name": "replace_in_file", "arguments": {"path": '
    '"config/app.toml", "old": "version = 1", "new": "version = 2"}}\n</tool_call>'
)
LLAMA_READ = '{"name": "read_file", "parameters": {"path": "config/app.toml"}}'
LLAMA_FIX = (
    '{"name": "replace_in_file", "parameters": {"path": "config/app.toml", "old": "version = 1", "new": "version = 2"}}'
)


GLM_READ = "\n<think>Read it first.</think>\n<tool_call>read_file\n<arg_key>path</arg_key>\n<arg_value>config/app.toml"
GLM_READ += "</arg_value>\n</tool_call>"
GLM_FIX = "\n<think></think>\n<tool_call>replace_in_file\n" + "".join(
    f"<arg_key>{k}</arg_key>\n<arg_value>{v}</arg_value>\n"
    for k, v in [("path", "config/app.toml"), ("old", "version = 1"), ("new", "version = 2")]
)
GLM_FIX += "</tool_call>"
QWEN_XML_READ = (
    "<tool_call>\n<function=read_file>\n<parameter=path>\nconfig/app.toml\n</parameter>\n</function>\n</tool_call>"
)
QWEN_XML_FIX = "I will fix it.\n<tool_call>\n<function=replace_in_file>\n" + "".join(
    f"<parameter={k}>\n{v}\n</parameter>\n"
    for k, v in [("path", "config/app.toml"), ("old", "version = 1"), ("new", "version = 2")]
)
QWEN_XML_FIX += "</function>\n</tool_call>"
GLM_SPECIALS = ["[gMASK]", "<sop>", "<|system|>", "<|user|>", "<|assistant|>", "<|observation|>", "<|endoftext|>"]


@pytest.mark.parametrize(
    ("template", "script", "glue"),
    [
        ("mistral-nemo.jinja", [MISTRAL_READ, MISTRAL_FIX, "Set version to 2."], "[TOOL_RESULTS]"),
        ("mistral-small-3.1.jinja", [MISTRAL_READ, MISTRAL_FIX, "Set version to 2."], "[TOOL_RESULTS]"),
        ("llama-3.1.jinja", [LLAMA_READ, LLAMA_FIX, "Set version to 2."], "ipython"),
        ("qwen3.jinja", [QWEN3_READ, QWEN3_FIX, "<think>\nDone.\n</think>\n\nSet version to 2."], "<tool_response>"),
        ("glm-4.6.jinja", [GLM_READ, GLM_FIX, "\n<think>Done.</think>\nSet version to 2."], "<tool_response>"),
        ("qwen3-coder.jinja", [QWEN_XML_READ, QWEN_XML_FIX, "Set version to 2."], "<tool_response>"),
    ],
)
def test_an_episode_in_another_familys_published_template_and_format(
    agent: Path, tmp_path: Path, template: str, script: list[str], glue: str
) -> None:
    """A whole episode through the family's own template: calls read in its format, results
    inserted by its template with mask 0, the next turn sampled, the task solved."""
    from rlvr_cli.chat.render import ChatRenderer
    from rlvr_cli.toy.tiny import build_tokenizer

    setup = _setup(agent)
    text = (Path(__file__).parents[1] / "chat" / "templates" / template).read_text()
    length = setup.contract.length.model_copy(update={"max_prompt_tokens": 8192})  # Llama's long tool preamble
    setup.contract = setup.contract.model_copy(update={"length": length})
    tokenizer, stops = setup.tokenizer, length.stop_tokens  # Mistral's template ends turns with the eos token
    if template.startswith("llama"):  # Llama's hard-codes its own special tokens: a tokenizer that has them
        tokenizer, stops = build_tokenizer(tmp_path / "llama3", "llama3"), ["<|eot_id|>"]
    if template.startswith("glm"):  # GLM's turns end on the next one's opening, which the policy writes
        tokenizer, stops = build_tokenizer(tmp_path / "glm", "chatml"), ["<|observation|>", "<|user|>"]
        tokenizer.add_special_tokens({"additional_special_tokens": GLM_SPECIALS})
    setup.renderer = ChatRenderer(tokenizer, text, stops, max_prompt_tokens=8192)
    task = next(t for t in setup.train_tasks if t["id"] == "edit-app-config")
    (sample,), _ = play(setup, agent, task, [script])
    assert sample.transcript["ended"] == "answer", [t.get("error") for t in sample.transcript["turns"]]
    assert sample.transcript["executed_calls"] == 2 and sample.reward == 1.0
    assert sample.text == "Set version to 2."  # what verify read: after Qwen3's reasoning, never the reasoning
    inserted = setup.tokenizer.decode([t for t, m in zip(sample.response_ids, sample.mask, strict=True) if m == 0])
    assert glue in inserted and "version = 1" in inserted  # the template's own glue around the tool's result
    if template.startswith("glm"):  # each call turn's sampled <|observation|> opened its results: never twice
        assert sample.transcript["server_calls"][1]["arguments"]["old"] == "version = 1"
        assert "<|observation|>" not in inserted  # every one in the episode is the policy's own, trained
    if template.startswith("mistral"):  # the ids the model wrote are the ones its results answer
        assert [i["call_id"] for i in sample.transcript["items"] if i["type"] == "function_call"] == [
            "r3adf1le0",
            "f1xvers10",
        ]


def test_a_call_the_template_refuses_ends_its_episode_not_the_run(agent: Path) -> None:
    """Model output is untrusted: Mistral's template raises on a call id that is not 9 letters
    and digits; the episode ends `template` with the template's reason and is verified as any."""
    from rlvr_cli.chat.render import ChatRenderer

    setup = _setup(agent)
    text = (Path(__file__).parents[1] / "chat" / "templates" / "mistral-nemo.jinja").read_text()
    setup.renderer = ChatRenderer(setup.tokenizer, text, setup.contract.length.stop_tokens, max_prompt_tokens=8192)
    length = setup.contract.length.model_copy(update={"max_prompt_tokens": 8192})
    setup.contract = setup.contract.model_copy(update={"length": length})
    task = next(t for t in setup.train_tasks if t["id"] == "edit-app-config")
    bad = MISTRAL_READ.replace("r3adf1le0", "x")
    (refused,), _ = play(setup, agent, task, [[bad, "Done."]])  # no exception: the run would go on
    assert refused.transcript["ended"] == "template" and refused.verdict is not None
    assert "9" in refused.transcript["turns"][0]["error"] and "refuses" in refused.transcript["turns"][0]["error"]


HARMONY_READ = ' to=functions.read_file<|channel|>commentary json<|message|>{"path": "config/app.toml"}<|call|>'
HARMONY_FIX = (
    ' to=functions.replace_in_file<|channel|>commentary json<|message|>{"path": "config/app.toml", "old": '
    '"version = 1", "new": "version = 2"}<|call|>'
)
HARMONY_SPECIALS = ["<|start|>", "<|channel|>", "<|message|>", "<|end|>", "<|call|>", "<|return|>", "<|constrain|>"]


class Harmony(Scripted):
    """gpt-oss's turns: a call ends on <|call|>, the final answer on <|return|> (each a stop token)."""

    def sample(self, prompts: list[list[int]], params: Any, seed: int) -> list[Generation]:
        turn, self.turn = self.turn, self.turn + 1
        script = self.scripts[0]
        ids = self.tok.encode(script[min(turn, len(script) - 1)], add_special_tokens=False)
        return [Generation(ids, [1] * len(ids), "stop", seed, [-0.5] * len(ids)) for _ in prompts]


def test_an_episode_in_gpt_oss_harmony_format(agent: Path, tmp_path: Path) -> None:
    from rlvr_cli.chat.render import ChatRenderer
    from rlvr_cli.engine.engines import PolicyEngine
    from rlvr_cli.env.tool_env import ToolEnv
    from rlvr_cli.rollout.base import Draw
    from rlvr_cli.rollout.tool_use import ToolUse
    from rlvr_cli.toy.tiny import build_tokenizer

    setup = _setup(agent)
    length = setup.contract.length.model_copy(update={"max_prompt_tokens": 8192})
    setup.contract = setup.contract.model_copy(update={"length": length})
    tokenizer = build_tokenizer(tmp_path / "harmony", "chatml")
    tokenizer.add_special_tokens({"additional_special_tokens": HARMONY_SPECIALS})  # gpt-oss's own, one id each
    text = (Path(__file__).parents[1] / "chat" / "templates" / "gpt-oss.jinja").read_text()
    setup.renderer = ChatRenderer(tokenizer, text, ["<|call|>", "<|return|>"], max_prompt_tokens=8192)
    assert setup.renderer.tool_format.name == "harmony"
    task = next(t for t in setup.train_tasks if t["id"] == "edit-app-config")
    final = "<|channel|>final<|message|>Set version to 2.<|return|>"
    with ToolEnv(setup.contract, agent) as env:
        engine = PolicyEngine(Harmony(setup, [[HARMONY_READ, HARMONY_FIX, final]]))
        (sample,) = ToolUse.of(setup.contract, setup.renderer, engine, env).sample([task], Draw(group_size=1, seed=1))
    assert sample.transcript["ended"] == "answer", [t.get("error") for t in sample.transcript["turns"]]
    assert sample.transcript["executed_calls"] == 2 and sample.reward == 1.0
    assert sample.text == "Set version to 2."  # the final channel is the final message
    inserted = tokenizer.decode([t for t, m in zip(sample.response_ids, sample.mask, strict=True) if m == 0])
    assert "<|start|>functions.read_file to=assistant<|channel|>commentary<|message|>" in inserted


def test_a_tool_outside_the_permitted_set_is_refused_and_never_reaches_the_server(agent: Path) -> None:
    """What a canary's allowlist does (rlvr release canary --allow-tools): the permitted tool runs,
    the other is answered with a refusal and has no effect on the environment."""
    from rlvr_cli.engine.engines import PolicyEngine
    from rlvr_cli.env.tool_env import ToolEnv
    from rlvr_cli.rollout.base import Draw
    from rlvr_cli.rollout.tool_use import ToolUse

    setup = _setup(agent)
    task = next(t for t in setup.train_tasks if t["id"] == "edit-app-config")
    with ToolEnv(setup.contract, agent) as env:
        env.permitted = {"read_file"}
        engine = PolicyEngine(Scripted(setup, [[READ, FIX, "Set version to 2"]]))
        (sample,) = ToolUse.of(setup.contract, setup.renderer, engine, env).sample([task], Draw(group_size=1, seed=1))
    calls = [c for t in sample.transcript["turns"] for c in t.get("tool_calls", [])]
    assert [c["name"] for c in calls] == ["read_file", "replace_in_file"]
    assert calls[1]["output"] == "error: tool 'replace_in_file' is not permitted here"
    assert [c["tool"] for c in sample.transcript["server_calls"]] == ["read_file"]  # the refused call never ran
    assert sample.reward == 0.0  # the file was not fixed
