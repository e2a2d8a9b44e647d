"""Tool-use rollouts (`rollout/tool_use.py`) on the tool-use template's file-editing
server and its chatml model: token in, token out (the sampled ids are trained as sampled, the
template's inserted ids carry mask 0 and re-rendering the finished transcript gives the same
ids), one verdict per episode from the server, the token budget across turns, and `rlvr train`
on a tool_use contract writing transcripts into the records."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from rlvr_cli.engine.types import Generation
from tests.conftest import kill_rlvr, rlvr, spawn_rlvr

CONTRACT = "experiment.rlvr.yaml"
READ = '<tool_call>{"name": "read_file", "arguments": {"path": "config/app.toml"}}</tool_call>'
FIX = (
    '<tool_call>{"name": "replace_in_file", "arguments": {"path": "config/app.toml", '
    '"old": "version = 1", "new": "version = 2"}}</tool_call>'
)
WRONG = (
    '<tool_call>{"name": "write_file", "arguments": {"path": "config/app.toml", "content": "version = 2"}}</tool_call>'
)


@pytest.fixture(scope="module")
def agent(tmp_path_factory: pytest.TempPathFactory) -> Path:
    folder = tmp_path_factory.mktemp("episodes") / "agent"
    made = rlvr("init", folder, "--template", "tool-use")
    assert made.code == 0, made.stderr
    return folder


class Scripted:
    """A stand-in rollout engine: row r of the batch gets turn t of script r (as token ids,
    then the stop token), so the episode machinery is tested on known outputs."""

    name = "scripted"

    def __init__(self, setup: Any, scripts: list[list[str]]) -> None:
        self.tok, self.stop, self.scripts, self.turn = setup.tokenizer, setup.renderer.stop_ids[0], scripts, 0

    def sample(self, prompts: list[list[int]], params: Any, seed: int) -> list[Generation]:
        turn, self.turn = self.turn, self.turn + 1
        out = []
        for r, _ in enumerate(prompts):
            script = self.scripts[r % len(self.scripts)]
            ids = [*self.tok.encode(script[min(turn, len(script) - 1)], add_special_tokens=False), self.stop]
            out.append(Generation(ids, [1] * len(ids), "stop", seed, [-0.5] * len(ids)))
        return out

    def load_weights(self, model: Any) -> None:
        pass

    def describe(self) -> str:
        return "scripted"


def play(setup: Any, folder: Path, task: dict, scripts: list[list[str]], monkeypatch: Any = None) -> tuple[list, list]:
    """One episode per script of `task`, against the contract's server: (samples, tool schemas)."""
    from rlvr_cli.engine.engines import PolicyEngine
    from rlvr_cli.env.tool_env import ToolEnv
    from rlvr_cli.rollout.base import Draw
    from rlvr_cli.rollout.tool_use import ToolUse

    with ToolEnv(setup.contract, folder) as env:
        rollout = ToolUse.of(setup.contract, setup.renderer, PolicyEngine(Scripted(setup, scripts)), env)
        return rollout.sample([task], Draw(group_size=len(scripts), seed=1)), env.schemas


def _setup(agent: Path, budget: int = 1024) -> Any:
    """The run's set-up, with room for the scripted episodes (the model's tokens are characters)."""
    from rlvr_cli.contract.load import load
    from rlvr_cli.train.faults import Fault
    from rlvr_cli.train.setup import build

    contract = load(agent / CONTRACT)
    length = contract.length.model_copy(update={"max_response_tokens": budget})
    setup = build(contract, agent, Fault.none())
    setup.contract = contract.model_copy(update={"length": length})
    return setup


def test_episodes_train_the_ids_they_sampled_and_are_judged_by_the_server(
    agent: Path, monkeypatch: pytest.MonkeyPatch
) -> None:

    setup = _setup(agent)
    task = next(t for t in setup.train_tasks if t["id"] == "edit-app-config")
    scripts = [[READ, FIX, "Set version to 2."], [WRONG, "Done."]]
    (right, wrong), schemas = play(setup, agent, task, scripts, monkeypatch)
    assert right.reward == 1.0 and wrong.reward == 0.0, (right.verdict, wrong.verdict)
    assert right.transcript["ended"] == "answer" and right.transcript["calls"] == 2
    assert right.text == "Set version to 2."
    logged = right.transcript["server_calls"]  # the server's own log, beside the client's view
    assert [c["tool"] for c in logged] == ["read_file", "replace_in_file"] and "version = 1" in logged[0]["output"]
    # token in, token out: sampled spans are exactly the scripted ids, mask 1; the rest mask 0
    tok, stop = setup.tokenizer, setup.renderer.stop_ids[0]
    for turn, text in zip(right.transcript["turns"], scripts[0], strict=True):
        a, b = turn["sampled"]
        assert right.response_ids[a:b] == [*tok.encode(text, add_special_tokens=False), stop]
        assert set(right.mask[a:b]) == {1}
    inserted = [i for i, m in enumerate(right.mask) if m == 0]
    assert inserted and all(right.sampling_logp[i] == 0.0 for i in inserted)
    assert "version = 1" in tok.decode([right.response_ids[i] for i in inserted])  # the tool's output
    # where the template is stable, re-rendering the whole transcript gives the very same ids
    from rlvr_cli.env.model import to_chat

    messages = [{"role": "user", "content": task["prompt"]}, *to_chat(right.transcript["items"])]
    text = setup.renderer.compiled.text(messages, schemas, False)
    rerendered = setup.renderer.encode(text)[0]
    assert rerendered[: len(right.prompt_ids) + len(right.response_ids)] == right.prompt_ids + right.response_ids


def test_the_token_budget_counts_every_turn(agent: Path, monkeypatch: pytest.MonkeyPatch) -> None:

    setup = _setup(agent, budget=300)
    budget = setup.contract.length.max_response_tokens
    task = setup.train_tasks[0]
    (sample,), _ = play(setup, agent, task, [[READ]], monkeypatch)  # reads forever
    ended = sample.transcript["ended"]
    assert ended in ("budget", "max_steps")
    assert len(sample.response_ids) <= budget
    if ended == "budget":
        assert sample.finish == "length" and sample.verdict is not None  # on_truncated: keep
    else:
        assert sample.transcript["calls"] == setup.contract.environment.max_steps


@pytest.mark.slow
def test_rlvr_train_gate_and_reward_audit_run_a_tool_use_contract(agent: Path) -> None:
    run = rlvr("train", agent / CONTRACT, "--max-steps", "1", "--run-dir", agent / "run", timeout=600)
    assert run.code == 0, run.stderr[-2000:]
    from rlvr_cli.store.records import read_records

    rows = read_records(agent / "run" / "records").to_pylist()
    assert rows and all(r["transcript"] for r in rows)
    transcript = json.loads(rows[0]["transcript"])
    assert {"items", "turns", "ended", "calls", "verdict"} <= set(transcript)
    assert all(r["status"] in (None, "ok", "format_error", "verifier_error") for r in rows)
    rollouts = rlvr("audit", "rollouts", agent / "run", "--format", "json")
    assert rollouts.code == 0, rollouts.stderr[-2000:]
    signals = rollouts.json()["tool_use"]
    assert signals["episodes"] == len(rows) and sum(signals["ended"].values()) == len(rows)
    assert "tool use:" in rlvr("audit", "rollouts", agent / "run").stdout
    # after the run: the release gate and the reward audit play greedy / sampled episodes, paired by task
    gate = rlvr("gate", agent / CONTRACT, "--candidate", agent / "run", timeout=600)
    assert gate.code in (0, 1), gate.stderr[-2000:]
    verdict = json.loads((agent / "run" / "gate" / "verdict.json").read_text())
    assert verdict["gates"] and all(g["name"] for g in verdict["gates"])
    audit = rlvr(
        "audit", "rewards", agent / CONTRACT, "--policy", agent / "model", "--policy", agent / "run", timeout=600
    )
    assert audit.code in (0, 1), audit.stderr[-2000:]


@pytest.mark.slow
def test_a_tool_use_run_killed_mid_episode_resumes_to_the_same_policy(agent: Path, tmp_path: Path) -> None:
    """SIGKILL while step 2's episodes are in flight: the resumed run redoes those episodes
    (none is half-counted) and ends with the very weights of an uninterrupted run."""
    import subprocess
    import time

    from rlvr_cli.store.run import complete_checkpoints
    from tests.conftest import copy_experiment

    exp = copy_experiment(
        agent,
        tmp_path / "exp",
        [("every_steps: 10", "every_steps: 1"), ("max_response_tokens: 256", "max_response_tokens: 96")],
    )
    contract = exp / CONTRACT
    straight = rlvr("train", contract, "--max-steps", "3", "--run-dir", tmp_path / "a", timeout=600)
    assert straight.code == 0, straight.stderr[-2000:]
    killed = tmp_path / "b"
    command = ["train", contract, "--max-steps", "3", "--run-dir", killed]
    proc = spawn_rlvr(*command, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    deadline = time.monotonic() + 300
    while not complete_checkpoints(killed / "checkpoints") and proc.poll() is None and time.monotonic() < deadline:
        time.sleep(0.02)
    time.sleep(0.2)  # into step 2: its episodes are being played
    assert proc.poll() is None, "the run ended before it could be killed"
    kill_rlvr(proc)
    # the resources server ran in a child process: it goes with the trainer, even on SIGKILL
    orphans = lambda: subprocess.run(["pgrep", "-f", f"rlvr_cli.env.child .* {exp}"], capture_output=True).stdout  # noqa: E731
    for _ in range(100):
        if not orphans():
            break
        time.sleep(0.1)
    assert not orphans(), "the server outlived the trainer"
    resumed = rlvr("train", contract, "--max-steps", "3", "--run-dir", killed, "--resume", timeout=600)
    assert resumed.code == 0, resumed.stderr[-2000:]
    weights = lambda run: (run / "final" / "model.safetensors").read_bytes()  # noqa: E731
    assert weights(tmp_path / "a") == weights(killed)
    from rlvr_cli.store.records import read_records

    rows = lambda run: sorted(  # noqa: E731
        (r["step"], r["group"], r["sample"], tuple(r["response_ids"]), r["reward"])
        for r in read_records(run / "records").to_pylist()
    )
    assert rows(tmp_path / "a") == rows(killed)  # every episode recorded once, as in the straight run


def test_validate_refuses_what_tool_use_training_would_ignore(agent: Path, tmp_path: Path) -> None:
    from tests.conftest import copy_experiment

    per_response = copy_experiment(agent, tmp_path / "a", [("unit: session", "unit: response")])
    found = rlvr("validate", per_response / CONTRACT)
    assert found.code == 1 and "RLV203" in found.stdout and "one reward" in found.stdout
    assert rlvr("validate", agent / CONTRACT).code == 0


def test_a_golden_path_is_part_of_the_episode_reward_in_training(
    agent: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Trajectory matching in training: the right state by the golden path earns the reward; the
    same state reached without the required read earns nothing (state AND path)."""
    from tests.conftest import copy_experiment

    exp = copy_experiment(agent, tmp_path / "exp")
    golden = {
        "order": "strict",
        "calls": [{"tool": "read_file", "args": {"path": {"exact": "config/app.toml"}}}, {"tool": "replace_in_file"}],
    }
    rows = [json.loads(line) for line in (exp / "data" / "train.jsonl").read_text().splitlines()]
    rows = [{**r, "trajectory": golden} if r["id"] == "edit-app-config" else r for r in rows]
    (exp / "data" / "train.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    setup = _setup(exp)
    task = next(t for t in setup.train_tasks if t["id"] == "edit-app-config")
    scripts = [[READ, FIX, "Set version to 2."], [FIX, "Set version to 2."]]
    (on_path, off_path), _ = play(setup, exp, task, scripts, monkeypatch)
    assert on_path.reward == 1.0 and on_path.verdict.components["path"] == 1.0, on_path.verdict
    assert off_path.reward == 0.0 and off_path.verdict.components["path"] == 0.0, off_path.verdict
    assert "read_file" in (off_path.verdict.detail or "")  # the state was right: the missing read failed it


def test_a_prompt_over_its_budget_is_an_error_or_its_last_tokens_as_the_contract_says() -> None:
    from types import SimpleNamespace

    from rlvr_cli.contract.tasks import fit_prompt
    from rlvr_cli.errors import RlvrError

    strict = SimpleNamespace(max_prompt_tokens=3, prompt_truncation="error")
    assert fit_prompt(strict, {"id": "t"}, [1, 2, 3]) == [1, 2, 3]
    with pytest.raises(RlvrError, match="task t: the prompt with the tool schemas is 5 tokens"):
        fit_prompt(strict, {"id": "t"}, [1, 2, 3, 4, 5], "the prompt with the tool schemas")
    assert fit_prompt(SimpleNamespace(max_prompt_tokens=3, prompt_truncation="left"), {"id": "t"}, [1, 2, 3, 4, 5]) == [
        3,
        4,
        5,
    ]


def test_a_hinted_episode_carries_its_hint_in_the_prompt_and_the_turns_still_continue(agent: Path) -> None:
    """Hints on the file-editing server (`placement: prompt`): the hinted half of the group sees
    the hint in its last user message, the other half does not, and both episodes play through
    the server's tools to a verdict, token in, token out."""
    from rlvr_cli.contract.data_section import Hints
    from rlvr_cli.engine.engines import PolicyEngine
    from rlvr_cli.env.tool_env import ToolEnv
    from rlvr_cli.rollout.base import Draw
    from rlvr_cli.rollout.tool_use import ToolUse

    setup = _setup(agent)
    hints = Hints(
        used=True,
        source="solutions",
        field="hint",
        leak_check=True,
        placement="prompt",
        share=0.5,
        until_step=5,
        advantage="subgroup",
    )
    setup.contract = setup.contract.model_copy(update={"data": setup.contract.data.model_copy(update={"hints": hints})})
    task = {**setup.train_tasks[0], "hint": "bump the version in config/app.toml"}
    with ToolEnv(setup.contract, agent) as env:
        rollout = ToolUse.of(setup.contract, setup.renderer, PolicyEngine(Scripted(setup, [[READ, FIX, "done"]])), env)
        hinted, plain = rollout.sample([task], Draw(group_size=2, seed=1, hinted=1))
    decode = lambda ids: setup.tokenizer.decode(ids)  # noqa: E731
    assert hinted.hint == task["hint"] and plain.hint is None
    assert "Hint: bump the version" in decode(hinted.prompt_ids) and "Hint:" not in decode(plain.prompt_ids)
    for sample in (hinted, plain):
        assert [t["calls"] for t in sample.transcript["turns"]] == [1, 1, 0]
        assert sample.verdict is not None and sample.verdict.valid and sample.reward == 1.0
