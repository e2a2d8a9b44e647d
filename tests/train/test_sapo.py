"""`objective.clip.kind: sapo` through `rlvr train` and `rlvr validate`: the loss a run reports
is SAPO's soft gate on its recorded advantages, each by the temperature of its advantage's sign
(PPO's surrogate gives another number on the same step), and what SAPO does not have — a clip
range, a clip fraction to watch — is refused."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.conftest import copy_experiment, rlvr

CLIP = "clip: {low: 0.2, high: 0.2}"
SAPO = "clip: {kind: sapo, temperature: {positive: 1.0, negative: 2.0}}"


def test_a_run_reports_sapos_loss_on_its_recorded_advantages(single_turn: Path, tmp_path: Path) -> None:
    """On the first step the ratio is 1, where the gate is 2/τ: each answer's loss is −A·2/τ(A),
    averaged over the answers (seq_mean_token_mean), with τ 1 for A > 0 and 2 elsewhere."""
    import pyarrow.parquet as pq

    exp = copy_experiment(single_turn, tmp_path / "exp", [(CLIP, SAPO)])
    done = rlvr("train", exp / "experiment.rlvr.yaml", "--max-steps", "1", "--run-dir", tmp_path / "run", timeout=600)
    assert done.code == 0, done.stderr[-3000:]
    metrics = [json.loads(line) for line in (tmp_path / "run" / "metrics.jsonl").read_text().splitlines()]
    step = next(m for m in metrics if "pg_loss" in m)
    rows = [r for f in sorted((tmp_path / "run" / "records").glob("*.parquet")) for r in pq.read_table(f).to_pylist()]
    trained = [r for r in rows if r["step"] == step["step"] and sum(r["loss_mask"]) > 0]
    assert trained and any(r["advantage"] > 0 for r in trained) and any(r["advantage"] < 0 for r in trained)
    sapo = sum(-r["advantage"] * 2 / (1.0 if r["advantage"] > 0 else 2.0) for r in trained) / len(trained)
    ppo = sum(-r["advantage"] for r in trained) / len(trained)
    assert step["pg_loss"] == pytest.approx(sapo, abs=1e-5)
    assert abs(sapo - ppo) > 1e-2  # PPO's surrogate would report another loss here
    assert step["clip_fraction"] == 0.0
    plan = json.loads((tmp_path / "run" / "plan.json").read_text())
    assert "SAPO" in json.dumps(plan) and "τ = 1.0 (A > 0), 2.0" in json.dumps(plan, ensure_ascii=False)


def test_sapo_refuses_a_clip_range_and_a_rule_on_the_clip_fraction(single_turn: Path, tmp_path: Path) -> None:
    rule = '    - {name: clip-guard, metric: clip_fraction, when: "> 0.2", window: 1, action: pause, owner: oncall}\n'
    watched = ("  rules:\n", "  rules:\n" + rule)
    cases = [
        (SAPO, [watched], ["RLV604"]),  # nothing is clipped: the rule could never fire
        (CLIP, [watched], []),  # PPO's clip fraction can be watched
        (SAPO, [], []),
        ("clip: {kind: sapo, low: 0.2, high: 0.2, temperature: {positive: 1.0, negative: 1.05}}", [], ["RLV003"] * 2),
        ("clip: {kind: sapo}", [], ["RLV003"]),  # the temperatures have no default
        ("clip: {low: 0.2, high: 0.2, temperature: {positive: 1.0, negative: 1.05}}", [], ["RLV003"]),
    ]
    for i, (clip, more, refused) in enumerate(cases):
        exp = copy_experiment(single_turn, tmp_path / f"exp{i}", [(CLIP, clip), *more])
        done = rlvr("validate", exp / "experiment.rlvr.yaml")
        codes = [line.split("error[")[1][:6] for line in done.stdout.splitlines() if "error[" in line]
        assert codes == refused, (clip, done.stdout)
        assert done.code == (1 if refused else 0)


VESPO = (
    "clip: {kind: vespo, gamma: {positive: {shape: 2.0, rate: 3.0}, negative: {shape: 3.0, rate: 2.0}}}\n"
    "  ratio: {level: sequence_sum, denominator: trainer_recomputed}"
)


def test_a_vespo_run_reports_its_loss_on_the_recorded_log_probs(single_turn: Path, tmp_path: Path) -> None:
    """`clip.kind: vespo`: on the first step every answer's likelihood ratio is 1, where φ(1) = 1,
    so the loss is −A·log π per token — the recorded advantages and old log-probs give it
    (seq_mean_token_mean here); PPO's surrogate would report another number."""
    import pyarrow.parquet as pq

    exp = copy_experiment(single_turn, tmp_path / "exp", [(CLIP, VESPO)])
    done = rlvr("train", exp / "experiment.rlvr.yaml", "--max-steps", "1", "--run-dir", tmp_path / "run", timeout=600)
    assert done.code == 0, done.stderr[-3000:]
    step = next(json.loads(line) for line in (tmp_path / "run" / "metrics.jsonl").read_text().splitlines())
    rows = [r for f in sorted((tmp_path / "run" / "records").glob("*.parquet")) for r in pq.read_table(f).to_pylist()]
    trained = [r for r in rows if sum(r["loss_mask"]) > 0]

    def per_answer(r: dict) -> float:  # the answer's mean token loss −A·log π
        kept = [lp for lp, m in zip(r["old_logprobs"], r["loss_mask"], strict=False) if m]
        return -r["advantage"] * sum(kept) / len(kept)

    vespo = sum(per_answer(r) for r in trained) / len(trained)
    ppo = sum(-r["advantage"] for r in trained) / len(trained)
    assert step["pg_loss"] == pytest.approx(vespo, abs=1e-5) and abs(vespo - ppo) > 1e-2
    assert step["clip_fraction"] == 0.0
    assert "VESPO" in (tmp_path / "run" / "plan.json").read_text()


def test_vespo_needs_the_answers_likelihood_ratio_and_its_gamma(single_turn: Path, tmp_path: Path) -> None:
    for i, (clip, refused) in enumerate(
        (
            (VESPO, None),
            (VESPO.replace("sequence_sum", "sequence"), "objective.ratio.level"),
            (VESPO.split("\n")[0], "objective.ratio"),
            ("clip: {kind: vespo}\n  ratio: {level: sequence_sum, denominator: trainer_recomputed}", "objective.clip"),
            (VESPO.replace("{kind: vespo,", "{kind: vespo, low: 0.2,"), "objective.clip.low"),
        )
    ):
        exp = copy_experiment(single_turn, tmp_path / f"v{i}", [(CLIP, clip)])
        done = rlvr("validate", exp / "experiment.rlvr.yaml")
        errors = [line for line in done.stdout.splitlines() if "error[" in line]
        if refused is None:
            assert done.code == 0 and not errors, done.stdout
        else:
            assert [e.split("] ")[1].split(":")[0] for e in errors] == [refused], (clip, done.stdout)
