"""`environment.server` as a child process (env/process.py): the standard library is never a
resources server (validate --deep, the audits and training refuse it alike); a server that cannot
start says why in one line, never a fatal error of the interpreter's shutdown; its output is kept
in the log folder given."""

from __future__ import annotations

from pathlib import Path

import pytest

from rlvr_cli.env.process import environment_process
from rlvr_cli.errors import RlvrError
from tests.conftest import copy_experiment, edit, rlvr

CONTRACT = "experiment.rlvr.yaml"
SERVER = "server: rlvr_cli.env.builtin.file_edit:FileEditServer"


@pytest.mark.parametrize("spec", ["os:system", "http.server:SimpleHTTPRequestHandler", "this:s"])
def test_the_standard_library_is_no_resources_server(tool_use: Path, tmp_path: Path, spec: str) -> None:
    exp = copy_experiment(tool_use, tmp_path / "exp")
    edit(exp, SERVER, f"server: {spec}")
    deep = rlvr("validate", "--deep", exp / CONTRACT)
    assert deep.code == 1 and "is a standard-library module; the resources server is your own code" in deep.stdout
    audit = rlvr("audit", "isolation", exp / CONTRACT, timeout=120)
    assert audit.code != 0 and "standard library" in audit.stderr and "Traceback" not in audit.stderr


def test_the_shipped_server_passes_the_same_check(tool_use: Path) -> None:
    deep = rlvr("validate", "--deep", "--format", "json", tool_use / CONTRACT)
    assert not [d for d in deep.json()["files"][0]["diagnostics"] if d["path"] == "environment.server"]


@pytest.mark.parametrize(
    ("source", "said"),
    [
        ("s = 'text'\n", "notapp:s is a str, not a ResourcesServer subclass"),
        ("raise RuntimeError('kaput at import')\ns = 1\n", "RuntimeError: kaput at import"),
    ],
)
def test_a_server_that_cannot_start_says_why_in_one_line(tmp_path: Path, source: str, said: str) -> None:
    (tmp_path / "notapp.py").write_text(source)
    with pytest.raises(RlvrError) as caught, environment_process("notapp:s", tmp_path, attempts=1, log_dir=tmp_path):
        pass
    assert said in str(caught.value) and "Fatal Python error" not in str(caught.value)
    assert said in (tmp_path / "env-server.log").read_text()


def test_a_running_servers_output_and_exit_status_are_kept(tmp_path: Path) -> None:
    (tmp_path / "talk.py").write_text(
        "from rlvr_cli.env.builtin.lookup import LookupServer\nprint('hello from the server', flush=True)\n"
    )
    with environment_process("talk:LookupServer", tmp_path, log_dir=tmp_path) as endpoint:
        assert "is still running" in endpoint.child.describe()
        endpoint.child.proc.kill()
        endpoint.child.proc.wait()
        described = endpoint.child.describe()
    assert "was killed by signal 9" in described and "hello from the server" in described
    assert str(tmp_path / "env-server.log") in described
    assert "exited with code -9" in (tmp_path / "env-server.log").read_text()


def test_an_asgi_app_of_the_users_own_is_served_behind_the_runs_token(tmp_path: Path) -> None:
    import httpx

    (tmp_path / "bare.py").write_text(
        "async def app(scope, receive, send):\n"
        "    await send({'type': 'http.response.start', 'status': 200, 'headers': []})\n"
        "    await send({'type': 'http.response.body', 'body': b'[]'})\n"
    )
    with environment_process("bare:app", tmp_path, log_dir=tmp_path) as endpoint:
        assert httpx.get(f"{endpoint.url}/tools", timeout=5).status_code == 401  # no token, no answer
        good = httpx.get(f"{endpoint.url}/tools", headers={"Authorization": f"Bearer {endpoint.token}"}, timeout=5)
        assert good.status_code == 200 and good.json() == []
