"""`rlvr tasks review` on tool-use tasks: the golden paths `rlvr tasks generate` recorded are
replayed against the contract's resources server. Generated tasks pass; planted defects are each
found at their row — a path that does not solve its task, a state that is not the expected one,
a call that answers otherwise on a replay, a task solved before any call (already in its target
state), a path whose every call is redundant — and a row without a path is said."""

from __future__ import annotations

import json
from pathlib import Path

from rlvr_cli.env.agent import serve
from tests.audit.generator_standin import make_app
from tests.audit.test_generate import spec_text
from tests.conftest import rlvr


def test_golden_paths_are_replayed_and_planted_defects_found(tmp_path: Path) -> None:
    agent = tmp_path / "agent"
    assert rlvr("init", agent, "--template", "tool-use", "--no-model").code == 0
    spec, generated = tmp_path / "spec.yaml", tmp_path / "tools.jsonl"
    with serve(make_app()) as url:
        spec.write_text(spec_text(url, "tools", 2, "tool_use"))
        assert rlvr("tasks", "generate", agent, spec, "--out", generated, timeout=600).code == 0
    sound = [json.loads(line) for line in generated.read_text().splitlines()]
    clean = rlvr("tasks", "review", agent, generated, "--format", "json", timeout=300)
    assert clean.code == 0, clean.stdout + clean.stderr
    assert json.loads(clean.stdout)["findings"] == []  # the generated paths replay to the best reward

    base = sound[0]
    step = base["golden_path"][0]
    wrong = {**base, "id": "wrong-path", "golden_path": [{**step, "arguments": {**step["arguments"], "new": "v = 2"}}]}
    state = {**base, "id": "other-state", "expected_state": {"config/app.toml": "version = 2\n"}}
    drifted = {**base, "id": "drifted", "golden_path": [{**step, "output": "something else"}]}
    solved = {k: v for k, v in base.items() if k != "expected_state"} | {"id": "already-solved", "value": "1"}
    solved["golden_path"] = []  # the seed already holds version 1
    rewrite = {"tool": "write_file", "arguments": {"path": "config/app.toml", "content": _after(base)}}
    redundant = {**base, "id": "redundant", "golden_path": [{"tool": step["tool"], "arguments": step["arguments"]}]}
    redundant["golden_path"].append(rewrite)  # either call alone sets the version
    bare = {k: v for k, v in base.items() if k != "golden_path"} | {"id": "no-path"}
    planted = tmp_path / "planted.jsonl"
    planted.write_text("".join(json.dumps(r) + "\n" for r in (wrong, state, drifted, solved, redundant, bare)))
    done = rlvr("tasks", "review", agent, planted, "--format", "json", timeout=300)
    assert done.code == 1, done.stdout + done.stderr
    found = {(f["task"], f["code"]) for f in json.loads(done.stdout)["findings"]}
    assert found == {
        ("wrong-path", "reference_fails"),
        ("other-state", "reference_fails"),
        ("drifted", "not_reproducible"),
        ("already-solved", "trivial_passes"),
        ("redundant", "no_discrimination"),
        ("no-path", "no_reference"),
    }, found
    text = rlvr("tasks", "review", agent, planted, timeout=300)
    assert f"{planted}:4: error [trivial_passes] task already-solved: no call and an empty final message" in text.stdout


def _after(task: dict) -> str:
    """The target file's text after the golden path (from the recorded state, or the seed's file)."""
    from rlvr_cli.env.builtin.file_edit import seed_files

    return seed_files(task)[task["target"]].replace("version = 1", "version = 2")
