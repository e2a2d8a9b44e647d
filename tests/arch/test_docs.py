"""The reference docs cannot drift: docs/contract.md's key table and docs/rules.md are generated
from the code, and every rule code the code can report is documented (and vice versa)."""

from __future__ import annotations

import re

from rlvr_cli.codes import BY_CODE, markdown
from rlvr_cli.commands.schema import BEGIN, END, contract_markdown
from tests.conftest import ROOT, rlvr


def test_contract_reference_lists_every_key_of_the_schema() -> None:
    text = (ROOT / "docs" / "contract.md").read_text()
    generated = text[text.index(BEGIN) : text.index(END) + len(END)]
    assert generated == contract_markdown(), "run: rlvr schema contract --markdown (and paste it into docs/contract.md)"


def test_rules_reference_is_generated_from_the_code_table() -> None:
    assert (ROOT / "docs" / "rules.md").read_text() == markdown(), "regenerate docs/rules.md from rlvr_cli/codes.yaml"


def test_every_code_the_code_reports_is_documented() -> None:
    emitted = set()
    for path in (ROOT / "rlvr_cli").rglob("*.py"):
        if path.name != "codes.py":
            emitted |= set(re.findall(r"\"(RL[VT]\d{3})\"", path.read_text()))
    assert emitted - set(BY_CODE) == set(), "codes reported but not documented"
    assert set(BY_CODE) - emitted == set(), "codes documented but never reported"


def test_rule_command_explains_a_code_and_refuses_an_unknown_one() -> None:
    shown = rlvr("rule", "rlv604")
    assert shown.code == 0 and shown.stdout.startswith("RLV604 (error)") and "fix:" in shown.stdout
    assert rlvr("rule", "RLV999").code == 2


def test_docs_cite_only_files_in_the_repository() -> None:
    for path in [ROOT / "README.md", *(ROOT / "docs").glob("*.md"), *(ROOT / "rlvr_cli").rglob("*.py")]:
        text = path.read_text()
        for name in ("CONTRACT.md", "ARCHITECTURE.md", "STYLE.md"):
            assert name not in text, f"{path} cites {name}, which is not in the repository"


def test_help_lists_commands_in_the_order_of_an_experiment_and_version_is_printed() -> None:
    shown = rlvr("--help").stdout
    order = ["init", "validate", "lock", "render", "audit", "train", "status", "gate", "report", "plan", "schema"]
    positions = [shown.index(f"\n  {name} ") for name in order]
    assert positions == sorted(positions)
    from rlvr_cli import __version__

    assert rlvr("--version").stdout.strip() == f"rlvr {__version__}"


def test_the_codes_only_the_data_check_reports_are_known_to_the_waivers() -> None:
    """A waiver of a data-check code is judged stale only when the data was checked (one of a
    code only the profile check reports, never by validate)."""
    from rlvr_cli.contract.waivers import DATA_CHECK, PROFILE_CHECK

    def emitted(folder: str) -> set[str]:
        return {
            code
            for path in (ROOT / "rlvr_cli" / folder).rglob("*.py")
            if path.name != "data.py"  # `rlvr data check` itself: it places the data check's findings
            for code in re.findall(r'"(RLV\d{3})"', path.read_text())
        }

    others = set().union(*(emitted(f) for f in ("contract", "commands", "train", "env", "audit", "rollout")))
    assert emitted("data") - others - {"RLV901"} == DATA_CHECK | PROFILE_CHECK
