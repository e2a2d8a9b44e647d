"""Small things a new user meets on the first day."""

from __future__ import annotations

from pathlib import Path

from tests.conftest import ROOT, rlvr


def test_an_unclosed_bracket_says_where_it_was_opened(tmp_path: Path) -> None:
    bad = tmp_path / "b.rlvr.yaml"
    bad.write_text("contract_version: 1\nname: x\nobjective:\n  clip: {low: 0.2, high: [0.28\n  kl: {coef: 0}\n")
    run = rlvr("validate", bad)
    assert run.code == 1 and "error[RLV001]" in run.stdout
    assert "opened at line 4, column 26" in run.stdout


def test_audit_verifier_states_its_summary_once(tool_use: Path) -> None:
    run = rlvr("audit", "verifier", tool_use / "experiment.rlvr.yaml", timeout=120)
    both = run.stdout + run.stderr
    assert run.code == 0 and both.count("disagreement(s)") == 1 and "disagreement" not in run.stdout


def test_the_declared_license_is_in_the_repository() -> None:
    assert 'license = "Apache-2.0"' in (ROOT / "pyproject.toml").read_text()
    assert (ROOT / "LICENSE").read_text().lstrip().startswith("Apache License")


def test_a_rule_can_watch_holdout_correctness_by_component(tmp_path: Path) -> None:
    text = (ROOT / "contracts" / "grpo-cpu.rlvr.yaml").read_text()
    rule = "    - {name: nan-guard,"
    watch = "    - {name: correct-drop, metric: holdout/correct, when: '< 0.05', window: 3, action: pause, owner: me}\n"
    (tmp_path / "ok.rlvr.yaml").write_text(text.replace(rule, watch + rule))
    assert rlvr("validate", "--format", "json", tmp_path / "ok.rlvr.yaml").json()["files"][0]["valid"]
    (tmp_path / "bad.rlvr.yaml").write_text(text.replace(rule, watch.replace("holdout/correct", "holdout/nope") + rule))
    bad = rlvr("validate", tmp_path / "bad.rlvr.yaml")
    assert bad.code == 1 and "error[RLV604]" in bad.stdout and "not a reward component" in bad.stdout
