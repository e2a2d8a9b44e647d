"""`objective.advantage.whiten` through `rlvr train`: the advantages a run records are its step's
rewards, group-centred, then whitened over the batch with each answer weighed by the tokens it
trains (`over: batch_tokens`, REINFORCE++ with baseline) — not as if each answer counted once."""

from __future__ import annotations

import math
from pathlib import Path

import pytest
import torch

from rlvr_cli.contract.load import load
from rlvr_cli.train.advantages import group_advantages
from tests.conftest import copy_experiment, rlvr

WHITEN = "whiten: {over: batch_tokens, std: population, epsilon: 1.0e-8, epsilon_use: variance_floor}"


def test_a_run_records_advantages_whitened_over_its_batchs_tokens(single_turn: Path, tmp_path: Path) -> None:
    import pyarrow.parquet as pq

    exp = copy_experiment(
        single_turn,
        tmp_path / "exp",
        [
            ("scale: group_std, std: sample, epsilon: 1.0e-4}", f"scale: none, {WHITEN}}}"),
            ("max_response_tokens: 2", "max_response_tokens: 5"),  # answers of several lengths
            ("prompts_per_step: 8", "prompts_per_step: 4"),
            ('response_length_mean, when: "> 2"', 'response_length_mean, when: "> 5"'),
        ],
    )
    done = rlvr("train", exp / "experiment.rlvr.yaml", "--max-steps", "2", "--run-dir", tmp_path / "run", timeout=600)
    assert done.code == 0, done.stderr[-3000:]
    objective = load(exp / "experiment.rlvr.yaml").objective
    once = objective.model_copy(
        update={
            "advantage": objective.advantage.model_copy(
                update={"whiten": objective.advantage.whiten.model_copy(update={"over": "batch"})}
            )
        }
    )
    rows = [r for f in sorted((tmp_path / "run" / "records").glob("*.parquet")) for r in pq.read_table(f).to_pylist()]
    steps = sorted({r["step"] for r in rows})
    assert len(steps) == 2
    differs = 0
    for step in steps:
        mine = sorted((r for r in rows if r["step"] == step), key=lambda r: (r["group"], r["sample"]))
        rewards = torch.tensor([math.nan if r["reward"] is None else r["reward"] for r in mine], dtype=torch.float64)
        tokens = torch.tensor([sum(r["loss_mask"]) for r in mine], dtype=torch.float64)
        recorded = torch.tensor([r["advantage"] for r in mine], dtype=torch.float64)
        expected = group_advantages(rewards, 8, objective, tokens)
        assert torch.allclose(recorded, expected, atol=1e-5), (step, recorded, expected)
        differs += not torch.allclose(recorded, group_advantages(rewards, 8, once, tokens), atol=1e-3)
    assert differs, "no step told counting each answer once from counting its tokens"


def test_batch_tokens_without_the_tokens_is_a_clear_error() -> None:
    from rlvr_cli.contract.advantage_section import Advantage

    advantage = Advantage.model_validate(
        {"baseline": "group_mean", "scale": "none", "whiten": {"over": "batch_tokens", "std": "sample",
         "epsilon": 1e-8, "epsilon_use": "add_to_variance"}}
    )  # fmt: skip
    objective = type("O", (), {"advantage": advantage})()
    with pytest.raises(ValueError, match="batch_tokens needs each sample's trained tokens"):
        group_advantages(torch.tensor([1.0, 0.0]), 2, objective)  # type: ignore[arg-type]
