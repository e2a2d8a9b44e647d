"""Shared helpers: run the real `rlvr` command, find example files."""

from __future__ import annotations

import contextlib
import getpass
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

# Test processes share the cores: each gets its share of threads, and so do the `rlvr` commands
# it starts (they inherit the variable). Two processes each spinning as many OpenMP threads as the
# machine has cores slow each other down many times over, not twice (measured: a compress run of
# 88 s alone took 333 s beside another worker). The worker count is known only once pytest-xdist
# has configured the worker (its PYTEST_XDIST_WORKER_COUNT comes after this file is imported).
_USER_THREADS = os.environ.get("OMP_NUM_THREADS")


# torch sets TORCHINDUCTOR_CACHE_DIR in process the first time it needs its cache (building a
# tiny model does): set here to the directory torch would choose, the environment every `rlvr`
# command of a test process runs in no longer changes halfway (tests/zygote_client.py keeps a
# warm interpreter per environment).
def _torch_cache_dir() -> str:
    """torch's own default (torch/_inductor/runtime/cache_dir_utils.py), without importing torch."""
    try:
        user = getpass.getuser()
    except (KeyError, OSError):  # a uid with no name (containers)
        user = f"uid_{os.getuid()}"
    return os.path.join(tempfile.gettempdir(), "torchinductor_" + re.sub(r'[\\/:*?"<>|]', "_", user))


os.environ.setdefault("TORCHINDUCTOR_CACHE_DIR", _torch_cache_dir())
# `rlvr train` keeps the best matrix-product rate it has seen on a machine (train/calibration.py):
# the tests' runs keep theirs apart from the user's, set before any `rlvr` command starts
os.environ.setdefault("RLVR_CACHE_DIR", os.path.join(tempfile.gettempdir(), f"rlvr-tests-cache-{os.getuid()}"))


def pytest_configure(config: pytest.Config) -> None:
    if _USER_THREADS is not None:
        return
    worker = getattr(config, "workerinput", None)
    if worker is None and config.getoption("numprocesses", None):
        return  # the controller of `-n N`: its workers (which inherit its environment) set their own
    workers = int((worker or {}).get("workercount", 1))
    threads = max(1, len(os.sched_getaffinity(0)) // workers)
    os.environ["OMP_NUM_THREADS"] = str(threads)
    if "torch" in sys.modules:  # imported already (a plugin, a conftest): its pool was sized from the old value
        sys.modules["torch"].set_num_threads(threads)


ROOT = Path(__file__).resolve().parent.parent


@contextlib.contextmanager
def environment_kept() -> Iterator[None]:
    """Leave the process environment as it was found (PYTEST_CURRENT_TEST aside, pytest's own)."""
    before = dict(os.environ)
    try:
        yield
    finally:
        for name in set(os.environ) - set(before) - {"PYTEST_CURRENT_TEST"}:
            del os.environ[name]
        for name, value in before.items():
            if name != "PYTEST_CURRENT_TEST" and os.environ.get(name) != value:
                os.environ[name] = value


@pytest.fixture(autouse=True)
def _environment_as_it_was() -> Iterator[None]:
    """Each test leaves the process environment as it found it. A variable a test (or a library
    it runs in process: torch's TORCHINDUCTOR_CACHE_DIR, the trackers' MLFLOW_*, TRACKIO_DIR) left
    behind would otherwise send the later `rlvr` commands of that test process to another warm
    interpreter (tests/zygote_client.py keeps one per environment); what a module fixture
    changes outlives its tests, and gets one of its own."""
    with environment_kept():
        yield


EXAMPLES = ROOT / "tests" / "contracts"


def shipped_contracts() -> list[Path]:
    """The example contracts the repository ships (`git ls-files`), never a file a user's own
    experiment left in contracts/; without git (an unpacked archive), every one there."""
    try:
        listed = subprocess.run(
            ["git", "ls-files", "contracts/*.rlvr.yaml"], cwd=ROOT, capture_output=True, text=True, timeout=30
        )
    except (OSError, subprocess.TimeoutExpired):
        listed = None
    if listed is not None and listed.returncode == 0 and listed.stdout.strip():
        return sorted(ROOT / line for line in listed.stdout.split())
    return sorted((ROOT / "contracts").glob("*.rlvr.yaml"))


@dataclass
class Run:
    code: int
    stdout: str
    stderr: str

    def json(self) -> dict:
        return json.loads(self.stdout)


def built_once(tmp_path_factory: pytest.TempPathFactory, name: str, build: Callable[[Path], None]) -> Path:
    """A folder built by the first test process that asks (under a lock) and shared by every
    other one in the session: for expensive inputs that tests copy before they change them."""
    import fcntl

    base = tmp_path_factory.getbasetemp()
    # the xdist workers' common parent; without xdist that parent outlives the session, so its own folder
    root = base.parent if os.environ.get("PYTEST_XDIST_WORKER") else base
    target, done = root / name, root / f"{name}.done"
    with open(root / f"{name}.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if not done.exists():
            shutil.rmtree(target, ignore_errors=True)
            build(target)
            done.touch()
    return target


def load_factor() -> float:
    """How much slower than idle this machine runs now (1 to 4): the run queue over the cores.
    Timeouts that catch hangs scale with it, so a busy machine does not fail a correct test."""
    return min(4.0, max(1.0, os.getloadavg()[0] / len(os.sched_getaffinity(0))))


def spawn_rlvr(*args: str | Path, env: dict | None = None, **popen: object) -> subprocess.Popen:
    """`python -u -m rlvr_cli ARGS` started as a process to signal or wait for (as torchrun starts
    one: forked from a warm interpreter through tests/worker_python.py, which passes signals on
    and ends as the command ends). End it with SIGKILL through `kill_rlvr`."""
    env = warm_launch(env)
    python = env.get("PYTHON_EXEC", sys.executable)
    proc = subprocess.Popen([python, "-u", "-m", "rlvr_cli", *[str(a) for a in args]], env=env, **popen)  # type: ignore[call-overload]
    workers = _warm_workers()
    proc.warm = workers is not None and workers.serves(env)  # type: ignore[attr-defined]
    return proc


def kill_rlvr(proc: subprocess.Popen) -> int:
    """SIGKILL the command `spawn_rlvr` started — the forked process itself, where one is forked
    — and wait for it: once this returns, nothing of it runs (as after killing a fresh process).
    A stand-in killed before its command was forked could leave the command to be killed by its
    watcher a moment later, so a kill right after the start waits for the fork (milliseconds)."""
    workers = _warm_workers()
    target = None
    if workers is not None and getattr(proc, "warm", False):
        deadline = time.monotonic() + 30
        while target is None and proc.poll() is None and time.monotonic() < deadline:
            target = workers.forked_for(proc.pid)
            if target is None:
                time.sleep(0.01)
    with contextlib.suppress(ProcessLookupError):
        os.kill(target or proc.pid, signal.SIGKILL)
    return proc.wait(60)


def rlvr(*args: str | Path, cwd: Path | None = None, timeout: float = 120, env: dict | None = None) -> Run:
    """Run `rlvr ARGS...` in a process of its own, as a user would (the timeout, a hang
    detector, scaled by the machine's load): forked from a warm interpreter (tests/zygote.py)
    where the environment allows, else a fresh `python -m rlvr_cli`."""
    argv = [str(a) for a in args]
    if "--nproc" in argv:
        warm_launch(env)
    limit = timeout * load_factor()
    warm = _warm()
    if warm is not None:
        done = warm.run(argv, cwd, dict(os.environ if env is None else env), limit)
        if done is not None:
            return Run(*done)
    proc = subprocess.run(
        [sys.executable, "-m", "rlvr_cli", *argv], capture_output=True, text=True, cwd=cwd, timeout=limit, env=env
    )
    return Run(proc.returncode, proc.stdout, proc.stderr)


def torchrun_launch(
    *args: str | Path, env: dict | None = None, cwd: Path | None = None, timeout: float = 600
) -> subprocess.CompletedProcess:
    """`torchrun ARGS` (`python -m torch.distributed.run ARGS`) run to its end, as a user's line
    runs it: the launcher forked from the warm interpreter of its environment (tests/zygote.py;
    a fresh one spends ~3 s importing torch) and its processes from warm ones
    (tests/zygote_workers.py), where the environment allows; else fresh."""
    argv = [str(a) for a in args]
    env = warm_launch(env)
    limit = timeout * load_factor()
    warm = _warm()
    if warm is not None:
        done = warm.run(argv, cwd, env, limit, "torch.distributed.run")
        if done is not None:
            return subprocess.CompletedProcess(["torchrun", *argv], *done)
    command = [sys.executable, "-m", "torch.distributed.run", *argv]
    return subprocess.run(command, capture_output=True, text=True, cwd=cwd, timeout=limit, env=env)


_ZYGOTE: list = []
_WORKERS: list = []


def _warm_workers():
    """This test process's warm interpreters for torchrun's processes (tests/zygote_client.py
    Workers); None when RLVR_TESTS_FRESH=1."""
    if os.environ.get("RLVR_TESTS_FRESH") == "1":
        return None
    if not _WORKERS:
        from tests.zygote_client import Workers

        _WORKERS.append(Workers())
    return _WORKERS[0]


# torchrun starts each process of a run the tests launch with PYTHON_EXEC (torch/distributed/run.py):
# set before any command starts, so that every environment a test launches in names it
if _warm_workers() is not None:
    os.environ.update(_warm_workers().environment())


def warm_launch(env: dict | None = None) -> dict:
    """The environment for a torchrun launch (`env`, or this process's): its processes are forked
    from a warm interpreter of that environment, started here if there is none yet."""
    env = dict(os.environ if env is None else env)
    workers = _warm_workers()
    if workers is not None:
        workers.ensure(env)
    return env


def _warm():
    """This test process's warm interpreters (tests/zygote_client.py Pool), started on first use;
    None when RLVR_TESTS_FRESH=1."""
    if os.environ.get("RLVR_TESTS_FRESH") == "1":
        return None
    if not _ZYGOTE:
        from tests.zygote_client import Pool

        _ZYGOTE.append(Pool())
    return _ZYGOTE[0]


def edit(folder: Path, old: str, new: str, name: str = "experiment.rlvr.yaml") -> None:
    """Replace text in an experiment folder's contract; the text must be there."""
    path = folder / name
    text = path.read_text()
    assert old in text, old
    path.write_text(text.replace(old, new))


@pytest.fixture(scope="session")
def tiny_chatml(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A tiny ChatML tokenizer + model folder, built once per test session."""
    from rlvr_cli.toy.tiny import build_tiny

    return build_tiny(tmp_path_factory.mktemp("tiny") / "model", "chatml")


def stopped_at_step_2(run: Path, folder: Path) -> Path:
    """A copy of a finished 3-step run as it stood when its step-2 checkpoint was the newest
    (checkpoints every 1 or 2 steps): what a run stopped there would resume from."""
    shutil.copytree(run, folder)
    shutil.rmtree(folder / "checkpoints" / "step-3")
    shutil.rmtree(folder / "final")
    return folder


def copy_experiment(source: Path, target: Path, edits: list[tuple[str, str]] = ()) -> Path:  # type: ignore[assignment]
    """A copy of an experiment folder, with text edits to its contract (each must apply)."""
    shutil.copytree(source, target, ignore=shutil.ignore_patterns("runs"))
    for old, new in edits:
        edit(target, old, new)
    return target


#: small, quick steps with a checkpoint after every one (the resume and fault tests)
QUICK_STEPS = [
    ("prompts_per_step: 8", "prompts_per_step: 4"),
    ("micro_batch_sequences: 16", "micro_batch_sequences: 8"),
    ("every_steps: 20", "every_steps: 1"),
]


@pytest.fixture(scope="session")
def single_turn(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """`rlvr init --template single-turn` (contract name `arith`), made once per test process.
    Shared: copy it (`copy_experiment`) before changing anything."""
    folder = tmp_path_factory.mktemp("single-turn") / "arith"
    made = rlvr("init", folder)
    assert made.code == 0, made.stderr
    return folder


@pytest.fixture(scope="session")
def tool_use(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """`rlvr init --template tool-use --no-model` (contract name `agent`), made once per test process."""
    folder = tmp_path_factory.mktemp("tool-use") / "agent"
    made = rlvr("init", folder, "-t", "tool-use", "--no-model")
    assert made.code == 0, made.stderr
    return folder
