"""`rlvr lock`: pin the sha256 of every file a valid contract names."""

from __future__ import annotations

import sys
from pathlib import Path

from rlvr_cli.contract import lock
from rlvr_cli.contract.diagnostics import ContractError
from rlvr_cli.contract.load import load
from rlvr_cli.contract.report import text_line
from rlvr_cli.errors import RlvrError, UsageProblem


def run_lock(contract_path: Path) -> None:
    if not contract_path.is_file():
        raise UsageProblem(f"{contract_path}: no such contract file")
    try:
        contract = load(contract_path)
    except ContractError as exc:
        for d in exc.diagnostics:
            print(text_line(str(contract_path), d), file=sys.stderr)
        raise RlvrError(f"{contract_path} is not valid; fix it before locking") from None
    try:
        target = lock.write(contract, contract_path)
    except FileNotFoundError as exc:
        raise RlvrError(f"cannot lock {contract_path}: {exc}") from None
    print(target)
