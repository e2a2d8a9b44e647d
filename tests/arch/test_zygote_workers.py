"""The processes torchrun starts for the runs the tests launch fork from a warm interpreter
(tests/zygote_workers.py, through tests/worker_python.py as torchrun's PYTHON_EXEC) and answer
as fresh `python -u -m rlvr_cli` processes do: exit codes, streams, signals; where they cannot
(another environment), they start fresh."""

from __future__ import annotations

import ast
import json
import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.conftest import ROOT, kill_rlvr, spawn_rlvr, torchrun_launch, warm_launch
from tests.worker_python import socket_path

BAD = sorted((ROOT / "tests" / "contracts" / "invalid").glob("*.rlvr.yaml"))[0]

pytestmark = pytest.mark.skipif(
    os.environ.get("RLVR_TESTS_FRESH") == "1", reason="RLVR_TESTS_FRESH=1: no warm launches"
)


def forked(env: dict) -> list[dict]:
    log = Path(str(socket_path(env)) + ".log")
    return [json.loads(line) for line in log.read_text().splitlines()] if log.exists() else []


def answer(command: list[str], env: dict) -> tuple[int, str, str]:
    done = subprocess.run(command, capture_output=True, text=True, env=env, timeout=300)
    return done.returncode, done.stdout, done.stderr


def test_a_process_torchrun_starts_forks_warm_and_answers_as_a_fresh_one() -> None:
    env = warm_launch()
    before = len(forked(env))
    stand_in = [env["PYTHON_EXEC"], "-u", "-m", "rlvr_cli", "validate", str(BAD)]
    warm = answer(stand_in, env)
    assert warm == answer([sys.executable, *stand_in[1:]], env) and warm[0] == 1  # the refusal, the same words
    assert [f["argv"] for f in forked(env)[before:]] == [["validate", str(BAD)]]
    launch = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node=2", "-m", "rlvr_cli"]
    done = answer([*launch, "--version"], env)
    assert done[0] == 0 and done[1].count("rlvr") == 2, done
    assert [f["argv"] for f in forked(env)[before + 1 :]] == [["--version"], ["--version"]]  # both ranks
    other = {**env, "ZYGOTE_PROBE": "1"}  # no warm interpreter of that environment: fresh, the same answer
    assert answer(stand_in, other) == warm and len(forked(env)) == before + 3


SCRIPT = """import os, sys, time
here = sys.path[0] == os.path.dirname(os.path.abspath(__file__))
os.write(1, f"{__name__} {sys.argv[1:]} {here} {os.environ['RANK']}\\n".encode())  # one write: ranks share the pipe
# every rank has written before any fails: torchrun stops the others when one exits non-zero
marks = os.path.join(os.path.dirname(os.path.abspath(__file__)), os.environ["TORCHELASTIC_RUN_ID"])
os.makedirs(marks, exist_ok=True)
open(os.path.join(marks, os.environ["RANK"]), "w").close()
deadline = time.monotonic() + 60
while len(os.listdir(marks)) < int(os.environ["WORLD_SIZE"]) and time.monotonic() < deadline:
    time.sleep(0.01)
sys.exit(3 if sys.argv[1:] == ["fail"] else 0)
"""


def test_a_tests_script_torchrun_starts_and_torchrun_itself_fork_warm_and_answer_as_fresh_ones(tmp_path: Path) -> None:
    """A test's own script under torchrun (`python -u SCRIPT ARGS`), and the launcher a test's
    torchrun line starts (tests/conftest.py `torchrun_launch`): the same exit codes and words."""
    script = tmp_path / "probe.py"
    script.write_text(SCRIPT)
    env = warm_launch()
    before = len(forked(env))
    launch = ["--standalone", "--nproc_per_node=2", str(script), "fail"]
    fresh = answer([sys.executable, "-m", "torch.distributed.run", *launch], {**env, "ZYGOTE_PROBE": "1"})
    warm = torchrun_launch(*launch, env=env)
    assert warm.returncode == fresh[0] != 0 and sorted(warm.stdout.splitlines()) == sorted(fresh[1].splitlines())
    assert sorted(warm.stdout.splitlines()) == ["__main__ ['fail'] True 0", "__main__ ['fail'] True 1"], warm.stdout
    assert [f["argv"] for f in forked(env)[before:]] == [["fail"], ["fail"]]  # both ranks forked warm
    done = torchrun_launch("--standalone", "--nproc_per_node=1", script, env=env)
    assert done.returncode == 0 and done.stdout == "__main__ [] True 0\n", done


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


def _serving(port: int, proc: subprocess.Popen) -> None:
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline and proc.poll() is None:
        try:
            socket.create_connection(("127.0.0.1", port), timeout=1).close()
            return
        except OSError:
            time.sleep(0.1)
    raise AssertionError(f"the server never listened: {proc.poll()}")


def _serve(python: str, contract: Path, env: dict) -> tuple[subprocess.Popen, int]:
    port = _free_port()
    command = [python, "-u", "-m", "rlvr_cli", "serve", str(contract), "--port", str(port)]
    proc = subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, env=env)
    _serving(port, proc)
    return proc, port


def test_a_signal_to_the_stand_in_reaches_the_process_and_a_killed_stand_in_takes_it_along(tool_use: Path) -> None:
    env = warm_launch()
    ended = []
    for python in (env["PYTHON_EXEC"], sys.executable):  # warm, then fresh: SIGTERM ends both alike
        proc, _ = _serve(python, tool_use, env)
        proc.send_signal(signal.SIGTERM)
        ended.append(proc.wait(60))
        proc.stderr.close()  # type: ignore[union-attr]
    assert ended[0] == ended[1], ended
    proc, port = _serve(env["PYTHON_EXEC"], tool_use, env)
    pid = forked(env)[-1]["pid"]
    proc.kill()  # as torchrun does to a process that outlives its SIGTERM
    proc.wait(60)
    proc.stderr.close()  # type: ignore[union-attr]
    deadline = time.monotonic() + 30
    while Path(f"/proc/{pid}").exists() and time.monotonic() < deadline:
        time.sleep(0.1)
    assert not Path(f"/proc/{pid}").exists()  # the server it stood for is gone with it
    with pytest.raises(OSError):
        socket.create_connection(("127.0.0.1", port), timeout=1).close()
    port = _free_port()  # a test's SIGKILL (kill_rlvr) goes to the forked process itself, and waits for it
    proc = spawn_rlvr("serve", tool_use, "--port", str(port), stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    _serving(port, proc)
    pid = forked(env)[-1]["pid"]
    assert forked(env)[-1]["requester"] == proc.pid
    assert kill_rlvr(proc) == -signal.SIGKILL and not Path(f"/proc/{pid}").exists()
    proc = spawn_rlvr("serve", tool_use, "--port", str(_free_port()), stderr=subprocess.DEVNULL)
    assert kill_rlvr(proc) == -signal.SIGKILL  # at once, its command barely forked: gone all the same
    assert forked(env)[-1]["requester"] == proc.pid and not Path(f"/proc/{forked(env)[-1]['pid']}").exists()


def _reads_the_environment(node: ast.AST) -> bool:
    """os.environ, os.getenv, or either imported by name."""
    names = {"environ", "getenv", "environb", "getenvb"}
    return any(
        (isinstance(n, ast.Attribute) and n.attr in names)
        or (isinstance(n, ast.Name) and n.id in names)
        or (isinstance(n, ast.alias) and n.name in names)
        for n in ast.walk(node)
    )


def test_no_module_of_rlvr_reads_the_environment_when_it_is_imported() -> None:
    """Commands fork from warm interpreters whatever their RLVR_* variables (tests/worker_python.py):
    that holds while rlvr reads the environment only when it runs, never at import."""
    assert _reads_the_environment(ast.parse("TIMEOUT = float(os.environ.get('RLVR_T', '1'))"))  # what it finds
    found = []
    for path in sorted((ROOT / "rlvr_cli").rglob("*.py")):
        for node in ast.parse(path.read_text()).body:
            if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
                continue
            if isinstance(node, ast.ClassDef):
                kept = [n for n in node.body if not isinstance(n, ast.FunctionDef | ast.AsyncFunctionDef)]
                node = ast.Module(body=kept, type_ignores=[])
            if _reads_the_environment(node):
                found.append(f"{path.relative_to(ROOT)}:{node.lineno if hasattr(node, 'lineno') else '?'}")
    assert found == []
