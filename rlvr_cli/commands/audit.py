"""`rlvr audit verifier|isolation|rollouts|rewards`: glue between the CLI and rlvr_cli.audit."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

from rlvr_cli.commands.common import load_valid_contract, require_extra
from rlvr_cli.commands.formats import as_json, check, emit, reporter, user_code_to_stderr
from rlvr_cli.errors import UsageProblem


def run_audit_verifier(contract_path: Path, candidates: Path | None, fmt: str, sample: int | None) -> int:
    from rlvr_cli.audit.verifier import run_audit

    check("audit verifier", fmt)
    contract = load_valid_contract(contract_path)
    folder = contract_path.resolve().parent
    with user_code_to_stderr():
        report = run_audit(contract, folder, _candidates(candidates, folder), sample)
    emit("audit verifier", fmt, report)
    verdict = "FAILED" if report.failed else "passed"
    skipped = f", {len(report.not_run)} could not run" if report.not_run else ""
    found = f", {len(report.findings)} finding(s)" if report.findings else ""
    print(
        f"verifier audit {verdict}: {len(report.disagreements)} disagreement(s) in {len(report.outcomes)} candidates"
        + skipped
        + found,
        file=sys.stderr,
    )
    return 1 if report.failed else 0


@reporter("audit verifier", "text")
def _verifier_text(report: Any) -> str:
    from rlvr_cli.audit.verifier import report_text

    return report_text(report)


@reporter("audit verifier", "json")
def _verifier_json(report: Any) -> str:
    return as_json(
        {
            "outcomes": [o.as_json() for o in report.outcomes],
            "by_kind": {k: dict(v) for k, v in report.matrix("kind").items()},
            "disagreements": len(report.disagreements),
            "not_run": len(report.not_run),
            "notes": report.notes,
            "findings": report.findings,
        }
    )


def run_audit_isolation(contract_path: Path, sessions: int, candidates: Path | None, fmt: str) -> int:
    require_extra("env", "fastapi", "uvicorn", "httpx")
    from rlvr_cli.audit.isolation import run_isolation

    check("audit isolation", fmt)
    contract = load_valid_contract(contract_path)
    folder = contract_path.resolve().parent
    with user_code_to_stderr():
        report = run_isolation(contract, folder, sessions, _candidates(candidates, folder))
    emit("audit isolation", fmt, report)
    print(f"isolation audit {'passed' if report.ok else 'FAILED'}", file=sys.stderr)
    return 0 if report.ok else 1


def _candidates(given: Path | None, folder: Path) -> Path:
    """A named candidates file must exist (a typo is a usage error, never an empty control group)."""
    if given is not None and not given.is_file():
        raise UsageProblem(f"{given}: no such candidates file")
    return given or folder / "audit" / "candidates.yaml"


@reporter("audit isolation", "text")
def _isolation_text(report: Any) -> str:
    from rlvr_cli.audit.isolation import report_text

    return report_text(report)


@reporter("audit isolation", "json")
def _isolation_json(report: Any) -> str:
    return as_json(
        {
            "sessions": report.sessions,
            "calls": report.calls,
            "refused": report.refused,
            "ok": report.ok,
            "findings": report.findings,
        }
    )


def run_audit_rollouts(run_dir: Path, fmt: str) -> int:
    require_extra("train", "pyarrow")
    from rlvr_cli.audit.rollout_audit import audit
    from rlvr_cli.store.run import RunFolder

    check("audit rollouts", fmt)
    run = RunFolder.existing(run_dir)
    if not run.records.is_dir():
        from rlvr_cli.errors import RlvrError

        raise RlvrError(f"{run_dir} is not an rlvr run folder (no records/)")
    report = audit(run_dir)
    emit("audit rollouts", fmt, report)
    return 0 if report["manifest_ok"] and report["data_check"]["ok"] else 1


@reporter("audit rollouts", "text")
def _rollouts_text(report: dict[str, Any]) -> str:
    from rlvr_cli.audit.rollout_audit import report_text

    return report_text(report)


reporter("audit rollouts", "json")(as_json)


def run_audit_rewards(contract_path: Path, policies: list[Path], samples: int, split: str, fmt: str) -> int:
    require_extra("train", "torch", "transformers")
    from rlvr_cli.audit.gates import compare_policies

    check("audit rewards", fmt)
    if len(policies) != 2:
        raise UsageProblem("give exactly two --policy options (A and B)")
    contract = load_valid_contract(contract_path)
    with user_code_to_stderr():
        result = compare_policies(contract, contract_path.resolve().parent, policies[0], policies[1], samples, split)
    emit("audit rewards", fmt, result)
    return 0


@reporter("audit rewards", "text")
def _rewards_text(result: dict[str, Any]) -> str:
    d = result["difference_b_minus_a"]
    lines = [
        f"{result['items']} {result['split']} tasks × {result['samples_per_item']} samples: "
        f"A {result['policy_a']['reward_mean']:.3f}, B {result['policy_b']['reward_mean']:.3f}; "
        f"B - A {d['mean']:+.3f} [{d['ci95'][0]:+.3f}, {d['ci95'][1]:+.3f}] (p = {d['p_value']:.3f})",
        f"tasks all-correct for both: {result['both_all_correct_share']:.0%}; "
        f"all-wrong for both: {result['both_all_wrong_share']:.0%}",
    ]
    if result["flag"]:
        lines.append(f"FLAG: {result['flag']}")
    return "\n".join(lines)


reporter("audit rewards", "json")(as_json)
