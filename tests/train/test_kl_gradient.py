"""`objective.kl.gradient: k2`: the KL term keeps its estimator's value and takes k2's gradient
(verl's `k1+`, `k3+`). Its numbers under verl's own `kl_penalty` are in
tests/interop/test_export_numbers.py; here: what the term is, where the key is refused, and
verl's names importing to it."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

from rlvr_cli.contract.load import load
from rlvr_cli.contract.models import Objective
from rlvr_cli.train.objective import policy_loss
from tests.conftest import copy_experiment, rlvr

KL = "kl: {coef: 0.01, estimator: k3, placement: loss}"
OBJECTIVE = {
    "reward": {"unit": "response", "components": [{"name": "c", "weight": 1.0}], "on_invalid": "exclude"},
    "advantage": {"baseline": "group_mean", "scale": "none"},
    "clip": {"low": 0.2, "high": 0.28},
    "aggregation": "token_mean",
}


def kl_term(estimator: str, gradient: str | None) -> tuple[float, torch.Tensor]:
    """The loss with zero advantages (the KL term alone) and its gradient with respect to log π_θ."""
    g = torch.Generator().manual_seed(0)
    logp = (-torch.rand(3, 4, generator=g, dtype=torch.float64) * 2).requires_grad_(True)
    ref = logp.detach() + (torch.rand(3, 4, generator=g, dtype=torch.float64) - 0.5)
    kl = {"coef": 1.0, "estimator": estimator, "placement": "loss", "gradient": gradient}
    objective = Objective.model_validate({**OBJECTIVE, "kl": kl})
    mask = torch.ones(3, 4, dtype=torch.float64)
    loss, _ = policy_loss(logp, logp.detach(), ref, torch.zeros(3), mask, objective, max_response_tokens=4)
    loss.backward()
    return float(loss.detach()), logp.grad


@pytest.mark.parametrize("estimator", ["k1", "k3"])
def test_the_term_has_the_estimators_value_and_k2s_gradient(estimator: str) -> None:
    value, straight = kl_term(estimator, "k2")
    own_value, own = kl_term(estimator, None)
    k2_value, k2 = kl_term("k2", None)
    assert value == pytest.approx(own_value, abs=1e-15)  # the estimator's value
    assert torch.allclose(straight, k2, atol=1e-15)  # k2's gradient
    assert not torch.allclose(straight, own, atol=1e-6) and value != pytest.approx(k2_value)


def test_the_key_is_refused_where_it_changes_nothing(single_turn: Path, tmp_path: Path) -> None:
    for i, (kl, refused) in enumerate(
        (
            ("kl: {coef: 0.01, estimator: k3, placement: loss, gradient: k2}", False),
            ("kl: {coef: 0.01, estimator: k1, placement: loss, gradient: k2}", False),
            ("kl: {coef: 0.01, estimator: k2, placement: loss, gradient: k2}", True),  # k2's own already
            ("kl: {coef: 0.01, estimator: k3, placement: reward, gradient: k2}", True),  # no gradient in a reward
            ("kl: {coef: 0.0, gradient: k2}", True),
            ("kl: {coef: 0.01, estimator: k3, placement: loss, gradient: estimator}", False),
        )
    ):
        exp = copy_experiment(single_turn, tmp_path / f"e{i}", [(KL, kl)])
        done = rlvr("validate", exp / "experiment.rlvr.yaml")
        assert ("error[RLV003] objective.kl.gradient" in done.stdout) == refused, (kl, done.stdout)
        assert done.code == (1 if refused else 0), (kl, done.stdout)


VERL_SITE = next((Path(__file__).resolve().parents[2] / ".venv-verl" / "lib").glob("python3*/site-packages/verl"), None)


@pytest.mark.skipif(VERL_SITE is None, reason="verl's environment .venv-verl is built by make install")
def test_verls_plus_estimators_import_as_k2s_gradient_and_export_back(single_turn: Path, tmp_path: Path) -> None:
    generated = VERL_SITE / "trainer" / "config" / "_generated_ppo_trainer.yaml"
    base = ["actor_rollout_ref.rollout.n=4", "data.train_batch_size=8", "actor_rollout_ref.actor.ppo_mini_batch_size=8"]
    base += ["actor_rollout_ref.rollout.name=vllm", "algorithm.adv_estimator=grpo"]
    exp = copy_experiment(single_turn, tmp_path / "exp")
    for i, (overrides, estimator, gradient) in enumerate(
        (
            (["actor_rollout_ref.actor.use_kl_loss=true", "actor_rollout_ref.actor.kl_loss_type=k3+"], "k3", "k2"),
            (["actor_rollout_ref.actor.use_kl_loss=true", "actor_rollout_ref.actor.kl_loss_type=kl+"], "k1", "k2"),
            (["actor_rollout_ref.actor.use_kl_loss=true", "actor_rollout_ref.actor.kl_loss_type=mse+"], "k2", None),
            (
                ["actor_rollout_ref.actor.use_kl_loss=true", "actor_rollout_ref.actor.kl_loss_type=low_var_kl"],
                "k3",
                None,
            ),
            (["algorithm.use_kl_in_reward=true", "algorithm.kl_penalty=low_var_kl+"], "k3", None),  # no gradient there
        )
    ):
        out = exp / f"v{i}.rlvr.yaml"
        done = rlvr(
            "import", "verl", generated, *base, *overrides, "--into", exp / "experiment.rlvr.yaml", "--out", out
        )
        assert done.code == 0, (overrides, done.stderr)
        kl = load(out).objective.kl
        assert (kl.estimator, kl.gradient) == (estimator, gradient), overrides
    plain = ["actor_rollout_ref.actor.use_kl_loss=true"]  # imported over v0's k3+: the peer's KL, whole
    done = rlvr(
        "import", "verl", generated, *base, *plain, "--into", exp / "v0.rlvr.yaml", "--out", exp / "p.rlvr.yaml"
    )
    assert done.code == 0, done.stderr
    assert load(exp / "p.rlvr.yaml").objective.kl.gradient is None
    done = rlvr("export", exp / "v0.rlvr.yaml", "--to", "verl", "--out", tmp_path / "verl", "--allow-inexact")
    assert done.code == 0, done.stderr
    assert "kl_loss_type: low_var_kl+" in (tmp_path / "verl" / "rlvr.yaml").read_text()
    for to in ("trl", "nemo-rl"):
        done = rlvr("export", exp / "v0.rlvr.yaml", "--to", to, "--out", tmp_path / to, "--allow-inexact")
        assert done.code == 1 and "no equivalent: objective.kl.gradient" in done.stderr, (to, done.stderr)
