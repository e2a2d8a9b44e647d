"""The experiment contract: load (YAML with positions) → models → rules → report."""

from rlvr_cli.contract.diagnostics import ContractError, Diagnostic
from rlvr_cli.contract.load import CheckResult, check_file, load
from rlvr_cli.contract.models import Contract

__all__ = ["CheckResult", "Contract", "ContractError", "Diagnostic", "check_file", "load"]
