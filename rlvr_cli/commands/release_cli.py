"""The `rlvr release` command group (bodies in commands/release.py)."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from rlvr_cli.commands.groups import command, contract_arg

release_app = typer.Typer(help="Bundle, verify, promote and roll back released policies.", no_args_is_help=True)
REGISTRY = typer.Option("--registry", help="The registry folder that keeps the bundles.")


@release_app.command("build")
@command
def build(
    contract: Annotated[Path, contract_arg("The contract the run trained")],
    run_dir: Annotated[Path, typer.Argument(help="The finished run folder (gated: rlvr gate first).")],
    registry: Annotated[Path, REGISTRY],
    drill_tasks: Annotated[
        int, typer.Option("--drill-tasks", min=0, help="Holdout conversations recorded for the rollback drill.")
    ] = 4,
) -> int:
    """Bundle a gated run into the registry.

    Policy, tokenizer and template, contract and lock, verifier, data check, verdict, report, hashed."""
    from rlvr_cli.commands.release import run_build

    return run_build(contract, run_dir, registry, drill_tasks)


@release_app.command("verify")
@command
def verify(bundle: Annotated[Path, typer.Argument(help="A bundle folder.")]) -> int:
    """Check every byte of a bundle against its manifest.

    Exit 1 naming each changed, missing or added file, or an edited manifest."""
    from rlvr_cli.commands.release import run_verify

    return run_verify(bundle)


@release_app.command("list")
@command
def list_(registry: Annotated[Path, typer.Argument(help="The registry folder.")]) -> int:
    """List the registry's bundles.

    Each with its gate verdict and state; which is current and which the last known-good."""
    from rlvr_cli.commands.release import run_list

    return run_list(registry)


@release_app.command("promote")
@command
def promote(
    registry: Annotated[Path, typer.Argument(help="The registry folder.")],
    bundle: Annotated[str, typer.Argument(help="The bundle id (rlvr release list).")],
) -> int:
    """Make an intact, passing bundle current.

    The bundle it replaces becomes the last known-good."""
    from rlvr_cli.commands.release import run_promote

    return run_promote(registry, bundle)


@release_app.command("canary")
@command
def canary(
    registry: Annotated[Path, typer.Argument(help="The registry folder.")],
    bundle: Annotated[str, typer.Argument(help="The candidate bundle id.")],
    tasks: Annotated[Path, typer.Option("--tasks", help="Live-like requests: a JSONL file in the task format.")],
    share: Annotated[float, typer.Option("--share", min=0.0, max=1.0, help="Share of the requests served.")] = 0.1,
    allow_tools: Annotated[
        str | None, typer.Option("--allow-tools", help="Comma-separated tools the canary may call (tool_use).")
    ] = None,
    margin: Annotated[float, typer.Option("--margin", min=0.0, help="Reward the candidate may lose.")] = 0.0,
    confidence: Annotated[float, typer.Option("--confidence", min=0.5, max=0.999)] = 0.9,
    seed: Annotated[int, typer.Option("--seed", help="Which requests the share picks.")] = 0,
) -> int:
    """Try a candidate on a share of requests beside the current bundle.

    Paired on the same requests, tools limited to the allowlist: promote, or exit 1 refused."""
    from rlvr_cli.commands.release import run_canary
    from rlvr_cli.release.canary import Traffic

    allow = frozenset(t.strip() for t in allow_tools.split(",") if t.strip()) if allow_tools is not None else None
    return run_canary(registry, bundle, Traffic(tasks, share, seed, allow, margin, confidence))


@release_app.command("rollback")
@command
def rollback(registry: Annotated[Path, typer.Argument(help="The registry folder.")]) -> int:
    """Make the last known-good bundle current again.

    Refused when that bundle is no longer intact."""
    from rlvr_cli.commands.release import run_rollback

    return run_rollback(registry)


@release_app.command("drill")
@command
def drill(
    registry: Annotated[Path, typer.Argument(help="The registry folder.")],
    bundle: Annotated[str | None, typer.Option("--bundle", help="Drill this bundle, not the last known-good.")] = None,
) -> int:
    """Rehearse a rollback without changing the registry.

    Restore the last known-good, replay its recorded conversations, compare with the recording."""
    from rlvr_cli.commands.release import run_drill

    return run_drill(registry, bundle)
