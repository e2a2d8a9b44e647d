"""`rlvr train --nproc N` launches through rlvr_cli/train/launcher.py: torchrun's launcher, ending
with the exit code of the process that failed first and one line naming it, without torchrun's
own traceback (each process says why it stopped)."""

from __future__ import annotations

import subprocess
import sys

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


def test_a_signal_to_the_launch_reaches_every_process_and_ends_it_with_the_signal_code() -> None:
    """SIGTERM sent to the launch alone (a scheduler's `kill PID`): torchrun passes it to every
    process and waits for them (each here exits 143, as a paused run does), then the launch
    exits 143 with one line, without torchrun's traceback."""
    import signal
    import time

    argv = [sys.executable, "-m", "rlvr_cli.train.launcher", "--standalone", "--nproc_per_node=2", "--no-python"]
    waits = ("sh", "-c", "trap 'exit 143' TERM; sleep 60 & wait")
    launch = subprocess.Popen([*argv, *waits], stderr=subprocess.PIPE, text=True)
    time.sleep(4)  # both processes started
    launch.send_signal(signal.SIGTERM)
    _, stderr = launch.communicate(timeout=60)
    assert launch.returncode == 143, stderr[-2000:]
    assert "the launch got SIGTERM: every process of the run was given it" in stderr
    assert "Traceback" not in stderr, stderr[-2000:]
