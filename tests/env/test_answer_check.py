"""The built-in answer-equivalence verifier (`environment.answer_check`, math-verify): through
`rlvr init --template math`, validate, the verifier audit and training; its arms against a
naive checker that the hedges and reasoning-only answers would fool; timeouts; and the format
rules that keep it and a verifier function apart."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from rlvr_cli.audit.arms import answer_check_arms
from rlvr_cli.env.builtin.answer import AnswerCheck
from tests.conftest import edit, rlvr

CONTRACT = "experiment.rlvr.yaml"
TASKS = [
    {"id": "int", "answer": "3"},
    {"id": "big", "answer": "12000"},
    {"id": "third", "answer": "\\frac{1}{3}"},
    {"id": "frac", "answer": "\\frac{3}{4}"},
    {"id": "dec", "answer": "0.5"},
    {"id": "interval", "answer": "(-2, 2)"},
]


@pytest.fixture(scope="module")
def math_exp(tmp_path_factory: pytest.TempPathFactory) -> Path:
    folder = tmp_path_factory.mktemp("math") / "exp"
    made = rlvr("init", folder, "--template", "math")
    assert made.code == 0, made.stderr
    return folder


@pytest.mark.parametrize("extract", ["last_boxed", "answer_line", "whole"])
def test_every_arm_gets_its_verdict_where_a_naive_checker_is_fooled(extract: str) -> None:
    check = AnswerCheck(extract)
    naive = lambda task, response: task["answer"] in response  # noqa: E731 - the checker people write first
    fooled = 0
    for arm in answer_check_arms(TASKS, None, extract):
        verdict = check(arm.task, arm.response)
        assert (verdict.reward == 1.0) == (arm.expected == "accept"), (arm.name, arm.response, verdict)
        fooled += arm.expected == "reject" and naive(arm.task, arm.response)
    assert fooled >= len(TASKS) - 1  # hedged answers (and reasoning-only ones) pass a substring check


def test_a_runaway_comparison_is_a_timeout_verdict_not_a_hang() -> None:
    verdict = AnswerCheck("last_boxed", timeout_s=1)({"answer": "3"}, "\\boxed{9^{9^{9^{9^{9}}}}}")
    assert (verdict.status == "timeout" and verdict.reward is None) or verdict.reward == 0.0


@pytest.mark.slow  # trains or runs rlvr train: make test runs it, make test-fast does not
def test_the_math_template_validates_audits_clean_and_trains(math_exp: Path) -> None:
    assert rlvr("validate", "--deep", "--strict", math_exp / CONTRACT).code == 0
    audit = rlvr("audit", "verifier", math_exp / CONTRACT, "--format", "json", timeout=300)
    assert audit.code == 0, audit.stdout[-2000:]
    names = {o["name"].split("/", 1)[1] for o in audit.json()["outcomes"]}
    assert {"answer", "equivalent form", "near miss", "two answers", "answer only in the reasoning"} <= names
    run = rlvr("train", math_exp / CONTRACT, "--max-steps", "2", "--run-dir", math_exp / "run", timeout=300)
    assert run.code == 0, run.stderr[-2000:]
    plan = json.loads((math_exp / "run" / "plan.json").read_text())
    assert plan["environment"]["answer_check"] == {"extract": "last_boxed", "answer_field": "answer", "timeout_s": 5.0}


def test_an_answer_check_and_a_verifier_exclude_each_other(math_exp: Path, tmp_path: Path) -> None:
    contract = tmp_path / CONTRACT
    contract.write_text((math_exp / CONTRACT).read_text())
    edit(tmp_path, "  answer_check:\n", "  verifier: verifier:verify\n  answer_check:\n")
    both = rlvr("validate", contract)
    assert both.code == 1 and "not both" in both.stdout
    contract.write_text((math_exp / CONTRACT).read_text())
    edit(tmp_path, "    extract: last_boxed ", "    extract: last_line ")
    assert rlvr("validate", contract).code == 1  # an extraction the format does not know


@pytest.mark.parametrize(
    ("response", "reward"),
    [
        ("The price is \\boxed{\\$5}.", 1.0),  # an escaped dollar sign is currency, not math mode
        ("\\boxed{\\$5.00}", 1.0),
        ("\\boxed{$5$}", 1.0),
        ("\\boxed{\\$6}", 0.0),  # the paired case: a wrong amount is read, and wrong
    ],
)
def test_an_escaped_dollar_sign_is_read_as_currency(response: str, reward: float) -> None:
    verdict = AnswerCheck("last_boxed")({"answer": "5"}, response)
    assert verdict.status == "ok" and verdict.reward == reward, verdict


@pytest.mark.parametrize(
    ("answer", "response", "reward"),
    [
        ("\\frac{1}{3}", "\\boxed{0.333333}", 0.0),  # rounded: another number
        ("\\frac{1}{2}", "\\boxed{0.5000001}", 0.0),
        ("\\frac{1}{3}", "\\boxed{0.3333333333333}", 1.0),  # equal to 10 places
        ("[2, 5)", "\\boxed{2 \\le x < 5}", 1.0),  # an inequality is the interval it describes
        ("1000", "\\boxed{1\\,000}", 1.0),  # a thin space sets off thousands (math-verify reads 1·0)
        ("1.5", "\\boxed{1\\,5}", 0.0),
    ],
)
def test_the_policy_over_math_verify(answer: str, response: str, reward: float) -> None:
    assert AnswerCheck("last_boxed")({"answer": answer}, response).reward == reward


def test_without_the_policy_math_verify_accepts_rounded_decimals(monkeypatch: pytest.MonkeyPatch) -> None:
    """The paired case: the audit arm that proves the policy fails against math-verify's defaults."""
    from rlvr_cli.env.builtin import answer as module

    check = AnswerCheck("last_boxed")
    arm = next(a for a in answer_check_arms(TASKS, None, "last_boxed") if a.name == "third/rounded decimal")
    assert check(arm.task, arm.response).reward == 0.0
    monkeypatch.setattr(module, "POLICY", {})
    assert check(arm.task, arm.response).reward == 1.0
