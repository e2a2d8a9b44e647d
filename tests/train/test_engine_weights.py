"""The rollout engine samples from the weights its records name. With an engine that keeps its
own copy of the policy (as vLLM does; on CPU `RLVR_FAULT=engine_copy` gives the lean or the
transformers engine a copy only `load_weights` updates), every sample's sampling log-probs,
recorded beside the trainer's own log-probs of the same tokens under `policy_revision`, agree
to float precision at every step. The paired run whose engine never receives the weights
(`stale_engine`, the bug this guards against) disagrees from the first optimizer step on."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from tests.conftest import QUICK_STEPS, copy_experiment, rlvr

CONTRACT = "experiment.rlvr.yaml"


def _gaps(run: Path) -> dict[int, float]:
    """Per step: the largest |sampling log-prob − trainer log-prob| over every trained token."""
    import pyarrow.parquet as pq

    gaps: dict[int, float] = {}
    for shard in sorted((run / "records").glob("*.parquet")):
        for row in pq.read_table(shard).to_pylist():
            if row["kept"] and row["old_logprobs"]:
                assert row["sampling_logprobs"] is not None and len(row["sampling_logprobs"]) == len(
                    row["old_logprobs"]
                )
                gap = max(abs(a - b) for a, b in zip(row["sampling_logprobs"], row["old_logprobs"], strict=True))
                gaps[row["step"]] = max(gaps.get(row["step"], 0.0), gap)
    return gaps


def _train(experiment: Path, run: str, fault: str) -> Path:
    env = {**os.environ, "RLVR_FAULT": f"{fault}@0"}
    done = rlvr("train", experiment / CONTRACT, "--run-dir", experiment / run, "--max-steps", "4", env=env, timeout=300)
    assert done.code == 0, done.stderr[-2000:]
    return experiment / run


@pytest.mark.slow
@pytest.mark.parametrize("engine", ["lean", "transformers"])
def test_an_engine_with_its_own_weights_samples_from_the_revision_recorded(
    single_turn: Path, tmp_path: Path, engine: str
) -> None:
    sampling = "sampling: {temperature: 1.0, top_p: 1.0, top_k: 0}"
    edits = [*QUICK_STEPS, (sampling, sampling[:-1] + f", engine: {engine}}}")]
    experiment = copy_experiment(single_turn, tmp_path / "exp", edits)
    run = _train(experiment, "copy", "engine_copy")
    gaps = _gaps(run)
    assert sorted(gaps) == [0, 1, 2, 3]
    assert max(gaps.values()) < 1e-4, gaps
    rows = _metrics(run)  # the same comparison, every step, in the metrics
    assert all(r["engine_logprob_diff_max"] < 1e-4 and r["engine_mismatch_share"] == 0 for r in rows), rows
    assert [round(r["engine_logprob_diff_max"], 9) for r in rows] == [round(gaps[s], 9) for s in range(4)]


@pytest.mark.slow
def test_an_engine_left_with_the_initial_weights_is_caught_by_the_records(single_turn: Path, tmp_path: Path) -> None:
    experiment = copy_experiment(single_turn, tmp_path / "exp", QUICK_STEPS)
    gaps = _gaps(_train(experiment, "stale", "stale_engine"))
    assert gaps[0] < 1e-4  # step 0 samples from the initial weights, which are the trained ones
    assert all(gaps[step] > 1e-2 for step in (1, 2, 3)), gaps


def _metrics(run: Path) -> list[dict]:
    return [json.loads(line) for line in (run / "metrics.jsonl").read_text().splitlines()]


@pytest.mark.slow
def test_a_rule_on_the_engine_mismatch_pauses_a_run_whose_engine_drifts(single_turn: Path, tmp_path: Path) -> None:
    rule = "    - {name: engine-drift, metric: engine_logprob_diff_max, when: '> 0.01', window: 1, action: pause, "
    rule += "owner: a}\n"
    experiment = copy_experiment(single_turn, tmp_path / "exp", [*QUICK_STEPS, ("  rules:\n", "  rules:\n" + rule)])
    env = {**os.environ, "RLVR_FAULT": "stale_engine@0"}
    run = experiment / "stale"
    done = rlvr("train", experiment / CONTRACT, "--run-dir", run, "--max-steps", "4", env=env, timeout=300)
    assert done.code == 4, done.stderr[-2000:]  # paused by the rule
    status = json.loads((run / "status.json").read_text())
    assert status["rule"]["name"] == "engine-drift" and status["rule"]["step"] == 1  # step 0 shares the weights
    rows = _metrics(run)
    assert rows[0]["engine_logprob_diff_max"] < 1e-4 and rows[1]["engine_mismatch_share"] > 0.1
    calm = rlvr("train", experiment / CONTRACT, "--run-dir", experiment / "calm", "--max-steps", "3", timeout=300)
    assert calm.code == 0, calm.stderr[-2000:]  # the same rule on an engine given every update never fires


TRAINER = "  ratio: {level: token, denominator: trainer_recomputed}\n"
MIS = "  correction: {kind: mis, level: token, low: 0.67, high: 1.5}\n"


@pytest.mark.slow
def test_the_ratio_denominator_and_a_masked_correction_act_on_a_drifting_engine(
    single_turn: Path, tmp_path: Path
) -> None:
    """Over the trainer's own log-probs the first pass's ratio is exactly 1 whatever the engine
    did, and the masked correction cuts the tokens a stale engine drew too far from the policy;
    over the engine's log-probs the same drift shows in the ratio instead. A faithful engine has
    nothing cut."""
    corrected = [*QUICK_STEPS, ("  aggregation: ", TRAINER + MIS + "  aggregation: ")]
    experiment = copy_experiment(single_turn, tmp_path / "exp", corrected)
    stale = _metrics(_train(experiment, "stale", "stale_engine"))
    assert all(r["ratio_max"] == 1.0 for r in stale)  # updates_per_batch 1: π_old is the pass's own
    assert stale[0]["is_cut_share"] == 0 and abs(stale[0]["is_weight_mean"] - 1) < 1e-3  # the same weights
    assert max(r["is_cut_share"] for r in stale[1:]) > 0.05, stale
    faithful = _metrics(_train(experiment, "copy", "engine_copy"))
    assert all(r["is_cut_share"] == 0 and abs(r["is_weight_mean"] - 1) < 1e-3 for r in faithful), faithful
    over_engine = [*QUICK_STEPS, ("  aggregation: ", "  ratio: {level: token, denominator: engine}\n  aggregation: ")]
    experiment = copy_experiment(single_turn, tmp_path / "engine", over_engine)
    drifted = _metrics(_train(experiment, "stale", "stale_engine"))
    assert "is_cut_share" not in drifted[0]  # no correction asked for
    assert drifted[0]["ratio_max"] < 1.001 and max(r["ratio_max"] for r in drifted[1:]) > 1.1, drifted


def test_a_rule_on_the_engine_mismatch_is_refused_where_it_could_act_on_the_first_step_only(
    single_turn: Path, tmp_path: Path
) -> None:
    """Sampled ahead, every step after the first trains what older weights drew: the engine's and
    the trainer's log-probs are then of different weights and the run does not compare them, so a
    rule watching the comparison would watch one step (RLV604); sampling with the current weights,
    the same rule is valid."""
    rule = "    - {name: engine-drift, metric: engine_kl, when: '> 0.01', window: 1, action: pause, owner: a}\n"
    ahead = [
        ("max_policy_lag: 0", "max_policy_lag: 1\n  sample_ahead: true"),
        ("  aggregation: ", TRAINER + "  aggregation: "),
    ]
    for i, (edits, refused) in enumerate((([], False), (ahead, True))):
        experiment = copy_experiment(single_turn, tmp_path / f"e{i}", [*edits, ("  rules:\n", "  rules:\n" + rule)])
        done = rlvr("validate", experiment / CONTRACT)
        assert ("error[RLV604]" in done.stdout and "first step only" in done.stdout) == refused, done.stdout
        assert done.code == int(refused), done.stdout
