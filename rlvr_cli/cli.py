"""The `rlvr` command line: parse arguments, call one function, turn its result into output.

Exit codes (every command): 0 success, 1 the input is invalid or a check failed,
2 usage error or unreadable path, 3 internal error (a bug: please report it).
Heavy libraries (torch, transformers, fastapi) are imported inside the commands that use them.
"""

from __future__ import annotations

import functools
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Annotated, Any, TypeVar

import typer

from rlvr_cli.errors import RlvrError

app = typer.Typer(
    name="rlvr",
    help="Reinforcement learning with verifiable rewards, run exactly as the contract says.",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
    rich_markup_mode=None,
)
F = TypeVar("F", bound=Callable[..., Any])
EXIT_INTERNAL = 3


def err(message: str) -> None:
    """Progress, logs and errors go to stderr; stdout carries the report only."""
    print(message, file=sys.stderr)


def guarded(fn: F) -> F:
    """Map domain errors to their exit code and anything unexpected to exit 3, no traceback."""

    @functools.wraps(fn)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        try:
            return fn(*args, **kwargs)
        except (typer.Exit, typer.Abort, SystemExit):
            raise
        except RlvrError as exc:
            err(f"error: {exc}")
            raise typer.Exit(exc.exit_code) from None
        except KeyboardInterrupt:
            err("interrupted")
            raise typer.Exit(130) from None
        except Exception as exc:
            err(
                f"internal error: {type(exc).__name__}: {exc}\n"
                "This is a bug in rlvr; rerun with RLVR_DEBUG=1 for the traceback."
            )
            import os

            if os.environ.get("RLVR_DEBUG"):
                raise
            raise typer.Exit(EXIT_INTERNAL) from None

    return wrapper  # type: ignore[return-value]


@app.command(
    context_settings={"allow_extra_args": True, "ignore_unknown_options": True, "help_option_names": []},
    add_help_option=False,
)
def validate(ctx: typer.Context) -> None:
    """Check contracts: exit 0 valid, 1 invalid (or warnings with --strict), 2 unreadable path.

    PATH... [--format text|json|github] [--deep] [--strict]; see `rlvr validate --help`.
    """
    from rlvr_cli.commands.validate import main as validate_main

    raise typer.Exit(validate_main(ctx.args))


@app.command()
@guarded
def schema(
    which: Annotated[str, typer.Argument(help="contract, candidates (audit) or record (rollout record).")] = "contract",
) -> None:
    """Print a JSON Schema; committed copies live in schemas/ (contract.schema.json, ...)."""
    from rlvr_cli.contract.schema import SCHEMAS, schema_text
    from rlvr_cli.errors import UsageProblem

    if which not in SCHEMAS:
        raise UsageProblem(f"no schema {which!r}; choose one of {', '.join(SCHEMAS)}")
    sys.stdout.write(schema_text(which))


@app.command()
@guarded
def lock(
    contract: Annotated[Path, typer.Argument(help="The contract whose files to pin.")],
) -> None:
    """Write the lock file: the sha256 of every artifact, data split and chat template."""
    from rlvr_cli.commands.lock import run_lock

    run_lock(contract)


@app.command()
@guarded
def render(
    contract: Annotated[Path, typer.Argument(help="The contract: tokenizer, chat template, stop tokens, limits.")],
    conversations: Annotated[
        Path, typer.Option("--conversations", "-c", help="JSONL, one {messages, tools?} per line.")
    ],
    format: Annotated[str, typer.Option("--format", "-f", help="text or json.")] = "text",
) -> None:
    """Show what the model sees, which tokens are trained, and the template's traps (exit 1 on an error check)."""
    from rlvr_cli.commands.render import run_render
    from rlvr_cli.errors import UsageProblem

    if format not in ("text", "json"):
        raise UsageProblem(f"--format must be text or json, not {format!r}")
    raise typer.Exit(run_render(contract, conversations, format))


@app.command()
@guarded
def train(
    contract: Annotated[Path, typer.Argument(help="The contract to run.")],
    run_dir: Annotated[
        Path | None, typer.Option("--run-dir", help="Run folder (default: runs/<name>/ beside the contract).")
    ] = None,
    max_steps: Annotated[
        int | None, typer.Option("--max-steps", help="Stop after this step (the contract is unchanged).")
    ] = None,
    resume: Annotated[bool, typer.Option("--resume", help="Continue from the newest complete checkpoint.")] = False,
    force: Annotated[bool, typer.Option("--force", help="With --resume: continue an aborted run.")] = False,
    nproc: Annotated[int, typer.Option("--nproc", min=1, help="Processes, started with torchrun (gloo on CPU).")] = 1,
) -> None:
    """Train as the contract says: exit 0 finished, 1 refused or failed, 4 paused by a rule, 5 aborted."""
    from rlvr_cli.train.run import launch, run_train

    if nproc > 1:
        argv = [str(contract)] + (["--run-dir", str(run_dir)] if run_dir else [])
        argv += (["--max-steps", str(max_steps)] if max_steps else []) + (["--resume"] if resume else [])
        raise typer.Exit(launch(nproc, argv + (["--force"] if force else [])))
    raise typer.Exit(run_train(contract, run_dir, max_steps, resume, force))


@app.command()
@guarded
def status(run_dir: Annotated[Path, typer.Argument(help="A run folder written by rlvr train.")]) -> None:
    """Where a run stands: step, last metrics, last checkpoint, fired rules, and what to do next."""
    from rlvr_cli.commands.status import run_status

    raise typer.Exit(run_status(run_dir))


audit_app = typer.Typer(help="Prove the verifier and the environment before training.", no_args_is_help=True)
app.add_typer(audit_app, name="audit")


@audit_app.command("verifier")
@guarded
def audit_verifier(
    contract: Annotated[Path, typer.Argument(help="The contract whose verifier to audit.")],
    candidates: Annotated[Path | None, typer.Option(help="Candidates file (default: audit/candidates.yaml).")] = None,
    format: Annotated[str, typer.Option("--format", "-f", help="text or json.")] = "text",
    tasks: Annotated[int, typer.Option(help="Single turn: tasks that get generated arms.")] = 5,
) -> None:
    """Run the control group through the real verifier; exit 1 on any false accept or reject."""
    from rlvr_cli.commands.audit import run_audit_verifier

    raise typer.Exit(run_audit_verifier(contract, candidates, format, tasks))


@audit_app.command("isolation")
@guarded
def audit_isolation(
    contract: Annotated[Path, typer.Argument(help="A tool_use contract.")],
    sessions: Annotated[int, typer.Option("--sessions", "-n", min=2, help="Concurrent sessions.")] = 16,
    format: Annotated[str, typer.Option("--format", "-f", help="text or json.")] = "text",
) -> None:
    """Run concurrent sessions with unique markers; exit 1 with the evidence on any leak."""
    from rlvr_cli.commands.audit import run_audit_isolation

    raise typer.Exit(run_audit_isolation(contract, sessions, format))


@audit_app.command("rollouts")
@guarded
def audit_rollouts(
    run_dir: Annotated[Path, typer.Argument(help="A run folder written by rlvr train.")],
    format: Annotated[str, typer.Option("--format", "-f", help="text or json.")] = "text",
) -> None:
    """Verify the record manifest (exit 1 on any mismatch), then report what the rollouts show."""
    from rlvr_cli.commands.audit import run_audit_rollouts

    raise typer.Exit(run_audit_rollouts(run_dir, format))


@audit_app.command("rewards")
@guarded
def audit_rewards(
    contract: Annotated[Path, typer.Argument(help="The contract (tasks, verifier, sampling).")],
    policy: Annotated[list[Path], typer.Option("--policy", help="A policy or run folder; give two (A, B).")],
    samples: Annotated[int, typer.Option(help="Samples per task.")] = 4,
    split: Annotated[str, typer.Option(help="train or holdout.")] = "holdout",
    format: Annotated[str, typer.Option("--format", "-f", help="text or json.")] = "text",
) -> None:
    """Reward distributions of two policies on the same tasks, paired; flags "no difference"."""
    from rlvr_cli.commands.audit import run_audit_rewards

    raise typer.Exit(run_audit_rewards(contract, policy, samples, split, format))


@app.command()
@guarded
def gate(
    contract: Annotated[Path, typer.Argument(help="The contract whose acceptance.gates to evaluate.")],
    candidate: Annotated[Path, typer.Option("--candidate", help="The run folder to release.")],
    baseline: Annotated[
        Path | None, typer.Option("--baseline", help="Evaluation JSON, policy or run folder to beat.")
    ] = None,
) -> None:
    """Release gates with paired bootstrap intervals per segment; exit 1 when the release fails."""
    from rlvr_cli.commands.audit import run_gate

    raise typer.Exit(run_gate(contract, candidate, baseline))


@app.command()
@guarded
def report(
    run_dir: Annotated[Path, typer.Argument(help="A run folder written by rlvr train.")],
    out: Annotated[Path | None, typer.Option("--out", help="HTML file (default RUN_DIR/report.html).")] = None,
) -> None:
    """Write one self-contained HTML report (curves, thresholds, fired rules, rollout audit)."""
    from rlvr_cli.commands.audit import run_report

    raise typer.Exit(run_report(run_dir, out))


@app.command()
@guarded
def plan(
    contract: Annotated[Path, typer.Argument(help="The contract; the model's config.json is read from disk.")],
    gpus: Annotated[int, typer.Option("--gpus", min=1, help="Devices to shard over (FSDP).")] = 1,
    gpu_memory: Annotated[
        float | None, typer.Option("--gpu-memory", help="GiB per device; says whether it fits.")
    ] = None,
) -> None:
    """Estimate memory per device (parameters, gradients, optimizer, reference, KV cache, activations)."""
    from rlvr_cli.commands.common import load_valid_contract
    from rlvr_cli.train.memory import load_shape, plan_table

    parsed = load_valid_contract(contract)
    table, fits = plan_table(parsed, load_shape(parsed, contract.resolve().parent), gpus, gpu_memory)
    print(table)
    raise typer.Exit(0 if fits else 1)


@app.command()
@guarded
def init(
    folder: Annotated[Path | None, typer.Argument(help="Experiment folder to create.")] = None,
    template: Annotated[str, typer.Option("--template", "-t", help="Template name (see --list).")] = "single-turn",
    force: Annotated[bool, typer.Option(help="Write into a non-empty folder (never overwrites a file).")] = False,
    list_: Annotated[bool, typer.Option("--list", help="List the templates and exit.")] = False,
    model: Annotated[
        bool, typer.Option(help="Build the tiny local model and tokenizer (needs the train extra).")
    ] = True,
) -> None:
    """Create an experiment folder from a template: contract, data, verifier, README, hook."""
    from rlvr_cli.commands.init import list_templates, run_init

    if list_:
        sys.stdout.write(list_templates())
        return
    if folder is None:
        err("error: give the folder to create, or --list")
        raise typer.Exit(2)
    run_init(folder, template, force=force, build_model=model)
