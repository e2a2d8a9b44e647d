"""Environments: verdicts, single-turn verifiers, resources servers and the agent loop."""

from rlvr_cli.env.verdict import Verdict

__all__ = ["Verdict"]
