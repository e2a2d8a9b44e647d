"""A warm interpreter that runs `rlvr` commands for the tests: `python -m rlvr_cli ARGS` in a
forked copy of a process that has already imported torch, transformers and rlvr's commands.

Each command is still a process of its own — its own pid, working directory, environment,
standard streams, exit code, signals and interpreter shutdown (atexit handlers, thread joins) —
started by `fork()` from a parent that has imported what every command imports, instead of by
a fresh interpreter that spends 3–19 s on imports. The parent never computes (no torch operation,
no thread), so the fork is as clean as a fresh start. A command whose environment differs from
the parent's (besides PYTEST_CURRENT_TEST and rlvr's own RLVR_* variables, which rlvr reads
when it runs) is never forked from it, since some libraries read variables when they are
imported: it starts fresh, or from a warm interpreter started in its own environment once that
environment is asked for again (tests/zygote_client.py Pool); every command starts fresh when
RLVR_TESTS_FRESH=1. The processes of the runs the tests launch under torchrun fork from warm
interpreters of their own (tests/zygote_workers.py).

Protocol (the parent's stdin/stdout, one JSON object per line): the test process sends
{"argv", "cwd", "env", "out", "err"}; the parent answers {"pid"} once the child runs, then
{"status"} (as os.waitpid's) when it has ended.
"""

from __future__ import annotations

import contextlib
import json
import os
import sys

#: imported once by the parent: what the heavy commands import on their own
PRELOAD = (
    "torch",
    "transformers",
    "transformers.models.llama.modeling_llama",
    "transformers.models.qwen2.modeling_qwen2",
    "safetensors.torch",
    "pyarrow.parquet",
    "httpx",
    "fastapi",
    "uvicorn",
    "transformers.tokenization_utils_tokenizers",
    "transformers.convert_slow_tokenizer",
    "pandas",
    "requests",
    "detect_secrets",
)


def _child(request: dict) -> None:
    """In the forked child: become `python -m rlvr_cli ARGV` and end as that process would."""
    devnull = os.open(os.devnull, os.O_RDONLY)
    out = os.open(request["out"], os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    err = os.open(request["err"], os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    for fd, target in ((devnull, 0), (out, 1), (err, 2)):
        os.dup2(fd, target)
        os.close(fd)
    if request["cwd"]:
        os.chdir(request["cwd"])
    run_as_main(request["env"], request["argv"])


def run_as_main(env: dict, argv: list[str]) -> None:
    """In a forked child whose streams and working directory are set: become
    `python -m rlvr_cli ARGV` in `env` and end as that process would (never returns)."""
    os.environ.clear()
    os.environ.update(env)
    import runpy

    sys.path[0] = os.getcwd()  # as `python -m` puts the working directory first
    sys.argv = ["rlvr", *argv]
    try:
        runpy.run_module("rlvr_cli", run_name="__main__", alter_sys=True)
        code = 0
    except SystemExit as stop:
        code = _exit_code(stop.code)
    except KeyboardInterrupt:
        code = 128 + 2  # what a shell reports for an interpreter ended by SIGINT
        import traceback

        traceback.print_exc()
    except BaseException:
        import traceback

        traceback.print_exc()
        code = 1
    # a fresh interpreter's shutdown, less the teardown of every imported module (seconds here):
    # non-daemon threads joined, atexit handlers (finalizers, log flushes) run, streams flushed
    import atexit
    import threading

    threading._shutdown()  # type: ignore[attr-defined]
    atexit._run_exitfuncs()
    for stream in (sys.stdout, sys.stderr):
        with contextlib.suppress(OSError, ValueError):
            stream.flush()
    os._exit(code)


def _exit_code(code: object) -> int:
    """The exit status the interpreter gives SystemExit(code)."""
    if code is None:
        return 0
    if isinstance(code, int):
        return code & 0xFF
    print(code, file=sys.stderr)
    return 1


def _every_module_of(package: str) -> None:
    """Import each module of `package` whose imports are installed (the commands import theirs
    lazily, so a preloaded package would still leave them to every command)."""
    import importlib
    import pkgutil

    root = importlib.import_module(package)
    for found in pkgutil.walk_packages(root.__path__, f"{package}."):
        if found.name.endswith("__main__"):
            continue
        with contextlib.suppress(Exception):
            importlib.import_module(found.name)


def preload() -> None:
    """Import what the commands import, computing nothing."""
    import importlib

    for name in PRELOAD:
        with contextlib.suppress(ImportError):  # an extra that is not installed: its commands import it
            importlib.import_module(name)
    _every_module_of("rlvr_cli")


def serve() -> None:
    preload()
    control_in, control_out = sys.stdin.buffer, sys.stdout.buffer
    control_out.write(b'{"ready": true}\n')
    control_out.flush()
    for line in control_in:
        request = json.loads(line)
        sys.stdout.flush()
        sys.stderr.flush()
        pid = os.fork()
        if pid == 0:
            _child(request)  # never returns: the child exits with the command's status
        control_out.write(json.dumps({"pid": pid}).encode() + b"\n")
        control_out.flush()
        _, status = os.waitpid(pid, 0)
        control_out.write(json.dumps({"status": status}).encode() + b"\n")
        control_out.flush()


if __name__ == "__main__":
    serve()
