"""The `rlvr tasks` command group (bodies in commands/tasks.py)."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from rlvr_cli.commands.groups import command, contract_arg

tasks_app = typer.Typer(help="Generate tasks, and review them before they are trained on.", no_args_is_help=True)


@tasks_app.command("generate")
@command
def generate(
    contract: Annotated[Path, contract_arg("The contract the tasks are for (seed examples, sandbox)")],
    spec: Annotated[Path, typer.Argument(help="The generation spec (YAML): generator endpoint, kind, count, prompt.")],
    out: Annotated[Path, typer.Option("--out", help="The JSONL file to write (resumed when a run stopped).")],
    cache: Annotated[
        Path | None, typer.Option("--cache", help="Replies by request hash (default: .rlvr-cache).")
    ] = None,
) -> int:
    """Generate tasks with a model behind an OpenAI endpoint.

    References are built by running the reference code in the verifier's sandbox; cached, resumable."""
    from rlvr_cli.commands.tasks import run_generate

    return run_generate(contract, spec, out, cache)


@tasks_app.command("review")
@command
def review(
    contract: Annotated[Path, contract_arg("The contract whose verifier judges the tasks")],
    tasks: Annotated[Path, typer.Argument(help="Tasks to review: JSONL in the contract's task format.")],
    format: Annotated[str, typer.Option("--format", "-f", help="text or json.")] = "text",
) -> int:
    """Check new tasks with the contract's verifier.

    Failing references, trivial passes, tests no mutant fails, leaked answers, duplicates; exit 1 on errors."""
    from rlvr_cli.commands.tasks import run_review

    return run_review(contract, tasks, format)
