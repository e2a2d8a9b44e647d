"""Every term of the objective against numbers worked out by hand."""

from __future__ import annotations

import math

import pytest
import torch

from rlvr_cli.contract.models import Objective
from rlvr_cli.train.objective import (
    aggregate,
    clipped_surrogate,
    group_advantages,
    group_outcomes,
    kl_estimate,
    policy_loss,
    ratio,
)


def objective(
    scale: str = "group_std",
    baseline: str = "group_mean",
    std: str | None = "population",
    epsilon: float | None = 1e-12,
    aggregation: str = "token_mean",
    kl: dict | None = None,
    clip: dict | None = None,
    entropy_coef: float = 0.0,
) -> Objective:
    return Objective.model_validate(
        {
            "reward": {"unit": "response", "components": [{"name": "c", "weight": 1.0}], "on_invalid": "exclude"},
            "advantage": {"baseline": baseline, "scale": scale, "std": std, "epsilon": epsilon},
            "clip": clip or {"low": 0.2, "high": 0.28},
            "kl": kl or {"coef": 0.0},
            "entropy_coef": entropy_coef,
            "aggregation": aggregation,
        }
    )


def close(a: torch.Tensor, b: list[float], tol: float = 1e-5) -> None:
    assert torch.allclose(a.double(), torch.tensor(b, dtype=torch.float64), atol=tol), (a, b)


def test_group_std_population_and_sample() -> None:
    rewards = torch.tensor([1.0, 0.0, 0.0, 1.0])
    close(group_advantages(rewards, 4, objective(std="population")), [1, -1, -1, 1])  # mean .5, std .5
    s = 0.5 / math.sqrt(1 / 3)  # sample std of the group: sqrt(4 * .25 / 3)
    close(group_advantages(rewards, 4, objective(std="sample")), [s, -s, -s, s])


def test_epsilon_is_added_to_the_std() -> None:
    close(group_advantages(torch.tensor([1.0, 0.0]), 2, objective(epsilon=0.5)), [0.5, -0.5])  # .5 / (.5 + .5)


def test_batch_std_and_none() -> None:
    rewards = torch.tensor([1.0, 0.0, 1.0, 1.0])  # groups [1, 0] and [1, 1]
    batch_std = math.sqrt(0.1875)  # rewards' mean .75: (3 · .0625 + .5625) / 4
    close(group_advantages(rewards, 2, objective(scale="batch_std")), [0.5 / batch_std, -0.5 / batch_std, 0, 0])
    close(group_advantages(rewards, 2, objective(scale="none", std=None, epsilon=None)), [0.5, -0.5, 0, 0])


def test_all_equal_group_is_exactly_zero_and_counted() -> None:
    rewards = torch.tensor([0.1, 0.1, 0.1, 1.0, 1.0, 1.0, 0.0, 0.0, 0.0, 1.0, 0.0, 0.0])
    adv = group_advantages(rewards, 3, objective(epsilon=1e-6))
    assert torch.equal(adv[:9], torch.zeros(9))  # no epsilon-made signal
    assert group_outcomes(rewards, 3, best=1.0) == {"groups": 4, "zero_std": 3, "all_correct": 1, "all_wrong": 1}


def test_excluded_samples_leave_the_group_statistics() -> None:
    rewards = torch.tensor([1.0, float("nan"), 0.0, 0.0])  # valid [1, 0, 0]: mean 1/3
    close(group_advantages(rewards, 4, objective(scale="none", std=None, epsilon=None)), [2 / 3, 0, -1 / 3, -1 / 3])


def test_the_leave_one_out_baseline_is_the_mean_of_the_other_rewards() -> None:
    """RLOO (verl's `rloo`, TRL's RLOOTrainer): r − (S − r)/(n − 1); an excluded sample is
    neither counted nor averaged; a group of one valid reward gets 0."""
    loo = objective(baseline="leave_one_out", scale="none", std=None, epsilon=None)
    rewards = torch.tensor(
        [1.0, 0.0, 0.0, 0.0, 1.0, float("nan"), 0.0, 0.0, 1.0, float("nan"), float("nan"), float("nan")]
    )
    close(group_advantages(rewards, 4, loo), [1, -1 / 3, -1 / 3, -1 / 3, 1, 0, -1 / 2, -1 / 2, 0, 0, 0, 0])
    with_mean = group_advantages(rewards, 4, objective(scale="none", std=None, epsilon=None))
    assert not torch.allclose(with_mean, group_advantages(rewards, 4, loo))  # the two baselines differ


def test_the_leave_one_out_std_is_the_std_of_the_other_rewards() -> None:
    """NeMo RL's `use_leave_one_out_baseline` with `normalize_rewards`: its own unit test's
    baselines [2.5, 2, 1.5] and stds [.707107, 1.414214, .707107] for rewards [1, 2, 3]
    (tests/unit/algorithms/test_utils.py), divided as its estimator does, + 1e-6; where the
    other rewards are all equal their std is 0 and the centred reward is not divided."""
    nemo = objective(baseline="leave_one_out", scale="leave_one_out_std", std="sample", epsilon=1e-6)
    baseline, std = torch.tensor([2.5, 2.0, 1.5]), torch.tensor([0.707107, 1.414214, 0.707107])
    expected = ((torch.tensor([1.0, 2.0, 3.0]) - baseline) / (std + 1e-6)).tolist()
    close(group_advantages(torch.tensor([1.0, 2.0, 3.0, 4.0, 5.0, 6.0]), 3, nemo), expected * 2)
    close(group_advantages(torch.tensor([1.0, 0.0, 0.0, 0.0]), 4, nemo), [1.0, *[-1 / 3 / math.sqrt(1 / 3)] * 3], 1e-5)
    close(group_advantages(torch.tensor([1.0, 0.0]), 2, nemo), [1.0, -1.0])  # one other reward: no sample std
    population = objective(baseline="leave_one_out", scale="leave_one_out_std", std="population", epsilon=1e-6)
    close(group_advantages(torch.tensor([1.0, 2.0, 3.0]), 3, population), [-3.0, 0.0, 3.0])  # others' std .5


def test_clipped_surrogate_positive_and_negative_advantage() -> None:
    r = torch.tensor([[0.5, 1.0, 1.5], [0.5, 1.0, 1.5]])
    loss, clipped = clipped_surrogate(r, torch.tensor([1.0, -1.0]), 0.2, 0.28)
    close(loss, [[-0.5, -1.0, -1.28], [0.8, 1.0, 1.5]])
    assert clipped.tolist() == [[False, False, True], [True, False, False]]


def test_dual_clip_bounds_negative_advantages() -> None:
    r = torch.tensor([[1.5, 4.0]])
    loss, clipped = clipped_surrogate(r, torch.tensor([-1.0]), 0.2, 0.28, dual=3.0)
    close(loss, [[1.5, 3.0]])  # max(4, 1.28) = 4 is capped at c·|A| = 3
    assert clipped.tolist() == [[False, True]]
    pos, _ = clipped_surrogate(r, torch.tensor([1.0]), 0.2, 0.28, dual=3.0)
    close(pos, [[-1.28, -1.28]])  # dual clip leaves positive advantages alone


def test_kl_estimators() -> None:
    logp, ref = torch.log(torch.tensor([[0.5]])), torch.log(torch.tensor([[0.25]]))
    ln2 = math.log(2)
    close(kl_estimate(logp, ref, "k1"), [[ln2]])
    close(kl_estimate(logp, ref, "k2"), [[0.5 * ln2**2]])
    close(kl_estimate(logp, ref, "k3"), [[0.5 - 1 + ln2]])


def test_ratio() -> None:
    close(ratio(torch.log(torch.tensor([[0.3]])), torch.log(torch.tensor([[0.2]]))), [[1.5]])


@pytest.mark.parametrize(
    ("how", "expected"),
    [
        ("token_mean", 7 / 3),
        ("seq_mean_token_mean", 2.75),
        ("seq_mean_token_sum", 3.5),
        ("constant_norm", 7 / 6),
    ],
)
def test_aggregations(how: str, expected: float) -> None:
    per_token = torch.tensor([[1.0, 2.0, 3.0], [4.0, 5.0, 6.0]])
    mask = torch.tensor([[1, 1, 0], [1, 0, 0]])
    assert aggregate(per_token, mask, how, max_response_tokens=3).item() == pytest.approx(expected)


def test_kl_placement_loss_adds_beta_kl_and_reward_placement_does_not() -> None:
    logp = torch.log(torch.tensor([[0.5, 0.5]]))
    old, ref = logp.clone(), torch.log(torch.tensor([[0.25, 0.25]]))
    mask = torch.tensor([[1, 1]])
    adv = torch.tensor([1.0])
    k3 = 0.5 - 1 + math.log(2)
    in_loss, stats = policy_loss(
        logp,
        old,
        ref,
        adv,
        mask,
        objective(kl={"coef": 0.1, "estimator": "k3", "placement": "loss"}),
        max_response_tokens=2,
    )
    assert in_loss.item() == pytest.approx(-1.0 + 0.1 * k3)
    assert stats.kl_sum == pytest.approx(2 * k3) and stats.ratio_max == 1.0 and stats.clipped == 0
    in_reward, _ = policy_loss(
        logp,
        old,
        ref,
        adv,
        mask,
        objective(kl={"coef": 0.1, "estimator": "k3", "placement": "reward"}),
        max_response_tokens=2,
    )
    assert in_reward.item() == pytest.approx(-1.0)


def test_entropy_bonus() -> None:
    logp = torch.zeros(1, 2)
    loss, stats = policy_loss(
        logp,
        logp,
        None,
        torch.tensor([0.0]),
        torch.ones(1, 2),
        objective(entropy_coef=0.5),
        max_response_tokens=2,
        entropy=torch.tensor([[2.0, 4.0]]),
    )
    assert loss.item() == pytest.approx(-0.5 * 3.0) and stats.entropy_sum == 6.0


@pytest.mark.parametrize("how", ["token_mean", "constant_norm", "seq_mean_token_mean", "seq_mean_token_sum"])
def test_four_micro_batches_give_the_gradient_of_one_batch(how: str) -> None:
    torch.manual_seed(0)
    B, T = 16, 7
    base = torch.randn(B, T)
    old = base + 0.1 * torch.randn(B, T)
    mask = (torch.rand(B, T) > 0.3).int()
    mask[:, 0] = 1
    adv = torch.randn(B)
    obj = objective(aggregation=how)

    def grad(chunks: int) -> torch.Tensor:
        logp = base.clone().requires_grad_(True)
        for part in torch.arange(B).chunk(chunks):
            loss, _ = policy_loss(
                logp[part],
                old[part],
                None,
                adv[part],
                mask[part],
                obj,
                max_response_tokens=T,
                total_tokens=float(mask.sum()),
                total_sequences=B,
            )
            loss.backward()
        return logp.grad

    torch.testing.assert_close(grad(4), grad(1), atol=1e-7, rtol=1e-6)


def test_local_token_means_would_differ() -> None:
    """The check above can fail: dividing each micro-batch by its own token count changes the gradient."""
    torch.manual_seed(1)
    base, mask = torch.randn(16, 5), (torch.rand(16, 5) > 0.5).int()
    mask[:, 0] = 1
    adv, obj = torch.randn(16), objective()
    logp = base.clone().requires_grad_(True)
    for part in torch.arange(16).chunk(4):
        policy_loss(logp[part], base[part], None, adv[part], mask[part], obj, max_response_tokens=5)[0].backward()
    local = logp.grad.clone()
    logp.grad = None
    policy_loss(logp, base, None, adv, mask, obj, max_response_tokens=5)[0].backward()
    assert not torch.allclose(local / 4, logp.grad, atol=1e-6)


def test_every_value_the_contract_accepts_for_the_objective_has_its_math() -> None:
    """Each objective `Literal` of the contract's models equals the registry that computes it,
    so a new value cannot be accepted by validate and missed by the math (or the reverse)."""
    import typing

    from rlvr_cli.contract import models
    from rlvr_cli.rollout.rollouts import ROLLOUTS
    from rlvr_cli.train import objective as obj

    def values(model: type, name: str) -> set:
        annotation = model.model_fields[name].annotation
        if typing.get_origin(annotation) is typing.Literal:
            return set(typing.get_args(annotation))
        found = set()
        for arg in typing.get_args(annotation) or (annotation,):
            found |= set(typing.get_args(arg)) if typing.get_origin(arg) is typing.Literal else set()
        return found

    section = lambda name: models.Objective.model_fields[name].annotation  # noqa: E731
    advantage, kl = section("advantage"), section("kl")
    assert values(models.Objective, "aggregation") == set(obj.AGGREGATIONS)
    assert values(advantage, "scale") == set(obj.ADVANTAGE_SCALES)
    assert values(advantage, "baseline") == set(obj.ADVANTAGE_BASELINES)
    assert values(advantage, "std") == set(obj.STD_KINDS)
    assert values(kl, "estimator") == set(obj.KL_ESTIMATORS)
    assert values(kl, "placement") == set(obj.KL_PLACEMENTS)
    assert values(models.Environment, "kind") == set(ROLLOUTS)
    # and the check itself sees a missing value
    assert values(kl, "estimator") != set(obj.KL_ESTIMATORS) - {"k2"}
