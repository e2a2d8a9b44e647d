"""The step line names a straggling process and a stale queue only when they matter."""

from __future__ import annotations

from rlvr_cli.commands.train import progress_line

BASE = {"step": 4, "reward_mean": 0.5, "kl": 0.01, "entropy": 2.0, "response_length_mean": 9.0, "step_seconds": 2.0}


def test_mfu_is_on_the_step_line() -> None:
    assert "  mfu 37.5%  " in progress_line(5, 10, {**BASE, "mfu": 0.375}, 10.0)
    assert "mfu" not in progress_line(5, 10, BASE, 10.0)


def test_a_rank_that_keeps_the_others_waiting_is_named() -> None:
    slow = progress_line(5, 10, {**BASE, "rank_lag_s": 0.9, "slowest_rank": 1.0}, 10.0)
    assert "rank 1 lags 0.9s" in slow
    assert "lags" not in progress_line(5, 10, {**BASE, "rank_lag_s": 0.3, "slowest_rank": 1.0}, 10.0)  # 15 %: noise


def test_samples_drawn_long_ago_are_named() -> None:
    assert "samples 5.0s old" in progress_line(5, 10, {**BASE, "rollout_age_s": 5.0}, 10.0)
    assert "old" not in progress_line(5, 10, {**BASE, "rollout_age_s": 1.5}, 10.0)  # drawn during the last step


def test_an_engine_that_drifts_from_the_trainer_is_named() -> None:
    drifting = {**BASE, "engine_logprob_diff_max": 0.74, "engine_mismatch_share": 0.62}
    assert "engine drifts: |Δ log p| up to 0.74 on 62% > 0.1" in progress_line(5, 10, drifting, 10.0)
    calm = {**BASE, "engine_logprob_diff_max": 4.8e-07, "engine_mismatch_share": 0.0}  # float noise
    assert "engine" not in progress_line(5, 10, calm, 10.0)
