"""The JSON Schema is generated from the models, committed, and agrees with them."""

from __future__ import annotations

import json
from pathlib import Path

import jsonschema
import pytest

from rlvr_cli.contract import yaml12
from rlvr_cli.contract.schema import contract_schema
from tests.conftest import EXAMPLES, ROOT, rlvr
from tests.contract.test_examples import INVALID, expected, valid_contracts

# Codes that mean "the structure is wrong": exactly what the schema must reject too.
STRUCTURAL = {"RLV002", "RLV003", "RLV201", "RLV501", "RLV502", "RLV601"}


def schema_errors(data: object) -> list[str]:
    validator = jsonschema.Draft202012Validator(contract_schema())
    return [e.message for e in validator.iter_errors(data)]


@pytest.mark.parametrize("name", ["contract", "candidates", "record"])
def test_committed_schemas_are_current(name: str) -> None:
    from rlvr_cli.commands.schema import FILES, schema_text

    committed = (ROOT / "schemas" / FILES[name]).read_text()
    assert committed == schema_text(name), f"run: rlvr schema {name} > schemas/{FILES[name]}"
    jsonschema.Draft202012Validator.check_schema(json.loads(committed))


def test_shipped_candidates_and_records_match_their_schemas(tmp_path: Path) -> None:
    import yaml

    from rlvr_cli.commands.schema import candidates_schema

    data = yaml.safe_load((ROOT / "templates" / "tool-use" / "audit" / "candidates.yaml").read_text())
    assert list(jsonschema.Draft202012Validator(candidates_schema()).iter_errors(data)) == []


def test_schema_command_prints_the_schema() -> None:
    run = rlvr("schema")
    assert run.code == 0
    assert json.loads(run.stdout) == contract_schema()


def test_schema_is_a_valid_draft_2020_12_schema() -> None:
    jsonschema.Draft202012Validator.check_schema(contract_schema())


def test_valid_examples_pass_the_schema(tmp_path: Path) -> None:
    for path in valid_contracts(tmp_path):
        assert schema_errors(yaml12.parse(path.read_text()).data) == [], path


PARSED = [p for p in INVALID if not p.name.startswith("RLV001")]  # RLV001: no data to compare


@pytest.mark.parametrize("path", PARSED, ids=lambda p: p.name.removesuffix(".rlvr.yaml"))
def test_schema_and_models_agree_on_each_example(path: Path) -> None:
    codes = {line.split()[0] for line in expected(path)}
    errors = schema_errors(yaml12.parse(path.read_text()).data)
    assert bool(errors) == bool(codes & STRUCTURAL), (codes, errors)


def test_check_jsonschema_reads_yaml_contracts_like_rlvr(tmp_path: Path) -> None:
    """The external tool the benchmark compares against accepts our schema and examples."""
    import subprocess
    import sys

    good = ROOT / "contracts" / "grpo-cpu.rlvr.yaml"
    bad = EXAMPLES / "invalid" / "RLV003-missing-key.rlvr.yaml"
    schema = ROOT / "schemas" / "contract.schema.json"
    tool = [sys.executable, "-m", "check_jsonschema", "--schemafile", str(schema)]
    assert subprocess.run([*tool, str(good)], capture_output=True).returncode == 0
    assert subprocess.run([*tool, str(bad)], capture_output=True).returncode == 1


JSON_SCHEMA_KEYWORDS = {
    "$schema",
    "$defs",
    "$ref",
    "title",
    "description",
    "type",
    "properties",
    "required",
    "additionalProperties",
    "items",
    "prefixItems",
    "anyOf",
    "oneOf",
    "allOf",
    "not",
    "if",
    "then",
    "else",
    "enum",
    "const",
    "default",
    "minimum",
    "maximum",
    "exclusiveMinimum",
    "exclusiveMaximum",
    "minLength",
    "maxLength",
    "minItems",
    "maxItems",
    "pattern",
}


def _keywords(node: object, inside_properties: bool = False) -> set[str]:
    found: set[str] = set()
    if isinstance(node, dict):
        for key, value in node.items():
            if not inside_properties:
                found.add(key)
            if key in ("default", "const", "enum") and not inside_properties:
                continue  # values, not schemas
            found |= _keywords(value, inside_properties=key in ("properties", "$defs") and not inside_properties)
    elif isinstance(node, list):
        for value in node:
            found |= _keywords(value)
    return found


def test_schema_uses_only_json_schema_keywords() -> None:
    """A constraint pydantic cannot translate (e.g. `ge`) would be silently ignored by validators."""
    assert _keywords(contract_schema()) - JSON_SCHEMA_KEYWORDS == set()
