"""`rlvr data check` and `rlvr data split`."""

from __future__ import annotations

import sys
from collections import Counter
from pathlib import Path
from typing import Any

from rlvr_cli.commands.common import importable, load_valid_contract, require_extra
from rlvr_cli.commands.formats import emit, reporter
from rlvr_cli.contract.diagnostics import Finding
from rlvr_cli.contract.models import Contract
from rlvr_cli.contract.waivers import active
from rlvr_cli.data.findings import LISTED_PER_CODE, DataReport
from rlvr_cli.errors import UsageProblem
from rlvr_cli.files import atomic_write_text

VALIDATE_PER_CODE = 20
DATA_MODULES = ("datasketch", "detect_secrets")


@reporter("data check", "text")
def _text(report: DataReport) -> str:
    return report.text()


@reporter("data check", "json")
def _json(report: DataReport) -> str:
    return report.dumps().rstrip("\n")


@reporter("data check", "github")
def _github(report: DataReport) -> str:
    return report.github()


def data_report(contract: Contract, contract_path: Path, *, waive: bool = True, profile: Any = None) -> DataReport:
    from rlvr_cli.data.check import check

    waivers = active(contract) if waive else []
    return check(contract, contract_path.resolve().parent, contract_path.name, waivers, profile)


def run_data_check(
    contract_path: Path,
    fmt: str,
    out: Path | None,
    max_per_code: int = LISTED_PER_CODE,
    profile_path: Path | None = None,
) -> int:
    """Exit 0 clean (warnings and waived findings allowed), 1 an error finding."""
    from rlvr_cli.commands.formats import check as check_format

    check_format("data check", fmt)
    if max_per_code < 0:
        raise UsageProblem("--max-per-code must be 0 (every finding) or more")
    require_extra("data", *DATA_MODULES)
    contract = load_valid_contract(contract_path)
    profile = None
    if profile_path is not None:
        from rlvr_cli.data.difficulty import Profile

        profile = Profile.read(profile_path)
    report = data_report(contract, contract_path, profile=profile)
    report.listed_per_code = max_per_code
    if out is not None:
        atomic_write_text(out, report.dumps())
    emit("data check", fmt, report)
    print(report.summary(), file=sys.stderr)
    return 1 if report.errors else 0


def deep_findings(contract: Contract, folder: Path, contract_path: Path) -> list[Finding]:
    """The data check as `rlvr validate --deep` reports it: at the split's key in the contract,
    with the data file and line in the message (the first VALIDATE_PER_CODE of each code;
    waivers are applied by validate itself)."""
    missing = [m for m in DATA_MODULES if not importable(m)]
    if missing:
        message = f"the data check needs {', '.join(missing)}: pip install 'rlvr-cli[data]'"
        return [Finding("RLV901", "error", ("data", "splits"), message)]
    report = data_report(contract, contract_path, waive=False)
    scopes, shown = active(contract), Counter[str]()
    found, rest = [], Counter[tuple[str, str]]()  # past the listed ones: how many no waiver covers
    for f in report.findings:
        shown[f.code] += 1
        severity = "error" if f.severity == "error" else "warning"
        if shown[f.code] > VALIDATE_PER_CODE:
            if not any(w.covers(f.code, report.said(f), f.tasks) for w in scopes):
                rest[(f.code, severity)] += 1
            continue
        split = f.at.split if f.at is not None else f.split
        where: tuple[str, ...] = ("data", "splits", split, "path") if split else ("data",)
        if f.code == "RLV407":
            where = ("data", "holdout_design")
        message = f"{report.where(f.at)}: {f.message}" if f.at is not None else f.message
        found.append(Finding(f.code, severity, where, message, tasks=f.tasks))
    for (code, severity), n in rest.items():
        more = f"... and {n} more {code} findings no waiver covers (`rlvr data check --max-per-code 0` lists every one)"
        found.append(Finding(code, severity, ("data",), more))
    return found


def run_data_split(
    contract_path: Path,
    source: Path | None,
    by: str | None,
    fractions: str,
    seed: int | None,
    *,
    force: bool,
    profile_path: Path | None = None,
    drop: str | None = None,
) -> int:
    from rlvr_cli.data.difficulty import Profile, parse_drop
    from rlvr_cli.data.split import write_split

    require_extra("data", *DATA_MODULES)
    contract = load_valid_contract(contract_path)
    shares = _fractions(fractions)
    dropping = parse_drop(drop)
    if dropping and profile_path is None:
        raise UsageProblem("--drop needs --profile FILE (the labels come from the difficulty profile)")
    profile = Profile.read(profile_path) if profile_path is not None else None
    folder = contract_path.resolve().parent
    source_path = source if source is not None else folder / contract.data.sources[0].path
    if not source_path.is_file():
        raise UsageProblem(f"{source_path}: no such source file")
    chosen = contract.hyperparameters.seed if seed is None else seed
    target, manifest = write_split(
        contract, contract_path, source_path, by, shares, chosen, force=force, profile=profile, drop=dropping
    )
    for name, info in manifest["splits"].items():
        asked = manifest["fractions"][name]
        print(f"{name}: {info['rows']} tasks ({manifest['shares'][name]:.0%}, asked {asked:.0%}) → {info['path']}")
    dropped = len(manifest["dropped_duplicates"])
    print(
        f"{dropped} exact duplicate(s) dropped, {manifest['near_duplicate_joins']} near-duplicate join(s); "
        f"{manifest['groups']} group(s), the largest of {manifest['largest_group']} task(s) "
        "(a group stays in one split)"
    )
    if profile is not None:
        _print_strata(manifest["profile"])
    print(f"manifest: {target}")
    if not contract.data.split_manifest:
        rel = target.relative_to(folder).as_posix()
        print(
            f"next: add `split_manifest: {rel}` to the contract's data section so `rlvr lock` pins it", file=sys.stderr
        )
    from rlvr_cli.contract.lock import lock_path

    pinned = lock_path(contract, contract_path)
    if pinned.is_file():  # its sha256s are of the splits just replaced: validate --deep would say RLV104
        print(
            f"next: {pinned.name} pins the splits this replaced; run `rlvr lock {contract_path}` again", file=sys.stderr
        )
    return 0


def _print_strata(summary: dict[str, Any]) -> None:
    dropped = summary["dropped"]
    if dropped:
        by_label = Counter(d["profile"] for d in dropped)
        print(f"{len(dropped)} task(s) left out by --drop: " + ", ".join(f"{k} {n}" for k, n in by_label.items()))
    print("stratified by difficulty:")
    for split, mix in summary["mix"].items():
        print(f"  {split}: " + (", ".join(f"{label} {n}" for label, n in mix.items()) or "no task"))
    unprofiled = sum(mix.get("unprofiled", 0) for mix in summary["mix"].values())
    if unprofiled:
        print(f"{unprofiled} task(s) are not in the profile: a stratum of their own", file=sys.stderr)


def _fractions(text: str) -> list[float]:
    try:
        shares = [float(part) for part in text.split(",")]
    except ValueError:
        raise UsageProblem(f"--fractions {text!r}: three numbers, e.g. 0.8,0.1,0.1") from None
    if len(shares) != 3 or any(not 0 < s < 1 for s in shares) or abs(sum(shares) - 1) > 1e-6:
        raise UsageProblem(f"--fractions {text!r}: three shares between 0 and 1 that sum to 1")
    return shares
