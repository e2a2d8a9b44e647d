"""Off-policy terms of the objective (`objective.ratio`, `objective.correction`) against numbers
worked out by hand, GSPO's gradient against its definition, and the contract's refusals."""

from __future__ import annotations

import math
from pathlib import Path

import pytest
import torch
import yaml

from rlvr_cli.contract.load import check_file
from rlvr_cli.contract.models import Objective
from rlvr_cli.contract.off_policy import Correction
from rlvr_cli.train.objective import aggregate, correction_weights, importance_ratio, policy_loss
from tests.conftest import EXAMPLES

LOGP = torch.tensor([[-1.0, -2.0, -0.5], [-0.3, -0.7, 0.0]], dtype=torch.float64)
OLD = torch.tensor([[-1.2, -1.9, -0.9], [-0.3, -0.2, 0.0]], dtype=torch.float64)
ENGINE = torch.tensor([[-1.0, -2.5, -0.9], [-1.0, -0.2, 0.0]], dtype=torch.float64)
MASK = torch.tensor([[1.0, 1.0, 1.0], [1.0, 1.0, 0.0]], dtype=torch.float64)


def objective(ratio: dict | None = None, correction: dict | None = None, aggregation: str = "token_mean") -> Objective:
    data = {
        "reward": {"unit": "response", "components": [{"name": "c", "weight": 1.0}], "on_invalid": "exclude"},
        "advantage": {"baseline": "group_mean", "scale": "none"},
        "clip": {"low": 0.2, "high": 0.28},
        "kl": {"coef": 0.0},
        "aggregation": aggregation,
        "ratio": ratio,
        "correction": correction,
    }
    return Objective.model_validate({k: v for k, v in data.items() if v is not None})


def test_the_sequence_ratio_is_the_geometric_mean_of_the_token_ratios() -> None:
    r = importance_ratio(LOGP, OLD, MASK, "sequence")
    first = math.exp((0.2 - 0.1 + 0.4) / 3)  # mean of log π_θ − log π_old over 3 tokens
    second = math.exp((0.0 - 0.5) / 2)  # 2 trained tokens: the padding's difference is left out
    assert torch.allclose(r, torch.tensor([[first] * 3, [second] * 3], dtype=torch.float64))
    assert torch.allclose(importance_ratio(LOGP, OLD, MASK, "token"), torch.exp(LOGP - OLD))


@pytest.mark.parametrize("how", ["token_mean", "seq_mean_token_mean", "seq_mean_token_sum", "constant_norm"])
def test_gspo_token_form_has_the_gradient_of_the_sequence_ratio(how: str) -> None:
    """The broadcast form (TRL: exp(mean log r) per answer, the same on every token) and rlvr's
    token form give one loss and one gradient, whatever the aggregation."""
    adv = torch.tensor([1.0, -0.5], dtype=torch.float64)
    grads = []
    for form in ("rlvr", "broadcast"):
        logp = LOGP.clone().requires_grad_(True)
        if form == "rlvr":
            r = importance_ratio(logp, OLD, MASK, "sequence")
        else:
            log_s = ((logp - OLD) * MASK).sum(1) / MASK.sum(1)
            r = torch.exp(log_s)[:, None].expand_as(logp)
        per_token = torch.maximum(-adv[:, None] * r, -adv[:, None] * r.clamp(0.8, 1.28))
        loss = aggregate(per_token, MASK, how, max_response_tokens=3)
        loss.backward()
        grads.append((float(loss.detach()), logp.grad.clone()))
    assert grads[0][0] == pytest.approx(grads[1][0], abs=1e-12)
    assert torch.allclose(grads[0][1] * MASK, grads[1][1] * MASK, atol=1e-12)


def test_tis_truncates_and_mis_masks_per_token_and_per_answer() -> None:
    w = [[math.exp(-0.2), math.exp(0.6), 1.0], [math.exp(0.7), 1.0, 0.0]]  # exp(old − engine), padding 0
    tis = correction_weights(OLD, ENGINE, MASK, Correction(kind="tis", level="token", cap=1.5))
    assert tis is not None
    assert torch.allclose(tis, torch.tensor([[w[0][0], 1.5, 1.0], [1.5, 1.0, 0.0]], dtype=torch.float64))
    mis = correction_weights(OLD, ENGINE, MASK, Correction(kind="mis", level="token", low=0.9, high=1.9))
    assert mis is not None
    assert torch.allclose(mis, torch.tensor([[0.0, w[0][1], 1.0], [0.0, 1.0, 0.0]], dtype=torch.float64))
    sequence = correction_weights(OLD, ENGINE, MASK, Correction(kind="tis", level="sequence", cap=10.0))
    assert sequence is not None  # the product over the answer's trained tokens
    expected = [[math.exp(0.4)] * 3, [math.exp(0.7), math.exp(0.7), 0.0]]
    assert torch.allclose(sequence, torch.tensor(expected, dtype=torch.float64))
    masked = correction_weights(OLD, ENGINE, MASK, Correction(kind="mis", level="sequence", low=0.5, high=1.9))
    assert masked is not None
    assert torch.allclose(masked, torch.tensor([[math.exp(0.4)] * 3, [0.0] * 3], dtype=torch.float64))
    assert correction_weights(OLD, ENGINE, MASK, Correction(kind="none")) is None


def test_the_weights_multiply_each_tokens_clipped_loss_and_are_counted() -> None:
    adv = torch.tensor([1.0, -1.0], dtype=torch.float64)
    tis = {"kind": "tis", "level": "token", "cap": 1.5}
    ratio = {"level": "token", "denominator": "trainer_recomputed"}
    plain, _ = policy_loss(LOGP, OLD, None, adv, MASK, objective(ratio), max_response_tokens=3)
    weighted, stats = policy_loss(
        LOGP, OLD, None, adv, MASK, objective(ratio, tis), max_response_tokens=3, engine_logp=ENGINE
    )
    r = torch.exp(LOGP - OLD)
    per_token = torch.maximum(-adv[:, None] * r, -adv[:, None] * r.clamp(0.8, 1.28))
    w = correction_weights(OLD, ENGINE, MASK, Correction(kind="tis", level="token", cap=1.5))
    assert w is not None
    assert float(weighted) == pytest.approx(float((per_token * w * MASK).sum() / 5), abs=1e-12)
    assert float(plain) == pytest.approx(float((per_token * MASK).sum() / 5), abs=1e-12)
    assert stats.weight_sum == pytest.approx(float((w * MASK).sum())) and stats.weight_cut == 2  # two capped
    _, untouched = policy_loss(LOGP, OLD, None, adv, MASK, objective(ratio), max_response_tokens=3)
    assert untouched.weight_sum == 5 and untouched.weight_cut == 0


def errors(
    tmp_path: Path, ratio: object = None, correction: object = None, ahead: bool = False, severity: str = "error"
) -> list[tuple]:
    data = yaml.safe_load((EXAMPLES / "coverage" / "every-key.rlvr.yaml").read_text())
    data["objective"].pop("ratio", None)
    data["objective"].pop("correction", None)
    if ratio is not None:
        data["objective"]["ratio"] = ratio
    if correction is not None:
        data["objective"]["correction"] = correction
    data["hyperparameters"]["sample_ahead"] = ahead
    if ahead:
        data["hyperparameters"]["parallel"] = {"strategy": "ddp"}  # fsdp2 does not sample ahead
        data["hyperparameters"]["max_policy_lag"] = max(
            data["hyperparameters"]["max_policy_lag"], data["hyperparameters"]["updates_per_batch"]
        )
    path = tmp_path / "c.rlvr.yaml"
    path.write_text(yaml.safe_dump(data, sort_keys=False))
    return [(d.code, d.path, d.message) for d in check_file(path).diagnostics if d.severity == severity]


TRAINER = {"level": "token", "denominator": "trainer_recomputed"}


@pytest.mark.parametrize(
    ("ratio", "correction", "path", "message"),
    [
        (TRAINER, {"kind": "tis", "level": "token"}, "objective.correction", "missing required key 'cap'"),
        (TRAINER, {"kind": "tis", "level": "token", "cap": 2, "low": 0.5}, "objective.correction.low", "tis does"),
        (TRAINER, {"kind": "mis", "level": "token", "cap": 2, "low": 0.5, "high": 2}, "objective.correction.cap", ""),
        (TRAINER, {"kind": "mis", "level": "token", "low": 2, "high": 2}, "objective.correction.low", "below high"),
        (TRAINER, {"kind": "none", "level": "token"}, "objective.correction.level", "none does not read level"),
        (TRAINER, {"kind": "tis", "cap": 2}, "objective.correction", "missing required key 'level'"),
        (
            {"level": "token", "denominator": "engine"},
            {"kind": "tis", "level": "token", "cap": 2},
            "objective.correction.kind",
            "needs ratio.denominator trainer_recomputed",
        ),
        (None, {"kind": "mis", "level": "sequence", "low": 0.5, "high": 2}, "objective.correction.kind", "needs"),
    ],
)
def test_a_correction_key_nothing_reads_or_one_it_needs_is_refused(
    tmp_path: Path, ratio: object, correction: object, path: str, message: str
) -> None:
    found = errors(tmp_path, ratio, correction)
    assert len(found) == 1 and found[0][:2] == ("RLV003", path), found
    assert message in found[0][2]


def test_every_form_the_docs_show_is_valid(tmp_path: Path) -> None:
    assert errors(tmp_path) == []
    assert errors(tmp_path, {"level": "sequence", "denominator": "engine"}) == []
    assert errors(tmp_path, TRAINER, {"kind": "tis", "level": "token", "cap": 2.0}) == []
    assert errors(tmp_path, TRAINER, {"kind": "mis", "level": "sequence", "low": 0.5, "high": 2.0}) == []
    assert errors(tmp_path, TRAINER, {"kind": "none"}) == []


def test_samples_drawn_ahead_need_the_ratio_said(tmp_path: Path) -> None:
    found = errors(tmp_path, ahead=True)
    assert [(c, p) for c, p, _ in found] == [("RLV003", "objective")]
    assert "missing required key 'ratio' (required when hyperparameters.sample_ahead is true" in found[0][2]
    assert errors(tmp_path, TRAINER, ahead=True) == []


def test_stale_samples_over_the_trainers_log_probs_without_a_correction_are_warned(tmp_path: Path) -> None:
    [(code, path, message)] = errors(tmp_path, TRAINER, ahead=True, severity="warning")
    assert (code, path) == ("RLV306", "objective.ratio.denominator") and "biased gradient" in message
    tis = {"kind": "tis", "level": "token", "cap": 2.0}
    assert errors(tmp_path, TRAINER, tis, ahead=True, severity="warning") == []  # corrected
    assert errors(tmp_path, {"level": "token", "denominator": "engine"}, ahead=True, severity="warning") == []
    assert errors(tmp_path, TRAINER, severity="warning") == []  # nothing drawn ahead: nothing stale
