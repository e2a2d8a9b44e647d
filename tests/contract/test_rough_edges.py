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


def test_integers_are_written_as_integers_and_a_huge_one_gets_a_plain_message(tmp_path: Path) -> None:
    base = (ROOT / "tests" / "contracts" / "valid" / "base.rlvr.yaml").read_text()
    assert "group_size: 4\n" in base
    (tmp_path / "f.rlvr.yaml").write_text(base.replace("group_size: 4\n", "group_size: 4.0\n"))
    run = rlvr("validate", tmp_path / "f.rlvr.yaml")
    assert run.code == 1 and "group_size: expected an integer, got the float 4.0; write 4" in run.stdout
    (tmp_path / "h.rlvr.yaml").write_text(base.replace("group_size: 4\n", "group_size: " + "9" * 5000 + "\n"))
    run = rlvr("validate", tmp_path / "h.rlvr.yaml")
    assert run.code == 1 and "an integer of 5,000 digits (at most 100)" in run.stdout
    assert "set_int_max_str_digits" not in run.stdout + run.stderr
    assert rlvr("validate", ROOT / "tests" / "contracts" / "valid" / "base.rlvr.yaml").code == 0  # as written: fine


def test_a_tag_on_a_mapping_is_refused_like_a_tag_on_a_scalar(tmp_path: Path) -> None:
    base = (ROOT / "tests" / "contracts" / "valid" / "base.rlvr.yaml").read_text()
    (tmp_path / "m.rlvr.yaml").write_text(base.replace("\nlength:\n", "\nlength: !!python/object:os.Foo\n", 1))
    run = rlvr("validate", tmp_path / "m.rlvr.yaml")
    assert run.code == 1 and "error[RLV001] unsupported tag" in run.stdout
    (tmp_path / "ok.rlvr.yaml").write_text(base.replace("\nlength:\n", "\nlength: !!map\n", 1))  # a standard tag
    assert rlvr("validate", tmp_path / "ok.rlvr.yaml").code == 0
