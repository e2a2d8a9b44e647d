"""Signals that mean what they say: the weights that sampled each record, the measured lag, the
verifier's identity, old log-probs for every sample, KL watched without a penalty, Dr. GRPO's
constant normaliser, and a shipped contract whose clip really acts."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
import torch

from rlvr_cli.files import sha256_file
from tests.conftest import ROOT, copy_experiment, edit, rlvr

CONTRACT = "experiment.rlvr.yaml"


@pytest.fixture
def experiment(single_turn: Path, tmp_path: Path) -> Path:
    edits = [("prompts_per_step: 8", "prompts_per_step: 4"), ("micro_batch_sequences: 16", "micro_batch_sequences: 8")]
    return copy_experiment(single_turn, tmp_path / "exp", edits)


def records(run: Path) -> list[dict]:
    import pyarrow.parquet as pq

    manifest = json.loads((run / "records" / "manifest.json").read_text())["shards"]
    return [r for s in manifest for r in pq.read_table(run / "records" / s["file"]).to_pylist()]


def metrics(run: Path) -> list[dict]:
    return [json.loads(line) for line in (run / "metrics.jsonl").read_text().splitlines()]


@pytest.mark.slow  # trains: make test runs it, make test-fast does not
def test_records_carry_the_sampling_weights_lag_verifier_and_old_logprobs(experiment: Path, tmp_path: Path) -> None:
    edit(experiment, "updates_per_batch: 1", "updates_per_batch: 2")
    edit(experiment, "max_policy_lag: 0", "max_policy_lag: 1")
    edit(experiment, "on_truncated: keep", "on_truncated: exclude")  # discarded samples, never trained
    run_dir = tmp_path / "run"
    done = rlvr("train", experiment / CONTRACT, "--run-dir", run_dir, "--max-steps", "3", timeout=300)
    assert done.code == 0, done.stderr[-2000:]
    rows = records(run_dir)
    for step in range(3):
        assert {r["policy_revision"] for r in rows if r["step"] == step} == {2 * step}  # the weights that sampled
    trained = [r for r in rows if r["kept"]]
    untrained = [r for r in rows if not r["kept"]]
    assert trained and untrained, "the test needs both trained and excluded samples"
    assert {r["policy_lag"] for r in trained} == {1} and {r["policy_lag"] for r in untrained} == {None}
    assert all(r["old_logprobs"] and len(r["old_logprobs"]) == len(r["response_ids"]) for r in rows)
    digest = sha256_file(experiment / "verifier.py")
    assert {r["verifier"] for r in rows} == {f"verifier:verify arith-1.0 sha256:{digest}"}
    assert [m["policy_lag"] for m in metrics(run_dir)] == [1.0, 1.0, 1.0]


@pytest.mark.slow  # trains: make test runs it, make test-fast does not
def test_kl_is_watched_without_a_penalty(experiment: Path, tmp_path: Path) -> None:
    edit(experiment, "kl: {coef: 0.01, estimator: k3, placement: loss}", "kl: {coef: 0}")
    checked = rlvr("validate", "--format", "json", experiment / CONTRACT)
    codes = [d["code"] for d in checked.json()["files"][0]["diagnostics"]]
    assert checked.code == 0 and "RLV604" not in codes and "RLV204" not in codes
    run_dir = tmp_path / "run"
    done = rlvr("train", experiment / CONTRACT, "--run-dir", run_dir, "--max-steps", "3", timeout=300)
    assert done.code == 0, done.stderr[-2000:]
    assert "measured with k3 for the monitoring rules" in done.stderr
    kl = [m["kl"] for m in metrics(run_dir)]
    assert kl[0] == 0.0 and kl[2] > 0.0  # the policy drifts from the reference; nothing penalises it


def test_a_reference_nobody_watches_is_still_loaded_for_nothing(experiment: Path) -> None:
    edit(experiment, "kl: {coef: 0.01, estimator: k3, placement: loss}", "kl: {coef: 0}")
    text = (experiment / CONTRACT).read_text()
    (experiment / CONTRACT).write_text("\n".join(x for x in text.splitlines() if "metric: kl," not in x) + "\n")
    checked = rlvr("validate", "--format", "json", experiment / CONTRACT)
    assert "RLV204" in [d["code"] for d in checked.json()["files"][0]["diagnostics"]]


def test_constant_norm_divides_by_a_constant_of_the_run() -> None:
    from rlvr_cli.contract.load import load
    from rlvr_cli.train.update import normalisers

    dr = load(ROOT / "contracts" / "dr-grpo-cpu.rlvr.yaml")
    grpo = load(ROOT / "contracts" / "grpo-cpu.rlvr.yaml")
    full = dr.hyperparameters.prompts_per_step * dr.hyperparameters.group_size
    assert normalisers(dr, 100.0, 37)["total_sequences"] == full  # 37 survived; the divisor does not move
    assert normalisers(dr, 100.0, full)["total_sequences"] == full
    assert normalisers(grpo, 100.0, 37)["total_sequences"] == 37


def test_clipped_tokens_get_no_gradient() -> None:
    from rlvr_cli.train.objective import clipped_surrogate

    ratio = torch.tensor([[0.5, 0.9, 1.0, 1.1, 1.5]], requires_grad=True)
    adv = torch.tensor([1.0])
    loss, clipped = clipped_surrogate(ratio, adv, 0.2, 0.2)
    loss.sum().backward()
    assert clipped.tolist() == [[False, False, False, False, True]]  # A > 0: only r > 1 + high is clipped
    assert ratio.grad is not None and ratio.grad[0, 4] == 0 and (ratio.grad[0, :4] != 0).all()


@pytest.mark.slow
@pytest.mark.slow  # trains: make test runs it, make test-fast does not
def test_the_shipped_dapo_contract_exercises_the_clip(tmp_path: Path) -> None:
    from rlvr_cli.toy.tiny import ARITHMETIC, build_tiny

    shutil.copytree(ROOT / "contracts" / "arith", tmp_path / "arith", ignore=shutil.ignore_patterns("model"))
    build_tiny(tmp_path / "arith" / "model", "chatml", alphabet=ARITHMETIC)
    shutil.copyfile(ROOT / "contracts" / "dapo-cpu.rlvr.yaml", tmp_path / "dapo-cpu.rlvr.yaml")
    run_dir = tmp_path / "run"
    done = rlvr("train", tmp_path / "dapo-cpu.rlvr.yaml", "--run-dir", run_dir, "--max-steps", "4", timeout=300)
    assert done.code == 0, done.stderr[-2000:]
    rows = metrics(run_dir)
    assert max(r["clip_fraction"] for r in rows) > 0 and max(r["ratio_max"] for r in rows) > 1.0
    assert {r["policy_lag"] for r in rows} == {1.0}


@pytest.mark.slow  # trains: make test runs it, make test-fast does not
def test_holdout_reward_excludes_invalid_verdicts(experiment: Path, tmp_path: Path) -> None:
    holdout = {json.loads(x)["id"] for x in (experiment / "data" / "holdout.jsonl").read_text().splitlines()}
    verifier = experiment / "verifier.py"
    guard = f"    if task['id'] in {sorted(holdout)!r}:\n        raise RuntimeError('holdout verifier down')\n"
    verifier.write_text(
        verifier.read_text().replace("    text = response.strip()", guard + "    text = response.strip()")
    )
    edit(experiment, "holdout_every: 10", "holdout_every: 1")
    run_dir = tmp_path / "run"
    done = rlvr("train", experiment / CONTRACT, "--run-dir", run_dir, "--max-steps", "2", timeout=300)
    assert done.code == 0, done.stderr[-2000:]
    assert [m["holdout_reward"] for m in metrics(run_dir)] == [None, None]  # no valid verdict: undefined, not 0
