"""The `rlvr tasks` command group (bodies in commands/tasks.py)."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from rlvr_cli.commands.groups import command, contract_arg

tasks_app = typer.Typer(help="Review tasks before they are trained on.", no_args_is_help=True)


@tasks_app.command("review")
@command
def review(
    contract: Annotated[Path, contract_arg("The contract whose verifier judges the tasks")],
    tasks: Annotated[Path, typer.Argument(help="Tasks to review: JSONL in the contract's task format.")],
    format: Annotated[str, typer.Option("--format", "-f", help="text or json.")] = "text",
) -> int:
    """Check tasks against their references with the contract's verifier.

    Failing references, trivial passes, tests no mutant fails, leaked answers, duplicates; exit 1 on errors."""
    from rlvr_cli.commands.tasks import run_review

    return run_review(contract, tasks, format)
