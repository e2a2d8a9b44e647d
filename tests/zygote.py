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
    "torch.distributed.run",  # the launcher the tests' torchrun lines start (tests/conftest.py `torchrun_launch`)
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
    run_as_main(request["env"], request["argv"], request.get("module", "rlvr_cli"))


def run_as_main(env: dict, argv: list[str], module: str = "rlvr_cli", script: str | None = None) -> None:
    """In a forked child whose streams and working directory are set: become
    `python -m MODULE ARGV` in `env` (`rlvr`, or torchrun's launcher), or `python SCRIPT ARGV`,
    and end as that process would (never returns)."""
    os.environ.clear()
    os.environ.update(env)
    import runpy

    # as `python -m` puts the working directory first, and `python SCRIPT` the script's folder
    sys.path[0] = os.path.dirname(os.path.abspath(script)) if script else os.getcwd()
    sys.argv = [script or ("rlvr" if module == "rlvr_cli" else module), *argv]
    try:
        if script:
            runpy.run_path(script, run_name="__main__")
        else:
            runpy.run_module(module, run_name="__main__", alter_sys=True)
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
    """Import what the commands import, computing nothing; then freeze what was imported out of
    the garbage collector's reach (`gc.freeze`, as forking servers do): a fresh interpreter's
    objects are collected as its own, but a forked child would scan the ~400,000 objects it
    inherited at every full collection (`rlvr train` makes one when its steps begin: ~0.6 s a
    process here), writing to each object's header and so copying every page they lie on."""
    import gc
    import importlib
    import inspect

    for name in PRELOAD:
        with contextlib.suppress(ImportError):  # an extra that is not installed: its commands import it
            importlib.import_module(name)
    _every_module_of("rlvr_cli")
    # torchrun's launcher names each rendezvous event by `inspect.stack()`, which looks up every
    # frame's module by its file: a frame of a frozen module (`<frozen runpy>`) matches no file,
    # so each such lookup walks all of sys.modules (~6,000 here, against ~1,500 in a fresh
    # launcher), ~2 s a launch. Their names map to their modules, and the cache is filled once.
    for name, module in list(sys.modules.items()):
        if getattr(getattr(module, "__spec__", None), "origin", None) == "frozen":
            inspect.modulesbyfile[f"<frozen {name}>"] = name
    inspect.getmodule(sys._getframe(), "<warm>")
    gc.collect()
    gc.freeze()


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
