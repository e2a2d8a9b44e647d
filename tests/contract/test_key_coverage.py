"""Every key acts: for each leaf key of the format, changing its value must change what the run
does (its resolved plan, `plan.json`) or be answered by a diagnostic. A key that does neither
is validated and then ignored — a defect this test refuses, for every key added later too."""

from __future__ import annotations

import copy
from pathlib import Path
from typing import Any

import pytest
import yaml

from rlvr_cli.commands.schema import contract_schema
from rlvr_cli.contract.load import check_file
from rlvr_cli.train.run_plan import build_plan
from tests.conftest import EXAMPLES

COVERAGE = EXAMPLES / "coverage"
BASES = (
    "every-key.rlvr.yaml",
    "every-key-alt.rlvr.yaml",
    "every-key-answer.rlvr.yaml",
    "every-key-code.rlvr.yaml",
    "every-key-judge.rlvr.yaml",
    "every-key-set.rlvr.yaml",
)
#: keys whose every value is refused until rlvr runs them (RLV010); their presence is a diagnostic
REFUSED = {"artifacts.verifier.container"}
#: one-of members that cannot sit beside the other forms in a valid contract
NOT_LEAVES = {"artifacts.reference.same_as_policy", "artifacts.reference.none"}


def leaves(data: Any, path: tuple = ()) -> list[tuple]:
    if isinstance(data, dict):
        return [leaf for key, value in data.items() for leaf in leaves(value, (*path, key))]
    if isinstance(data, list) and data and isinstance(data[0], dict):
        return [leaf for i, item in enumerate(data) for leaf in leaves(item, (*path, i))]
    return [path]


def dotted(path: tuple) -> str:
    return ".".join("[]" if isinstance(p, int) else p for p in path).replace(".[]", "[]")


def schema_leaves(node: dict, defs: dict, prefix: str = "") -> set[str]:
    out = set()
    for key, prop in node.get("properties", {}).items():
        options = prop.get("anyOf") or [prop]
        items = [o.get("items", {}) for o in options if o.get("type") == "array"]
        refs = [o["$ref"] for o in options if "$ref" in o] + [
            form["$ref"] for item in items for form in [item, *item.get("oneOf", [])] if "$ref" in form
        ]  # a list of mappings, or of names or mappings (monitoring.trackers)
        is_list = any(o.get("type") == "array" for o in options)
        name = f"{prefix}{key}" + ("[]" if is_list and refs else "")
        if refs:
            out |= schema_leaves(defs[refs[0].rsplit("/", 1)[1]], defs, name + ".")
        else:
            out.add(name)
    return out


def mutate(value: Any) -> list[Any]:
    """Other values of the same type: what a user might write instead."""
    if isinstance(value, bool):
        return [not value]
    if isinstance(value, int):
        return [value + 1, max(value - 1, 0)]
    if isinstance(value, float):
        return [value * 0.5, value * 1.5 + 0.01]
    if isinstance(value, str):
        return [value + "x", "other"]
    if isinstance(value, list):
        return [value[:-1] or ["other"], [*value, "other"]]
    return ["other"]


def plan_of(path: Path) -> tuple[dict | None, list]:
    result = check_file(path)
    diagnostics = sorted((d.code, d.path, d.severity) for d in result.diagnostics)
    if result.contract is None or not result.valid:
        return None, diagnostics
    plan = build_plan(result.contract, path, Path("/run"), result.contract.hyperparameters.max_steps, "cpu")
    plan.pop("contract_sha256")
    return plan, diagnostics


def set_at(data: dict, path: tuple, value: Any) -> dict:
    out = copy.deepcopy(data)
    node = out
    for key in path[:-1]:
        node = node[key]
    node[path[-1]] = value
    return out


def test_the_bases_hold_every_key_of_the_schema() -> None:
    held = {
        dotted(p[:n])
        for name in BASES
        for p in leaves(yaml.safe_load((COVERAGE / name).read_text()))
        for n in range(1, len(p) + 1)
    }  # a free-form mapping (data.pii_patterns) is held by its entries
    schema = contract_schema()
    missing = schema_leaves(schema, schema["$defs"]) - held - REFUSED - NOT_LEAVES
    assert missing == set(), f"add these keys to {BASES}: {sorted(missing)}"


@pytest.mark.parametrize("base", BASES)
def test_every_key_changes_the_plan_or_gets_a_diagnostic(base: str, tmp_path: Path) -> None:
    data = yaml.safe_load((COVERAGE / base).read_text())
    base_plan, base_diags = plan_of(COVERAGE / base)
    assert base_plan is not None, base_diags
    inert = []
    for path in leaves(data):
        if path[0] == "name":  # the run's name is the default run folder; it shows in the plan paths only
            continue
        acted = False
        for value in mutate(_get(data, path)):
            target = tmp_path / base
            target.write_text(yaml.safe_dump(set_at(data, path, value), sort_keys=False))
            plan, diags = plan_of(target)
            if diags != base_diags or (plan is not None and plan != {**base_plan, "contract": str(target)}):
                acted = True
                break
        if not acted:
            inert.append(dotted(path))
    assert inert == [], f"keys that change neither the plan nor the diagnostics: {inert}"


def test_a_refused_key_is_always_a_diagnostic(tmp_path: Path) -> None:
    data = yaml.safe_load((COVERAGE / "every-key.rlvr.yaml").read_text())
    data["artifacts"]["verifier"]["container"] = "registry/verifier@sha256:" + "c" * 64
    (tmp_path / "c.rlvr.yaml").write_text(yaml.safe_dump(data, sort_keys=False))
    assert "RLV010" in [d.code for d in check_file(tmp_path / "c.rlvr.yaml").diagnostics]


def _get(data: Any, path: tuple) -> Any:
    for key in path:
        data = data[key]
    return data
