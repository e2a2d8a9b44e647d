"""`rlvr schema NAME`: the JSON Schemas rlvr publishes, composed here from the stages that own
them (the contract's models, the audit's candidate file, the rollout record)."""

from __future__ import annotations

import json
from typing import Any

from rlvr_cli.contract.schema import contract_schema


def candidates_schema() -> dict[str, Any]:
    """JSON Schema of `audit/candidates.yaml` (rlvr audit verifier)."""
    from rlvr_cli.audit.verifier import CandidateFile

    return {
        "$schema": "https://json-schema.org/draft/2020-12/schema",
        **CandidateFile.model_json_schema(),
        "title": "rlvr audit candidates",
    }


def record_schema() -> dict[str, Any]:
    """JSON Schema of one rollout record row (the Parquet shards under records/)."""
    from rlvr_cli.store.records import json_schema

    return json_schema()


SCHEMAS = {"contract": contract_schema, "candidates": candidates_schema, "record": record_schema}
FILES = {
    "contract": "contract.schema.json",
    "candidates": "audit-candidates.schema.json",
    "record": "rollout-record.schema.json",
}


def schema_text(name: str) -> str:
    return json.dumps(SCHEMAS[name](), indent=2, ensure_ascii=False) + "\n"
