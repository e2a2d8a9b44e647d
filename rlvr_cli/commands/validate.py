"""`rlvr validate`: expand paths, check each contract, print one report, pick the exit code."""

from __future__ import annotations

import argparse
import sys
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path

from rlvr_cli.commands.formats import REPORTERS, emit, reporter
from rlvr_cli.contract.diagnostics import Finding
from rlvr_cli.contract.formatters import report_github, report_json, report_text, summary, use_color
from rlvr_cli.contract.load import CheckResult, check_file
from rlvr_cli.contract.models import Contract
from rlvr_cli.errors import guard

EXIT_OK, EXIT_INVALID, EXIT_USAGE = 0, 1, 2
PATTERNS = ("*.rlvr.yaml", "*.rlvr.yml")


@dataclass(frozen=True)
class Checked:
    """What `validate`'s reporters print: the results, and whether the terminal takes colour."""

    results: list[CheckResult]
    color: bool


for _fmt, _write in {"text": report_text, "json": report_json, "github": report_github}.items():
    reporter("validate", _fmt)(lambda checked, write=_write: write(checked.results, checked.color))


def expand(paths: list[Path]) -> tuple[list[Path], list[str]]:
    """Files to check, and the problems with paths that could not be used."""
    files: list[Path] = []
    problems: list[str] = []
    for path in paths:
        if path.is_dir():
            matches = sorted({p for pattern in PATTERNS for p in path.rglob(pattern)})
            found = [p for p in matches if p.is_file()]
            problems += [f"{p}: not a regular file (a dangling link, a pipe, ...)" for p in matches if not p.is_file()]
            if not matches:
                problems.append(f"{path}: no *.rlvr.yaml file in this folder")
            files.extend(found)
        elif path.is_file():
            files.append(path)
        elif path.exists():
            problems.append(f"{path}: not a regular file")
        else:
            problems.append(f"{path}: no such file or folder")
    return files, problems


def _readable(files: list[Path]) -> Iterator[tuple[Path, str | None]]:
    for path in files:
        try:
            with path.open("rb"):
                pass
        except OSError as exc:
            yield path, exc.strerror or str(exc)
        else:
            yield path, None


def sandbox_findings(contract: Contract, folder: Path, contract_path: Path) -> list[Finding]:
    """`unit_tests` runs code only in a working bubblewrap sandbox: say so before training."""
    if contract.environment.unit_tests is None:
        return []
    from rlvr_cli.env.sandbox import problem

    why = problem()
    if why is None:
        return []
    return [Finding("RLV901", "error", ("environment", "unit_tests"), f"unit_tests cannot run code here: {why}")]


def run_validate(paths: list[Path], fmt: str, *, deep: bool, strict: bool) -> int:
    more: tuple = ()
    if deep:  # the data check is the data stage's; a plain validate never imports it
        from rlvr_cli.commands.data import deep_findings

        more = (deep_findings, sandbox_findings)
    files, problems = expand(paths)
    results: list[CheckResult] = []
    for path, problem in _readable(files):
        if problem:
            problems.append(f"{path}: cannot be read ({problem})")
            continue
        try:
            results.append(check_file(path, deep=deep, more=more))
        except OSError as exc:  # opens but cannot be read (e.g. /proc/self/mem)
            problems.append(f"{path}: cannot be read ({exc.strerror or exc})")
    emit("validate", fmt, Checked(results, use_color() and fmt == "text"))
    for problem in problems:
        print(f"error: {problem}", file=sys.stderr)
    if results:
        print(summary(results), file=sys.stderr)
    if problems:
        return EXIT_USAGE
    failed = any(not r.valid for r in results)
    warned = any(d.severity == "warning" for r in results for d in r.diagnostics)
    return EXIT_INVALID if failed or (strict and warned) else EXIT_OK


def _path(text: str) -> Path:
    if not text.strip():  # Path("") is the current folder: an empty argument must not validate it
        raise argparse.ArgumentTypeError("an empty path names no contract")
    return Path(text)


def parser() -> argparse.ArgumentParser:
    """The one definition of validate's options (argparse: it runs on every commit, so no
    framework import is paid before the first contract is read)."""
    p = argparse.ArgumentParser(
        prog="rlvr validate",
        description="Check contracts. Exit 0 valid (warnings allowed), 1 invalid (or warnings "
        "with --strict), 2 usage error or unreadable path, 3 internal error.",
    )
    p.add_argument(
        "paths", nargs="+", type=_path, metavar="PATH", help="contract files, or folders searched for *.rlvr.yaml"
    )
    p.add_argument("--format", "-f", choices=sorted(REPORTERS["validate"]), default="text", help="report format")
    p.add_argument(
        "--deep", action="store_true", help="also load tokenizer, data, verifier and lock files from disk (no network)"
    )
    p.add_argument("--strict", action="store_true", help="warnings fail too (exit 1)")
    return p


def main(argv: Sequence[str]) -> int:
    """`rlvr validate ARGV...` → exit code; the internal-error net lives here too."""
    args = parser().parse_args(list(argv))  # exits 2 on a usage error, as argparse does
    return guard(lambda: run_validate(args.paths, args.format, deep=args.deep, strict=args.strict))
