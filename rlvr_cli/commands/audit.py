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
