"""The contract's JSON Schema, generated from the pydantic models.

The models say what each key is; the conditional requirements that `rules.py` enforces
(e.g. `kl.estimator` when `kl.coef > 0`) are added here as `if`/`then` so that editors and
`check-jsonschema` reject the same incomplete contracts that `rlvr validate` rejects.
"""

from __future__ import annotations

import json
from typing import Any

from rlvr_cli.contract.models import Contract
from rlvr_cli.contract.verifier_kinds import BUILTIN_KINDS


def _present(*keys: str) -> dict[str, Any]:
    return {"required": list(keys), "properties": {k: {"not": {"type": "null"}} for k in keys}}


def _when(prop: str, condition: dict[str, Any], *keys: str) -> dict[str, Any]:
    return {
        "if": {"required": [prop], "properties": {prop: condition}},
        "then": _present(*keys),
    }


# definition name → conditions that only a cross-key rule can express
CONDITIONS: dict[str, list[dict[str, Any]]] = {
    "Environment": [
        {
            "if": {"required": ["kind"], "properties": {"kind": {"const": "single_turn"}}},
            "then": {"anyOf": [_present(k) for k in ("verifier", *BUILTIN_KINDS)]},
        },
        _when("kind", {"const": "tool_use"}, "server", "max_steps"),
    ],
    "Clip": [
        _when("kind", {"const": "sapo"}, "temperature"),
        _when("kind", {"const": "vespo"}, "gamma"),
        {
            "if": {"required": ["kind"], "properties": {"kind": {"enum": ["sapo", "vespo"]}}},
            "else": _present("low", "high"),
        },
    ],
    "Advantage": [_when("scale", {"enum": ["group_std", "batch_std", "leave_one_out_std"]}, "std", "epsilon")],
    "Correction": [
        _when("kind", {"const": "tis"}, "level", "cap"),
        _when("kind", {"const": "mis"}, "level", "low", "high"),
    ],
    "KL": [_when("coef", {"type": "number", "exclusiveMinimum": 0}, "estimator", "placement")],
    "Hints": [_when("used", {"const": True}, "source", "field", "placement", "share", "until_step", "advantage")],
    "Length": [_when("on_truncated", {"const": "penalize"}, "truncation_penalty")],
    "DynamicSampling": [_when("drop_uniform_groups", {"const": True}, "log_by")],
    "Rule": [_present("window", "owner")],
}


def contract_schema() -> dict[str, Any]:
    schema = Contract.model_json_schema(by_alias=True)
    for name, conditions in CONDITIONS.items():
        schema["$defs"][name]["allOf"] = conditions
    return {"$schema": "https://json-schema.org/draft/2020-12/schema", **schema}


def contract_schema_text() -> str:
    return json.dumps(contract_schema(), indent=2, ensure_ascii=False) + "\n"
