"""The `--format` registry: every command with a `--format` option registers one reporter per
format (a function from its result to the text printed on stdout). No `if fmt == "json"`
inside a command; an unknown format is a usage error listing the choices."""

from __future__ import annotations

import contextlib
import json
import os
import sys
from collections.abc import Callable, Iterator
from typing import Any

from rlvr_cli.errors import UsageProblem

Reporter = Callable[[Any], str]
REPORTERS: dict[str, dict[str, Reporter]] = {}


def reporter(command: str, fmt: str) -> Callable[[Reporter], Reporter]:
    def register(fn: Reporter) -> Reporter:
        REPORTERS.setdefault(command, {})[fmt] = fn
        return fn

    return register


def check(command: str, fmt: str) -> None:
    """Refuse an unknown format before any work is done (exit 2)."""
    choices = REPORTERS.get(command, {})
    if fmt not in choices:
        raise UsageProblem(f"--format must be one of {', '.join(sorted(choices))}, not {fmt!r}")


def emit(command: str, fmt: str, result: Any) -> None:
    check(command, fmt)
    text = REPORTERS[command][fmt](result)
    if text:
        print(text)


@contextlib.contextmanager
def user_code_to_stderr() -> Iterator[None]:
    """While user code runs (verifiers, environments), file descriptor 1 points at stderr: a
    `print()` in a verifier never lands in the report on stdout (`--format json` stays JSON)."""
    sys.stdout.flush()
    saved = os.dup(1)
    os.dup2(2, 1)
    try:
        yield
    finally:
        sys.stdout.flush()
        os.dup2(saved, 1)
        os.close(saved)


def as_json(data: Any) -> str:
    return json.dumps(data, indent=1, default=str)
