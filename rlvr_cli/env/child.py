"""The resources server in a process of its own, for `rlvr train`: `python -m rlvr_cli.env.child
SPEC FOLDER PORT`, the bearer token in `RLVR_CHILD_TOKEN`. It serves on 127.0.0.1 until its
stdin closes — the trainer holds the other end, so the server goes when the trainer ends, however
it ends (a normal exit, Ctrl-C, SIGTERM, SIGKILL, a crash)."""

from __future__ import annotations

import os
import sys
import threading
from pathlib import Path

from rlvr_cli.errors import RlvrError

ERROR_PREFIX = "rlvr-server-error: "


def _exit_when_orphaned() -> None:
    sys.stdin.buffer.read()  # returns at EOF: the trainer is gone
    os._exit(0)


def main(argv: list[str]) -> None:
    import uvicorn

    from rlvr_cli.env.agent import load_app

    spec, folder, port = argv[0], Path(argv[1]), int(argv[2])
    token = os.environ.pop("RLVR_CHILD_TOKEN", None)
    cap = os.environ.pop("RLVR_CHILD_MAX_OUTPUT_BYTES", "")
    try:
        app = load_app(spec, folder, token=token, max_output_bytes=int(cap) if cap.isdigit() else None)
    except BaseException as exc:  # the trainer reads this line; nothing after it may hide it
        _die(f"{exc}" if isinstance(exc, RlvrError) else f"{type(exc).__name__}: {exc}")
    threading.Thread(target=_exit_when_orphaned, daemon=True).start()
    config = uvicorn.Config(app, host="127.0.0.1", port=port, log_level="error", access_log=False)
    try:
        uvicorn.Server(config).run()
    except BaseException as exc:
        _die(f"{type(exc).__name__}: {exc}")
    os._exit(0)  # never an interpreter shutdown racing the daemon thread on stdin


def _die(message: str) -> None:
    """One line the trainer shows (`rlvr-server-error: ...`), then exit 1 at once: a normal
    shutdown with the stdin thread still reading ends in a fatal error that hides the reason."""
    print(f"{ERROR_PREFIX}{message}", file=sys.stderr, flush=True)
    os._exit(1)


if __name__ == "__main__":
    main(sys.argv[1:])
