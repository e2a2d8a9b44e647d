"""`holdout_nll` (monitoring.reference_answers): the policy's mean negative log-likelihood per
token of the holdout's reference responses, checked against transformers' own forward."""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest

from tests.conftest import copy_experiment, edit, rlvr

pytestmark = pytest.mark.slow  # trains: make test runs it, make test-fast does not

CONTRACT = "experiment.rlvr.yaml"


@pytest.fixture
def experiment(single_turn: Path, tmp_path: Path) -> Path:
    folder = copy_experiment(single_turn, tmp_path / "exp", [("holdout_every: 10", "holdout_every: 2")])
    holdout = folder / "data" / "holdout.jsonl"
    rows = [json.loads(line) for line in holdout.read_text().splitlines()]
    for row in rows:
        row["solution"] = f"{row['answer']}"  # the response a perfect policy writes
    holdout.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return folder


def nll_by_hand(model_dir: Path, holdout: Path) -> float:
    """Each prompt through the tokenizer's own chat template, the solution then <|im_end|>; one
    plain transformers forward per task."""
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(model_dir)
    model = AutoModelForCausalLM.from_pretrained(model_dir).eval()
    total, count = 0.0, 0
    for line in holdout.read_text().splitlines():
        task = json.loads(line)
        chat = [{"role": "user", "content": task["prompt"]}]
        prompt = tokenizer.apply_chat_template(chat, add_generation_prompt=True, tokenize=True, return_dict=False)
        end = tokenizer.convert_tokens_to_ids("<|im_end|>")
        response = [*tokenizer.encode(task["solution"], add_special_tokens=False), end]
        ids = torch.tensor([list(prompt) + response])
        with torch.no_grad():
            logp = torch.log_softmax(model(ids).logits[0, :-1].double(), dim=-1)
        targets = ids[0, 1:]
        picked = logp[torch.arange(len(targets)), targets][-len(response) :]
        total -= float(picked.sum())
        count += len(response)
    return total / count


def test_holdout_nll_is_the_reference_responses_mean_loss_per_token(experiment: Path, tmp_path: Path) -> None:
    edit(experiment, "  holdout_every: 2\n", "  holdout_every: 2\n  reference_answers: solution\n")
    run = tmp_path / "run"
    done = rlvr("train", experiment / CONTRACT, "--run-dir", run, "--max-steps", "4", timeout=300)
    assert done.code == 0, done.stderr[-2000:]
    start = json.loads((run / "holdout-start.json").read_text())["holdout_nll"]
    assert start == pytest.approx(nll_by_hand(experiment / "model", experiment / "data" / "holdout.jsonl"), rel=1e-5)
    rows = [json.loads(line) for line in (run / "metrics.jsonl").read_text().splitlines()]
    values = [r.get("holdout_nll") for r in rows]
    assert values[0] is None and values[2] is None  # holdout steps only
    assert all(isinstance(v, float) and math.isfinite(v) and v > 0 for v in (values[1], values[3]))
    assert values[3] != start  # the policy moved


def test_a_field_no_holdout_task_has_stops_the_run_before_it_starts(experiment: Path, tmp_path: Path) -> None:
    edit(experiment, "  holdout_every: 2\n", "  holdout_every: 2\n  reference_answers: worked_solution\n")
    done = rlvr("train", experiment / CONTRACT, "--run-dir", tmp_path / "run", "--max-steps", "2", timeout=300)
    assert done.code == 1
    assert "monitoring.reference_answers names 'worked_solution', which no holdout task has" in done.stderr
