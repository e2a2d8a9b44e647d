"""The numbers an update reports (metrics.jsonl): the loss terms' statistics summed over every
process, and what each metric is made of."""

from __future__ import annotations

from rlvr_cli.train import distributed as dist
from rlvr_cli.train import objective as obj
from rlvr_cli.train.importance import correction_metrics
from rlvr_cli.train.setup import Setup


def global_stats(stats: obj.LossStats) -> obj.LossStats:
    """Every rank reports the numbers of the whole batch."""
    if not dist.active():
        return stats
    return obj.LossStats(
        dist.total(stats.tokens),
        dist.total(stats.clipped),
        dist.maximum(stats.ratio_max),
        dist.total(stats.kl_sum),
        dist.total(stats.entropy_sum),
        dist.total(stats.pg_loss),
        dist.total(stats.weight_sum),
        dist.total(stats.weight_cut),
        dist.total(stats.masked),
    )


def update_metrics(
    setup: Setup, stats: obj.LossStats, loss: float, grad_norm: float, nonfinite: float
) -> dict[str, float]:
    tokens = max(stats.tokens, 1.0)
    return {
        "nonfinite_count": nonfinite,
        "loss": loss,
        "pg_loss": stats.pg_loss,
        "kl": stats.kl_sum / tokens if setup.reference is not None else 0.0,
        "entropy": stats.entropy_sum / tokens,
        "clip_fraction": stats.clipped / tokens,
        "ratio_max": stats.ratio_max,
        "grad_norm": grad_norm,
        "lr": setup.scheduler.get_last_lr()[0],
        **correction_metrics(setup.contract, stats.weight_sum, stats.weight_cut, tokens),
        **({"off_policy_masked_share": stats.masked / tokens} if setup.contract.objective.off_policy_mask else {}),
    }
