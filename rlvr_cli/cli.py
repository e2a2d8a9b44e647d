"""The `rlvr` command line: parse arguments, call one function, turn its result into an exit code.

Commands are listed in the order of an experiment. Exit codes (rlvr_cli.errors.ExitCode):
0 success, 1 the input is invalid or a check failed, 2 usage error, unreadable path or
missing extra, 3 internal error (a bug: please report it), 4 a run paused by a rule,
5 a run aborted. Heavy libraries (torch, transformers, fastapi) are imported inside the
commands that use them.
"""

from __future__ import annotations

import functools
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Annotated, Any, TypeVar

import typer
import typer.core

from rlvr_cli import __version__
from rlvr_cli.errors import guard

F = TypeVar("F", bound=Callable[..., Any])


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
        "lock",
        "render",
        "audit",
        "train",
        "status",
        "gate",
        "report",
        "plan",
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
    add_completion=False,
    pretty_exceptions_enable=False,
    rich_markup_mode=None,
)


@app.callback()
def _main(
    version: Annotated[
        bool, typer.Option("--version", callback=_version, is_eager=True, help="Print the version and exit.")
    ] = False,
) -> None:
    """Reinforcement learning with verifiable rewards, run exactly as the contract says."""


def command(fn: F) -> F:
    """A command body returns its exit code (None: 0); errors are mapped by `errors.guard`."""

    @functools.wraps(fn)
    def wrapper(*args: Any, **kwargs: Any) -> None:
        code = guard(lambda: fn(*args, **kwargs) or 0)
        raise typer.Exit(int(code))

    return wrapper  # type: ignore[return-value]


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
    """Create an experiment folder from a template: contract, data, verifier, README, hook."""
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
    """Check contracts: exit 0 valid, 1 invalid (or warnings with --strict), 2 unreadable path.

    PATH... [--format text|json|github] [--deep] [--strict]; see `rlvr validate --help`.
    """
    from rlvr_cli.commands.validate import main as validate_main

    raise typer.Exit(validate_main(ctx.args))


data_app = typer.Typer(help="Check and split the task data the contract names.", no_args_is_help=True)
app.add_typer(data_app, name="data")


@data_app.command("check")
@command
def data_check(
    contract: Annotated[Path, typer.Argument(help="The contract whose data splits to check.")],
    format: Annotated[str, typer.Option("--format", "-f", help="text, json or github.")] = "text",
    out: Annotated[Path | None, typer.Option(help="Also write the JSON report (data-check.json) here.")] = None,
    max_per_code: Annotated[
        int, typer.Option("--max-per-code", help="Findings of one code the text and github forms list (0: all).")
    ] = 200,
) -> int:
    """Check every claim of the contract's data section against the split files: ids,
    duplicates and near duplicates across splits, answer leakage, secrets and personal data,
    the holdout design, row schema. Exit 0 clean, 1 an error finding, 2 usage. JSON (and
    --out) lists every finding; text and github list --max-per-code of each code."""
    from rlvr_cli.commands.data import run_data_check

    return run_data_check(contract, format, out, max_per_code)


@data_app.command("split")
@command
def data_split(
    contract: Annotated[Path, typer.Argument(help="The contract whose split files to write.")],
    source: Annotated[
        Path | None, typer.Option(help="JSONL of every task (default: the contract's first data source).")
    ] = None,
    by: Annotated[
        str | None, typer.Option(help="Task field whose groups never straddle two splits (default: each task).")
    ] = None,
    fractions: Annotated[str, typer.Option(help="Shares of train, holdout and sealed_eval.")] = "0.8,0.1,0.1",
    seed: Annotated[int | None, typer.Option(help="Seed of the placement (default: hyperparameters.seed).")] = None,
    force: Annotated[bool, typer.Option(help="Replace split files that already exist.")] = False,
) -> int:
    """Deduplicate, then split by a key, seeded and reproducible; writes the three splits the
    contract names and a manifest (data.split_manifest) that `rlvr lock` pins."""
    from rlvr_cli.commands.data import run_data_split

    return run_data_split(contract, source, by, fractions, seed, force=force)


@app.command()
@command
def lock(contract: Annotated[Path, typer.Argument(help="The contract whose files to pin.")]) -> int:
    """Write the lock file: the sha256 of every artifact, data split and chat template."""
    from rlvr_cli.commands.lock import run_lock

    run_lock(contract)
    return 0


@app.command()
@command
def render(
    contract: Annotated[Path, typer.Argument(help="The contract: tokenizer, chat template, stop tokens, limits.")],
    conversations: Annotated[
        Path, typer.Option("--conversations", "-c", help="JSONL, one {messages, tools?} per line.")
    ],
    format: Annotated[str, typer.Option("--format", "-f", help="text or json.")] = "text",
) -> int:
    """Show what the model sees, which tokens are trained, and the template's traps (exit 1 on an error check)."""
    from rlvr_cli.commands.render import run_render

    return run_render(contract, conversations, format)


audit_app = typer.Typer(help="Prove the verifier and the environment before training.", no_args_is_help=True)
app.add_typer(audit_app, name="audit")


@audit_app.command("verifier")
@command
def audit_verifier(
    contract: Annotated[Path, typer.Argument(help="The contract whose verifier to audit.")],
    candidates: Annotated[Path | None, typer.Option(help="Candidates file (default: audit/candidates.yaml).")] = None,
    format: Annotated[str, typer.Option("--format", "-f", help="text or json.")] = "text",
    tasks: Annotated[
        int | None,
        typer.Option(
            min=1, help="Single turn: generated arms for a random sample of this many tasks (default: every task)."
        ),
    ] = None,
) -> int:
    """Run the control group through the real verifier: exit 0 passed, 1 a false accept or
    reject (with the evidence), 2 usage (a missing candidates file), 3 the audit could not run."""
    from rlvr_cli.commands.audit import run_audit_verifier

    return run_audit_verifier(contract, candidates, format, tasks)


@audit_app.command("isolation")
@command
def audit_isolation(
    contract: Annotated[Path, typer.Argument(help="A tool_use contract.")],
    sessions: Annotated[int, typer.Option("--sessions", "-n", min=2, help="Concurrent sessions.")] = 16,
    candidates: Annotated[
        Path | None, typer.Option(help="Candidates whose tool calls are replayed (default: audit/candidates.yaml).")
    ] = None,
    format: Annotated[str, typer.Option("--format", "-f", help="text or json.")] = "text",
) -> int:
    """Replay your candidates' tool calls in concurrent sessions with unique markers: exit 0
    isolated, 1 a finding with its evidence, 2 usage, 3 the audit could not run (and why)."""
    from rlvr_cli.commands.audit import run_audit_isolation

    return run_audit_isolation(contract, sessions, candidates, format)


@audit_app.command("rollouts")
@command
def audit_rollouts(
    run_dir: Annotated[Path, typer.Argument(help="A run folder written by rlvr train.")],
    format: Annotated[str, typer.Option("--format", "-f", help="text or json.")] = "text",
) -> int:
    """Verify the record manifest (exit 1 on any mismatch), then report what the rollouts show."""
    from rlvr_cli.commands.audit import run_audit_rollouts

    return run_audit_rollouts(run_dir, format)


@audit_app.command("rewards")
@command
def audit_rewards(
    contract: Annotated[Path, typer.Argument(help="The contract (tasks, verifier, sampling).")],
    policy: Annotated[list[Path], typer.Option("--policy", help="A policy or run folder; give two (A, B).")],
    samples: Annotated[int, typer.Option(help="Samples per task.")] = 4,
    split: Annotated[str, typer.Option(help="train or holdout.")] = "holdout",
    format: Annotated[str, typer.Option("--format", "-f", help="text or json.")] = "text",
) -> int:
    """Reward distributions of two policies on the same tasks, paired; flags "no difference"."""
    from rlvr_cli.commands.audit import run_audit_rewards

    return run_audit_rewards(contract, policy, samples, split, format)


@app.command()
@command
def train(
    contract: Annotated[Path, typer.Argument(help="The contract to run.")],
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
    """Train as the contract says: exit 0 finished, 1 refused or failed, 4 paused by a rule, 5 aborted."""
    from rlvr_cli.commands.train import launch, run_train

    if nproc is not None:
        argv = [str(contract)] + (["--run-dir", str(run_dir)] if run_dir else [])
        argv += (["--max-steps", str(max_steps)] if max_steps else []) + (["--resume"] if resume else [])
        argv += ["--device-memory", str(device_memory)] if device_memory is not None else []
        return launch(nproc, argv + (["--force"] if force else []) + (["--auto"] if auto else []))
    return run_train(contract, run_dir, max_steps, resume, force, auto, device_memory)


@app.command()
@command
def status(run_dir: Annotated[Path, typer.Argument(help="A run folder written by rlvr train.")]) -> int:
    """Where a run stands: step, last metrics, last checkpoint, fired rules, and what to do next."""
    from rlvr_cli.commands.status import run_status

    return run_status(run_dir)


@app.command()
@command
def gate(
    contract: Annotated[Path, typer.Argument(help="The contract whose acceptance.gates to evaluate.")],
    candidate: Annotated[
        Path, typer.Option("--candidate", help="The run folder to release, or a saved evaluation JSON.")
    ],
    baseline: Annotated[
        Path | None, typer.Option("--baseline", help="Evaluation JSON, policy or run folder to beat.")
    ] = None,
) -> int:
    """Release gates with paired bootstrap intervals per segment; exit 1 when the release fails."""
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
) -> int:
    """Write one self-contained HTML page: a run's report (plan, gates, curves, rollout audit,
    samples), or several runs compared (contract differences key by key, curves overlaid)."""
    from rlvr_cli.commands.report import run_report

    return run_report(run_dirs, out)


@app.command()
@command
def plan(
    contract: Annotated[Path, typer.Argument(help="The contract; the model's config.json is read from disk.")],
    gpus: Annotated[int, typer.Option("--gpus", min=1, help="Devices to shard over (FSDP).")] = 1,
    gpu_memory: Annotated[
        float | None, typer.Option("--gpu-memory", help="GiB per device; says whether it fits.")
    ] = None,
) -> int:
    """Estimate memory per device (parameters, gradients, optimizer, reference, KV cache, activations)."""
    from rlvr_cli.commands.common import load_valid_contract
    from rlvr_cli.train.memory_estimate import load_shape, plan_table

    parsed = load_valid_contract(contract)
    table, fits = plan_table(parsed, load_shape(parsed, contract.resolve().parent), gpus, gpu_memory)
    print(table)
    return 0 if fits else 1


@app.command()
@command
def schema(
    which: Annotated[str, typer.Argument(help="contract, candidates (audit) or record (rollout record).")] = "contract",
    markdown: Annotated[bool, typer.Option("--markdown", help="contract: every key as a Markdown table.")] = False,
) -> int:
    """Print a JSON Schema; committed copies live in schemas/ (contract.schema.json, ...)."""
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
    """Explain one rule code: what fires it, why it matters, how to fix it, an example."""
    from rlvr_cli.codes import explain

    print(explain(code))
    return 0
