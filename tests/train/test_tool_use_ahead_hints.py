"""Tool-use contracts run what single-turn ones do: sampling ahead (the next step's episodes
played during the update, by a copy of the weights one step older) and hint-assisted episodes
(here the hint starts the first response: in the context, never trained, part of the text the
calls are parsed from). On the lookup template: the run trains, records the hints and the lag,
resumes after SIGKILL to the same weights and records as a straight run, and is gated."""

from __future__ import annotations

import json
import subprocess
import time
from pathlib import Path

import pytest

from tests.conftest import copy_experiment, kill_rlvr, rlvr, spawn_rlvr
from tests.train.test_lookup_learns import lookup  # noqa: F401  (the shared template fixture)

CONTRACT = "experiment.rlvr.yaml"
HINT = "<tool_call>"
HINTS = (
    "hints: {used: false}",
    "hints: {used: true, source: demonstrations, field: hint, leak_check: true, placement: response_prefix, "
    "share: 0.5, until_step: 10, advantage: subgroup}",
)
AHEAD = ("max_policy_lag: 0", "max_policy_lag: 1\n  sample_ahead: true")
RATIO = ("  aggregation: ", "  ratio: {level: token, denominator: engine}\n  aggregation: ")  # required when ahead


def _records(run: Path) -> list[dict]:
    """Every record row, without what measures time (verify seconds, the server's call times)."""
    import pyarrow.parquet as pq

    rows = []
    for shard in sorted((run / "records").glob("*.parquet")):
        for row in pq.read_table(shard).to_pylist():
            row.pop("verify_seconds")
            transcript = json.loads(row.pop("transcript"))
            for call in transcript.get("server_calls") or []:
                call.pop("time", None)
            rows.append({**row, "transcript": transcript})
    return rows


@pytest.fixture
def experiment(lookup: Path, tmp_path: Path) -> Path:  # noqa: F811
    exp = copy_experiment(
        lookup,
        tmp_path / "exp",
        [AHEAD, RATIO, HINTS, ("prompts_per_step: 8", "prompts_per_step: 4"), ("every_steps: 20", "every_steps: 1")],
    )
    train = exp / "data" / "train.jsonl"
    rows = [json.loads(line) for line in train.read_text().splitlines()]
    train.write_text("".join(json.dumps({**row, "hint": HINT}) + "\n" for row in rows))
    return exp


@pytest.mark.slow
def test_tool_use_samples_ahead_with_hints_resumes_exactly_and_is_gated(experiment: Path, tmp_path: Path) -> None:
    from rlvr_cli.store.run import complete_checkpoints

    contract = experiment / CONTRACT
    checked = rlvr("validate", contract)
    assert checked.code == 0, checked.stdout  # no RLV010: both run for tool_use
    straight = rlvr("train", contract, "--max-steps", "4", "--run-dir", tmp_path / "a", timeout=600)
    assert straight.code == 0, straight.stderr[-2000:]
    rows = _records(tmp_path / "a")
    lags = {r["step"]: r["policy_lag"] for r in rows if r["kept"]}
    assert lags[0] == 0 and all(lags[step] == 1 for step in (1, 2, 3))  # steps 1.. were sampled ahead
    hinted = [r for r in rows if r["hint"] is not None]
    assert hinted and all(r["hint"] == HINT and r["sample"] < 4 for r in hinted)  # the first half of each group
    assert all(r["transcript"]["turns"][0]["text"].startswith(HINT) for r in hinted)
    # the hint's tokens follow the unhinted prompt: in the context, never in the trained response
    plain = {(r["step"], r["group"]): r["prompt_ids"] for r in rows if r["hint"] is None}
    for r in hinted:
        base = plain[(r["step"], r["group"])]
        assert r["prompt_ids"][: len(base)] == base and len(r["prompt_ids"]) > len(base)
    metrics = [json.loads(line) for line in (tmp_path / "a" / "metrics.jsonl").read_text().splitlines()]
    assert metrics[0]["hint_share"] == 0.5 and metrics[-1]["hint_share"] < 0.5

    killed = tmp_path / "b"
    command = ["train", contract, "--max-steps", "4", "--run-dir", killed]
    proc = spawn_rlvr(*command, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    deadline = time.monotonic() + 300
    while len(complete_checkpoints(killed / "checkpoints")) < 2 and proc.poll() is None and time.monotonic() < deadline:
        time.sleep(0.02)
    assert proc.poll() is None, "the run ended before it could be killed"
    kill_rlvr(proc)  # with step 2's episodes in flight or drawn ahead
    resumed = rlvr("train", contract, "--max-steps", "4", "--run-dir", killed, "--resume", timeout=600)
    assert resumed.code == 0, resumed.stderr[-2000:]
    weights = lambda run: (run / "final" / "model.safetensors").read_bytes()  # noqa: E731
    assert weights(tmp_path / "a") == weights(killed)
    strip = lambda rs: [{k: v for k, v in r.items() if k != "run"} for r in rs]  # noqa: E731
    assert strip(_records(killed)) == strip(rows)

    gate = rlvr("gate", contract, "--candidate", tmp_path / "a", timeout=600)
    assert gate.code in (0, 1), gate.stderr[-2000:]
    verdict = json.loads((tmp_path / "a" / "gate" / "verdict.json").read_text())
    assert verdict["gates"] and all(g["name"] for g in verdict["gates"])
