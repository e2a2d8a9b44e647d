"""Trajectory matching on environments of two domains (env/trajectory.py): a golden path in
the task makes the server's verdict state AND path, with a `path` component; matchers (exact,
tolerance, regex, any), orders (strict, partial, unordered) and optional steps behave as
documented; a malformed path is a verifier_error, never a reward."""

from __future__ import annotations

from typing import Any

import pytest

from tests.env.domains import Bank, Inventory

LOOKUP_THEN_SET = {
    "order": "strict",
    "calls": [
        {"tool": "list_items"},
        {"tool": "set_quantity", "args": {"item": {"exact": "pear"}, "quantity": "any"}},
    ],
}


def episode(server: Any, task: dict[str, Any], calls: list[tuple[str, dict[str, Any]]]) -> Any:
    sid = server.seed_session(task)
    for name, arguments in calls:
        server.call(sid, name, arguments)
    verdict = server.verify_session(sid)
    server.close_session(sid)
    return verdict


def test_right_state_and_path_earns_the_reward_with_a_path_component() -> None:
    task = {"id": "t", "item": "pear", "quantity": 9, "trajectory": LOOKUP_THEN_SET}
    verdict = episode(Inventory(), task, [("list_items", {}), ("set_quantity", {"item": "pear", "quantity": 9})])
    assert verdict.reward == 1.0 and verdict.components["path"] == 1.0


def test_right_state_by_a_path_off_the_golden_one_earns_nothing() -> None:
    task = {"id": "t", "item": "pear", "quantity": 9, "trajectory": LOOKUP_THEN_SET}
    blind = episode(Inventory(), task, [("set_quantity", {"item": "pear", "quantity": 9})])  # no lookup first
    assert blind.reward == 0.0 and blind.components == {"success": 0.0, "path": 0.0}
    assert "list_items" in blind.detail
    late = episode(
        Inventory(), task, [("set_quantity", {"item": "pear", "quantity": 9}), ("list_items", {})]
    )  # the lookup came after the change
    assert late.reward == 0.0 and "strict order" in late.detail
    unordered = {**LOOKUP_THEN_SET, "order": "unordered"}
    assert (
        episode(
            Inventory(),
            {**task, "trajectory": unordered},
            [("set_quantity", {"item": "pear", "quantity": 9}), ("list_items", {})],
        ).reward
        == 1.0
    )


def test_a_path_alone_is_not_enough_the_state_must_be_right_too() -> None:
    task = {"id": "t", "item": "pear", "quantity": 9, "trajectory": LOOKUP_THEN_SET}
    wrong = episode(Inventory(), task, [("list_items", {}), ("set_quantity", {"item": "pear", "quantity": 8})])
    assert wrong.reward == 0.0 and wrong.components["path"] == 1.0  # on the path, wrong state


@pytest.mark.parametrize(
    ("amount", "memo", "ok"),
    [(25.0, None, True), (25.004, None, True), (26.0, None, False)],
)
def test_tolerance_partial_order_and_optional_steps_on_a_bank(amount: float, memo: Any, ok: bool) -> None:
    path = {
        "order": "partial",
        "calls": [
            {"tool": "balance", "args": {"account": {"regex": "^ali"}}},
            {"tool": "balance", "args": {"account": {"exact": "bob"}}},
            {"tool": "transfer", "args": {"amount": {"tolerance": [25, 0.01]}, "source": "any"}, "after": [0]},
            {"tool": "balance", "args": {"account": {"exact": "carol"}}, "optional": True},
        ],
    }

    class Accepting(Bank):  # judge the path alone
        def verify(self, state, task, calls, final_message):  # type: ignore[no-untyped-def]
            from rlvr_cli.env.verdict import Verdict

            return Verdict("ok", 1.0, {"success": 1.0})

    calls = [
        ("balance", {"account": "alice"}),
        ("transfer", {"source": "alice", "target": "bob", "amount": amount}),
        ("balance", {"account": "bob"}),  # after the transfer: partial order allows it
    ]
    verdict = episode(Accepting(), {"id": "b", "trajectory": path}, calls)
    assert (verdict.reward == 1.0) is ok and verdict.components["path"] == float(ok)


def test_a_malformed_path_is_a_verifier_error_never_a_reward() -> None:
    task = {"id": "t", "item": "pear", "quantity": 9, "trajectory": {"order": "sideways", "calls": []}}
    verdict = episode(Inventory(), task, [("list_items", {})])
    assert verdict.status == "verifier_error" and "trajectory" in verdict.detail
    bad_matcher = {"order": "strict", "calls": [{"tool": "list_items", "args": {"x": {"fuzzy": 1}}}]}
    verdict = episode(Inventory(), {**task, "trajectory": bad_matcher}, [("list_items", {"x": 1})])
    assert verdict.status == "verifier_error"
