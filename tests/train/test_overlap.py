"""Sampling ahead within max_policy_lag (`hyperparameters.sample_ahead`): the next step's
groups are drawn during the update by the weights one step older, each sample's lag is
measured and recorded, the ratio is taken against the sampling log-probs, resume is exact
(the samples in flight are in the checkpoint), and validate refuses it without lag budget."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch
from safetensors.torch import load_file

from tests.conftest import QUICK_STEPS, copy_experiment, edit, rlvr

CONTRACT = "experiment.rlvr.yaml"
AHEAD = ("max_policy_lag: 0", "max_policy_lag: 1\n  sample_ahead: true")
RATIO = ("  aggregation: ", "  ratio: {level: token, denominator: engine}\n  aggregation: ")  # required when ahead


@pytest.fixture
def experiment(single_turn: Path, tmp_path: Path) -> Path:
    return copy_experiment(single_turn, tmp_path / "exp", [*QUICK_STEPS, AHEAD, RATIO])


def metrics(run: Path) -> list[dict]:
    return [json.loads(line) for line in (run / "metrics.jsonl").read_text().splitlines()]


@pytest.mark.slow
@pytest.mark.parametrize("lag", [1, 2])
def test_sampling_ahead_is_off_policy_by_its_lag_measured_and_resumes_exactly(experiment: Path, lag: int) -> None:
    """With max_policy_lag 2 two steps are in flight: step 2 trains on samples drawn by the
    weights step 0 started from."""
    import pyarrow.parquet as pq

    edit(experiment, "max_policy_lag: 1", f"max_policy_lag: {lag}")
    full, part = experiment / "full", experiment / "part"
    assert rlvr("train", experiment / CONTRACT, "--run-dir", full, "--max-steps", "6", timeout=300).code == 0
    rows = metrics(full)
    assert [r["policy_lag"] for r in rows] == [min(step, lag) for step in range(6)]  # step 0 samples its own
    assert any(r["ratio_max"] > 1.0 for r in rows[1:])  # the ratio is against the sampling log-probs
    assert "rollout_age_s" not in rows[0]  # step 0 samples its own
    for r in rows[1:]:  # the queue: how long the step waited for samples drawn ahead, how old they were
        assert 0 <= r["time_wait_rollouts_s"] <= r["time_generate_s"] and 0 < r["rollout_age_s"] < 300
    shard = sorted((full / "records").glob("*.parquet"))
    lags = {r["step"]: r["policy_lag"] for s in shard for r in pq.read_table(s).to_pylist() if r["kept"]}
    assert all(lags[step] == min(step, lag) for step in range(6)), lags
    plan = json.loads((full / "plan.json").read_text())
    assert plan["sample_ahead"] is True and plan["sample_ahead_steps"] == lag
    assert rlvr("train", experiment / CONTRACT, "--run-dir", part, "--max-steps", "3", timeout=300).code == 0
    resumed = rlvr("train", experiment / CONTRACT, "--run-dir", part, "--max-steps", "6", "--resume", timeout=300)
    assert resumed.code == 0, resumed.stderr[-2000:]
    a, b = load_file(full / "final" / "model.safetensors"), load_file(part / "final" / "model.safetensors")
    assert all(torch.equal(a[k], b[k]) for k in a)
    assert [(r["loss"], r["reward_mean"]) for r in metrics(full)] == [
        (r["loss"], r["reward_mean"]) for r in metrics(part)
    ]


def test_sampling_ahead_needs_lag_budget(experiment: Path) -> None:
    edit(experiment, "max_policy_lag: 1", "max_policy_lag: 0")
    refused = rlvr("validate", experiment / CONTRACT)
    assert refused.code == 1 and "RLV303" in refused.stdout and "sample_ahead" in refused.stdout


def test_sampling_ahead_needs_the_ratio_said(experiment: Path) -> None:
    assert rlvr("validate", experiment / CONTRACT).code == 0
    edit(experiment, RATIO[1], RATIO[0])
    refused = rlvr("validate", experiment / CONTRACT)
    assert refused.code == 1 and "error[RLV003] objective: missing required key 'ratio'" in refused.stdout
