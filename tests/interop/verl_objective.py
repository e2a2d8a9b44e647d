"""Run by verl's own environment (`.venv-verl`) on a folder `rlvr export --to verl` wrote: verl's
Hydra composes the exported config, its actor config is built from it as verl builds it
(`omega_conf_to_dataclass`), and each case of the JSON file is computed with verl 0.9.1's own
functions under that config — the advantage estimator `algorithm.adv_estimator` names, the policy loss its
`policy_loss.loss_mode` names, `compute_rollout_correction_weights`, `kl_penalty`, `agg_loss` —
added up as verl's v1 `ppo_loss` adds them. Prints JSON: for each (folder, cases) pair, each
case's advantages, loss and gradient with respect to the log-probs."""

from __future__ import annotations

import json
import sys

import numpy as np
import torch
from hydra import compose, initialize_config_dir
from verl.trainer.ppo import core_algos
from verl.trainer.ppo.rollout_corr_helper import compute_rollout_correction_weights
from verl.utils.config import omega_conf_to_dataclass


def tensor(values: list) -> torch.Tensor:
    return torch.tensor(values, dtype=torch.float64)


def run(config, actor, case: dict) -> dict:
    logp = tensor(case["logp"]).requires_grad_(True)
    old, ref, engine, mask = (tensor(case[k]) for k in ("old", "ref", "engine", "mask"))
    rewards = torch.zeros_like(mask, dtype=torch.float32 if case.get("float32") else torch.float64)
    rewards[:, 0] = tensor(case["rewards"])  # float32 where verl's trainer keeps them so
    index = np.repeat(np.arange(len(case["rewards"]) // case["group_size"]), case["group_size"])
    estimator = core_algos.get_adv_estimator_fn(config.algorithm.adv_estimator)  # as verl's compute_advantage
    adv, _ = estimator(
        token_level_rewards=rewards,
        response_mask=mask,
        index=index,
        epsilon=1e-6,
        norm_adv_by_std_in_grpo=config.algorithm.norm_adv_by_std_in_grpo,
    )
    weights = None
    correction = config.algorithm.rollout_correction
    if correction.rollout_is:
        weights, _ = compute_rollout_correction_weights(
            old - engine, mask, rollout_is=correction.rollout_is, rollout_is_threshold=correction.rollout_is_threshold
        )
    actor.global_batch_info.update(
        dp_size=1,
        batch_num_tokens=mask.sum(),
        global_batch_size=mask.shape[0],
        loss_scale_factor=actor.loss_scale_factor,
    )
    policy = core_algos.get_policy_loss_fn(actor.policy_loss.loss_mode)
    loss, _ = policy(old, logp, adv, mask, actor.loss_agg_mode, actor, rollout_is_weights=weights)
    if actor.use_kl_loss:
        kld = core_algos.kl_penalty(logprob=logp, ref_logprob=ref, kl_penalty=actor.kl_loss_type)
        loss = (
            loss + core_algos.agg_loss(kld, mask, actor.loss_agg_mode, **actor.global_batch_info) * actor.kl_loss_coef
        )
    loss.backward()
    return {"advantages": adv[:, 0].tolist(), "loss": float(loss.detach()), "grad": logp.grad.tolist()}


def main(folder: str, cases_file: str) -> list[dict]:
    with initialize_config_dir(config_dir=folder, version_base=None):
        config = compose(config_name="rlvr")
    actor = omega_conf_to_dataclass(config.actor_rollout_ref.actor)
    with open(cases_file, encoding="utf-8") as fh:
        cases = json.load(fh)
    return [run(config, actor, case) for case in cases]


if __name__ == "__main__":  # FOLDER CASES [FOLDER CASES ...]: one answer list per pair, in one process
    pairs = sys.argv[1:]
    print(json.dumps([main(pairs[i], pairs[i + 1]) for i in range(0, len(pairs), 2)]))
