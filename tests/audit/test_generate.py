"""`rlvr tasks generate` then `rlvr tasks review` through the CLI, against a stand-in generator
(a rule): 30 code tasks whose tests are built by running each reference solution in the sandbox;
a generator that goes down mid-run leaves the rows so far and a cursor, and the rerun asks only
what is left; a rerun from the cache asks nothing; the review finds each planted defect (a wrong
reference, tests no mutant fails, a leaked answer) and nothing in the sound tasks."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from rlvr_cli.env.agent import serve
from rlvr_cli.env.sandbox import problem
from tests.audit.generator_standin import make_app
from tests.conftest import rlvr

pytestmark = [
    pytest.mark.slow,  # 30 tasks generated, then reviewed with their mutants in the sandbox
    pytest.mark.skipif(problem() is not None, reason=f"needs a working bubblewrap: {problem()}"),
]
SPEC = """generator: {{url: "{url}", model: rule, temperature: 0.8, seed: 0, retries: 0, timeout_s: 30}}
kind: unit_tests
count: 30
examples: 2
id_prefix: gen
prompt: |
  Write one new Python programming task like these, as one JSON object with prompt, function,
  solution and inputs (argument lists):
  {{examples}}
"""


def spec_text(url: str, model: str, count: int, kind: str) -> str:
    """The spec against the stand-in at `url`, asking its `model` for `count` tasks of `kind`."""
    text = SPEC.format(url=f"{url}/v1").replace("model: rule", f"model: {model}")
    return text.replace("count: 30", f"count: {count}").replace("kind: unit_tests", f"kind: {kind}")


def test_generate_resume_cache_and_review(tmp_path: Path) -> None:
    code = tmp_path / "code"
    assert rlvr("init", code, "--template", "code", "--no-model").code == 0
    spec, out = tmp_path / "spec.yaml", tmp_path / "generated.jsonl"
    down = make_app(fail_after=12)
    with serve(down) as url:
        spec.write_text(SPEC.format(url=f"{url}/v1"))
        stopped = rlvr("tasks", "generate", code, spec, "--out", out, timeout=600)
    assert stopped.code == 3 and "answered HTTP 500" in stopped.stderr, stopped.stderr
    assert not out.exists() and json.loads(out.with_name(out.name + ".cursor").read_text())["next"] == 12
    healthy = make_app()
    with serve(healthy) as url:
        spec.write_text(SPEC.format(url=f"{url}/v1"))
        done = rlvr("tasks", "generate", code, spec, "--out", out, timeout=600)
        assert done.code == 0, done.stderr
        assert healthy.state.requests == 18  # only what was left
        again = rlvr("tasks", "generate", code, spec, "--out", tmp_path / "again.jsonl", timeout=600)
        assert again.code == 0 and healthy.state.requests == 18  # all 30 replies from the cache: nothing asked
    assert (tmp_path / "again.jsonl").read_text() == out.read_text()
    assert "resumed at request 12" in done.stdout and "2 repl(ies) skipped" in done.stdout  # of the 18 asked
    rows = [json.loads(line) for line in out.read_text().splitlines()]
    assert len(rows) == 27 and not out.with_name(out.name + ".partial").exists()
    assert {"generator", "prompt_sha256", "seed", "builder"} <= set(rows[0]["provenance"])
    shift = next(r for r in rows if r["id"] == "gen-00000")
    assert shift["tests"]["cases"][0] == {"args": [3, 2], "expected": 5}  # run, not claimed
    review = rlvr("tasks", "review", code, out, "--format", "json", timeout=900)
    assert review.code == 1, review.stderr
    found: dict[str, set] = {}
    for f in json.loads(review.stdout)["findings"]:
        found.setdefault(f["task"], set()).add(f["code"])
    for row in rows:
        seed = row["provenance"]["seed"]
        expected = {3: {"reference_fails"}, 5: {"no_discrimination", "trivial_passes"}, 7: {"leaked_answer"}}
        assert found.get(row["id"], set()) >= expected.get(seed % 10, set()), (row["id"], found.get(row["id"]))
        if seed % 10 not in expected:
            errors = {c for c in found.get(row["id"], set()) if c not in ("near_duplicate", "leaked_answer")}
            assert not errors, (row["id"], errors)


def test_answer_tasks_get_the_answer_their_program_prints(tmp_path: Path) -> None:
    code = tmp_path / "code"
    assert rlvr("init", code, "--template", "code", "--no-model").code == 0
    spec, out = tmp_path / "spec.yaml", tmp_path / "answers.jsonl"
    with serve(make_app()) as url:
        spec.write_text(spec_text(url, "answers", 4, "answer_check"))
        done = rlvr("tasks", "generate", code, spec, "--out", out, timeout=600)
    assert done.code == 0, done.stderr
    rows = [json.loads(line) for line in out.read_text().splitlines()]
    assert [(r["prompt"], r["answer"]) for r in rows] == [
        ("What is 11 times 3?", "33"),
        ("What is 12 times 3?", "36"),
        ("What is 14 times 3?", "42"),  # request 2's program printed nothing: skipped
    ]
    assert "request 2: its program printed no answer" in done.stderr


def test_tool_use_tasks_get_the_golden_path_their_solution_takes_on_the_server(tmp_path: Path) -> None:
    agent = tmp_path / "agent"
    assert rlvr("init", agent, "--template", "tool-use", "--no-model").code == 0
    spec, out = tmp_path / "spec.yaml", tmp_path / "tools.jsonl"
    with serve(make_app()) as url:
        spec.write_text(spec_text(url, "tools", 3, "tool_use"))
        done = rlvr("tasks", "generate", agent, spec, "--out", out, timeout=600)
    assert done.code == 0, done.stderr
    rows = [json.loads(line) for line in out.read_text().splitlines()]
    assert [r["id"] for r in rows] == ["gen-00000", "gen-00001"]  # request 2's solution does not solve it
    assert "request 2: its reference solution does not solve it" in done.stderr
    step = rows[0]["golden_path"][0]
    assert step["tool"] == "replace_in_file" and step["output"]  # replayed: the server's own output
    assert rows[0]["target"] == "config/app.toml" and rows[0]["expected_state"]
