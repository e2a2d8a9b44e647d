"""Helpers shared by the commands that start from a contract."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

from rlvr_cli.contract.diagnostics import ContractError
from rlvr_cli.contract.models import Contract
from rlvr_cli.errors import RlvrError, UsageProblem


def load_valid_contract(path: Path, *, artifacts: bool = False) -> Contract:
    """The typed contract, or exit: 2 when the file is missing, 1 (with the report) when invalid.
    With `artifacts`, the model folders it names must be there too (RLV901 with file:line:col)."""
    from rlvr_cli.contract.formatters import text_line
    from rlvr_cli.contract.load import load

    if not path.is_file():
        raise UsageProblem(f"{path}: no such contract file")
    try:
        from rlvr_cli.contract.deep import artifacts as artifact_check

        return load(path, more=(artifact_check,) if artifacts else ())
    except ContractError as exc:
        for diag in exc.diagnostics:
            print(text_line(str(path), diag), file=sys.stderr)
        raise RlvrError(f"{path} cannot be used as it is (the errors above); fix them and rerun") from None


def require_extra(extra: str, *modules: str) -> None:
    """A command that needs an optional extra says how to install it (exit 2), never a traceback."""
    missing = [m for m in modules if not importable(m)]
    if missing:
        raise UsageProblem(
            f"this command needs {', '.join(missing)}, which come with the '{extra}' extra: "
            f"pip install 'rlvr-cli[{extra}]'"
        )


def importable(module: str) -> bool:
    try:
        return importlib.util.find_spec(module) is not None
    except (ImportError, ValueError):
        return False
