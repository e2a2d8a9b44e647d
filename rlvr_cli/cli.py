"""The `rlvr` command line: parse arguments, call one function, turn its result into an exit code.

Commands are listed in the order of an experiment. Exit codes (rlvr_cli.errors.ExitCode):
0 success, 1 the input is invalid or a check failed, 2 usage error, unreadable path or
missing extra, 3 internal error (a bug: please report it), 4 a run paused by a rule,
5 a run aborted, 141 the reader of stdout went away. Heavy libraries (torch, transformers,
fastapi) are imported inside the commands that use them.
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Annotated, Any

import typer
import typer.core

from rlvr_cli import __version__
from rlvr_cli.commands.groups import audit_app, command, contract_arg, data_app
from rlvr_cli.commands.interop_cli import export, import_app
from rlvr_cli.commands.release_cli import release_app
from rlvr_cli.commands.tasks_cli import tasks_app


def _version(value: bool) -> None:
    if value:
        print(f"rlvr {__version__}")
        raise typer.Exit(0)


class _ExperimentOrder(typer.core.TyperGroup):
    """`rlvr --help` lists the commands in the order of an experiment, not alphabetically."""

    ORDER = (
        "init",
        "validate",
        "data",
        "tasks",
        "lock",
        "render",
        "audit",
        "train",
        "status",
        "gate",
        "release",
        "report",
        "plan",
        "import",
        "export",
        "serve",
        "schema",
    )

    def list_commands(self, ctx: Any) -> list[str]:
        names = super().list_commands(ctx)
        return sorted(names, key=lambda n: self.ORDER.index(n) if n in self.ORDER else len(self.ORDER))


app = typer.Typer(
    cls=_ExperimentOrder,
    name="rlvr",
    help="Reinforcement learning with verifiable rewards, run exactly as the contract says.",
    no_args_is_help=True,
    add_completion=True,
    pretty_exceptions_enable=False,
    rich_markup_mode=None,
)


@app.callback()
def _main(
    version: Annotated[
        bool, typer.Option("--version", "-V", callback=_version, is_eager=True, help="Print the version and exit.")
    ] = False,
) -> None:
    """Reinforcement learning with verifiable rewards, run exactly as the contract says."""


@app.command()
@command
def init(
    folder: Annotated[Path | None, typer.Argument(help="Experiment folder to create.")] = None,
    template: Annotated[str, typer.Option("--template", "-t", help="Template name (see --list).")] = "single-turn",
    force: Annotated[bool, typer.Option(help="Write into a non-empty folder (never overwrites a file).")] = False,
    list_: Annotated[bool, typer.Option("--list", help="List the templates and exit.")] = False,
    model: Annotated[
        bool, typer.Option(help="Build the tiny local model and tokenizer (needs the train extra).")
    ] = True,
) -> int:
    """Create an experiment folder from a template.

    It holds the contract, data, verifier, README and a pre-commit hook."""
    from rlvr_cli.commands.init import list_templates, run_init
    from rlvr_cli.errors import UsageProblem

    if list_:
        sys.stdout.write(list_templates())
        return 0
    if folder is None:
        raise UsageProblem("give the folder to create, or --list")
    run_init(folder, template, force=force, build_model=model)
    return 0


@app.command(
    context_settings={"allow_extra_args": True, "ignore_unknown_options": True, "help_option_names": []},
    add_help_option=False,
)
def validate(ctx: typer.Context) -> None:
    """Check contracts in a fraction of a second, with rule codes.

    Exit 0 valid, 1 invalid (or warnings with --strict), 2 unreadable path.

    PATH... [--format text|json|github] [--deep] [--strict]; see `rlvr validate --help`.
    """
    from rlvr_cli.commands.validate import main as validate_main

    raise typer.Exit(validate_main(ctx.args))


app.add_typer(data_app, name="data")
app.add_typer(audit_app, name="audit")
app.add_typer(import_app, name="import")
app.add_typer(release_app, name="release")
app.add_typer(tasks_app, name="tasks")
app.command("export")(export)


@app.command()
@command
def serve(
    contract: Annotated[Path, contract_arg("The tool_use contract whose resources server to serve.")],
    interface: Annotated[str, typer.Option(help="The interface to speak: nemo-gym.")] = "nemo-gym",
    host: Annotated[str, typer.Option(help="Address to listen on.")] = "127.0.0.1",
    port: Annotated[int, typer.Option(min=1, max=65535, help="Port to listen on.")] = 8000,
    rows: Annotated[
        Path | None, typer.Option(help="First write the train and holdout tasks as NeMo Gym rows in this folder.")
    ] = None,
) -> int:
    """Serve the contract's resources server to another framework.

    With NeMo Gym's interface (seed_session, one route per tool, verify), until interrupted."""
    from rlvr_cli.commands.serve import run_serve

    return run_serve(contract, interface, host, port, rows)


@app.command()
@command
def lock(
    contract: Annotated[Path, contract_arg("The contract whose files to pin.")],
) -> int:
    """Pin each artifact, data split and chat template by sha256.

    Writes the lock file beside the contract; `validate --deep` checks it."""
    from rlvr_cli.commands.lock import run_lock

    run_lock(contract)
    return 0


@app.command()
@command
def render(
    contract: Annotated[
        Path,
        contract_arg("The contract: tokenizer, chat template, stop tokens, limits."),
    ],
    conversations: Annotated[
        Path, typer.Option("--conversations", "-c", help="JSONL, one {messages, tools?} per line.")
    ],
    format: Annotated[str, typer.Option("--format", "-f", help="text or json.")] = "text",
) -> int:
    """Show what the model sees and which tokens are trained.

    Also the chat template's traps (exit 1 on an error check)."""
    from rlvr_cli.commands.render import run_render

    return run_render(contract, conversations, format)


@app.command()
@command
def train(
    contract: Annotated[Path, contract_arg("The contract to run.")],
    run_dir: Annotated[
        Path | None, typer.Option("--run-dir", help="Run folder (default: runs/<name>/ beside the contract).")
    ] = None,
    max_steps: Annotated[
        int | None, typer.Option("--max-steps", help="Stop after this step (the contract is unchanged).")
    ] = None,
    resume: Annotated[bool, typer.Option("--resume", help="Continue from the newest complete checkpoint.")] = False,
    force: Annotated[
        bool, typer.Option("--force", help="With --resume: continue an aborted run, or a partial checkpoint.")
    ] = False,
    auto: Annotated[
        bool,
        typer.Option("--auto", help="Resume if a checkpoint exists, else start in the same folder (for schedulers)."),
    ] = False,
    nproc: Annotated[
        int | None,
        typer.Option(
            "--nproc", min=1, help="Processes, started with torchrun (gloo on CPU); --nproc 1 is one torchrun process."
        ),
    ] = None,
    device_memory: Annotated[
        float | None,
        typer.Option(
            "--device-memory",
            min=0,
            help="GiB each device has: refuse a plan that does not fit (default: what CUDA reports; no check on CPU).",
        ),
    ] = None,
) -> int:
    """Train as the contract says.

    Exit 0 finished, 1 refused or failed, 2 usage, 4 paused by a rule, 5 aborted."""
    from rlvr_cli.commands.train import launch, run_train

    if nproc is not None:
        argv = [str(contract)] + (["--run-dir", str(run_dir)] if run_dir else [])
        argv += (["--max-steps", str(max_steps)] if max_steps is not None else []) + (["--resume"] if resume else [])
        argv += ["--device-memory", str(device_memory)] if device_memory is not None else []
        argv += (["--force"] if force else []) + (["--auto"] if auto else [])
        return launch(nproc, contract, max_steps, argv)
    return run_train(contract, run_dir, max_steps, resume, force, auto, device_memory)


@app.command()
@command
def status(run_dir: Annotated[Path, typer.Argument(help="A run folder written by rlvr train.")]) -> int:
    """Where a run stands, and what to do next.

    Step, last metrics, last checkpoint and fired rules."""
    from rlvr_cli.commands.status import run_status

    return run_status(run_dir)


@app.command()
@command
def gate(
    contract: Annotated[Path, contract_arg("The contract whose acceptance.gates to evaluate.")],
    candidate: Annotated[
        Path, typer.Option("--candidate", help="The run folder to release, or a saved evaluation JSON.")
    ],
    baseline: Annotated[
        Path | None, typer.Option("--baseline", help="Evaluation JSON, policy or run folder to beat.")
    ] = None,
) -> int:
    """Decide the release by the contract's gates.

    Paired bootstrap intervals per segment; exit 1 when the release fails."""
    from rlvr_cli.commands.gate import run_gate

    return run_gate(contract, candidate, baseline)


@app.command()
@command
def report(
    run_dirs: Annotated[list[Path], typer.Argument(help="One run folder, or several to compare.")],
    out: Annotated[
        Path | None,
        typer.Option("--out", help="HTML file (default RUN_DIR/report.html; comparing: ./rlvr-compare.html)."),
    ] = None,
    by: Annotated[
        str | None,
        typer.Option(
            "--by",
            help="Comparing: the budget runs are compared at — rollouts, tokens, verifier_seconds (discarded "
            "generations included) or step (the default).",
        ),
    ] = None,
) -> int:
    """Write a run's HTML report, or one page comparing several runs.

    One self-contained page: a run's report (plan, gates, curves, rollout audit,
    samples), or several runs compared (contract differences key by key, curves overlaid)."""
    from rlvr_cli.commands.report import run_report

    return run_report(run_dirs, out, by)


@app.command()
@command
def plan(
    contract: Annotated[Path, contract_arg("The contract; the model's config.json is read from disk.")],
    gpus: Annotated[int, typer.Option("--gpus", min=1, help="Devices to shard over (FSDP).")] = 1,
    gpu_memory: Annotated[
        float | None, typer.Option("--gpu-memory", help="GiB per device; says whether it fits.")
    ] = None,
) -> int:
    """Estimate memory per device, and whether the run fits.

    Parameters, gradients, optimizer, reference, KV cache, activations; exit 1 when it does not fit."""
    from rlvr_cli.commands.common import load_valid_contract
    from rlvr_cli.train.collectives import plan_lines
    from rlvr_cli.train.memory_estimate import load_shape, plan_table

    parsed = load_valid_contract(contract, artifacts=True)
    shape = load_shape(parsed, contract.resolve().parent)
    table, fits = plan_table(parsed, shape, gpus, gpu_memory)
    print("\n".join([table, *plan_lines(parsed, shape, gpus)]))
    return 0 if fits else 1


@app.command()
@command
def schema(
    which: Annotated[str, typer.Argument(help="contract, candidates (audit) or record (rollout record).")] = "contract",
    markdown: Annotated[bool, typer.Option("--markdown", help="contract: every key as a Markdown table.")] = False,
) -> int:
    """Print a JSON Schema: contract, candidates or record.

    Committed copies live in schemas/ (contract.schema.json, ...)."""
    from rlvr_cli.commands.schema import SCHEMAS, contract_markdown, schema_text
    from rlvr_cli.errors import UsageProblem

    if which not in SCHEMAS:
        raise UsageProblem(f"no schema {which!r}; choose one of {', '.join(SCHEMAS)}")
    if markdown and which != "contract":
        raise UsageProblem("--markdown is for the contract schema")
    sys.stdout.write(contract_markdown() + "\n" if markdown else schema_text(which))
    return 0


@app.command()
@command
def rule(code: Annotated[str, typer.Argument(help="A rule code: RLV604, RLT007, ...")]) -> int:
    """Explain one rule code and how to fix what fires it.

    What fires it, why it matters, how to fix it, and a contract that fires it."""
    from rlvr_cli.codes import explain

    print(explain(code))
    return 0
