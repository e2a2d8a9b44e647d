"""Reward profiling through `rlvr audit rewards`: local checkpoints and a stand-in
OpenAI-compatible endpoint (a rule) on the same tasks — pass@1 and pass@k per model, tasks no
model or every model solves, a weaker model beating a stronger one, the difficulty profile file —
and an endpoint that is down, slow, not JSON or short of choices stops the audit with a clear
message and writes nothing. The key comes from the environment and is written nowhere."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from rlvr_cli.env.agent import serve
from tests.audit.openai_standin import make_app
from tests.conftest import copy_experiment, rlvr

CONTRACT = "experiment.rlvr.yaml"
KEY = "sk-test-0123456789-never-written"


@pytest.fixture
def exp(single_turn: Path, tmp_path: Path) -> Path:
    return copy_experiment(single_turn, tmp_path / "exp")


def audit(exp: Path, *policies: str, more: tuple = ()) -> object:
    args = [a for p in policies for a in ("--policy", p)]
    env = {**__import__("os").environ, "OPENAI_API_KEY": KEY}
    return rlvr("audit", "rewards", exp / CONTRACT, *args, "--samples", "2", *more, timeout=600, env=env)


def another_policy(exp: Path) -> Path:
    """A second local checkpoint: the tiny model with its weights perturbed."""
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    model = AutoModelForCausalLM.from_pretrained(exp / "model")
    torch.manual_seed(0)
    with torch.no_grad():
        for weight in model.parameters():
            weight.add_(torch.randn_like(weight) * 0.05)
    model.save_pretrained(exp / "other")
    AutoTokenizer.from_pretrained(exp / "model").save_pretrained(exp / "other")
    return exp / "other"


def test_a_profile_of_local_policies_and_endpoints(exp: Path) -> None:
    holdout = exp / "data" / "holdout.jsonl"
    rows = [json.loads(line) for line in holdout.read_text().splitlines()]
    rows[0]["answer"] = "99"  # a broken reference: no model can be right
    holdout.write_text("".join(json.dumps(r) + "\n" for r in rows))
    other = another_policy(exp)
    app = make_app()
    with serve(app) as url:
        done = audit(
            exp,
            str(exp / "model"),
            str(other),  # two local policies, then the endpoints
            f"openai:wrong@{url}/v1",  # listed as stronger than the local model, weaker than the rule
            f"openai:sum@{url}/v1",
            more=("--format", "json", "--profile", str(exp / "profile.jsonl")),
        )
    assert done.code == 0, done.stderr[-2000:]
    result = json.loads(done.stdout)
    models = result["profile"]["models"]
    rule = models[f"openai:sum@{url}/v1"]
    items = result["items"]
    assert rule["pass@2"] == rule["pass@1"] == (items - 1) / items and rule["rewards"]["1.2"] == (items - 1) * 2
    assert models[f"openai:wrong@{url}/v1"]["pass@1"] == 0.0
    assert result["profile"]["unsolved"] == [rows[0]["id"]]  # too hard, or a broken verifier: found
    assert result["profile"]["solved_by_all"] == []
    assert (
        len(models) == 4 and result["profile"]["pairs"][2]["differ"]
    )  # the rule's rewards differ from the wrong one's
    profiled = [json.loads(line) for line in (exp / "profile.jsonl").read_text().splitlines()]
    assert len(profiled) == items and all(len(r["pass@1"]) == 4 for r in profiled)
    labels = {r["id"]: r["profile"] for r in profiled}
    assert labels.pop(rows[0]["id"]) == "unsolved" and set(labels.values()) <= {"hard", "medium", "easy"}
    assert all(k == f"Bearer {KEY}" for k in app.state.keys)  # the key went to the endpoint
    assert KEY not in done.stdout + done.stderr + (exp / "profile.jsonl").read_text()  # and nowhere else


def test_a_weaker_model_beating_a_stronger_one_is_flagged(exp: Path) -> None:
    with serve(make_app()) as url:
        done = audit(exp, f"openai:sum@{url}/v1", f"openai:wrong@{url}/v1", more=("--format", "json"))
    assert done.code == 0, done.stderr[-2000:]
    profile = json.loads(done.stdout)["profile"]
    assert len(profile["inversions"]) == profile["items"]  # every task: the "weaker" one is right
    text = rlvr("audit", "rewards", exp / CONTRACT, "--policy", str(exp / "model"), "--policy", str(exp / "model"))
    assert "NO DIFFERENCE" in text.stdout and "unsolved by every model" in text.stdout


@pytest.mark.parametrize(
    ("model", "message"),
    [
        ("slow", "did not answer within 1 s"),
        ("malformed", "not an OpenAI chat completion"),
        ("few", "answered 1 choices"),
    ],
)
def test_an_endpoint_that_misbehaves_stops_the_audit_and_writes_nothing(exp: Path, model: str, message: str) -> None:
    profile = exp / "profile.jsonl"
    with serve(make_app()) as url:
        done = audit(
            exp, f"openai:{model}@{url}/v1", f"openai:sum@{url}/v1", more=("--timeout", "1", "--profile", str(profile))
        )
    assert done.code == 3 and message in done.stderr, done.stderr[-2000:]
    assert "Traceback" not in done.stderr and not profile.exists()


def test_an_endpoint_that_is_down_or_misnamed(exp: Path) -> None:
    down = audit(exp, "openai:sum@http://127.0.0.1:9/v1", "openai:sum@http://127.0.0.1:9/v1", more=("--timeout", "2"))
    assert down.code == 3 and "cannot be reached" in down.stderr
    assert audit(exp, "openai:sum", "openai:sum").code == 2


def test_endpoints_are_profiled_on_a_tool_use_contract(tmp_path: Path) -> None:
    """Each sample is an episode against the resources server with the endpoint's function
    calling: the model that edits the file earns the reward, the one that only says so does not."""
    agent = tmp_path / "agent"
    assert rlvr("init", agent, "--template", "tool-use", "--no-model").code == 0
    app = make_app()
    with serve(app) as url:
        done = audit(agent, f"openai:talker@{url}/v1", f"openai:editor@{url}/v1", more=("--format", "json"))
    assert done.code == 0, done.stderr[-2000:]
    result = json.loads(done.stdout)
    models = result["profile"]["models"]
    assert models[f"openai:talker@{url}/v1"]["pass@1"] == 0.0 and models[f"openai:editor@{url}/v1"]["pass@1"] == 1.0
    assert result["profile"]["pairs"][0]["differ"]
    offered = ["delete_file", "list_files", "read_file", "replace_in_file", "write_file"]
    assert sorted(app.state.tools[0]) == offered  # the schemas training shows, the forbidden trap included
