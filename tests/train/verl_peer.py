"""Run by verl's own environment (`.venv-verl`, built by `make install`): each case of the JSON
file given is computed with verl 0.9.1's own functions — `core_algos.compute_policy_loss_vanilla`
(dual-clip PPO), `core_algos.compute_policy_loss_gspo`, `rollout_corr_helper.
compute_rollout_correction_weights` — in float64, and the loss, its gradient with respect to the
log-probs and the weights are printed as JSON. tests/train/test_peers.py compares them with rlvr's.
"""

from __future__ import annotations

import json
import sys

import torch
from verl.trainer.ppo import core_algos
from verl.trainer.ppo.rollout_corr_helper import compute_rollout_correction_weights
from verl.workers.config import FSDPActorConfig


def tensor(values: list) -> torch.Tensor:
    return torch.tensor(values, dtype=torch.float64)


def run(case: dict) -> dict:
    logp = tensor(case["logp"]).requires_grad_(True)
    old, mask = tensor(case["old"]), tensor(case["mask"])
    adv = tensor(case["adv"])[:, None].expand_as(logp)  # verl's advantages are per token
    weights = None
    if case.get("correction"):
        kind, level = case["correction"]["kind"], case["correction"]["level"]
        threshold = (
            case["correction"]["cap"] if kind == "tis" else f"{case['correction']['low']}_{case['correction']['high']}"
        )
        weights, _ = compute_rollout_correction_weights(
            old - tensor(case["engine"]), mask, rollout_is=level, rollout_is_threshold=threshold
        )
    config = FSDPActorConfig(
        strategy="fsdp",
        rollout_n=1,
        ppo_micro_batch_size_per_gpu=1,
        clip_ratio=0.2,
        clip_ratio_low=0.2,
        clip_ratio_high=0.28,
        clip_ratio_c=case["dual"],
    )
    policy = (
        core_algos.compute_policy_loss_gspo if case["level"] == "sequence" else core_algos.compute_policy_loss_vanilla
    )
    loss, _ = policy(old, logp, adv, mask, case["agg"], config, rollout_is_weights=weights)
    loss.backward()
    return {
        "loss": float(loss.detach()),
        "grad": logp.grad.tolist(),
        "weights": None if weights is None else weights.tolist(),
    }


if __name__ == "__main__":
    with open(sys.argv[1], encoding="utf-8") as fh:
        cases = json.load(fh)
    print(json.dumps([run(case) for case in cases]))
