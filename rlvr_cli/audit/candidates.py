"""The control group's candidates: the file format (`audit/candidates.yaml`, schema
`schemas/audit-candidates.schema.json`) and how a candidate names its task."""

from __future__ import annotations

from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field

from rlvr_cli.errors import RlvrError

Kind = Literal[
    "correct",
    "alternate_correct",
    "collateral_damage",
    "forbidden_tool",
    "off_path",
    "no_op_claim",
    "custom",
    "wrong",
    "format_error",
    "empty",
]


class Candidate(BaseModel):
    """One control-group candidate: a task, what kind of solution it is, what must happen."""

    model_config = ConfigDict(extra="forbid")
    name: str | None = None
    task: str | dict[str, Any] = Field(description="A task id from the contract's splits, or an inline task.")
    kind: Kind
    expected: Literal["accept", "reject"]
    trajectory: list[list[dict[str, Any]]] | None = Field(
        None, description="tool_use: model outputs per step, in Responses API item shapes."
    )
    response: str | None = Field(None, description="single_turn: the response text.")
    responses: list[str] | None = Field(
        None, description="single_turn with reward.unit set: the set's responses, judged together (set_size of them)."
    )


class CandidateFile(BaseModel):
    model_config = ConfigDict(extra="forbid")
    candidates: list[Candidate]


def load_candidates(path: Path) -> list[Candidate]:
    import yaml
    from pydantic import ValidationError

    if not path.is_file():
        return []
    try:
        data = yaml.safe_load(path.read_text(encoding="utf-8")) or {"candidates": []}
        return CandidateFile.model_validate(data).candidates
    except (yaml.YAMLError, ValidationError) as exc:
        raise RlvrError(f"{path}: {exc}") from None


def resolve_task(task: str | dict[str, Any], tasks: dict[str, dict[str, Any]]) -> dict[str, Any]:
    if isinstance(task, dict):
        return task
    if task not in tasks:
        raise RlvrError(f"candidate task {task!r} is in no split of the contract")
    return tasks[task]
