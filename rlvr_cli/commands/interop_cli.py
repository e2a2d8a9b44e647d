"""The `rlvr import` group and the `rlvr export` command (bodies in commands/interop.py)."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from rlvr_cli.commands.groups import command, contract_arg, contract_file

import_app = typer.Typer(
    help="Import a TRL, verl or NeMo RL config, or a verifiers taskset.",
    no_args_is_help=True,
)
INTO = typer.Option(
    "--into",
    callback=lambda path: contract_file(path) if path is not None else None,
    help="The contract (or its folder) whose environment, data and model the run uses; the import writes beside it.",
)
OUT = typer.Option("--out", help="The contract file to write (beside --into; default: CONFIG's name .rlvr.yaml).")


@import_app.command("trl")
@command
def import_trl(
    config: Annotated[
        Path, typer.Argument(help="GRPOConfig (or RLOOConfig) options as YAML or JSON (a TrainingArguments dump too).")
    ],
    into: Annotated[Path, INTO],
    out: Annotated[Path | None, OUT] = None,
    processes: Annotated[
        int, typer.Option("--processes", min=1, help="Processes the TRL run used (per-device batch × processes).")
    ] = 1,
    peft_config: Annotated[
        Path | None,
        typer.Option(
            "--peft-config",
            help="peft's LoraConfig keywords as YAML or JSON (GRPOTrainer's peft_config); "
            "default: peft_config.yaml beside CONFIG when there is one.",
        ),
    ] = None,
    trainer: Annotated[
        str, typer.Option("--trainer", help="grpo (GRPOTrainer, `trl grpo`) or rloo (RLOOTrainer, `trl rloo`).")
    ] = "grpo",
) -> int:
    """Import a TRL 1.16 GRPOConfig (or, with --trainer rloo, an RLOOConfig).

    Exit 1 listing every option the contract cannot state."""
    from rlvr_cli.commands.interop import run_import
    from rlvr_cli.errors import UsageProblem

    if trainer not in ("grpo", "rloo"):
        raise UsageProblem(f"--trainer {trainer!r}: choose grpo or rloo")
    return run_import("trl-rloo" if trainer == "rloo" else "trl", config, [], into, out, processes, peft_config)


@import_app.command("verl")
@command
def import_verl(
    config: Annotated[Path, typer.Argument(help="verl's ppo_trainer YAML (whole or only what the run sets).")],
    overrides: Annotated[
        list[str] | None, typer.Argument(help="Hydra overrides key=value, as on verl's command line.")
    ] = None,
    into: Annotated[Path | None, INTO] = None,
    out: Annotated[Path | None, OUT] = None,
) -> int:
    """Import a verl 0.9.1 config with its overrides.

    Exit 1 listing every choice the contract cannot state."""
    return _with_overrides("verl", config, overrides, into, out)


@import_app.command("nemo-rl")
@command
def import_nemo_rl(
    config: Annotated[
        Path, typer.Argument(help="A NeMo RL GRPO config (its defaults: files beside it, as NeMo RL reads).")
    ],
    overrides: Annotated[
        list[str] | None, typer.Argument(help="Overrides key=value, as on NeMo RL's command line.")
    ] = None,
    into: Annotated[Path | None, INTO] = None,
    out: Annotated[Path | None, OUT] = None,
) -> int:
    """Import a NeMo RL GRPO config (grpo, loss_fn, policy) with its overrides.

    Exit 1 listing every choice the contract cannot state."""
    return _with_overrides("nemo-rl", config, overrides, into, out)


def _with_overrides(peer: str, config: Path, overrides: list[str] | None, into: Path | None, out: Path | None) -> int:
    """A peer whose runs are a config file and command-line overrides (verl, NeMo RL)."""
    from rlvr_cli.commands.interop import run_import
    from rlvr_cli.errors import UsageProblem

    if into is None:
        raise UsageProblem("--into CONTRACT is required: the experiment the imported objective runs on")
    return run_import(peer, config, overrides or [], into, out, 1)


@import_app.command("verifiers")
@command
def import_verifiers(
    taskset: Annotated[str, typer.Argument(help="The verifiers (v1) Taskset subclass, as module:Class.")],
    out: Annotated[Path, typer.Option("--out", help="The JSONL of tasks to write (rlvr's task rows).")],
    config: Annotated[str, typer.Option(help="The taskset's config as a JSON object.")] = "{}",
) -> int:
    """Turn a verifiers taskset into rlvr tasks.

    Prints the environment and reward components the contract states."""
    from rlvr_cli.commands.interop import run_import_verifiers

    return run_import_verifiers(taskset, out, config)


@command
def export(
    contract: Annotated[Path, contract_arg("The contract to export")],
    to: Annotated[str, typer.Option("--to", help="trl, verl or nemo-rl.")],
    out: Annotated[Path, typer.Option("--out", help="A new folder for the peer's files.")],
    processes: Annotated[int, typer.Option("--processes", min=1, help="trl: processes the run will use.")] = 1,
    allow_inexact: Annotated[
        bool, typer.Option("--allow-inexact", help="Write even where the peer computes another number (each stated).")
    ] = False,
) -> int:
    """Write the TRL, verl or NeMo RL config of the contract.

    For verl also its reward function and data; exit 1 listing every choice the peer cannot express."""
    from rlvr_cli.commands.interop import run_export
    from rlvr_cli.errors import UsageProblem

    if to not in ("trl", "verl", "nemo-rl"):
        raise UsageProblem(f"--to {to!r}: choose trl, verl or nemo-rl")
    return run_export(contract, to, out, processes, allow_inexact)
