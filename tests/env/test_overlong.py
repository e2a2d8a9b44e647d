"""DAPO's soft overlong punishment (`length.overlong_penalty`): nothing up to the budget less the
buffer, then linearly to −factor at the budget, added to a verified response's reward; a truncated
response given `truncation_penalty` gets that alone; a buffer longer than the budget is refused
(RLV504); verl's overlong buffer imports as it (only where its dapo reward manager applies it)."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.conftest import copy_experiment, rlvr

CONTRACT = "experiment.rlvr.yaml"
PENALTY = "  overlong_penalty: {buffer_tokens: 4, factor: 0.5}\n"


def contract_with(single_turn: Path, folder: Path, lines: str, budget: int = 8) -> Path:
    exp = copy_experiment(single_turn, folder)
    text = (exp / CONTRACT).read_text().replace("  max_response_tokens: 2\n", f"  max_response_tokens: {budget}\n")
    (exp / CONTRACT).write_text(text.replace("  padding_side: left\n", "  padding_side: left\n" + lines))
    return exp / CONTRACT


def sample(tokens: int, finish: str = "stop"):  # type: ignore[no-untyped-def]
    from rlvr_cli.env.sample import Sample

    return Sample(
        task={"id": "t"}, group=0, index=0, prompt_ids=[1], response_ids=[5] * tokens, mask=[1] * tokens,
        finish=finish, seed=0,
    )  # fmt: skip


@pytest.mark.parametrize("penalised", [True, False], ids=["overlong_penalty", "none"])
def test_the_penalty_grows_over_the_buffer_and_only_there(single_turn: Path, tmp_path: Path, penalised: bool) -> None:
    from rlvr_cli.contract.load import load
    from rlvr_cli.env.scoring import apply_verdict
    from rlvr_cli.env.verdict import Verdict

    contract = load(contract_with(single_turn, tmp_path / "exp", PENALTY if penalised else ""))
    rewards = []
    for tokens in (3, 4, 5, 6, 8):
        s = sample(tokens, "length" if tokens == 8 else "stop")
        apply_verdict(contract, s, Verdict("ok", components={"correct": 1.0, "format": 1.0}), 0.0)
        rewards.append(s.reward)
    expected = [1.2, 1.2, 1.075, 0.95, 0.7] if penalised else [1.2] * 5  # 1.0 + 0.2 · format, less 0.5 · (n − 4) / 4
    assert rewards == pytest.approx(expected)


def test_a_truncated_response_given_its_penalty_gets_that_alone(single_turn: Path, tmp_path: Path) -> None:
    from rlvr_cli.contract.load import load
    from rlvr_cli.env.scoring import needs_verdict

    text = PENALTY.replace("  overlong", "  overlong")  # beside on_truncated: penalize
    path = contract_with(single_turn, tmp_path / "exp", text)
    path.write_text(
        path.read_text().replace("on_truncated: keep", "on_truncated: penalize\n  truncation_penalty: -1.0")
    )
    s = sample(8, "length")
    assert not needs_verdict(load(path), s) and s.reward == -1.0


def test_a_buffer_longer_than_the_budget_is_refused(single_turn: Path, tmp_path: Path) -> None:
    path = contract_with(single_turn, tmp_path / "exp", PENALTY.replace("buffer_tokens: 4", "buffer_tokens: 9"))
    done = rlvr("validate", path)
    assert done.code == 1 and "RLV504" in done.stdout + done.stderr
    path.write_text(path.read_text().replace("buffer_tokens: 9", "buffer_tokens: 8"))
    assert rlvr("validate", path).code == 0
    from rlvr_cli.contract.load import load
    from rlvr_cli.train.run_plan import build_plan

    words = build_plan(load(path), path, tmp_path / "run", 1, "cpu")["objective"][0]  # what plan.json says
    assert words.endswith("− 0.5·(tokens − 0)/8 beyond 0 tokens (DAPO's overlong punishment)"), words


def test_verls_overlong_buffer_imports_where_its_dapo_reward_manager_applies_it(
    single_turn: Path, tmp_path: Path
) -> None:
    from rlvr_cli.contract.load import load

    exp = contract_with(single_turn, tmp_path / "exp", "", budget=64).parent
    config = exp / "dapo.yaml"
    config.write_text("{}\n")
    base = ["algorithm.adv_estimator=grpo", "actor_rollout_ref.rollout.n=4", "data.train_batch_size=8"]
    base += ["actor_rollout_ref.actor.ppo_mini_batch_size=8", "data.max_response_length=64"]
    buffer = ["custom_reward_function.overlong_buffer.enable=True", "custom_reward_function.overlong_buffer.len=16"]
    buffer += ["custom_reward_function.overlong_buffer.penalty_factor=1.0"]
    naive = rlvr("import", "verl", config, *base, *buffer, "--into", exp / CONTRACT, "--out", exp / "naive.rlvr.yaml")
    assert naive.code == 0 and "only the dapo reward manager applies it" in naive.stderr, naive.stderr
    assert load(exp / "naive.rlvr.yaml").length.overlong_penalty is None
    dapo = [*base, *buffer, "reward_model.reward_manager=dapo"]
    done = rlvr("import", "verl", config, *dapo, "--into", exp / CONTRACT, "--out", exp / "dapo.rlvr.yaml")
    assert done.code == 0, done.stderr
    penalty = load(exp / "dapo.rlvr.yaml").length.overlong_penalty
    assert penalty is not None and (penalty.buffer_tokens, penalty.factor) == (16, 1.0)


def test_a_run_adds_the_penalty_to_every_verified_response_it_records(single_turn: Path, tmp_path: Path) -> None:
    """Through `rlvr train`: each recorded reward is the weighted components plus the penalty of
    its own length, and some response did run into the buffer (the check can fail)."""
    import json

    import pyarrow.parquet as pq

    path = contract_with(single_turn, tmp_path / "exp", PENALTY)
    path.write_text(path.read_text().replace('when: "> 2"', 'when: "> 8"'))  # the length guard, at the new budget
    done = rlvr("train", path, "--run-dir", tmp_path / "run", "--max-steps", "1", timeout=600)
    assert done.code == 0, done.stderr[-2000:]
    rows = [r for f in sorted((tmp_path / "run" / "records").glob("*.parquet")) for r in pq.read_table(f).to_pylist()]
    scored = [r for r in rows if r["reward"] is not None]
    assert scored
    weights = {"correct": 1.0, "format": 0.2}
    for r in scored:
        earned = sum(weights[k] * v for k, v in json.loads(r["components"]).items())
        penalty = min(0.0, -0.5 * (len(r["response_ids"]) - 4) / 4)
        assert r["reward"] == pytest.approx(earned + penalty), r
    assert any(len(r["response_ids"]) > 4 for r in scored)
