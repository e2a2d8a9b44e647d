"""The tool-use example that learns, through the real CLI: `rlvr init --template lookup` builds
and warm-starts the tiny model, `rlvr train` runs episodes against the `lookup` server, and
the records show the tool-call rate rising and the final answers becoming correct; the gate
(greedy episodes on boxes never trained on) passes and the report is written. And tool-use
training under torchrun: two processes, a server each, every group's episodes recorded once."""

from __future__ import annotations

import json
import shutil
import subprocess
from pathlib import Path

import pyarrow.parquet as pq
import pytest
import torch
from safetensors.torch import load_file

from tests.conftest import built_once, rlvr, stopped_at_step_2


@pytest.fixture(scope="session")
def lookup(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """`rlvr init --template lookup` (the warm-up takes ~30 s), once for every test process."""

    def init(folder: Path) -> None:
        made = rlvr("init", folder, "--template", "lookup", timeout=600)
        assert made.code == 0, made.stderr
        # minutes of warm-up on a small machine are never silent: it says how far it is
        assert "warming it up" in made.stderr and made.stderr.count("  warm-up step ") >= 5, made.stderr

    return built_once(tmp_path_factory, "lookup-template", init)


def episodes_by_step(run_dir: Path) -> dict[int, list[dict]]:
    """Training episodes of each step: did the episode call the tool, was it correct."""
    steps: dict[int, list[dict]] = {}
    for shard in sorted((run_dir / "records").glob("*.parquet")):
        for row in pq.read_table(shard, columns=["step", "transcript", "components"]).to_pylist():
            transcript = row["transcript"]
            transcript = json.loads(transcript) if isinstance(transcript, str) else transcript
            components = row["components"]
            components = json.loads(components) if isinstance(components, str) else components
            steps.setdefault(row["step"], []).append({"called": transcript["calls"] > 0, **components})
    return steps


def rate(steps: dict[int, list[dict]], which: range, key: str) -> float:
    rows = [e for s in which for e in steps[s]]
    return sum(float(e[key]) for e in rows) / len(rows)


@pytest.mark.slow
def test_lookup_template_learns_to_call_the_tool_and_answer(lookup: Path, tmp_path: Path) -> None:
    folder, run_dir = tmp_path / "lookup", tmp_path / "run"
    shutil.copytree(lookup, folder)
    contract = folder / "experiment.rlvr.yaml"
    assert rlvr("validate", "--deep", "--strict", contract).code == 0
    done = rlvr("train", contract, "--run-dir", run_dir, "--max-steps", "30", timeout=600)
    assert done.code == 0, done.stderr[-2000:]

    steps = episodes_by_step(run_dir)
    first, last = range(0, 5), range(25, 30)
    called = rate(steps, first, "called"), rate(steps, last, "called")
    correct = rate(steps, first, "correct"), rate(steps, last, "correct")
    assert called[0] <= 0.8 and called[1] >= called[0] + 0.15, called
    # how far 30 steps get depends on the machine's float kernels (RL amplifies them): on a
    # 2-core Xeon with avx512_bf16, 0.21 → 0.39 (holdout 0.37 → 0.57); elsewhere it reached 0.8
    assert correct[0] <= 0.75 and correct[1] >= correct[0] + 0.15, correct
    # the reward is the server's: no episode is correct without having looked
    assert all(e["looked"] == 1.0 for s in steps.values() for e in s if e["correct"] == 1.0)

    rollouts = rlvr("audit", "rollouts", run_dir)
    assert rollouts.code == 0 and "calls per episode" in rollouts.stdout, rollouts.stdout
    share = float(rollouts.stdout.split(" of them with a call")[0].rsplit(" ", 1)[-1])
    assert share == pytest.approx(rate(steps, range(30), "called"), abs=1e-3)  # the share of episodes that called
    gate = rlvr("gate", contract, "--candidate", run_dir, timeout=300)
    verdict = json.loads((run_dir / "gate" / "verdict.json").read_text())
    assert gate.code in (0, 1) and verdict["release"] in ("pass", "fail"), gate.stdout
    # greedy answers on boxes never trained on do not get worse; whether they get better depends
    # on the warm start: 0.37 → 0.57 on one 2-core Xeon, 0.81 → 0.81 (paired gain 0.00 [−0.07,
    # +0.07]) on a 2-core Xeon with AMX, whose warm start already answers most boxes greedily
    gained = next(g for g in verdict["gates"] if g["name"] == "holdout-no-regression")
    assert gained["overall"]["delta"][0] >= -0.05, gained["overall"]
    # learned on them as it samples them (temperature 1, as trained): the paired gain over the
    # warm start is clearly positive (on the AMX Xeon 0.42 → 0.79, ci95 [0.30, 0.44])
    warm = folder / "model"
    paired = rlvr("audit", "rewards", contract, "--policy", warm, "--policy", run_dir, "--samples", "4", "-f", "json")
    assert paired.code == 0, paired.stderr[-2000:]
    gain = json.loads(paired.stdout)["difference_b_minus_a"]
    assert gain["ci95"][0] >= 0.1, gain
    report = rlvr("report", run_dir, "--out", tmp_path / "report.html")
    assert report.code == 0 and "holdout/correct" in (tmp_path / "report.html").read_text()


@pytest.mark.slow
def test_tool_use_trains_in_two_processes_with_a_server_each(lookup: Path, tmp_path: Path) -> None:
    folder, run_dir, split = tmp_path / "lookup", tmp_path / "run", tmp_path / "split"
    shutil.copytree(lookup, folder)
    contract = folder / "experiment.rlvr.yaml"
    contract.write_text(contract.read_text().replace("every_steps: 20", "every_steps: 2"))
    done = rlvr("train", contract, "--nproc", "2", "--run-dir", run_dir, "--max-steps", "3", timeout=600)
    assert done.code == 0, done.stderr[-3000:]
    first = rlvr("train", contract, "--nproc", "2", "--run-dir", split, "--max-steps", "2", timeout=600)
    resumed = rlvr("train", contract, "--nproc", "2", "--run-dir", split, "--max-steps", "3", "--resume", timeout=600)
    assert first.code == 0 and resumed.code == 0, resumed.stderr[-3000:]
    straight, again = (load_file(d / "final" / "model.safetensors") for d in (run_dir, split))
    assert all(torch.equal(straight[k], again[k]) for k in straight)  # resumed with the same N: exact
    assert "samples are those of" not in resumed.stderr, resumed.stderr[-3000:]
    plain = rlvr("train", contract, "--run-dir", split, "--max-steps", "4", "--resume", timeout=600)  # 2 → 1
    assert plain.code == 0, plain.stderr[-3000:]
    said = "resuming as one plain process from a checkpoint of 2 processes under torchrun"
    assert said in plain.stderr and "samples are those of one plain process" in plain.stderr, plain.stderr[-3000:]
    assert json.loads((run_dir / "plan.json").read_text())["processes"] == 2
    rows = []
    for shard in sorted((run_dir / "records").glob("*.parquet")):
        rows += pq.read_table(shard, columns=["step", "group", "sample", "transcript", "status"]).to_pylist()
    assert len(rows) == 3 * 8 * 8  # every rank's episodes, each once
    for step in range(3):
        groups = sorted((r["group"], r["sample"]) for r in rows if r["step"] == step)
        assert groups == [(g, j) for g in range(8) for j in range(8)]
    transcripts = [json.loads(r["transcript"]) if isinstance(r["transcript"], str) else r["transcript"] for r in rows]
    assert all(r["status"] == "ok" for r in rows) and any(t["calls"] for t in transcripts)
    assert all(t["verdict"]["status"] == "ok" for t in transcripts)
    servers = subprocess.run(["pgrep", "-f", f"rlvr_cli.env.child .* {folder}"], capture_output=True).stdout
    assert not servers, "a rank's server outlived the run"


@pytest.mark.slow
def test_dynamic_sampling_of_tool_use_episodes_over_two_processes_keeps_the_step_whole_and_resumes_exactly(
    lookup: Path, tmp_path: Path
) -> None:
    """DAPO's dynamic sampling of tool-use episodes under torchrun (each process's share seeded
    by its rank): every round's groups are numbered after the earlier rounds', each group asks
    one task and no task twice in a step, the groups kept are exactly those whose rewards
    differ (at most `prompts_per_step`), the metrics count what the records hold, and a run
    stopped at step 2 and resumed by two processes ends with the straight run's weights."""
    folder = tmp_path / "lookup"
    shutil.copytree(lookup, folder)
    contract = folder / "experiment.rlvr.yaml"
    text = contract.read_text().replace("every_steps: 20", "every_steps: 2")
    dynamic = "  dynamic_sampling: {drop_uniform_groups: true, max_rounds: 3, log_by: [domain]}\n"
    contract.write_text(text.replace("  on_truncated: keep\n", "  on_truncated: keep\n" + dynamic))
    straight = tmp_path / "run"
    done = rlvr("train", contract, "--nproc", "2", "--run-dir", straight, "--max-steps", "3", timeout=600)
    assert done.code == 0, done.stderr[-3000:]
    split = stopped_at_step_2(straight, tmp_path / "split")
    resumed = rlvr("train", contract, "--nproc", "2", "--run-dir", split, "--max-steps", "3", "--resume", timeout=600)
    assert resumed.code == 0, resumed.stderr[-3000:]
    weights = [load_file(d / "final" / "model.safetensors") for d in (straight, split)]
    assert all(torch.equal(weights[0][k], weights[1][k]) for k in weights[0])
    metrics = [json.loads(line) for line in (straight / "metrics.jsonl").read_text().splitlines()]
    columns = ["step", "round", "group", "prompt_id", "reward", "kept"]
    rows = [
        r
        for f in sorted((straight / "records").glob("*.parquet"))
        for r in pq.read_table(f, columns=columns).to_pylist()
    ]
    assert any(m["dynamic_sampling_rounds"] > 1 for m in metrics)  # the test reaches a second round
    for m in metrics:
        step = [r for r in rows if r["step"] == m["step"]]
        groups: dict[int, list[dict]] = {}
        for r in step:
            groups.setdefault(r["group"], []).append(r)
        assert sorted(groups) == list(range(len(groups))) == list(range(int(m["groups_generated"])))
        rounds = [g[0]["round"] for _, g in sorted(groups.items())]
        assert rounds == sorted(rounds) and len(set(rounds)) == m["dynamic_sampling_rounds"]
        tasks = [{r["prompt_id"] for r in g} for g in groups.values()]
        assert all(len(t) == 1 for t in tasks) and len(set.union(*tasks)) == len(tasks)  # no task twice
        kept = [g for g in groups.values() if all(r["kept"] for r in g)]
        assert all(len({r["reward"] for r in g}) > 1 for g in kept) and len(kept) <= 8
        assert len(kept) == m["groups_accepted"] and 8 * len(kept) == m["samples_kept"]
        assert m["accept_rate/domain=lookup"] == pytest.approx(len(kept) / len(groups))


@pytest.mark.slow
def test_tool_use_episodes_sampled_ahead_over_two_processes_resume_exactly_and_in_one_process(
    lookup: Path, tmp_path: Path
) -> None:
    """`sample_ahead` with tool-use episodes under torchrun: each process runs its share of the
    next step's episodes during the update. Stopped at step 2 and resumed by two processes, the
    run ends with the straight run's weights; resumed by one plain process, the episodes in
    flight at the checkpoint (the two processes') are the ones step 2 trains, so that step's
    metrics are the straight run's, and the run says the episodes after it are one process's."""
    folder = tmp_path / "lookup"
    shutil.copytree(lookup, folder)
    contract = folder / "experiment.rlvr.yaml"
    text = contract.read_text().replace("every_steps: 20", "every_steps: 2")
    text = text.replace("  max_policy_lag: 0\n", "  max_policy_lag: 1\n  sample_ahead: true\n")
    contract.write_text(text.replace("  aggregation:", "  ratio: {level: token, denominator: engine}\n  aggregation:"))
    straight = tmp_path / "run"
    done = rlvr("train", contract, "--nproc", "2", "--run-dir", straight, "--max-steps", "3", timeout=600)
    assert done.code == 0, done.stderr[-3000:]
    split, plain = (stopped_at_step_2(straight, tmp_path / name) for name in ("split", "plain"))
    resumed = rlvr("train", contract, "--nproc", "2", "--run-dir", split, "--max-steps", "3", "--resume", timeout=600)
    alone = rlvr("train", contract, "--run-dir", plain, "--max-steps", "3", "--resume", timeout=600)
    assert resumed.code == 0 and alone.code == 0, (resumed.stderr + alone.stderr)[-3000:]
    assert "samples are those of one plain process" in alone.stderr, alone.stderr[-3000:]
    weights = [load_file(d / "final" / "model.safetensors") for d in (straight, split)]
    assert all(torch.equal(weights[0][k], weights[1][k]) for k in weights[0])
    rows = {d: [json.loads(x) for x in (d / "metrics.jsonl").read_text().splitlines()] for d in (straight, plain)}
    assert [r["policy_lag"] for r in rows[straight]] == [0, 1, 1]
    keys = ["reward_mean", "response_length_mean", "total_rollouts"]
    assert [rows[plain][2][k] for k in keys] == [rows[straight][2][k] for k in keys]
