"""Precision that cannot silently drop updates.

At lr 1e-6 (the shipped 7B contract's), an AdamW step moves each weight by about 1e-6, less than
half the last bit of a bf16 weight of magnitude ~0.016 (the tiny model's): pure bf16 weights do
not move, and `validate` says so (RLV304) with the largest weight that still can. `precision: bf16`
keeps fp32 master weights and optimizer state and computes in bf16 (autocast): it applies the
updates an fp32 run applies. fp16 computes with a loss scaler whose state is checkpointed.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.conftest import QUICK_STEPS, copy_experiment, rlvr

BASE = Path(__file__).resolve().parents[1] / "contracts" / "valid" / "base.rlvr.yaml"
CONTRACT = "experiment.rlvr.yaml"


def _validate(tmp_path: Path, old: str, new: str) -> str:
    path = tmp_path / "c.rlvr.yaml"
    text = BASE.read_text()
    assert old in text
    path.write_text(text.replace(old, new))
    return rlvr("validate", path, "--format", "json").stdout


def test_pure_bf16_is_flagged_with_the_largest_weight_a_step_still_moves(tmp_path: Path) -> None:
    out = json.loads(_validate(tmp_path, "precision: bf16", "precision: {params: bf16, compute: bf16}"))
    found = [d for f in out["files"] for d in f["diagnostics"] if d["code"] == "RLV304"]
    assert len(found) == 1 and found[0]["severity"] == "warning", out
    assert "lr 1e-05" in found[0]["message"] and "|w| < 0.0039" in found[0]["message"], found[0]["message"]


def test_bf16_with_master_weights_is_not_flagged(tmp_path: Path) -> None:
    for written in ("bf16", "{params: fp32, compute: bf16, reduce: bf16}", "fp16"):
        out = json.loads(_validate(tmp_path, "precision: bf16", f"precision: {written}"))
        codes = [d["code"] for f in out["files"] for d in f["diagnostics"]]
        assert "RLV304" not in codes and out["files"][0]["valid"], (written, out)


def test_precision_that_cannot_run_is_refused_where_it_is_written(tmp_path: Path) -> None:
    out = _validate(tmp_path, "precision: bf16", "precision: {params: bf16, compute: fp32}")
    assert "RLV003" in out and "compute fp32 over bf16 weights" in out
    out = _validate(tmp_path, "precision: bf16", "precision: {params: fp16, compute: fp16}")
    assert "hyperparameters.precision.params" in out and "expected 'fp32' or 'bf16'" in out
    out = json.loads(_validate(tmp_path, "precision: bf16", "precision: bf17"))["files"][0]["diagnostics"]
    assert [(d["code"], d["path"]) for d in out] == [("RLV003", "hyperparameters.precision")], out
    text = BASE.read_text()
    rules = "  rules:\n"
    assert rules in text
    watched = "    - {name: s, metric: loss_scale, when: '< 1', window: 1, action: pause, owner: me}\n"
    path = tmp_path / "scale.rlvr.yaml"
    path.write_text(text.replace(rules, rules + watched, 1))
    assert "needs fp16 compute" in rlvr("validate", path).stdout
    path.write_text(text.replace(rules, rules + watched, 1).replace("precision: bf16", "precision: fp16"))
    assert rlvr("validate", path).code == 0


def _weights(folder: Path) -> dict:
    from safetensors.torch import load_file

    out: dict = {}
    for file in sorted(folder.glob("*.safetensors")):
        out.update(load_file(file))
    return out


def _deltas(initial: dict, run: Path) -> dict:
    final = _weights(run / "final")
    return {k: final[k].float() - v.to(final[k].dtype).float() for k, v in initial.items()}


def _changed(deltas: dict) -> float:
    return sum(int((d != 0).sum()) for d in deltas.values()) / sum(d.numel() for d in deltas.values())


def _cosine(a: dict, b: dict) -> float:
    import torch

    x = torch.cat([a[k].flatten() for k in sorted(a)])
    y = torch.cat([b[k].flatten() for k in sorted(a)])
    return float(x @ y / (x.norm() * y.norm()))


@pytest.mark.slow
def test_at_lr_1e6_bf16_master_weights_apply_the_fp32_updates_and_pure_bf16_drops_them(
    single_turn: Path, tmp_path: Path
) -> None:
    initial = _weights(single_turn / "model")
    deltas = {}
    for name, precision in (("fp32", "fp32"), ("mixed", "bf16"), ("pure", "{params: bf16, compute: bf16}")):
        edits = [*QUICK_STEPS, ("lr: 3.0e-3", "lr: 1.0e-6"), ("precision: fp32", f"precision: {precision}")]
        experiment = copy_experiment(single_turn, tmp_path / name, edits)
        if name == "pure":
            assert "RLV304" in rlvr("validate", experiment / CONTRACT).stdout
        done = rlvr("train", experiment / CONTRACT, "--run-dir", experiment / "run", "--max-steps", "3", timeout=300)
        assert done.code == 0, done.stderr[-2000:]
        deltas[name] = _deltas(initial, experiment / "run")
    assert _changed(deltas["fp32"]) > 0.99
    assert _changed(deltas["mixed"]) > 0.99, _changed(deltas["mixed"])
    assert _cosine(deltas["mixed"], deltas["fp32"]) > 0.9  # the same updates, to bf16 compute's rounding
    assert _changed(deltas["pure"]) < 0.1, _changed(deltas["pure"])  # only weights below ~5e-4 can move


@pytest.mark.slow
def test_fp16_computes_with_a_loss_scaler_that_is_checkpointed_and_resumed(single_turn: Path, tmp_path: Path) -> None:
    import torch

    experiment = copy_experiment(single_turn, tmp_path / "fp16", [*QUICK_STEPS, ("precision: fp32", "precision: fp16")])
    run = experiment / "run"
    done = rlvr("train", experiment / CONTRACT, "--run-dir", run, "--max-steps", "2", timeout=300)
    assert done.code == 0, done.stderr[-2000:]
    assert "fp16 compute" in (run / "plan.json").read_text()
    state = torch.load(run / "checkpoints" / "step-2" / "state.pt", weights_only=True)
    assert state["scaler"]["scale"] == 65536.0, state.get("scaler")
    rows = [json.loads(line) for line in (run / "metrics.jsonl").read_text().splitlines()]
    assert all(r["loss_scale"] == 65536.0 and r["overflow_count"] == 0 for r in rows), rows
    resumed = rlvr("train", experiment / CONTRACT, "--run-dir", run, "--max-steps", "3", "--resume", timeout=300)
    assert resumed.code == 0, resumed.stderr[-2000:]
    straight = rlvr("train", experiment / CONTRACT, "--run-dir", experiment / "r3", "--max-steps", "3", timeout=300)
    assert straight.code == 0, straight.stderr[-2000:]
    a, b = _weights(run / "final"), _weights(experiment / "r3" / "final")
    assert all(torch.equal(a[k], b[k]) for k in a)  # resume is exact with fp16 compute
