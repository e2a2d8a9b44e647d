"""A server of another framework's own Python (NeMo Gym's, OpenEnv's), run for a test: its output
goes to a file (a pipe nobody reads would fill and stall it), it is up once `probe` answers 200,
and it is stopped (killed if it will not go) when the test is done."""

from __future__ import annotations

import contextlib
import subprocess
import tempfile
import time
from collections.abc import Iterator

import httpx

from rlvr_cli.env.agent import free_port


@contextlib.contextmanager
def served(command: list[str], probe: str, wait_s: float = 90.0) -> Iterator[str]:
    """Run `command` with the port appended; yield the server's base URL."""
    port = free_port()
    url = f"http://127.0.0.1:{port}"
    with tempfile.TemporaryFile() as log:
        proc = subprocess.Popen([*command, str(port)], stdout=log, stderr=subprocess.STDOUT)
        try:
            deadline = time.monotonic() + wait_s
            while True:
                with contextlib.suppress(httpx.HTTPError):
                    if httpx.get(f"{url}{probe}", timeout=1).status_code == 200:
                        break
                if proc.poll() is not None or time.monotonic() > deadline:
                    log.seek(0)
                    raise AssertionError(f"{command[1]} did not start: {log.read()[-2000:].decode(errors='replace')}")
                time.sleep(0.25)
            yield url
        finally:
            proc.terminate()
            try:
                proc.wait(10)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait(10)
