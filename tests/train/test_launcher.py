"""`rlvr train --nproc N` launches through rlvr_cli/train/launcher.py: torchrun's launcher, ending
with the exit code of the process that failed first and one line naming it, without torchrun's
own traceback (each process says why it stopped)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

KILLED = "import os, signal; os.kill(os.getpid(), signal.SIGKILL)"


def launch(nproc: int, *command: str) -> subprocess.CompletedProcess:
    argv = [sys.executable, "-m", "rlvr_cli.train.launcher", "--standalone", f"--nproc_per_node={nproc}"]
    return subprocess.run([*argv, "--no-python", *command], capture_output=True, text=True, timeout=120)


@pytest.mark.parametrize(
    ("command", "code", "said"),
    [
        (("sh", "-c", "exit 143"), 143, "exit code 143"),  # a run paused by SIGTERM exits 143 (docs/cli.md)
        ((sys.executable, "-c", KILLED), 137, "SIGKILL (exit code 137)"),
        (("sh", "-c", "exit 0"), 0, None),
    ],
    ids=["paused", "killed", "finished"],
)
def test_the_launch_ends_with_the_first_failed_process_code_and_no_traceback(
    command: tuple[str, ...], code: int, said: str | None
) -> None:
    done = launch(2, *command)
    assert done.returncode == code, done.stderr[-2000:]
    assert "Traceback" not in done.stderr and "ChildFailedError" not in done.stderr, done.stderr[-2000:]
    assert "failed (exitcode" not in done.stderr, done.stderr[-2000:]  # torchrun's own line: ours says it
    if said is None:
        assert "stopped first" not in done.stderr
    else:
        assert f"of the run stopped first: {said}; its own message is above" in done.stderr, done.stderr[-2000:]


def test_a_signal_to_the_launch_reaches_every_process_and_ends_it_with_the_signal_code(tmp_path: Path) -> None:
    """SIGTERM sent to the launch alone (a scheduler's `kill PID`): torchrun passes it to every
    process and waits for them (each here exits 143, as a paused run does), then the launch
    exits 143 with one line, without torchrun's traceback."""
    import signal
    import time

    argv = [sys.executable, "-m", "rlvr_cli.train.launcher", "--standalone", "--nproc_per_node=2", "--no-python"]
    waits = ("sh", "-c", f"trap 'exit 143' TERM; touch {tmp_path}/started-$LOCAL_RANK; sleep 60 & wait")
    launch = subprocess.Popen([*argv, *waits], stderr=subprocess.PIPE, text=True)
    deadline = time.monotonic() + 120
    while len(list(tmp_path.glob("started-*"))) < 2 and time.monotonic() < deadline and launch.poll() is None:
        time.sleep(0.05)  # both processes started (a fixed wait was short on a busy machine: the launch died unhandled)
    assert len(list(tmp_path.glob("started-*"))) == 2, launch.poll()
    launch.send_signal(signal.SIGTERM)
    _, stderr = launch.communicate(timeout=60)
    assert launch.returncode == 143, stderr[-2000:]
    assert "the launch got SIGTERM: every process of the run was given it" in stderr
    assert "Traceback" not in stderr, stderr[-2000:]
