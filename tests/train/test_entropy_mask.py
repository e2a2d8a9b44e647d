"""`objective.entropy_mask` (the policy loss on the highest-entropy tokens) through `rlvr train`,
`rlvr validate` and the TRL mapping. Its loss against TRL's own is in test_peers.py."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch

from rlvr_cli.interop.trl_export import export_config
from rlvr_cli.interop.trl_map import import_config
from rlvr_cli.train.entropy_mask import quantile
from tests.conftest import copy_experiment, rlvr

AGG = "  aggregation: seq_mean_token_mean\n"
MASK = (AGG, f"{AGG}  entropy_mask: {{top: 0.2}}\n")
LONGER = ("max_response_tokens: 2", "max_response_tokens: 6")  # answers of several tokens
GUARD = ('response_length_mean, when: "> 2"', 'response_length_mean, when: "> 6"')


def update_row(run: Path) -> dict:
    rows = [json.loads(line) for line in (run / "metrics.jsonl").read_text().splitlines()]
    return next(r for r in rows if "pg_loss" in r)


def test_the_threshold_is_the_steps_whatever_its_micro_batches(single_turn: Path, tmp_path: Path) -> None:
    """The same step with micro-batches of 8 and of the whole batch: the same loss and gradient
    (a threshold taken per micro-batch would keep other tokens), and another loss without the
    mask."""
    found = {}
    for name, edits in (
        ("micro8", [MASK, LONGER, GUARD, ("micro_batch_sequences: 16", "micro_batch_sequences: 8")]),
        ("whole", [MASK, LONGER, GUARD, ("micro_batch_sequences: 16", "micro_batch_sequences: 64")]),
        ("unmasked", [LONGER, GUARD]),
    ):
        exp = copy_experiment(single_turn, tmp_path / name, edits)
        run = tmp_path / f"run-{name}"
        done = rlvr("train", exp / "experiment.rlvr.yaml", "--max-steps", "1", "--run-dir", run, timeout=600)
        assert done.code == 0, done.stderr[-3000:]
        found[name] = update_row(run)
        assert ("by entropy" in (run / "plan.json").read_text()) == (name != "unmasked")
    for key in ("pg_loss", "grad_norm"):
        assert found["micro8"][key] == pytest.approx(found["whole"][key], rel=1e-5, abs=1e-7), key
    assert found["whole"]["pg_loss"] != pytest.approx(found["unmasked"]["pg_loss"], rel=1e-3)


def test_a_share_that_changes_nothing_or_trains_nothing_is_refused(single_turn: Path, tmp_path: Path) -> None:
    for i, (top, refused) in enumerate(((0.2, False), (1.0, True), (0.0, True), (0.999, False))):
        exp = copy_experiment(single_turn, tmp_path / f"e{i}", [(AGG, f"{AGG}  entropy_mask: {{top: {top}}}\n")])
        done = rlvr("validate", exp / "experiment.rlvr.yaml")
        assert ("error[RLV003] objective.entropy_mask.top" in done.stdout) == refused, (top, done.stdout)


def test_the_quantile_is_torchs_bit_for_bit() -> None:
    for n in (1, 2, 5, 97, 4096):
        values = torch.rand(n, generator=torch.Generator().manual_seed(n)) * 4
        for q in (0.0, 0.2, 0.5, 0.8, 1.0):
            assert torch.equal(quantile(values, q), torch.quantile(values, q)), (n, q)


def test_trls_top_entropy_quantile_imports_and_exports() -> None:
    def imported(config: dict):
        return import_config(config, train_rows=16, processes=1, components=1, policy="p")

    whole = imported({"top_entropy_quantile": 0.2, "per_device_train_batch_size": 16})
    assert not whole.refused and whole.values["objective.entropy_mask.top"] == 0.2
    assert not [d for d in whole.differences if d.key == "top_entropy_quantile"]
    cut = imported({"top_entropy_quantile": 0.2, "per_device_train_batch_size": 8, "gradient_accumulation_steps": 2})
    assert any(d.key == "top_entropy_quantile" and "micro-batch" in d.text for d in cut.inexact)
    assert "objective.entropy_mask.top" not in imported({}).values  # 1.0: every token
    assert [d.key for d in imported({"top_entropy_quantile": 0.0}).refused] == ["top_entropy_quantile"]

    from rlvr_cli.contract.load import load

    contract = load(Path(__file__).resolve().parents[2] / "contracts" / "grpo-cpu.rlvr.yaml")
    objective = type(contract.objective).model_validate(
        {**contract.objective.model_dump(), "entropy_mask": {"top": 0.3}}
    )
    mapping = export_config(contract.model_copy(update={"objective": objective}))
    assert mapping.values["top_entropy_quantile"] == 0.3 and not mapping.refused
    assert export_config(contract).values["top_entropy_quantile"] == 1.0
