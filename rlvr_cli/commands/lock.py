"""`rlvr lock`: pin the sha256 of every file a valid contract names."""

from __future__ import annotations

from pathlib import Path

from rlvr_cli.commands.common import load_valid_contract
from rlvr_cli.contract import lock
from rlvr_cli.errors import RlvrError


def run_lock(contract_path: Path) -> None:
    contract = load_valid_contract(contract_path)
    try:
        target = lock.write(contract, contract_path)
    except FileNotFoundError as exc:
        raise RlvrError(f"cannot lock {contract_path}: {exc}") from None
    print(target)
