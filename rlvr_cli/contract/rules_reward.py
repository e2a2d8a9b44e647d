"""Rules on what one reward is attached to: episodes of several sessions (which sessions the
episode's reward trains) and sets of responses judged together."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

from rlvr_cli.contract.diagnostics import Finding, error
from rlvr_cli.contract.models import Contract
from rlvr_cli.contract.rules import rule


@rule
def rlv205_session_credit(c: Contract, _: Path) -> Iterator[Finding]:
    reward, sessions = c.objective.reward, c.environment.max_sessions or 1
    where = ("objective", "reward", "credit")
    if reward.unit == "trajectory" and sessions > 1 and reward.credit is None:
        yield error(
            "RLV205",
            ("objective", "reward"),
            f"an episode may hold {sessions} sessions (environment.max_sessions) and earns one reward: say which "
            "sessions it trains — credit: all_sessions (each with the episode's advantage) or last_session",
        )
    elif reward.credit is not None and (reward.unit != "trajectory" or sessions == 1):
        why = (
            f"reward.unit '{reward.unit}' gives each unit its own reward"
            if reward.unit != "trajectory"
            else "an episode holds one session (environment.max_sessions absent or 1)"
        )
        yield error("RLV205", where, f"credit changes nothing here: {why}; drop it")


@rule
def rlv206_sets(c: Contract, _: Path) -> Iterator[Finding]:
    reward, env, size = c.objective.reward, c.environment, c.objective.reward.set_size
    where = ("objective", "reward", "set_size")
    if reward.unit != "set":
        if size is not None:
            yield error("RLV206", where, f"set_size changes nothing: reward.unit is '{reward.unit}'; drop it")
        return
    if size is None:
        yield error(
            "RLV206",
            ("objective", "reward"),
            "reward.unit 'set' judges set_size responses together: give set_size (≥ 2)",
        )
        return
    group = c.hyperparameters.group_size
    if size < 2:
        yield error("RLV206", where, "a set holds at least 2 responses (a set of 1 is reward.unit: response)")
    elif group % size or group // size < 2:
        yield error(
            "RLV206",
            ("hyperparameters", "group_size"),
            f"group_size {group} must hold at least two whole sets of {size} (the sets of a group are each "
            f"other's baseline): use a multiple of {size} that is ≥ {2 * size}",
        )
    if env.kind != "single_turn":
        yield error("RLV206", ("environment", "kind"), "reward.unit 'set' judges single-turn responses together")
    elif env.verifier is None or env.answer_check or env.unit_tests or env.judge:
        yield error(
            "RLV206",
            ("environment", "verifier"),
            "a set is judged by a verifier `module:function` called with the task and the list of the set's "
            "responses; answer_check, unit_tests and judge judge one response",
        )
    if c.data.hints is not None and c.data.hints.used:
        yield error("RLV206", ("data", "hints"), "hinted and unhinted members would share one set's reward")
