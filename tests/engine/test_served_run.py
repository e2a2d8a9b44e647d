"""`rlvr train` with a served engine, end to end as a user runs it: the stand-in (vLLM's HTTP API
over the experiment's own tiny model) samples every rollout, receives the weights of every
optimizer step (its log-probs equal the trainer's at every step, and it ends holding the final
policy's weights), and when it starts answering wrongly mid-run the run stops with exit 1 and a
truthful `status.json`, keeping every finished step, then goes on with `--auto` once it is fixed."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.conftest import QUICK_STEPS, copy_experiment, rlvr, torchrun_launch
from tests.engine.standin import Running, StandIn

CONTRACT = "experiment.rlvr.yaml"
SAMPLING = "sampling: {temperature: 1.0, top_p: 1.0, top_k: 0}"
RATIO = "  ratio: {level: token, denominator: trainer_recomputed}\n"


def served_by(running: Running) -> list[tuple[str, str]]:
    """The contract's edits that sample from the stand-in (vLLM's API), over the trainer's log-probs."""
    server = f"server: {{url: '{running.url}', model: tiny-policy, timeout_s: 60, retries: 0}}"
    return [(SAMPLING, SAMPLING[:-1] + f", engine: vllm, {server}}}"), ("  aggregation:", RATIO + "  aggregation:")]


def _metrics(run: Path) -> list[dict]:
    return [json.loads(line) for line in (run / "metrics.jsonl").read_text().splitlines()]


@pytest.mark.slow
def test_a_run_samples_from_a_served_engine_and_stops_truthfully_when_it_lies(
    single_turn: Path, tmp_path: Path
) -> None:
    import torch
    from safetensors.torch import load_file

    experiment = copy_experiment(single_turn, tmp_path / "exp", QUICK_STEPS)
    running = Running(StandIn(experiment / "model", "tiny-policy", "vllm"))
    try:
        copy_experiment(experiment, tmp_path / "served", served_by(running))
        experiment = tmp_path / "served"
        run = experiment / "run"
        done = rlvr("train", experiment / CONTRACT, "--run-dir", run, "--max-steps", "3", timeout=300)
        assert done.code == 0, done.stderr[-2000:]
        plan = json.loads((run / "plan.json").read_text())
        assert plan["rollout_engine"].startswith(f"vllm standin server at {running.url} (model tiny-policy")
        rows = _metrics(run)
        assert [r["step"] for r in rows] == [0, 1, 2]
        assert all(r["engine_logprob_diff_max"] < 1e-4 for r in rows), rows  # it sampled from the current weights
        assert all(r["time_engine_weights_s"] > 0 for r in rows)
        standin = running.standin
        assert len(standin.loads) == 4  # the starting weights, then after each optimizer step
        final = load_file(run / "final" / "model.safetensors")
        held = standin.model.state_dict()
        assert all(torch.equal(held[name], tensor) for name, tensor in final.items())

        requests = standin.sampled
        running.standin.fault, running.standin.fault_after = "short_logprobs", requests + 32  # one step from now
        failed = rlvr("train", experiment / CONTRACT, "--run-dir", run, "--max-steps", "6", "--auto", timeout=300)
        assert failed.code == 1, failed.stderr[-2000:]
        assert "Traceback" not in failed.stderr and "returned 2 tokens with 1 log-probs" in failed.stderr
        status = json.loads((run / "status.json").read_text())
        assert status["state"] == "failed" and f"the vllm server at {running.url}" in status["reason"]
        assert "kept checkpoint step-4" in status["next"] and "--auto" in status["next"]
        assert [r["step"] for r in _metrics(run)] == [0, 1, 2, 3]  # every finished step kept

        running.standin.fault = None  # the server is fixed: the run goes on where it stopped
        again = rlvr("train", experiment / CONTRACT, "--run-dir", run, "--max-steps", "6", "--auto", timeout=300)
        assert again.code == 0, again.stderr[-2000:]
        assert [r["step"] for r in _metrics(run)] == [0, 1, 2, 3, 4, 5]
        assert json.loads((run / "status.json").read_text())["state"] == "finished"
    finally:
        running.stop()


@pytest.mark.slow
def test_processes_under_torchrun_sample_from_one_server_that_one_process_hands_the_weights(
    single_turn: Path, tmp_path: Path
) -> None:
    """Two sharded (fsdp2) processes with a served engine: each sends its share of the groups to
    the one server, and process 0 alone hands it the weights, written weight by weight as both
    gather them, the other waiting until the server holds them before it samples. The server's
    log-probs are the trainer's at every step, it loaded the weights once at the start and once
    a step, and it ends holding the final policy."""
    import os

    import pyarrow.parquet as pq
    import torch
    from safetensors.torch import load_file

    experiment = copy_experiment(single_turn, tmp_path / "exp", QUICK_STEPS)
    running = Running(StandIn(experiment / "model", "tiny-policy", "vllm"))
    try:
        edits = [*served_by(running), ("  precision: fp32\n", "  precision: fp32\n  parallel: {strategy: fsdp2}\n")]
        folder = copy_experiment(experiment, tmp_path / "sharded", edits)
        run = folder / "run"
        command = ["--standalone", "--nproc_per_node=2", "-m", "rlvr_cli", "train", str(folder / CONTRACT)]
        done = torchrun_launch(
            *command, "--run-dir", run, "--max-steps", "3", env={**os.environ, "OMP_NUM_THREADS": "1"}
        )
        assert done.returncode == 0, done.stderr[-3000:]
        rows = _metrics(run)
        assert [r["step"] for r in rows] == [0, 1, 2]
        assert all(r["engine_logprob_diff_max"] < 1e-4 for r in rows), rows  # every process: the current weights
        assert len(running.standin.loads) == 4  # the starting weights, then after each step: one process hands them
        records = [r for s in sorted((run / "records").glob("*.parquet")) for r in pq.read_table(s).to_pylist()]
        for step in range(3):  # both processes' shares, each group's samples once
            drawn = sorted((r["group"], r["sample"]) for r in records if r["step"] == step)
            assert drawn == [(g, j) for g in range(4) for j in range(8)]  # QUICK_STEPS: 4 prompts a step
        final, held = load_file(run / "final" / "model.safetensors"), running.standin.model.state_dict()
        assert all(torch.equal(held[name], tensor) for name, tensor in final.items())
        assert [p.name for p in (run / "engine_weights").iterdir()] == [Path(running.standin.path).name]
    finally:
        running.stop()


@pytest.mark.slow
@pytest.mark.parametrize("processes", [[], ["--nproc", "2"]], ids=["one-process", "torchrun-2"])
def test_a_served_engine_samples_the_next_step_during_the_update_and_gets_the_weights_after(
    single_turn: Path, tmp_path: Path, processes: list[str]
) -> None:
    """`sample_ahead` with a served engine: while the trainer updates step t, the server samples
    step t + 1 with the weights it holds (policy lag 1), and the trainer hands it the new weights
    only once that sampling has ended: every request is answered by the weights it came to, and
    each load falls between two steps' requests; under torchrun every process's sampling ends
    before process 0 hands the server the weights. A run stopped at step 2 resumes with the
    samples in flight the checkpoint holds (the server draws nothing for step 2; one process).
    Two steps ahead is refused: one revision is held."""
    import pyarrow.parquet as pq
    import torch
    from safetensors.torch import load_file

    experiment = copy_experiment(single_turn, tmp_path / "exp", QUICK_STEPS)
    running = Running(StandIn(experiment / "model", "tiny-policy", "vllm"))
    try:
        ahead = [*served_by(running), ("max_policy_lag: 0", "max_policy_lag: 1\n  sample_ahead: true")]
        folder = copy_experiment(experiment, tmp_path / "ahead", ahead)
        run, split = folder / "run", folder / "split"
        running.standin.slow = 0.3  # each batch outlasts the update: new weights arrive while it samples
        done = rlvr("train", folder / CONTRACT, *processes, "--run-dir", run, "--max-steps", "3", timeout=300)
        assert done.code == 0, done.stderr[-2000:]
        assert [r["policy_lag"] for r in _metrics(run)] == [0, 1, 1]
        standin = running.standin
        assert len(standin.loads) == 4  # the starting weights, then after each optimizer step
        assert all(came == answered for came, answered in standin.spans)  # no load during a request
        per_step = 4 * 8  # QUICK_STEPS: 4 prompts of 8 samples, one request each
        holdout = len((folder / "data" / "holdout.jsonl").read_text().splitlines())  # answered before step 0
        # the first load's weights sample the holdout, steps 0 and 1; each later one, the next step
        # (step 3's samples too: in flight when --max-steps stops the run, kept for a run that goes on)
        held = [came for came, _ in standin.spans]
        assert held == sorted(held) and [held.count(n) for n in (1, 2, 3)] == [holdout + 2 * per_step] + [per_step] * 2
        if processes:  # the resume path is one process's (tests/train: sampling ahead under torchrun)
            return
        first = rlvr("train", folder / CONTRACT, *processes, "--run-dir", split, "--max-steps", "2", timeout=300)
        assert first.code == 0, first.stderr[-2000:]
        in_flight = json.loads((split / "checkpoints" / "step-2" / "trainer.json").read_text())["ahead"]
        kept = sorted((s["group"], s["index"], s["response_ids"], s["sampling_logp"]) for s in in_flight[0]["samples"])
        asked = len(standin.spans)
        again = rlvr(
            "train", folder / CONTRACT, *processes, "--run-dir", split, "--max-steps", "3", "--resume", timeout=300
        )
        assert again.code == 0, again.stderr[-2000:]
        # step 2 trained what the checkpoint held; the server drew step 3's samples only (in flight at the end)
        assert len(standin.spans) - asked == per_step
        columns = ["step", "group", "sample", "response_ids", "sampling_logprobs", "policy_revision"]
        rows = [
            r
            for f in sorted((split / "records").glob("*.parquet"))
            for r in pq.read_table(f, columns=columns).to_pylist()
        ]
        trained = sorted(
            (r["group"], r["sample"], r["response_ids"], r["sampling_logprobs"]) for r in rows if r["step"] == 2
        )
        assert trained == kept and {r["policy_revision"] for r in rows if r["step"] == 2} == {1}
        final, now = load_file(split / "final" / "model.safetensors"), standin.model.state_dict()
        assert all(torch.equal(now[name], tensor) for name, tensor in final.items())  # handed the last weights
        deeper = folder / "deeper.rlvr.yaml"
        deeper.write_text((folder / CONTRACT).read_text().replace("max_policy_lag: 1", "max_policy_lag: 2"))
        refused = rlvr("validate", deeper)
        assert refused.code == 1 and "RLV010" in refused.stdout + refused.stderr
    finally:
        running.stop()


@pytest.mark.slow
def test_dynamic_sampling_over_two_processes_asks_one_server_for_each_round(single_turn: Path, tmp_path: Path) -> None:
    """DAPO's dynamic sampling under torchrun with a served engine: each round's groups go to the
    one server from every process, all from the weights it was handed at the step's start (one
    load a step), and the step keeps what the records hold."""
    import pyarrow.parquet as pq

    experiment = copy_experiment(single_turn, tmp_path / "exp", QUICK_STEPS)
    running = Running(StandIn(experiment / "model", "tiny-policy", "vllm"))
    try:
        dynamic = "  dynamic_sampling: {drop_uniform_groups: true, max_rounds: 3, log_by: [difficulty]}\n"
        edits = [*served_by(running), ("  padding_side: left\n", "  padding_side: left\n" + dynamic)]
        folder = copy_experiment(experiment, tmp_path / "dynamic", edits)
        run = folder / "run"
        done = rlvr("train", folder / CONTRACT, "--nproc", "2", "--run-dir", run, "--max-steps", "3", timeout=300)
        assert done.code == 0, done.stderr[-2000:]
        rows = _metrics(run)
        assert any(r["dynamic_sampling_rounds"] > 1 for r in rows), rows  # a second round asked the server
        standin = running.standin
        assert len(standin.loads) == 4 and all(came == answered for came, answered in standin.spans)
        records = [r for f in sorted((run / "records").glob("*.parquet")) for r in pq.read_table(f).to_pylist()]
        for r in rows:
            mine = [x for x in records if x["step"] == r["step"]]
            assert sorted({x["group"] for x in mine}) == list(range(int(r["groups_generated"])))
            assert {x["policy_revision"] for x in mine} == {r["step"]}  # every round: the step's weights
            assert sum(x["kept"] for x in mine) == r["samples_kept"] == 8 * r["groups_accepted"]
    finally:
        running.stop()
