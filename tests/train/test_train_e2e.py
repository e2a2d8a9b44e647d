"""`rlvr train` end to end on a tiny local model, as a user runs it."""

from __future__ import annotations

import hashlib
import itertools
import json
from pathlib import Path

import pytest

from rlvr_cli.metrics import METRICS
from tests.conftest import copy_experiment, edit, rlvr

pytestmark = pytest.mark.slow  # end-to-end runs: `make test` runs them, `make test-fast` does not

CONTRACT = "experiment.rlvr.yaml"


@pytest.fixture(scope="module")
def scaffold(single_turn: Path) -> Path:
    return single_turn


@pytest.fixture
def experiment(single_turn: Path, tmp_path: Path) -> Path:
    return copy_experiment(single_turn, tmp_path / "exp")


def metrics(run: Path) -> list[dict]:
    return [json.loads(line) for line in (run / "metrics.jsonl").read_text().splitlines()]


@pytest.fixture(scope="module")
def learned(scaffold: Path, tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, object]:
    """One shortened run of the shipped single-turn example, shared by the assertions below."""
    run_dir = tmp_path_factory.mktemp("run") / "r"
    result = rlvr("train", scaffold / CONTRACT, "--run-dir", run_dir, "--max-steps", "40", timeout=600)
    return run_dir, result


def test_mean_reward_rises(learned: tuple[Path, object]) -> None:
    run_dir, result = learned
    assert result.code == 0, result.stderr[-2000:]
    rows = metrics(run_dir)
    assert [r["step"] for r in rows] == list(range(40))
    first = sum(r["reward_mean"] for r in rows[:5]) / 5
    last = sum(r["reward_mean"] for r in rows[-10:]) / 10
    assert last > first + 0.05, (first, last)


def test_progress_shows_holdout_correctness_and_a_learning_run_is_not_called_signal_less(
    learned: tuple[Path, object],
) -> None:
    _, result = learned
    lines = [line for line in result.stderr.splitlines() if line.startswith("step ")]
    assert len(lines) == 40 and all(" tok/s  mfu " in line and "  ETA " in line for line in lines)
    # the held-out correctness before training is said once, then each line shows the newest
    # evaluation (not only the reward): step 0's until the first evaluation after step 10
    said = [line for line in result.stderr.splitlines() if line.startswith("holdout before training: correct ")]
    assert len(said) == 1 and said[0].endswith("(step 0)")
    assert "holdout correct" in lines[0] and "(step 0)" in lines[8] and "(step 10)" in lines[9]
    assert "no learning signal" not in result.stderr


def test_a_run_without_learning_signal_says_so_and_why(experiment: Path, tmp_path: Path) -> None:
    (experiment / "verifier.py").write_text(
        "from rlvr_cli.env import Verdict\n\n\ndef verify(task, response):\n"
        "    return Verdict('ok', 0.0, {'correct': 0.0, 'format': 0.0})\n"
    )
    run = rlvr("train", experiment / CONTRACT, "--run-dir", tmp_path / "run", "--max-steps", "4", timeout=600)
    assert run.code == 0, run.stderr[-2000:]
    said = [line for line in run.stderr.splitlines() if "no learning signal" in line]
    assert len(said) == 1 and "steps 1–3" in said[0] and "every answer got the lowest reward" in said[0]
    assert "too hard" in said[0] and "rlvr audit verifier" in said[0]


def test_run_folder_layout_and_status(learned: tuple[Path, object]) -> None:
    run_dir, result = learned
    for name in (
        "plan.json",
        "metrics.jsonl",
        "records/manifest.json",
        "final/config.json",
        "final/model.safetensors",
        "final/tokenizer.json",
        "status.json",
    ):
        assert (run_dir / name).is_file(), name
    status = json.loads((run_dir / "status.json").read_text())
    assert status["state"] == "finished" and status["step"] == 40
    plan = json.loads((run_dir / "plan.json").read_text())
    assert any("seq_mean_token_mean" in line for line in plan["objective"])
    assert plan["steps"] == {"contract_max_steps": 200, "this_run_max_steps": 40}
    assert "plan for" in result.stderr and "aggregation seq_mean_token_mean" in result.stderr
    assert "sampling: lean (rlvr" in result.stderr and "update forward: shared prompts" in result.stderr
    assert plan["update_forward"].startswith("shared prompts") and plan["rollout_engine"].startswith("lean")


def test_every_contract_metric_is_logged(learned: tuple[Path, object]) -> None:
    run_dir, _ = learned
    rows = metrics(run_dir)
    keys = set().union(*rows)
    # tests/train/test_hints.py, test_precision.py, test_overlap.py, test_holdout_nll.py, test_distributed.py,
    # test_engine_weights.py, tests/engine/test_served_run.py, test_off_policy_mask.py, test_rejection.py
    elsewhere = ("hints", "fp16", "sample_ahead", "reference_answers", "torchrun", "correction", "served")
    elsewhere += ("off_policy_mask", "rejection")
    missing = [m.name for m in METRICS if m.name not in keys and m.needs not in elsewhere]
    assert missing == []  # holdout metrics appear on holdout steps
    assert not any(m.name in keys for m in METRICS if m.needs in elsewhere)  # no hints, no fp16: none of theirs
    parts = ("time_generate_s", "time_score_s", "time_update_s", "time_records_s")
    assert all(k in rows[0] for k in (*parts, "tokens_per_s"))
    for r in rows:  # a step's wall time covers its parts, its records included
        assert r["step_seconds"] >= sum(r[k] for k in parts)
        assert r["tokens_per_s"] == pytest.approx(
            r["response_length_mean"] * r["groups_generated"] * 8 / r["step_seconds"]
        )
    holdout_steps = [r["step"] for r in rows if r.get("holdout_reward") is not None]
    assert holdout_steps == [9, 19, 29, 39]
    assert all(0.1 < r["memory_peak_gib"] < 16 for r in rows)  # the process's resident peak so far
    for before, after in itertools.pairwise(rows):  # between two rows: the step and what came between
        assert after["elapsed_s"] - before["elapsed_s"] >= after["step_seconds"]


def test_the_first_update_sees_a_ratio_of_exactly_one(learned: tuple[Path, object]) -> None:
    """Old log-probs come from the same forward, dtype and micro-batches as the update."""
    run_dir, _ = learned
    assert all(r["ratio_max"] == 1.0 and r["clip_fraction"] == 0.0 for r in metrics(run_dir))


def test_records_are_listed_with_checksums(learned: tuple[Path, object]) -> None:
    import pyarrow.parquet as pq

    run_dir, _ = learned
    manifest = json.loads((run_dir / "records" / "manifest.json").read_text())
    rows = 0
    for shard in manifest["shards"]:
        data = (run_dir / "records" / shard["file"]).read_bytes()
        assert hashlib.sha256(data).hexdigest() == shard["sha256"]
        rows += shard["rows"]
    assert rows == 40 * 64
    table = pq.read_table(run_dir / "records" / manifest["shards"][0]["file"]).to_pylist()
    row = table[0]
    for key in (
        "run",
        "step",
        "prompt_id",
        "group",
        "sample",
        "session_id",
        "policy_revision",
        "prompt_ids",
        "response_ids",
        "loss_mask",
        "old_logprobs",
        "sampling",
        "seed",
        "response_text",
        "finish_reason",
        "status",
        "reward",
        "components",
        "kept",
    ):
        assert key in row
    assert len(row["old_logprobs"]) == len(row["response_ids"]) == len(row["loss_mask"])
    import jsonschema

    from rlvr_cli.commands.schema import record_schema

    for record in table[:5]:
        jsonschema.validate(record, record_schema())
    assert row["finish_reason"] in ("stop", "length")


def test_final_policy_loads_with_from_pretrained(learned: tuple[Path, object]) -> None:
    from transformers import AutoModelForCausalLM, AutoTokenizer

    run_dir, _ = learned
    assert AutoModelForCausalLM.from_pretrained(run_dir / "final") is not None
    assert AutoTokenizer.from_pretrained(run_dir / "final").eos_token == "<|im_end|>"


def test_refuses_an_invalid_contract_and_an_existing_run(experiment: Path, learned: tuple[Path, object]) -> None:
    edit(experiment, "group_size: 8", "group_size: 1")
    run = rlvr("train", experiment / CONTRACT)
    assert run.code == 1 and "RLV301" in run.stderr and not (experiment / "runs").exists()
    run_dir, _ = learned
    edit(experiment, "group_size: 1", "group_size: 8")
    again = rlvr("train", experiment / CONTRACT, "--run-dir", run_dir)
    assert again.code == 2 and "already holds a run" in again.stderr and "Traceback" not in again.stderr


VERIFIERS = {
    "raises": "def verify(task, response):\n    raise ValueError('broken verifier')\n",
    "hangs": "import time\ndef verify(task, response):\n    time.sleep(60)\n",
    "garbage": "def verify(task, response):\n    return 42\n",
}


@pytest.mark.parametrize("kind", sorted(VERIFIERS))
def test_broken_verifiers_are_recorded_never_reward_zero(experiment: Path, kind: str) -> None:
    (experiment / "verifier.py").write_text(VERIFIERS[kind])
    edit(experiment, "timeout_s: 5", "timeout_s: 0.5")
    edit(experiment, "prompts_per_step: 8", "prompts_per_step: 1")
    edit(experiment, "group_size: 8", "group_size: 2")
    edit(experiment, "micro_batch_sequences: 16", "micro_batch_sequences: 2")
    run = rlvr("train", experiment / CONTRACT, "--max-steps", "1", timeout=300)
    # verifier-broken (error rate > 0.1 for 2 evaluations) has not fired after one step
    assert run.code == 0, run.stderr[-2000:]
    import pyarrow.parquet as pq

    records = pq.read_table(experiment / "runs" / "arith" / "records" / "shard-000000.parquet").to_pylist()
    expected = "timeout" if kind == "hangs" else "verifier_error"
    assert {r["status"] for r in records} == {expected}
    assert all(r["reward"] is None and not r["kept"] and r["discard_reason"] == expected for r in records)
    row = metrics(experiment / "runs" / "arith")[0]
    assert row["verifier_error_rate"] == 1.0


def test_on_invalid_fail_aborts_the_run(experiment: Path) -> None:
    (experiment / "verifier.py").write_text(VERIFIERS["raises"])
    edit(experiment, "on_invalid: exclude", "on_invalid: fail")
    run = rlvr("train", experiment / CONTRACT, "--max-steps", "1", timeout=300)
    assert run.code == 5, run.stderr[-2000:]
    status = json.loads((experiment / "runs" / "arith" / "status.json").read_text())
    assert status["state"] == "aborted" and "broken verifier" in status["reason"]


def test_tokenizer_without_the_stop_token_is_refused(experiment: Path) -> None:
    edit(experiment, 'stop_tokens: ["<|im_end|>"]', 'stop_tokens: ["<|eot_id|>", "<eos>"]')
    run = rlvr("train", experiment / CONTRACT, "--max-steps", "1")
    assert run.code == 1 and "'<eos>' is not a token of the tokenizer" in run.stderr
    assert "Traceback" not in run.stderr


def test_empty_dataset_is_refused(experiment: Path) -> None:
    (experiment / "data" / "train.jsonl").write_text("")
    run = rlvr("train", experiment / CONTRACT, "--max-steps", "1")
    assert run.code == 1 and "holds no task" in run.stderr


def test_dynamic_sampling_logs_acceptance_and_counts_discarded_generations(experiment: Path) -> None:
    from rlvr_cli.store.records import read_records

    edit(
        experiment,
        "  padding_side: left\n",
        "  padding_side: left\n  dynamic_sampling: {drop_uniform_groups: true, max_rounds: 3, log_by: [difficulty]}\n",
    )
    run = rlvr("train", experiment / CONTRACT, "--max-steps", "3", timeout=300)
    assert run.code == 0, run.stderr[-2000:]
    rows = metrics(experiment / "runs" / "arith")
    assert all(any(k.startswith("accept_rate/difficulty=") for k in r) for r in rows)
    records = read_records(experiment / "runs" / "arith" / "records").to_pylist()
    dropped = [r for r in records if r["discard_reason"] == "uniform_group"]
    generated = sum(r["groups_generated"] for r in rows)
    assert len(records) == generated * 8 and rows[-1]["total_rollouts"] == len(records)
    assert len(dropped) == sum(r["groups_generated"] - r["groups_accepted"] for r in rows) * 8


def test_kl_in_the_reward_keeps_the_first_ratio_at_one(experiment: Path) -> None:
    """With `kl.placement: reward` the old log-probs come from a separate forward before the
    advantages; same code, shapes and micro-batches, so the ratio is still exactly 1."""
    edit(
        experiment,
        "kl: {coef: 0.01, estimator: k3, placement: loss}",
        "kl: {coef: 0.05, estimator: k1, placement: reward}",
    )
    run = rlvr("train", experiment / CONTRACT, "--max-steps", "3", timeout=300)
    assert run.code == 0, run.stderr[-2000:]
    assert "subtracted from each response's reward" in run.stderr
    rows = metrics(experiment / "runs" / "arith")
    assert all(r["ratio_max"] == 1.0 for r in rows) and rows[-1]["kl"] > 0
