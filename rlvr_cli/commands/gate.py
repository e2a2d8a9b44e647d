"""`rlvr gate` and `rlvr report`: what a finished run is worth, and how it got there."""

from __future__ import annotations

import sys
from pathlib import Path

from rlvr_cli.commands.common import load_valid_contract, require_extra
from rlvr_cli.commands.formats import user_code_to_stderr
from rlvr_cli.errors import ExitCode, UsageProblem


def run_gate(contract_path: Path, candidate: Path, baseline: Path | None) -> int:
    require_extra("train", "torch", "transformers")
    from rlvr_cli.audit.gates import gate_table, run_gates, write_verdict

    contract = load_valid_contract(contract_path)
    if not candidate.exists():
        raise UsageProblem(f"{candidate}: no such run folder or evaluation file")
    with user_code_to_stderr():
        result = run_gates(contract, contract_path.resolve().parent, candidate, baseline)
    out = candidate / "gate" if candidate.is_dir() else candidate.with_name(candidate.stem + "-gate")
    write_verdict(result, out)
    print(gate_table(result))
    print(f"verdict written to {out / 'verdict.json'}", file=sys.stderr)
    if candidate.is_dir():  # a run folder: its trackers get the verdict too
        from rlvr_cli.trackers.fanout import publish

        for line in publish(candidate, [out / "verdict.json"]):
            print(line, file=sys.stderr)
    return ExitCode.OK if result.release == "pass" else ExitCode.FAILED
