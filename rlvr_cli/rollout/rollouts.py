"""The rollout a contract's environment runs, with its reward source open."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from rlvr_cli.contract.models import Contract
from rlvr_cli.engine.engines import PolicyEngine
from rlvr_cli.rollout.base import Rollout
from rlvr_cli.rollout.single_turn import SingleTurn
from rlvr_cli.rollout.tool_use import ToolUse

#: environment.kind → its rollout (contract/models.py's `Environment.kind` Literal; a test ties them)
ROLLOUTS: dict[str, type[SingleTurn] | type[ToolUse]] = {"single_turn": SingleTurn, "tool_use": ToolUse}


@contextlib.contextmanager
def open_rollout(
    contract: Contract, folder: Path, renderer: Any, engine: PolicyEngine, log_dir: Path | None = None
) -> Iterator[Rollout]:
    """The environment's rollout sampling with `engine`: its reward source (the verifier worker,
    or the resources server; under torchrun one per process) opened here and closed after.
    `log_dir`: where a resources server's output and exit status are kept (the run folder)."""
    kind = ROLLOUTS[contract.environment.kind]
    with kind.reward_source(contract, folder, log_dir) as source:
        yield kind.of(contract, renderer, engine, source)  # type: ignore[arg-type]
