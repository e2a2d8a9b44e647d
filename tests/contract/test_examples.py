"""Every rule code fires on its example at the right line; valid examples stay clean."""

from __future__ import annotations

import re
import shutil
from pathlib import Path

import pytest

from tests.conftest import EXAMPLES, ROOT, rlvr, shipped_contracts

INVALID = sorted((EXAMPLES / "invalid").glob("*.rlvr.yaml"))
CONTRACT_CODES = [
    "RLV803",
    "RLV010",
    "RLV001",
    "RLV002",
    "RLV003",
    "RLV101",
    "RLV102",
    "RLV103",
    "RLV201",
    "RLV202",
    "RLV203",
    "RLV204",
    "RLV301",
    "RLV302",
    "RLV303",
    "RLV401",
    "RLV402",
    "RLV403",
    "RLV404",
    "RLV501",
    "RLV502",
    "RLV503",
    "RLV601",
    "RLV602",
    "RLV603",
    "RLV604",
    "RLV701",
    "RLV801",
    "RLV802",
]  # RLV104 and RLV901 need files on disk: tests/contract/test_deep.py


def expected(path: Path) -> list[str]:
    return sorted((path.parent / path.name.replace(".rlvr.yaml", ".expected")).read_text().split("\n")[:-1])


def test_examples_are_up_to_date(tmp_path: Path) -> None:
    """The committed examples are what make_examples.py writes (no hand drift)."""
    from tests.contracts import make_examples

    for name in make_examples.EXAMPLES:
        text, lines = make_examples.build(name)
        assert (EXAMPLES / "invalid" / f"{name}.rlvr.yaml").read_text() == text, name
        assert (EXAMPLES / "invalid" / f"{name}.expected").read_text() == lines, name


def test_each_invalid_example_gets_exactly_its_codes_and_lines() -> None:
    run = rlvr("validate", "--format", "json", *INVALID)
    assert run.code == 1, run.stderr
    files = run.json()["files"]
    assert len(files) == len(INVALID)
    for entry in files:
        got = sorted(f"{d['code']} {d['line']} {d['severity']}" for d in entry["diagnostics"])
        assert got == expected(Path(entry["path"])), entry["path"]
        errors = [d for d in entry["diagnostics"] if d["severity"] == "error"]
        assert entry["valid"] == (not errors)


def test_every_contract_code_has_an_example() -> None:
    covered = {line.split()[0] for path in INVALID for line in expected(path)}
    missing = [code for code in CONTRACT_CODES if code not in covered]
    assert not missing


def valid_contracts(tmp_path: Path) -> list[Path]:
    paths = shipped_contracts() + sorted((EXAMPLES / "valid").glob("*.rlvr.yaml"))
    for template in sorted((ROOT / "templates").iterdir()):
        text = (template / "experiment.rlvr.yaml").read_text().replace("__NAME__", template.name)
        target = tmp_path / f"{template.name}.rlvr.yaml"
        target.write_text(text)
        paths.append(target)
    return paths


def test_valid_examples_have_no_diagnostic(tmp_path: Path) -> None:
    paths = valid_contracts(tmp_path)
    assert len(paths) >= 6
    run = rlvr("validate", "--strict", "--format", "json", *paths)
    assert run.code == 0, run.stdout
    for entry in run.json()["files"]:
        assert entry["valid"] and entry["diagnostics"] == [], entry


def test_shipped_contracts_carry_a_header_with_their_command() -> None:
    for path in shipped_contracts():
        header = path.read_text().split("contract_version:")[0]
        assert f"rlvr validate contracts/{path.name}" in header
        assert f"rlvr train    contracts/{path.name}" in header or f"rlvr plan     contracts/{path.name}" in header


@pytest.mark.parametrize("variant", ["DAPO", "Dr. GRPO", "GRPO"])
def test_objective_family_examples_exist(variant: str) -> None:
    texts = {p.name: p.read_text() for p in shipped_contracts()}
    matches = {
        "DAPO": lambda t: (
            "aggregation: token_mean" in t
            and "drop_uniform_groups: true" in t
            and re.search(r"clip: \{low: 0.2, high: 0.28\}", t)
        ),
        "Dr. GRPO": lambda t: "aggregation: constant_norm" in t and "scale: none" in t,
        "GRPO": lambda t: "aggregation: seq_mean_token_mean" in t and "scale: group_std" in t,
    }
    assert any(matches[variant](t) for t in texts.values())


def test_a_copied_example_keeps_its_positions(tmp_path: Path) -> None:
    """Positions come from the file that was read, wherever it lives."""
    source = EXAMPLES / "invalid" / "RLV302-micro-batch-indivisible.rlvr.yaml"
    copy = tmp_path / "copy.rlvr.yaml"
    shutil.copyfile(source, copy)
    run = rlvr("validate", copy)
    line = expected(source)[0].split()[1]
    assert f"copy.rlvr.yaml:{line}:26: error[RLV302] hyperparameters.micro_batch_sequences:" in run.stdout


def test_shape_rules_give_a_value_that_fixes_them() -> None:
    found = {}
    for name in ("RLV301-group-of-one", "RLV302-micro-batch-indivisible"):
        run = rlvr("validate", "--format", "json", EXAMPLES / "invalid" / f"{name}.rlvr.yaml")
        found.update({d["code"]: d["suggestion"] for d in run.json()["files"][0]["diagnostics"]})
    assert found["RLV301"] == "8"
    assert found["RLV302"] == "4"  # the largest micro-batch ≤ 5 that divides 16 sequences
