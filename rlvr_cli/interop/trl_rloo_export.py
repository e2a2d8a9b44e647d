"""The contract → TRL 1.16's RLOOConfig keyword arguments, for a contract that takes the answer's
likelihood ratio (`ratio.level: sequence_sum`): RLOOTrainer's objective is fixed in its code, so
each of its parts the contract states otherwise is refused (trl_rloo_map.py is the other
direction); the batch, sampling and optimizer are written as for GRPOConfig."""

from __future__ import annotations

from rlvr_cli.contract.models import Contract
from rlvr_cli.interop import trl_export
from rlvr_cli.interop.common import Mapping


def export_config(contract: Contract, processes: int = 1) -> Mapping:
    """RLOOConfig keywords and the differences."""
    out = Mapping()
    _objective(contract, out)
    trl_export.batch(contract, out, processes)
    trl_export.sampling(contract, out)
    trl_export.optimizer(contract, out)
    return out


def _objective(contract: Contract, out: Mapping) -> None:
    o, fixed = contract.objective, "RLOOTrainer"
    if (o.advantage.baseline, o.advantage.scale) != ("leave_one_out", "none"):
        out.refuse(
            "objective.advantage",
            f"{o.advantage.baseline}/{o.advantage.scale}: {fixed} subtracts the others' mean and divides by no std",
        )
    w = o.advantage.whiten
    out.set("normalize_advantages", w is not None, "objective.advantage.whiten")
    if w is not None and (w.over, w.std, w.epsilon, w.epsilon_use) != ("batch", "sample", 1e-4, "add_to_std"):
        out.refuse(
            "objective.advantage.whiten",
            f"over {w.over}, {w.std} std, epsilon {w.epsilon} {w.epsilon_use}: {fixed} whitens over the batch's "
            "answers, each once, ÷ (sample std + 1e-4)",
        )
    if o.aggregation != "seq_mean_token_mean":
        out.refuse("objective.aggregation", f"{o.aggregation}: {fixed} averages each answer's loss over answers")
    if o.ratio is not None and o.ratio.denominator == "engine":
        out.refuse("objective.ratio.denominator", f"engine: {fixed} divides by its own recomputed log-probs")
    if o.clip.kind not in (None, "ppo"):
        out.refuse("objective.clip.kind", f"{o.clip.kind}: {fixed} clips PPO's way")
    out.set("epsilon", o.clip.low, "objective.clip.low")
    out.set("epsilon_high", o.clip.high, "objective.clip.high")
    if o.clip.dual is not None:
        out.refuse("objective.clip.dual", f"{o.clip.dual}: {fixed} has no dual clip")
    out.set("beta", o.kl.coef, "objective.kl.coef")
    if o.kl.coef > 0 and (o.kl.estimator, o.kl.placement) != ("k1", "reward"):
        out.refuse("objective.kl", f"{o.kl.estimator} in the {o.kl.placement}: {fixed}'s KL is k1 in the reward")
    if o.entropy_coef > 0:
        out.refuse("objective.entropy_coef", f"{o.entropy_coef}: {fixed} has no entropy bonus")
    if o.rejection:
        out.refuse("objective.rejection", f"{fixed} rejects nothing by the engine/trainer divergence")
    if o.entropy_mask is not None:
        out.refuse("objective.entropy_mask", f"{fixed} has no entropy mask of the policy loss")
    if o.off_policy_mask is not None:
        out.refuse("objective.off_policy_mask", f"{fixed} has no off-policy sequence masking")
    if o.corrects:
        out.refuse("objective.correction", f"{fixed} corrects no engine mismatch")
    trl_export.reward(contract, out, "it still counts among the answers the loss averages")
