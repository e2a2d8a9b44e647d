"""The tests' warm interpreter (tests/zygote.py) answers as a fresh `python -m rlvr_cli` does:
the same exit codes, streams and working directory, and a fresh start where the environment
differs from the one it was started with."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.conftest import ROOT
from tests.zygote_client import Zygote

BAD = ROOT / "tests" / "contracts" / "invalid"


def fresh(argv: list[str], cwd: Path | None = None) -> tuple[int, str, str]:
    proc = subprocess.run([sys.executable, "-m", "rlvr_cli", *argv], capture_output=True, text=True, cwd=cwd)
    return proc.returncode, proc.stdout, proc.stderr


@pytest.fixture(scope="module")
def warm() -> Zygote:
    zygote = Zygote()
    yield zygote
    zygote.close()


def test_warm_commands_answer_as_fresh_ones(warm: Zygote, tmp_path: Path) -> None:
    bad = sorted(BAD.glob("*.rlvr.yaml"))[0]
    cases = [
        ["--version"],
        ["validate", str(bad)],  # exit 1, diagnostics on stdout
        ["status", str(tmp_path / "no-such-run")],  # a run folder that is not there
        ["no-such-command"],
        ["schema", "contract"],
    ]
    for argv in cases:
        assert warm.run(argv, None, dict(os.environ), 120) == fresh(argv), argv


def test_a_warm_command_runs_in_its_working_directory(warm: Zygote, tmp_path: Path) -> None:
    made = warm.run(["init", "exp", "--no-model"], tmp_path, dict(os.environ), 120)
    assert made is not None and made[0] == 0, made
    assert (tmp_path / "exp" / "experiment.rlvr.yaml").exists()


def test_another_environment_starts_fresh_and_a_hang_times_out(warm: Zygote, tmp_path: Path) -> None:
    assert warm.run(["--version"], None, {**os.environ, "ZYGOTE_PROBE": "1"}, 120) is None
    assert warm.run(["--version"], None, {**os.environ, "RLVR_FAULT": "x"}, 120) is not None  # read when rlvr runs
    with pytest.raises(subprocess.TimeoutExpired):  # a command past its time is killed, as subprocess.run does
        warm.run(["serve", "--help"], None, dict(os.environ), 0.001)
    assert warm.run(["--version"], None, dict(os.environ), 120)[0] == 0  # and the next one runs


def test_each_test_process_and_its_commands_get_their_share_of_the_cores(warm: Zygote) -> None:
    """Two workers each running as many OpenMP threads as the machine has cores slow each other
    down several times over (tests/conftest.py); the commands inherit the worker's count."""
    import torch

    from tests import conftest

    if conftest._USER_THREADS is not None:
        pytest.skip(f"OMP_NUM_THREADS={conftest._USER_THREADS} was set by whoever ran the tests")
    workers = int(os.environ.get("PYTEST_XDIST_WORKER_COUNT", "1"))
    share = max(1, len(os.sched_getaffinity(0)) // workers)
    assert os.environ["OMP_NUM_THREADS"] == str(share) and torch.get_num_threads() == share
    assert warm.env["OMP_NUM_THREADS"] == str(share)  # what every command forked from it starts with


def test_a_test_leaves_the_environment_as_it_found_it(warm: Zygote) -> None:
    """What a test sets or changes in os.environ is undone after it (tests/conftest.py), so later
    commands of the same test process still fork from the warm interpreter."""
    from tests.conftest import environment_kept

    os.environ["ZYGOTE_KEPT_PROBE"] = "before"
    try:
        with environment_kept():
            os.environ["ZYGOTE_LEFT_BEHIND"] = "1"
            os.environ["ZYGOTE_KEPT_PROBE"] = "changed"
        assert "ZYGOTE_LEFT_BEHIND" not in os.environ and os.environ["ZYGOTE_KEPT_PROBE"] == "before"
    finally:
        del os.environ["ZYGOTE_KEPT_PROBE"]
    assert warm.run(["--version"], None, dict(os.environ), 120) is not None  # still warm


def test_an_environment_that_drifts_gets_a_warm_interpreter_of_its_own(warm: Zygote) -> None:
    """A module fixture or a library can leave a variable set for the rest of a test process
    (torch sets TORCHINDUCTOR_CACHE_DIR in process, and a module fixture's change outlives every
    test of the module): its first command runs fresh, the next ones fork from an interpreter
    started in that environment, and the first environment's interpreter stays warm."""
    from tests.zygote_client import Pool, _comparable

    pool = Pool()
    pool.warm[frozenset(_comparable(warm.env).items())] = warm  # the module's, already warm
    drifted = {**warm.env, "ZYGOTE_DRIFTED": "1"}
    try:
        assert pool.run(["--version"], None, drifted, 120) is None  # once: a one-off, fresh
        again = pool.run(["schema", "contract"], None, drifted, 300)
        assert again is not None and again == fresh(["schema", "contract"])
        assert [z.env.get("ZYGOTE_DRIFTED") for z in pool.warm.values()] == [None, "1"]
        assert pool.run(["--version"], None, dict(warm.env), 120) is not None  # the first one still answers
    finally:
        for zygote in pool.warm.values():
            if zygote is not warm:
                zygote.close()
