"""`length.dynamic_sampling.uniform_on`: dynamic sampling drops a group whose rewards are all equal
(`reward`, verl's filter_groups.metric: reward) or whose verifier rewards before length shaping
are (`verifier_reward`: NeMo RL's unshaped_total_reward, verl's score) — a truncated response
given its penalty is then verified all the same, its reward staying the penalty."""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest

from rlvr_cli.contract.load import load
from tests.conftest import copy_experiment, rlvr

DYNAMIC = "  dynamic_sampling: {drop_uniform_groups: true, max_rounds: 1, log_by: [difficulty], uniform_on: %s}\n"
OVERLONG = "  overlong_penalty: {buffer_tokens: 4, factor: 0.5}\n"


def experiment(single_turn: Path, folder: Path, uniform_on: str, extra: str = OVERLONG) -> Path:
    return copy_experiment(
        single_turn,
        folder,
        [
            ("max_response_tokens: 2", "max_response_tokens: 5"),  # answers of several lengths, penalised
            ('response_length_mean, when: "> 2"', 'response_length_mean, when: "> 5"'),
            ("  padding_side: left\n", "  padding_side: left\n" + extra + DYNAMIC % uniform_on),
        ],
    )


def test_a_penalized_truncated_answer_is_verified_for_the_filter_and_keeps_its_penalty(
    single_turn: Path, tmp_path: Path
) -> None:
    from rlvr_cli.env.sample import Sample
    from rlvr_cli.env.scoring import apply_verdict, needs_verdict
    from rlvr_cli.env.verdict import Verdict

    text = "  on_truncated: penalize\n  truncation_penalty: -1.0\n"
    for uniform_on, verified in (("verifier_reward", True), ("reward", False)):
        exp = experiment(single_turn, tmp_path / uniform_on, uniform_on, extra="")
        path = exp / "experiment.rlvr.yaml"
        path.write_text(path.read_text().replace("  on_truncated: keep", text.rstrip("\n")))
        contract = load(path)
        s = Sample(task={"id": "t"}, group=0, index=0, prompt_ids=[1], response_ids=[5] * 5, mask=[1] * 5,
                   finish="length", seed=0)  # fmt: skip
        assert needs_verdict(contract, s) is verified and s.reward == -1.0
        if verified:
            apply_verdict(contract, s, Verdict("ok", components={"correct": 1.0, "format": 1.0}), 0.0)
            assert (s.reward, s.verifier_reward, s.verdict, s.kept) == (-1.0, 1.2, None, True)
            apply_verdict(contract, s, Verdict("timeout"), 0.0)  # an invalid verdict: no value, still trained
            assert s.reward == -1.0 and s.kept


def test_verifier_reward_that_changes_nothing_is_refused(single_turn: Path, tmp_path: Path) -> None:
    exp = experiment(single_turn, tmp_path / "plain", "verifier_reward", extra="")
    done = rlvr("validate", exp / "experiment.rlvr.yaml")
    assert done.code == 1 and "RLV505" in done.stdout and "no overlong_penalty and no truncation penalty" in done.stdout
    exp = experiment(single_turn, tmp_path / "shaped", "verifier_reward")
    assert rlvr("validate", exp / "experiment.rlvr.yaml").code == 0
    path = exp / "experiment.rlvr.yaml"  # no group dropped: either value changes nothing
    path.write_text(path.read_text().replace("drop_uniform_groups: true", "drop_uniform_groups: false"))
    for value in ("verifier_reward", "reward"):
        path.write_text(path.read_text().replace("uniform_on: verifier_reward", f"uniform_on: {value}"))
        done = rlvr("validate", path)
        assert done.code == 1 and f"uniform_on: {value} changes nothing" in done.stdout, done.stdout


@pytest.mark.parametrize("uniform_on", ["verifier_reward", "reward"])
def test_a_run_drops_the_groups_whose_chosen_rewards_are_all_equal(
    single_turn: Path, tmp_path: Path, uniform_on: str
) -> None:
    """The toy policy's answers are mostly wrong and of several lengths: under the overlong
    penalty their rewards differ where their verifier rewards do not."""
    import pyarrow.parquet as pq

    exp = experiment(single_turn, tmp_path / "exp", uniform_on)
    done = rlvr("train", exp / "experiment.rlvr.yaml", "--max-steps", "2", "--run-dir", tmp_path / "run", timeout=600)
    assert done.code == 0, done.stderr[-3000:]
    weights = {c.name: c.weight for c in load(exp / "experiment.rlvr.yaml").objective.reward.components}
    rows = [r for f in sorted((tmp_path / "run" / "records").glob("*.parquet")) for r in pq.read_table(f).to_pylist()]
    groups: dict[tuple[int, int], list[dict]] = {}
    for row in rows:
        groups.setdefault((row["step"], row["group"]), []).append(row)
    told_apart = 0
    for members in groups.values():
        rewards = {r["reward"] for r in members}
        verifier = {round(sum(w * json.loads(r["components"])[n] for n, w in weights.items()), 9) for r in members}
        dropped = all(r["discard_reason"] == "uniform_group" for r in members)
        assert dropped == (len(verifier if uniform_on == "verifier_reward" else rewards) == 1), members
        told_apart += (len(rewards) == 1) != (len(verifier) == 1)
        assert all(r["reward"] is not None and not math.isnan(r["reward"]) for r in members)
    assert told_apart, "no group's rewards and verifier rewards disagreed: the test told nothing apart"
