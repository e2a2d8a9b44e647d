"""The resources server in a process of its own, for `rlvr train`: `python -m rlvr_cli.env.child
SPEC FOLDER PORT`, the bearer token in `RLVR_CHILD_TOKEN`. It serves on 127.0.0.1 until its
stdin closes — the trainer holds the other end, so the server goes when the trainer ends, however
it ends (a normal exit, Ctrl-C, SIGTERM, SIGKILL, a crash)."""

from __future__ import annotations

import os
import sys
import threading
from pathlib import Path


def _exit_when_orphaned() -> None:
    sys.stdin.buffer.read()  # returns at EOF: the trainer is gone
    os._exit(0)


def main(argv: list[str]) -> None:
    import uvicorn

    from rlvr_cli.env.agent import load_app

    spec, folder, port = argv[0], Path(argv[1]), int(argv[2])
    token = os.environ.pop("RLVR_CHILD_TOKEN", None)
    cap = os.environ.pop("RLVR_CHILD_MAX_OUTPUT_BYTES", "")
    app = load_app(spec, folder, token=token, max_output_bytes=int(cap) if cap.isdigit() else None)
    threading.Thread(target=_exit_when_orphaned, daemon=True).start()
    config = uvicorn.Config(app, host="127.0.0.1", port=port, log_level="error", access_log=False)
    uvicorn.Server(config).run()


if __name__ == "__main__":
    main(sys.argv[1:])
