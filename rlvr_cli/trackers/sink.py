"""What a tracker adapter is told when its run opens, and what it must do (`Sink`)."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol


@dataclass(frozen=True)
class Spec:
    """A contract's tracker (`monitoring.trackers[]`), as its process reads it: plain values, so
    a tracker's process starts without loading the contract's models."""

    kind: str
    dir: str | None = None
    project: str | None = None
    uri: str | None = None
    mode: str | None = None


@dataclass
class Opening:
    """What a tracker is told when its run opens."""

    run_id: str  # the same across resumes
    name: str  # the contract's name
    project: str
    folder: Path  # its local files
    config: dict[str, Any]  # the contract, flattened to dotted keys
    first_step: int  # the first step this invocation sends (steps from it on are redone on resume)
    kept: dict[str, Any]  # what the tracker kept from its previous opening (e.g. MLflow's run id)
    spec: Spec

    def to_json(self) -> dict[str, Any]:
        return {**self.__dict__, "folder": str(self.folder), "spec": self.spec.__dict__}

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> Opening:
        names = cls.__dataclass_fields__
        fields = {k: v for k, v in data.items() if k in names}
        return cls(**{**fields, "folder": Path(data["folder"]), "spec": Spec(**data["spec"])})


class Sink(Protocol):
    purges: bool  # steps sent again replace the old ones, so nothing is skipped on resume

    def open(self, opening: Opening) -> dict[str, Any]: ...  # what to keep for the next opening
    def log(self, step: int, values: dict[str, float]) -> None: ...
    def file(self, path: Path, text: str) -> None: ...
    def close(self, outcome: str) -> None: ...
