"""`objective.off_policy_mask` (DeepSeek-V3.2's off-policy sequence masking) through `rlvr train`,
`rlvr validate` and the TRL mapping. Its loss against TRL's own is in test_peers.py."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from rlvr_cli.interop.trl_export import export_config
from rlvr_cli.interop.trl_map import import_config
from tests.conftest import copy_experiment, rlvr

AGG = "  aggregation: seq_mean_token_mean\n"
TWO_PASSES = [("updates_per_batch: 1", "updates_per_batch: 2"), ("max_policy_lag: 0", "max_policy_lag: 1")]


def masked(threshold: float, against: str = "old") -> tuple[str, str]:
    return AGG, f"{AGG}  off_policy_mask: {{threshold: {threshold}, against: {against}}}\n"


def last_update(run: Path) -> dict:
    rows = [json.loads(line) for line in (run / "metrics.jsonl").read_text().splitlines()]
    return [r for r in rows if "pg_loss" in r][-1]


def test_the_second_pass_masks_answers_whose_policy_moved_away(single_turn: Path, tmp_path: Path) -> None:
    """Two optimizer passes over a batch: the first moves the policy away from the answers with
    A < 0, so on the second their mean log π_old − log π_θ is above 0 and δ = 0 drops them (the
    step's pg_loss is the second pass's); a threshold no drift reaches drops none, and reports
    another loss."""
    found = {}
    for threshold in (0.0, 1000.0):
        exp = copy_experiment(single_turn, tmp_path / f"e{threshold}", [*TWO_PASSES, masked(threshold)])
        run = tmp_path / f"run{threshold}"
        done = rlvr("train", exp / "experiment.rlvr.yaml", "--max-steps", "1", "--run-dir", run, timeout=600)
        assert done.code == 0, done.stderr[-3000:]
        found[threshold] = last_update(run)
        assert "off-policy sequence masking" in (run / "plan.json").read_text()
    assert 0 < found[0.0]["off_policy_masked_share"] < 1
    assert found[1000.0]["off_policy_masked_share"] == 0
    assert found[0.0]["pg_loss"] != pytest.approx(found[1000.0]["pg_loss"], abs=1e-6)


def test_where_the_mask_could_never_act_it_is_refused(single_turn: Path, tmp_path: Path) -> None:
    rule = (
        '    - {name: opsm, metric: off_policy_masked_share, when: "> 0.5", window: 1, action: pause, owner: oncall}\n'
    )
    watched = ("  rules:\n", "  rules:\n" + rule)
    for i, (edits, refused) in enumerate(
        (
            ([masked(0.1)], "RLV003"),  # one optimizer step: π_old is π_θ, nothing is ever masked
            ([masked(0.1), *TWO_PASSES], None),
            ([masked(0.1, "engine")], None),  # the engine's log-probs are not the trainer's
            ([masked(-0.1, "engine")], "RLV003"),  # below 0: every A < 0 answer on-policy
            ([masked(0.1, "engine"), watched], None),
            ([watched], "RLV604"),  # no mask: nothing to watch
        )
    ):
        exp = copy_experiment(single_turn, tmp_path / f"e{i}", edits)
        done = rlvr("validate", exp / "experiment.rlvr.yaml")
        codes = [line.split("error[")[1][:6] for line in done.stdout.splitlines() if "error[" in line]
        assert codes == ([refused] if refused else []), (edits, done.stdout)


def test_trls_threshold_imports_against_the_log_probs_trl_compares() -> None:
    def imported(config: dict) -> tuple:
        mapping = import_config(config, train_rows=16, processes=1, components=1, policy="p")
        assert not mapping.refused, mapping.refused
        values = mapping.values
        keys = ("objective.off_policy_mask.threshold", "objective.off_policy_mask.against")
        return tuple(values.get(k) for k in keys), mapping.comments.get("objective.ratio.denominator", "")

    assert imported({"off_policy_mask_threshold": 0.5, "use_vllm": True})[0] == (0.5, "engine")
    assert imported({"off_policy_mask_threshold": 0.5, "num_iterations": 2})[0] == (0.5, "old")
    none, comment = imported({"off_policy_mask_threshold": 0.5})  # trl compares π_θ with itself: a no-op
    assert none == (None, None) and "not imported" in comment
    refused = import_config({"off_policy_mask_threshold": -1.0}, train_rows=16, processes=1, components=1, policy="p")
    assert [d.key for d in refused.refused] == ["off_policy_mask_threshold"]


def test_trls_export_writes_the_threshold_where_trl_compares_the_same_log_probs() -> None:
    from rlvr_cli.contract.load import load

    contract = load(Path(__file__).resolve().parents[2] / "contracts" / "grpo-cpu.rlvr.yaml")
    for against, refused in (("old", []), ("engine", ["objective.off_policy_mask.against"])):
        objective = contract.objective.model_copy(update={"off_policy_mask": {"threshold": 0.3, "against": against}})
        objective = type(objective).model_validate(objective.model_dump())
        mapping = export_config(contract.model_copy(update={"objective": objective}))
        assert [d.key for d in mapping.refused] == refused
        assert mapping.values["off_policy_mask_threshold"] == 0.3
