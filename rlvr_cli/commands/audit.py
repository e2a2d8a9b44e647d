"""`rlvr audit verifier|isolation`: glue between the CLI and rlvr_cli.audit."""

from __future__ import annotations

import json
import sys
from pathlib import Path

from rlvr_cli.commands.common import load_valid_contract


def run_audit_verifier(contract_path: Path, candidates: Path | None, fmt: str, limit: int) -> int:
    from rlvr_cli.audit.verifier import report_text, run_audit

    contract = load_valid_contract(contract_path)
    folder = contract_path.resolve().parent
    report = run_audit(contract, folder, candidates or folder / "audit" / "candidates.yaml", limit)
    if fmt == "json":
        print(
            json.dumps(
                {
                    "outcomes": [o.as_json() for o in report.outcomes],
                    "by_kind": {k: dict(v) for k, v in report.matrix("kind").items()},
                    "disagreements": len(report.disagreements),
                },
                indent=1,
            )
        )
    else:
        print(report_text(report))
    verdict = "passed" if not report.disagreements else "FAILED"
    print(
        f"verifier audit {verdict}: {len(report.disagreements)} disagreement(s) in {len(report.outcomes)} candidates",
        file=sys.stderr,
    )
    return 1 if report.disagreements else 0


def run_audit_isolation(contract_path: Path, sessions: int, fmt: str) -> int:
    from rlvr_cli.audit.isolation import report_text, run_isolation

    contract = load_valid_contract(contract_path)
    report = run_isolation(contract, contract_path.resolve().parent, sessions)
    if fmt == "json":
        print(json.dumps({"sessions": report.sessions, "ok": report.ok, "findings": report.findings}, indent=1))
    else:
        print(report_text(report))
    return 0 if report.ok else 1


def run_audit_rollouts(run_dir: Path, fmt: str) -> int:
    from rlvr_cli.audit.rollouts import audit, report_text

    if not run_dir.is_dir():
        from rlvr_cli.errors import UsageProblem

        raise UsageProblem(f"{run_dir}: no such run folder")
    if not (run_dir / "records").is_dir():
        from rlvr_cli.errors import RlvrError

        raise RlvrError(f"{run_dir} is not an rlvr run folder (no records/)")
    report = audit(run_dir)
    print(json.dumps(report, indent=1, default=str) if fmt == "json" else report_text(report))
    return 0 if report["manifest_ok"] else 1


def run_audit_rewards(contract_path: Path, policies: list[Path], samples: int, split: str, fmt: str) -> int:
    from rlvr_cli.audit.gates import compare_policies
    from rlvr_cli.errors import UsageProblem

    if len(policies) != 2:
        raise UsageProblem("give exactly two --policy options (A and B)")
    contract = load_valid_contract(contract_path)
    result = compare_policies(contract, contract_path.resolve().parent, policies[0], policies[1], samples, split)
    if fmt == "json":
        print(json.dumps(result, indent=1))
    else:
        d = result["difference_b_minus_a"]
        print(
            f"{result['items']} {split} tasks × {samples} samples: A {result['policy_a']['reward_mean']:.3f}, "
            f"B {result['policy_b']['reward_mean']:.3f}; B - A {d['mean']:+.3f} "
            f"[{d['ci95'][0]:+.3f}, {d['ci95'][1]:+.3f}] (p = {d['p_value']:.3f})"
        )
        print(
            f"tasks all-correct for both: {result['both_all_correct_share']:.0%}; "
            f"all-wrong for both: {result['both_all_wrong_share']:.0%}"
        )
        if result["flag"]:
            print(f"FLAG: {result['flag']}")
    return 0


def run_gate(contract_path: Path, candidate: Path, baseline: Path | None) -> int:
    from rlvr_cli.audit.gates import gate_table, run_gates, write_verdict
    from rlvr_cli.errors import UsageProblem

    contract = load_valid_contract(contract_path)
    if not candidate.is_dir():
        raise UsageProblem(f"{candidate}: no such run folder")
    result = run_gates(contract, contract_path.resolve().parent, candidate, baseline)
    out = candidate / "gate"
    write_verdict(result, out)
    print(gate_table(result))
    print(f"verdict written to {out / 'verdict.json'}", file=sys.stderr)
    return 0 if result["release"] == "pass" else 1


def run_report(run_dir: Path, out: Path | None) -> int:
    from rlvr_cli.audit.report import write_report
    from rlvr_cli.errors import RlvrError, UsageProblem

    if not run_dir.is_dir():
        raise UsageProblem(f"{run_dir}: no such run folder")
    if not (run_dir / "metrics.jsonl").is_file():
        raise RlvrError(f"{run_dir} is not an rlvr run folder (no metrics.jsonl)")
    print(write_report(run_dir, out))
    return 0
