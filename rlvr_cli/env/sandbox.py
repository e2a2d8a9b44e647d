"""Run untrusted code under bubblewrap: no network, a read-only root and system, a private
writable /tmp (size-capped; the working folder, and the only place code can write), separate
pid/user/ipc/uts namespaces, no capabilities, rlimits per test case, and every process killed
at the end.

What the sandbox can see: the system's /usr (and its /bin, /lib links), the Python
installation that runs rlvr (its prefix only, read-only: not the virtual environment, not the
contract's folder, not the data), the runner script, a fresh /dev and a size-capped /tmp.
Nothing of the trainer's environment variables.

Without a working bubblewrap rlvr refuses to run code; it never falls back to running it
unsandboxed (`plain=True` exists for the benchmark that measures what the sandbox costs).
"""

from __future__ import annotations

import contextlib
import json
import os
import resource
import select
import shutil
import signal
import subprocess
import sys
import tempfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from rlvr_cli.errors import RlvrError

HARNESS = Path(__file__).resolve().parent / "builtin" / "harness.py"
INSIDE = "/run/rlvr/harness.py"
STARTUP_S = 1.5  # what the runner leaves of the deadline for the sandbox to start and report
CHANNEL_CAP = 64 << 20


@dataclass(frozen=True)
class Limits:
    case_timeout_s: float = 2.0
    memory_mb: int = 512
    processes: int = 16
    file_mb: int = 16
    output_kb: int = 256

    def as_json(self) -> dict[str, Any]:
        return {k: getattr(self, k) for k in ("case_timeout_s", "memory_mb", "processes", "file_mb", "output_kb")}


@dataclass
class Run:
    """What came back: `ready` (the runner started before any model code ran), the case
    results by index, and how the sandbox ended."""

    ready: bool = False
    cases: dict[int, dict[str, Any]] = field(default_factory=dict)
    timed_out: bool = False
    returncode: int | None = None
    stderr: str = ""


NOBODY = 65534


def _others_can_run(path: str) -> bool:
    """Whether an unprivileged user can reach and execute `path` (every folder above it open)."""
    import stat

    parts = Path(path).parents
    try:
        folders_open = all(os.stat(p).st_mode & stat.S_IXOTH for p in parts)
        return folders_open and bool(os.stat(path).st_mode & stat.S_IXOTH)
    except OSError:
        return False


def python() -> tuple[str, str]:
    """(the interpreter the sandbox runs, the installation prefix to bind). The base installation
    behind any virtual environment; run as root, the sandbox runs as nobody, so one that nobody
    can reach (else the system's /usr/bin/python3)."""
    exe = os.path.realpath(getattr(sys, "_base_executable", sys.executable))
    prefix = os.path.realpath(sys.base_prefix)
    if os.geteuid() == 0 and not (_others_can_run(exe) and _others_can_run(prefix)):
        return os.path.realpath("/usr/bin/python3"), "/usr"
    return exe, prefix


def _system_binds(prefix: str) -> list[str]:
    args = ["--ro-bind", "/usr", "/usr"]
    for top in ("/bin", "/lib", "/lib32", "/lib64", "/sbin"):
        if os.path.islink(top):
            args += ["--symlink", os.readlink(top), top]
        elif os.path.isdir(top):
            args += ["--ro-bind", top, top]
    if prefix != "/usr" and not prefix.startswith("/usr/"):
        args += ["--ro-bind", prefix, prefix]
    return args


def command(limits: Limits, harness_fd: int) -> list[str]:
    """The bwrap command line that runs the harness (given as an open file: the sandbox gets a
    copy, whatever folder rlvr is installed in)."""
    bwrap = shutil.which("bwrap")
    if bwrap is None:
        raise RlvrError("bubblewrap is not installed; rlvr never runs code unsandboxed")
    exe, prefix = python()
    tmp_bytes = max(64, 4 * limits.file_mb) << 20
    return [
        bwrap,
        "--unshare-all",
        "--unshare-user",
        "--uid", "1000", "--gid", "1000",
        "--hostname", "sandbox",
        "--die-with-parent",
        "--new-session",
        "--cap-drop", "ALL",
        "--clearenv",
        "--setenv", "PATH", "/usr/bin:/bin",
        "--setenv", "HOME", "/tmp",
        "--setenv", "LANG", "C.UTF-8",
        "--setenv", "PYTHONDONTWRITEBYTECODE", "1",
        *_system_binds(prefix),
        "--file", str(harness_fd), INSIDE,
        "--dev", "/dev",
        "--size", str(tmp_bytes), "--tmpfs", "/tmp",
        "--remount-ro", "/",  # the sandbox's own root (a tmpfs) read-only: only the size-capped /tmp is writable
        "--chdir", "/tmp",
        "--",
        exe, "-I", "-S", INSIDE,
    ]  # fmt: skip


def _unprivileged() -> None:
    """In the child, before exec: run as nobody when rlvr runs as root (root's processes are
    exempt from the process limit, and root needs no user namespace to escape one)."""
    if os.geteuid() == 0:
        os.setgroups([])
        os.setresgid(NOBODY, NOBODY, NOBODY)
        os.setresuid(NOBODY, NOBODY, NOBODY)


def problem() -> str | None:
    """Why code cannot be run sandboxed here, or None when bubblewrap works."""
    if shutil.which("bwrap") is None:
        return "bubblewrap is not installed (Debian: apt-get install bubblewrap); rlvr never runs code unsandboxed"
    exe = python()[0]
    if not os.path.exists(exe):
        return f"no Python the sandbox can run ({exe})"
    with HARNESS.open("rb") as harness:
        argv = [*command(Limits(), harness.fileno())[:-4], exe, "-I", "-S", "-c", "pass"]
        try:
            probe = subprocess.run(
                argv, capture_output=True, timeout=30, text=True, pass_fds=(harness.fileno(),), preexec_fn=_unprivileged
            )
        except (OSError, subprocess.TimeoutExpired) as exc:
            return f"bubblewrap cannot start a sandbox: {exc}"
    if probe.returncode != 0:
        why = probe.stderr.strip().splitlines()[-1:] or [f"exit {probe.returncode}"]
        return f"bubblewrap cannot start a sandbox here (user namespaces disabled?): {why[0]}"
    return None


def _outer_limits(limits: Limits) -> None:  # in the child, before exec
    mib = 1 << 20
    resource.setrlimit(resource.RLIMIT_FSIZE, (limits.file_mb * mib, limits.file_mb * mib))
    resource.setrlimit(resource.RLIMIT_CORE, (0, 0))
    _unprivileged()


def run(payload: dict[str, Any], limits: Limits, deadline_s: float, *, plain: bool = False) -> Run:
    """Run the harness on `payload` (code, mode, cases with inputs only) within `deadline_s`."""
    budget = max(0.1, deadline_s - STARTUP_S)
    payload = {**payload, "limits": limits.as_json(), "budget_s": budget, "contained": not plain}
    with tempfile.TemporaryDirectory(prefix="rlvr-sandbox-") as scratch, HARNESS.open("rb") as harness:
        stdin = Path(scratch) / "payload.json"
        stdin.write_text(json.dumps(payload), encoding="utf-8")
        channel = os.open(Path(scratch) / "channel", os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o600)
        argv = [python()[0], "-I", "-S", str(HARNESS)] if plain else command(limits, harness.fileno())
        errors = Path(scratch) / "stderr"
        try:
            with stdin.open("rb") as inp, errors.open("wb") as err:
                fds = (channel,) if plain else (channel, harness.fileno())
                outcome = _wait([*argv, str(channel)], inp, err, fds, limits, deadline_s, scratch if plain else None)
        finally:
            os.close(channel)
        outcome.stderr = _tail(errors)
        _read_channel(Path(scratch) / "channel", outcome)
    return outcome


def _wait(
    argv: list[str], inp: Any, err: Any, fds: tuple[int, ...], limits: Limits, deadline_s: float, cwd: str | None
) -> Run:
    proc = subprocess.Popen(
        argv,
        stdin=inp,
        stdout=subprocess.DEVNULL,
        stderr=err,
        pass_fds=fds,
        start_new_session=True,
        cwd=cwd or "/",  # the sandbox starts as nobody when rlvr runs as root: from a folder it can enter
        preexec_fn=None if cwd else (lambda: _outer_limits(limits)),
    )
    outcome = Run()
    try:
        outcome.returncode = _ended(proc, deadline_s)
    except subprocess.TimeoutExpired:
        outcome.timed_out = True
    finally:
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(proc.pid, signal.SIGKILL)  # bwrap; its sandbox dies with it
        proc.wait()
    return outcome


def _ended(proc: subprocess.Popen, timeout_s: float) -> int:
    """`proc.wait(timeout=timeout_s)`, woken the moment the process ends. Popen's own wait with a
    timeout polls with sleeps that grow to 50 ms, so a ~70 ms verdict came back after ~120 ms
    every other time; a pidfd (Linux 5.3) becomes readable when the process exits."""
    try:
        pidfd = os.pidfd_open(proc.pid)
    except (AttributeError, OSError):  # another OS, an older kernel, or already reaped
        return proc.wait(timeout=timeout_s)
    try:
        if not select.select([pidfd], [], [], timeout_s)[0]:
            raise subprocess.TimeoutExpired(proc.args, timeout_s)
    finally:
        os.close(pidfd)
    return proc.wait()


def _tail(path: Path, limit: int = 4000) -> str:
    data = path.read_bytes()
    return data[-limit:].decode("utf-8", errors="replace")


def _read_channel(path: Path, outcome: Run) -> None:
    with path.open("rb") as f:
        data = f.read(CHANNEL_CAP)
    for line in data.splitlines():
        try:
            record = json.loads(line)
        except ValueError:
            continue  # a torn last line of a killed runner
        if not isinstance(record, dict):
            continue
        if record.get("event") == "ready":
            outcome.ready = True
        elif isinstance(record.get("case"), int):
            outcome.cases[record["case"]] = record
