"""The sandboxed unit-test verifier (`environment.unit_tests`, bubblewrap): every exploit arm of
the audit is first shown to pass (or harm) a naive runner — the solution and its tests in one
unsandboxed Python process, judged by exit code — and then rejected by the real sandbox; the
template validates, audits clean and trains; faults of the sandbox itself are their own verdicts."""

from __future__ import annotations

import contextlib
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import pytest

from rlvr_cli.audit.code_arms import Plant, _exploits
from rlvr_cli.env.builtin.unit_tests import UnitTests
from rlvr_cli.env.sandbox import Limits, problem, run
from tests.conftest import edit, rlvr

CONTRACT = "experiment.rlvr.yaml"
ADD = {
    "id": "add",
    "tests": {
        "kind": "call",
        "function": "add",
        "cases": [{"args": [1, 2], "expected": 3}, {"args": [5, 5], "expected": 10}],
    },
}
REFERENCE = "def add(a, b):\n    return a + b\n"
ECHO = {
    "id": "echo",
    "tests": {"kind": "stdio", "cases": [{"stdin": "hi\n", "stdout": "HI\n"}, {"stdin": "a\nb\n", "stdout": "A\nB\n"}]},
}

pytestmark = pytest.mark.skipif(problem() is not None, reason=f"needs a working bubblewrap: {problem()}")


@pytest.fixture(scope="module")
def check() -> UnitTests:
    return UnitTests("last_code_block", "fraction", case_timeout_s=1.0, memory_mb=256, processes=8, deadline_s=12)


@pytest.fixture
def plant(tmp_path: Path) -> Plant:
    with Plant(tmp_path / "outside") as planted:
        planted.folder.mkdir()
        planted.expected.write_text(json.dumps({"add": ADD["tests"]["cases"]}))
        yield planted


def naive(code: str, folder: Path, expected: Path, timeout: float = 5) -> bool | None:
    """What a naive runner decides: the solution imported, then unittest discovery over a test
    file beside it, in one unsandboxed process; passed when it exits 0. None: it hung."""
    (folder / "solution.py").write_text(code)
    (folder / "test_solution.py").write_text(
        "import json, unittest\nfrom solution import add\n"
        f"CASES = json.load(open({str(expected)!r}))['add']\n"
        "class T(unittest.TestCase):\n"
        "    def test_cases(self):\n"
        "        for c in CASES:\n"
        "            self.assertEqual(add(*c['args']), c['expected'])\n"
    )
    runner = "import solution, unittest, sys\nunittest.main(module=None, argv=['t', 'discover', '-p', 'test_*.py'])\n"
    try:
        done = subprocess.run([sys.executable, "-c", runner], cwd=folder, capture_output=True, timeout=timeout)
    except subprocess.TimeoutExpired:
        return None
    return done.returncode == 0


def fenced(code: str) -> str:
    return f"My solution:\n```python\n{code}```\n"


FOOL_A_NAIVE_RUNNER = [
    "sys.exit(0) before the tests",
    "os._exit(0) before the tests",
    "monkeypatched test framework",
    "deleted tests",
    "expected outputs read from disk",
    "fake OK report",
    "network connection",
    "write outside the sandbox",
]


@pytest.mark.parametrize("arm", FOOL_A_NAIVE_RUNNER)
def test_each_exploit_passes_a_naive_runner_and_fails_in_the_sandbox(
    arm: str, check: UnitTests, plant: Plant, tmp_path: Path
) -> None:
    code = _exploits(ADD, ADD["tests"], REFERENCE, plant)[arm]
    work = tmp_path / "naive"
    work.mkdir()
    assert naive(code, work, plant.expected) is True  # the exploit is real
    plant.escape.unlink(missing_ok=True)
    before = plant.connections
    verdict = check(ADD, fenced(code))
    assert verdict.status == "ok" and verdict.components["tests"] == 0.0, verdict
    assert not plant.escape.exists() and plant.connections == before


def test_the_reference_passes_both(check: UnitTests, plant: Plant, tmp_path: Path) -> None:
    assert naive(REFERENCE, tmp_path, plant.expected) is True
    verdict = check(ADD, fenced(REFERENCE))
    assert verdict.status == "ok" and verdict.reward == 1.0, verdict


@pytest.mark.parametrize("arm", ["infinite loop", "fork bomb", "20 GB allocation"])
def test_runaway_code_fails_its_cases_in_bounded_time_and_leaves_nothing(
    arm: str, check: UnitTests, plant: Plant, tmp_path: Path
) -> None:
    code = _exploits(ADD, ADD["tests"], REFERENCE, plant)[arm]
    if arm == "infinite loop":
        assert naive(code, tmp_path, plant.expected, timeout=3) is None  # a naive runner hangs
    verdict = check(ADD, fenced(code))
    assert verdict.status == "ok" and verdict.reward == 0.0, verdict
    left = harnesses_left_by_this_process()
    assert left == [], f"processes left behind: {left}"


def test_a_sandbox_is_waited_for_until_it_ends_and_no_longer_than_its_deadline() -> None:
    """The verdict comes when the sandbox ends (its exit code kept), or at the deadline: a
    sandbox that cannot start within 0.01 s is killed then, and its verdict says so."""
    slow = UnitTests("last_code_block", "fraction", case_timeout_s=1.0, memory_mb=256, processes=8, deadline_s=0.01)
    started = time.monotonic()
    verdict = slow(ADD, fenced(REFERENCE))
    assert verdict.status == "timeout" and "did not start within 0.01 s" in verdict.detail, verdict
    assert time.monotonic() - started < 5
    sent = {"mode": "call", "function": "add", "cases": [{"args": [1, 2]}]}
    ended = run({**sent, "code": REFERENCE}, Limits(case_timeout_s=1.0, memory_mb=256), 12.0)
    assert ended.ready and not ended.timed_out and ended.returncode == 0 and ended.cases[0]["status"] == "done"
    assert harnesses_left_by_this_process() == []


def _ancestors(pid: int) -> list[int]:
    chain = []
    with contextlib.suppress(OSError, ValueError, IndexError):
        while pid > 1:
            stat = Path(f"/proc/{pid}/stat").read_text()
            pid = int(stat.rsplit(")", 1)[1].split()[1])  # the parent, after the (command)
            chain.append(pid)
    return chain


def harnesses_left_by_this_process() -> list[int]:
    """Sandboxed harness processes still alive that are ours: our descendants, or orphans
    (what a leak leaves). A harness under another test process (the other xdist worker runs
    code tests too) is not ours."""
    found = subprocess.run(["pgrep", "-f", "/run/rlvr/harness.py"], capture_output=True, text=True).stdout
    parent, me = os.getppid(), os.getpid()
    mine = []
    for pid in map(int, found.split()):
        chain = _ancestors(pid)
        if me in chain or parent not in chain:
            mine.append(pid)
    return mine


def test_outputs_are_compared_outside_with_declared_reward(check: UnitTests) -> None:
    print_upper = "print(input().upper())\n"
    assert check(ECHO, fenced(print_upper)).reward == 0.5  # one line read of two
    assert check(ECHO, fenced("import sys\nprint(sys.stdin.read().upper().strip())   \n\n")).reward == 1.0
    strict = UnitTests("whole", "all_or_nothing", case_timeout_s=1.0, deadline_s=10)
    assert strict(ECHO, print_upper).reward == 0.0
    assert strict(ADD, "def add(a, b):\n    return float(a + b)\n").reward == 1.0  # the same number
    assert strict(ADD, "def add(a, b):\n    return float(a + b) + 1e-9\n").reward == 0.0  # an integer is exact
    assert (
        strict(
            {**ADD, "tests": {**ADD["tests"], "cases": [{"args": [1, 0], "expected": 1}]}},
            "def add(a, b):\n    return True\n",
        ).reward
        == 0.0
    )


def test_what_a_case_leaves_or_prints_fails_it(check: UnitTests) -> None:
    daemon = (
        "import subprocess\nnull = subprocess.DEVNULL\nquiet = dict(stdin=null, stdout=null, stderr=null)\n"
        "subprocess.Popen(['sleep', '30'], start_new_session=True, **quiet)\n" + REFERENCE
    )
    left = check(ADD, fenced(daemon))
    assert left.reward == 0.0 and "left processes running" in (left.detail or "")
    loud = check(ADD, fenced("print('x' * 10_000_000)\n" + REFERENCE))
    assert loud.reward == 0.0 and "printed too much" in (loud.detail or "")
    killer = check(ADD, fenced("import os, signal\nos.kill(os.getppid(), signal.SIGKILL)\n" + REFERENCE))
    assert killer.status == "ok" and killer.reward == 0.0, killer  # never an invalid verdict to hide behind


def test_malformed_tests_no_code_and_a_broken_sandbox_get_their_own_verdicts(
    check: UnitTests, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    assert check({"id": "x", "tests": {"kind": "call", "cases": []}}, fenced(REFERENCE)).status == "verifier_error"
    assert check(ADD, "I would write add(a, b).").status == "format_error"
    fake = Path(tempfile.mkdtemp())  # run as root, the sandbox starts as nobody: a folder nobody can enter
    fake.chmod(0o755)
    (fake / "bwrap").write_text("#!/bin/sh\necho 'bwrap: setting up uid map: Permission denied' >&2\nexit 1\n")
    (fake / "bwrap").chmod(0o755)
    monkeypatch.setenv("PATH", f"{fake}:{os.environ['PATH']}")
    broken = check(ADD, fenced(REFERENCE))
    assert broken.status == "sandbox_error" and "uid map" in (broken.detail or "")
    assert "uid map" in (problem() or "")
    (fake / "bwrap").write_text("#!/bin/sh\nsleep 60\n")
    stalled = UnitTests.__new__(UnitTests)
    stalled.__dict__.update({**check.__dict__, "deadline_s": 2.0})
    assert stalled(ADD, fenced(REFERENCE)).status == "timeout"


@pytest.fixture(scope="module")
def code_exp(tmp_path_factory: pytest.TempPathFactory) -> Path:
    folder = tmp_path_factory.mktemp("code") / "exp"
    made = rlvr("init", folder, "--template", "code")
    assert made.code == 0, made.stderr
    return folder


@pytest.mark.slow
def test_the_code_template_validates_audits_clean_and_trains_through_the_sandbox(code_exp: Path) -> None:
    assert rlvr("validate", "--deep", "--strict", code_exp / CONTRACT).code == 0
    audit = rlvr("audit", "verifier", code_exp / CONTRACT, "--format", "json", timeout=600)
    assert audit.code == 0, audit.stdout[-3000:]
    report = audit.json()
    names = {o["name"].split("/", 1)[1] for o in report["outcomes"]}
    assert {"reference", "alternate form", "fork bomb", "20 GB allocation", "network connection"} <= names
    assert report["findings"] == []
    # `whole`: every sampled response is run as code, so training goes through the sandbox
    edit(code_exp, "extract: last_code_block", "extract: whole")
    run = rlvr("train", code_exp / CONTRACT, "--max-steps", "1", "--run-dir", code_exp / "run", timeout=600)
    assert run.code == 0, run.stderr[-2000:]
    from rlvr_cli.store.records import read_records

    rows = read_records(code_exp / "run" / "records").to_pylist()
    details = [r["verdict_detail"] or "" for r in rows]
    assert rows and all("passed" in d for d in details), details[:3]


def test_without_bubblewrap_code_is_never_run(code_exp: Path, tmp_path: Path) -> None:
    env = {**os.environ, "PATH": str(tmp_path)}  # no bwrap on it
    deep = rlvr("validate", "--deep", code_exp / CONTRACT, env=env)
    assert deep.code == 1 and "bubblewrap is not installed" in deep.stdout
    run = rlvr("train", code_exp / CONTRACT, "--max-steps", "1", "--run-dir", tmp_path / "run", env=env, timeout=300)
    assert run.code != 0 and "bubblewrap" in run.stderr and "Traceback" not in run.stderr


def test_a_timeout_too_short_for_one_case_is_refused(code_exp: Path, tmp_path: Path) -> None:
    (tmp_path / CONTRACT).write_text((code_exp / CONTRACT).read_text())
    edit(tmp_path, "  timeout_s: 20 ", "  timeout_s: 3 ")
    short = rlvr("validate", tmp_path / CONTRACT)
    assert short.code == 1 and "RLV003" in short.stdout and "case_timeout_s + 2" in short.stdout


def test_the_sandbox_root_is_read_only_and_only_the_capped_working_folder_is_writable(
    check: UnitTests, plant: Plant, monkeypatch: pytest.MonkeyPatch
) -> None:
    code = _exploits(ADD, ADD["tests"], REFERENCE, plant)["write outside the working folder"]
    verdict = check(ADD, fenced(code))
    assert verdict.status == "ok" and verdict.components["tests"] == 0.0, verdict  # no state outside /tmp
    flood = "open('/probe_root', 'wb').write(b'x' * (200 << 20))\n" + REFERENCE  # the host's memory, via a tmpfs
    assert check(ADD, fenced(flood)).components["tests"] == 0.0
    capped = "open('/tmp/probe', 'wb').write(b'x' * (200 << 20))\n" + REFERENCE  # the working folder is capped
    assert check(ADD, fenced(capped)).components["tests"] == 0.0
    beside = "open('/run/rlvr/probe', 'w').write('x')\n" + REFERENCE  # nor beside the runner
    assert check(ADD, fenced(beside)).components["tests"] == 0.0
    # the paired case: the same arm against a sandbox whose root is left writable is accepted
    from rlvr_cli.env import sandbox

    writable = sandbox.command

    def without_remount(limits: Any, fd: int) -> list[str]:
        argv = writable(limits, fd)
        at = argv.index("--remount-ro")
        return argv[:at] + argv[at + 2 :]

    monkeypatch.setattr(sandbox, "command", without_remount)
    assert check(ADD, fenced(code)).components["tests"] == 1.0


PARSE = {
    "kind": "call",
    "function": "parse_port",
    "cases": [
        {"args": ["8080"], "expected": 8080},
        {"args": ["http"], "raises": "ValueError", "match": "not a port"},
        {"args": ["99999"], "raises": "ValueError"},
    ],
}
STRICT = """def parse_port(text):
    port = int(text)
    if not 0 < port < 65536:
        raise ValueError('not a port')
    return port
"""
STRICT_MSG = """def parse_port(text):
    if not text.isdigit():
        raise ValueError('not a port: ' + text)
    port = int(text)
    if not 0 < port < 65536:
        raise ValueError('not a port')
    return port
"""
LENIENT = """def parse_port(text):
    try:
        return min(int(text), 65535)
    except ValueError:
        return 0
"""
WRONG_KIND = STRICT_MSG.replace("raise ValueError('not a port: ' + text)", "raise TypeError('not a port: ' + text)")


@pytest.mark.parametrize(
    ("code", "passed"),
    [(STRICT_MSG, "3/3"), (LENIENT, "1/3"), (WRONG_KIND, "2/3"), (STRICT, "2/3")],
    ids=["raises as expected", "lenient parser", "another exception", "another message"],
)
def test_a_case_can_expect_an_exception_and_its_message(check: UnitTests, code: str, passed: str) -> None:
    verdict = check({"id": "port", "tests": PARSE}, fenced(code))
    assert verdict.status == "ok" and verdict.detail.startswith(f"{passed} passed"), verdict


def test_integers_compare_exactly_and_floats_by_the_tests_tolerance(check: UnitTests) -> None:
    big = {"kind": "call", "function": "f", "cases": [{"args": [], "expected": 10**20 + 1}]}
    assert check({"id": "big", "tests": big}, fenced("def f():\n    return 1e20\n")).reward == 0.0
    assert check({"id": "big", "tests": big}, fenced("def f():\n    return 10**20 + 1\n")).reward == 1.0
    near = {"kind": "call", "function": "f", "cases": [{"args": [], "expected": 0.1 + 0.2}]}
    close = fenced("def f():\n    return 0.3\n")
    unsaid = check({"id": "near", "tests": near}, close)  # a float expectation: the task says how close
    assert unsaid.status == "verifier_error" and "give tests.tolerance" in (unsaid.detail or ""), unsaid
    assert check({"id": "near", "tests": {**near, "tolerance": 1e-9}}, close).reward == 1.0
    assert check({"id": "near", "tests": {**near, "tolerance": 0}}, close).reward == 0.0  # the task asks exact
    bad = check({"id": "near", "tests": {**near, "tolerance": "loose"}}, close)
    assert bad.status == "verifier_error" and "tolerance" in (bad.detail or "")
