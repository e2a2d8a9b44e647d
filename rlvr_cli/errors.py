"""The one exception family domain code raises; the CLI maps each to a message and exit code."""

from __future__ import annotations


class RlvrError(Exception):
    """A problem the user can fix: printed as one clear message, never a traceback."""

    exit_code = 1


class UsageProblem(RlvrError):
    """Bad arguments, a missing or unreadable path: exit 2."""

    exit_code = 2
