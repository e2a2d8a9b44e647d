"""The `rlvr data` and `rlvr audit` command groups, and the `command` wrapper every command uses."""

from __future__ import annotations

import functools
from collections.abc import Callable
from pathlib import Path
from typing import Annotated, Any, TypeVar

import typer

from rlvr_cli.errors import guard

F = TypeVar("F", bound=Callable[..., Any])


def contract_file(path: Path) -> Path:
    """A contract file, or the one contract (`*.rlvr.yaml`) an experiment folder holds: every
    command that takes CONTRACT accepts the folder `rlvr init` made. A folder with none or
    several is a usage error naming what is there."""
    if not path.is_dir():
        return path
    found = sorted({p for pattern in ("*.rlvr.yaml", "*.rlvr.yml") for p in path.glob(pattern)})
    if len(found) == 1:
        return found[0]
    if not found:
        raise typer.BadParameter(f"{path} is a folder with no contract (*.rlvr.yaml) in it")
    names = ", ".join(p.name for p in found)
    raise typer.BadParameter(f"{path} holds {len(found)} contracts ({names}); name the one to use")


def contract_arg(help: str) -> Any:
    """The CONTRACT argument: a contract file or the experiment folder that holds one."""
    return typer.Argument(
        callback=contract_file, metavar="CONTRACT", help=help.rstrip(".") + ": a file, or the folder that holds it."
    )


def command(fn: F) -> F:
    """A command body returns its exit code (None: 0); errors are mapped by `errors.guard`."""

    @functools.wraps(fn)
    def wrapper(*args: Any, **kwargs: Any) -> None:
        code = guard(lambda: fn(*args, **kwargs) or 0)
        raise typer.Exit(int(code))

    return wrapper  # type: ignore[return-value]


data_app = typer.Typer(help="Check and split the task data the contract names.", no_args_is_help=True)


@data_app.command("check")
@command
def data_check(
    contract: Annotated[Path, contract_arg("The contract whose data splits to check.")],
    format: Annotated[str, typer.Option("--format", "-f", help="text, json or github.")] = "text",
    out: Annotated[Path | None, typer.Option(help="Also write the JSON report (data-check.json) here.")] = None,
    max_per_code: Annotated[
        int, typer.Option("--max-per-code", help="Findings of one code the text and github forms list (0: all).")
    ] = 200,
    profile: Annotated[
        Path | None, typer.Option(help="A difficulty profile (audit rewards --profile): signal and mix per split.")
    ] = None,
) -> int:
    """Check the data splits against the contract's claims.

    Checks every claim of the contract's data section against the split files: ids,
    duplicates and near duplicates across splits, answer leakage, secrets and personal data,
    the holdout design, row schema. Exit 0 clean, 1 an error finding, 2 usage. JSON (and
    --out) lists every finding; text and github list --max-per-code of each code."""
    from rlvr_cli.commands.data import run_data_check

    return run_data_check(contract, format, out, max_per_code, profile)


@data_app.command("split")
@command
def data_split(
    contract: Annotated[Path, contract_arg("The contract whose split files to write.")],
    source: Annotated[
        Path | None, typer.Option(help="JSONL of every task (default: the contract's first data source).")
    ] = None,
    by: Annotated[
        str | None, typer.Option(help="Task field whose groups never straddle two splits (default: each task).")
    ] = None,
    fractions: Annotated[str, typer.Option(help="Shares of train, holdout and sealed_eval.")] = "0.8,0.1,0.1",
    seed: Annotated[int | None, typer.Option(help="Seed of the placement (default: hyperparameters.seed).")] = None,
    force: Annotated[bool, typer.Option(help="Replace split files that already exist.")] = False,
    profile: Annotated[
        Path | None, typer.Option(help="A difficulty profile (audit rewards --profile): each label split apart.")
    ] = None,
    drop: Annotated[
        str | None, typer.Option(help="Profile labels to leave out, e.g. unsolved,solved_by_all (needs --profile).")
    ] = None,
) -> int:
    """Deduplicate, then split by a key, seeded and reproducible.

    Writes the three splits the
    contract names and a manifest (data.split_manifest) that `rlvr lock` pins."""
    from rlvr_cli.commands.data import run_data_split

    return run_data_split(contract, source, by, fractions, seed, force=force, profile_path=profile, drop=drop)


audit_app = typer.Typer(help="Prove the verifier and the environment before training.", no_args_is_help=True)


@audit_app.command("verifier")
@command
def audit_verifier(
    contract: Annotated[Path, contract_arg("The contract whose verifier to audit.")],
    candidates: Annotated[Path | None, typer.Option(help="Candidates file (default: audit/candidates.yaml).")] = None,
    format: Annotated[str, typer.Option("--format", "-f", help="text or json.")] = "text",
    tasks: Annotated[
        int | None,
        typer.Option(
            min=1, help="Single turn: generated arms for a random sample of this many tasks (default: every task)."
        ),
    ] = None,
) -> int:
    """Run the control group through the real verifier.

    Exit 0 passed, 1 a false accept or reject (with the evidence), 2 usage (a missing
    candidates file), 3 the audit could not run."""
    from rlvr_cli.commands.audit import run_audit_verifier

    return run_audit_verifier(contract, candidates, format, tasks)


@audit_app.command("isolation")
@command
def audit_isolation(
    contract: Annotated[Path, contract_arg("A tool_use contract.")],
    sessions: Annotated[int, typer.Option("--sessions", "-n", min=2, help="Concurrent sessions.")] = 16,
    candidates: Annotated[
        Path | None, typer.Option(help="Candidates whose tool calls are replayed (default: audit/candidates.yaml).")
    ] = None,
    format: Annotated[str, typer.Option("--format", "-f", help="text or json.")] = "text",
) -> int:
    """Prove that concurrent sessions share no state.

    Replays your candidates' tool calls in concurrent sessions with unique markers: exit 0
    isolated, 1 a finding with its evidence, 2 usage, 3 the audit could not run (and why)."""
    from rlvr_cli.commands.audit import run_audit_isolation

    return run_audit_isolation(contract, sessions, candidates, format)


@audit_app.command("rollouts")
@command
def audit_rollouts(
    run_dir: Annotated[Path, typer.Argument(help="A run folder written by rlvr train.")],
    format: Annotated[str, typer.Option("--format", "-f", help="text or json.")] = "text",
) -> int:
    """Verify a run's records, then report what the rollouts show.

    Exit 1 on any mismatch with the record manifest."""
    from rlvr_cli.commands.audit import run_audit_rollouts

    return run_audit_rollouts(run_dir, format)


@audit_app.command("rewards")
@command
def audit_rewards(
    contract: Annotated[Path, contract_arg("The contract (tasks, verifier, sampling).")],
    policy: Annotated[
        list[str],
        typer.Option("--policy", help="A policy or run folder, or openai:MODEL@URL; two or more, weakest first."),
    ],
    samples: Annotated[int, typer.Option(min=1, help="Samples per task (k of pass@k).")] = 4,
    split: Annotated[str, typer.Option(help="train or holdout.")] = "holdout",
    format: Annotated[str, typer.Option("--format", "-f", help="text or json.")] = "text",
    profile: Annotated[
        Path | None, typer.Option("--profile", help="Write each task's difficulty profile here (JSONL).")
    ] = None,
    timeout: Annotated[float, typer.Option("--timeout", min=1, help="Seconds an endpoint may take per task.")] = 120,
    tasks: Annotated[
        Path | None, typer.Option("--tasks", help="Profile this JSONL of tasks instead of a split (before data split).")
    ] = None,
) -> int:
    """Profile policies' rewards on the same tasks, paired.

    pass@1 and pass@k per model and segment; unsolved, too easy and suspicious tasks."""
    from rlvr_cli.commands.audit import run_audit_rewards

    return run_audit_rewards(contract, policy, samples, split, format, profile, timeout, tasks)
