"""NeMo RL's rewards on their way to advantages, as the contract states them: the advantage
estimator (`grpo.adv_estimator`, or the older `grpo.normalize_rewards` /
`grpo.use_leave_one_out_baseline`), reward scaling and reward shaping (interop/nemo_rl_map.py
reads the rest of the config)."""

from __future__ import annotations

from typing import Any

from rlvr_cli.interop.common import Mapping, plain
from rlvr_cli.interop.nemo_rl_config import G, Reader

RFPP = "reinforce_plus_plus"
#: NeMo RL's ReinforcePlusPlusAdvantageEstimator's global normalisation as the contract's `whiten`
#: (key, value, why); nemo_rl_export.py checks the same
RFPP_WHITEN = (
    ("over", "batch_tokens", "NeMo RL: every valid response token of the batch"),
    ("std", "population", "NeMo RL: Σ mask·(A − mean)² / Σ mask (not an option)"),
    ("epsilon", 1e-8, "NeMo RL: rsqrt(var.clamp(min=1e-8)) (not an option)"),
    ("epsilon_use", "variance_floor", "NeMo RL: rsqrt(var.clamp(min=1e-8)) (not an option)"),
)


def advantage(get: Reader, out: Mapping, weights: list[float]) -> None:
    section = f"{G}.adv_estimator" if get.given(f"{G}.adv_estimator.name") else G
    name = get(f"{G}.adv_estimator.name") if section != G else "grpo"
    if name == RFPP:
        _reinforce_plus_plus(get, out)
        return
    if name != "grpo":
        out.refuse(f"{G}.adv_estimator.name", f"{name}: the contract's advantages are GRPO's or REINFORCE++'s")
    loo, normalize = get(f"{section}.use_leave_one_out_baseline"), get(f"{section}.normalize_rewards")
    source = get.source(f"{section}.use_leave_one_out_baseline")
    out.set("objective.advantage.baseline", "leave_one_out" if loo else "group_mean", source)
    scale = ("leave_one_out_std" if loo else "group_std") if normalize else "none"
    out.set("objective.advantage.scale", scale, get.source(f"{section}.normalize_rewards"))
    if normalize:
        std_of = "the other rewards of the group" if loo else "the group"
        out.set("objective.advantage.std", "sample", f"NeMo RL: the sample std (n − 1) of {std_of}, not an option")
        out.set("objective.advantage.epsilon", 1e-6, "NeMo RL adds 1e-6 where the std is not 0, not an option")
        out.bound(
            "objective.advantage.epsilon", "NeMo RL releases before the 1e-6 divide by the std alone (1e-6 of it)"
        )
    if get(f"{G}.reward_scaling.enabled"):
        _reward_scaling(get, out, weights)


def _reinforce_plus_plus(get: Reader, out: Mapping) -> None:
    """REINFORCE++ with baseline (`minus_baseline`): r − the group's mean, then whitened over every
    valid response token of the batch; its estimator reads neither normalize_rewards nor
    use_leave_one_out_baseline."""
    key = f"{G}.adv_estimator.minus_baseline"
    if not get(key):
        out.refuse(key, f"{plain(get(key))}: plain REINFORCE++, the rewards whitened with no group baseline")
        return
    out.set("objective.advantage.baseline", "group_mean", get.source(key))
    out.set("objective.advantage.scale", "none", f"NeMo RL's {RFPP} divides by no group std")
    for field, value, why in RFPP_WHITEN:
        out.set(f"objective.advantage.whiten.{field}", value, why)


def _reward_scaling(get: Reader, out: Mapping, weights: list[float]) -> None:
    """target_min + (r − source_min)·a, a = (target_max − target_min)/(source_max − source_min): the
    shift changes no advantage (the baseline takes it away, the std does not see it), the slope is
    the components' weights × a."""
    s = f"{G}.reward_scaling"
    lows, highs = (get(f"{s}.source_min"), get(f"{s}.target_min")), (get(f"{s}.source_max"), get(f"{s}.target_max"))
    if None in (*lows, *highs) or highs[0] == lows[0]:
        out.refuse(s, f"source [{lows[0]}, {highs[0]}] → target [{lows[1]}, {highs[1]}]: not an affine map")
        return
    slope = (highs[1] - lows[1]) / (highs[0] - lows[0])
    if slope <= 0:
        out.refuse(s, f"slope {slope:g}: a reward scaled so that worse is better")
        return
    shift = lows[1] - lows[0] * slope
    out.set("objective.reward.weights", [w * slope for w in weights], f"the base's weights × {slope:g} ({s})")
    if shift:
        out.differs(s, f"NeMo RL adds {shift:g} to every reward: no advantage changes, the recorded rewards do")


def reward_shaping(get: Reader, out: Mapping) -> None:
    """The DAPO overlong penalty or the stop-properly factor; where one shapes the reward under
    dynamic sampling, NeMo RL compares the unshaped rewards of a group (`unshaped_total_reward`)."""
    s = f"{G}.reward_shaping"
    if not get(f"{s}.enabled"):
        return
    coef = get(f"{s}.stop_properly_penalty_coef")
    if coef is not None:  # NeMo RL then ignores the overlong keys
        _stop_properly(get, out, coef)
    else:
        _overlong(get, out)
    shaped = "length.overlong_penalty" in out.values or out.values.get("length.on_truncated") == "penalize"
    if shaped and out.values.get("length.dynamic_sampling.drop_uniform_groups"):
        out.set(
            "length.dynamic_sampling.uniform_on",
            "verifier_reward",
            f"NeMo RL's dynamic sampling compares unshaped_total_reward, the reward before {s}",
        )


def _overlong(get: Reader, out: Mapping) -> None:
    s = f"{G}.reward_shaping"
    buffer, factor, limit = (
        get(f"{s}.overlong_buffer_length"),
        get(f"{s}.overlong_buffer_penalty"),
        get(f"{s}.max_response_length"),
    )
    if None in (buffer, factor, limit):
        out.refuse(s, "enabled without overlong_buffer_length, overlong_buffer_penalty and max_response_length")
        return
    out.set("length.overlong_penalty", {"buffer_tokens": int(buffer), "factor": float(factor)}, f"nemo-rl {s}")
    budget = out.values.get("length.max_response_tokens")
    if budget is not None and budget != limit:
        out.differs(
            f"{s}.max_response_length",
            f"{limit}: NeMo RL's penalty starts at {limit} − {buffer} tokens, the contract's at max_response_tokens "
            f"{budget} − {buffer}",
        )


def _stop_properly(get: Reader, out: Mapping, coef: Any) -> None:
    """A truncated response's reward × coef: 0 is `on_truncated: penalize` with a reward of 0, 1
    changes nothing; any other factor keeps part of a verdict the contract cannot scale."""
    key = f"{G}.reward_shaping.stop_properly_penalty_coef"
    if coef == 1:
        return
    if coef != 0:
        out.refuse(key, f"{plain(coef)}: a truncated response's reward scaled by it (0 and 1 have equivalents)")
    elif out.values.get("length.on_truncated") == "exclude":
        out.differs(key, "0.0: beside overlong_filtering, a truncated response trains on nothing either way")
    else:
        out.set("length.on_truncated", "penalize", f"nemo-rl {key}: 0.0, a truncated response's reward × 0")
        out.set("length.truncation_penalty", 0.0, f"nemo-rl {key}: 0.0, whatever its verdict")
