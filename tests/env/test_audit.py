"""Verifier and isolation audits catch deliberately broken environments; the built-in passes."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from tests.conftest import copy_experiment, edit, rlvr

CONTRACT = "experiment.rlvr.yaml"

BROKEN = '''
from rlvr_cli.env.builtin.file_edit import VERSION, FileEditServer
from rlvr_cli.env.server import create_app
from rlvr_cli.env.verdict import Verdict


class TargetOnly(FileEditServer):
    """Checks only the target value: destroying every other file still passes."""

    def verify(self, state, task, calls, final_message):
        text = (state.root / task["target"]).read_text() if (state.root / task["target"]).is_file() else ""
        ok = float(bool(VERSION.search(text)) and VERSION.search(text).group(1) == "2")
        return Verdict("ok", ok, {"success": ok})


class TrustsMessage(FileEditServer):
    """Believes the final message."""

    def verify(self, state, task, calls, final_message):
        ok = float("version is now 2" in final_message or "Set version" in final_message)
        return Verdict("ok", ok, {"success": ok})


SHARED = {}


class SharedState(FileEditServer):
    """Keeps every session's files in one dict keyed by path: sessions see each other."""

    def seed(self, task):
        state = super().seed(task)
        SHARED.setdefault("root", state.root)
        return type(state)(SHARED["root"], state.seeded)

    def release(self, state):
        pass


target_only = create_app(TargetOnly())
trusts_message = create_app(TrustsMessage())
shared_state = create_app(SharedState())
'''


@pytest.fixture(scope="module")
def scaffold(tool_use: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    folder = copy_experiment(tool_use, tmp_path_factory.mktemp("audit") / "agent")
    (folder / "broken_env.py").write_text(BROKEN)
    return folder


@pytest.fixture
def experiment(scaffold: Path, tmp_path: Path) -> Path:
    return copy_experiment(scaffold, tmp_path / "exp")


def use_server(folder: Path, spec: str) -> None:
    path = folder / CONTRACT
    path.write_text(
        path.read_text().replace("server: rlvr_cli.env.builtin.file_edit:FileEditServer", f"server: {spec}")
    )


def audit(folder: Path) -> tuple[int, dict]:
    run = rlvr("audit", "verifier", folder / CONTRACT, "--format", "json", timeout=300)
    return run.code, json.loads(run.stdout) if run.stdout.strip() else {}


def test_built_in_environment_passes_both_audits(experiment: Path) -> None:
    code, report = audit(experiment)
    assert code == 0 and report["disagreements"] == 0
    kinds = set(report["by_kind"])
    assert {"correct", "alternate_correct", "collateral_damage", "forbidden_tool", "no_op_claim"} <= kinds
    isolation = rlvr("audit", "isolation", experiment / CONTRACT, "--sessions", "12", timeout=300)
    assert isolation.code == 0, isolation.stdout + isolation.stderr


def test_target_only_verifier_is_caught_by_the_collateral_arm(experiment: Path) -> None:
    use_server(experiment, "broken_env:target_only")
    code, report = audit(experiment)
    assert code == 1
    false_accepts = [o for o in report["outcomes"] if o["got"] == "accept" and o["expected"] == "reject"]
    assert {o["kind"] for o in false_accepts} == {"collateral_damage"}
    assert any("correct + collateral" in (o["name"] or "") for o in false_accepts)  # a generated arm
    assert all(o["transcript"]["steps"] for o in false_accepts)  # the evidence is shown


def test_message_trusting_verifier_is_caught_by_the_no_op_arm(experiment: Path) -> None:
    use_server(experiment, "broken_env:trusts_message")
    run = rlvr("audit", "verifier", experiment / CONTRACT, timeout=300)
    assert run.code == 1
    assert "false accept: edit-app-config/no-op claim" in run.stdout


def test_shared_state_server_is_caught_by_the_isolation_audit(experiment: Path) -> None:
    use_server(experiment, "broken_env:shared_state")
    run = rlvr("audit", "isolation", experiment / CONTRACT, "--sessions", "8", "--format", "json", timeout=300)
    assert run.code == 1
    checks = {f["check"] for f in json.loads(run.stdout)["findings"]}
    # the first session's folder is everyone's: once it is gone, every session lost its own marker
    assert checks & {"no marker in another session", "each session keeps its own state"}
    assert "re-seeding resets state" in checks


def test_single_turn_audit_catches_a_lenient_and_a_crashing_verifier(tmp_path: Path) -> None:
    folder = tmp_path / "arith"
    assert rlvr("init", folder, "--no-model").code == 0
    honest = rlvr("audit", "verifier", folder / CONTRACT)
    assert honest.code == 0
    counted = re.findall(r"verified (\d+)/(\d+) candidates", honest.stderr)  # it says how far it is
    assert len(counted) >= 2 and counted[-1][0] == counted[-1][1]
    (folder / "verifier.py").write_text(
        "from rlvr_cli.env import Verdict\n"
        "def verify(task, response):\n"
        "    ok = float(response.strip()[:1].isdigit())\n"
        "    return Verdict('ok', ok, {'correct': ok, 'format': ok})\n"
    )
    lenient = rlvr("audit", "verifier", folder / CONTRACT, "--format", "json")
    assert lenient.code == 1
    assert {o["kind"] for o in json.loads(lenient.stdout)["outcomes"] if o["got"] != o["expected"]} == {"wrong"}
    (folder / "verifier.py").write_text("def verify(task, response):\n    raise RuntimeError('boom')\n")
    crashing = rlvr("audit", "verifier", folder / CONTRACT, "--format", "json")
    outcomes = json.loads(crashing.stdout)["outcomes"]
    assert crashing.code == 1 and {o["got"] for o in outcomes} == {"invalid"}
    assert all(o["verdict"]["status"] == "verifier_error" and o["reward"] is None for o in outcomes)


def test_tool_use_audit_needs_a_known_good_candidate(experiment: Path) -> None:
    (experiment / "audit" / "candidates.yaml").write_text("candidates: []\n")
    run = rlvr("audit", "verifier", experiment / CONTRACT)
    assert run.code == 3 and "no 'correct' candidate" in run.stderr  # the audit could not run
    (experiment / "audit" / "candidates.yaml").write_text("candidates: [{task: x, kind: nonsense}]\n")
    bad = rlvr("audit", "verifier", experiment / CONTRACT)
    assert bad.code == 1 and "candidates.yaml" in bad.stderr and "Traceback" not in bad.stderr


@pytest.mark.parametrize(
    ("old", "new", "words"),
    [
        (
            "tools: [list_files, read_file, write_file, replace_in_file]",
            "tools: [list_files, read_file]",
            "environment.tools",
        ),
        ("forbidden_tools: [delete_file]", "forbidden_tools: []", "environment.forbidden_tools"),
    ],
)
def test_the_contracts_tools_must_be_what_the_server_declares(experiment: Path, old: str, new: str, words: str) -> None:
    edit(experiment, old, new)
    (other,) = {"environment.tools", "environment.forbidden_tools"} - {words}
    for audit_kind in ("verifier", "isolation"):
        run = rlvr("audit", audit_kind, experiment / CONTRACT, timeout=120)
        assert run.code == 1 and words in run.stdout and "but the server" in run.stdout, run.stdout + run.stderr
        assert other not in run.stdout  # the key that differs, not its neighbour
        data = rlvr("audit", audit_kind, experiment / CONTRACT, "--format", "json", timeout=120)
        assert data.code == 1 and words in json.dumps(data.json())  # a finding in the report, not a bare stderr line
    deep = rlvr("validate", "--deep", "--format", "json", experiment / CONTRACT).json()["files"][0]["diagnostics"]
    assert [d["path"] for d in deep if d["path"].startswith("environment.")] == [words]  # read from its source
    edit(experiment, new, old)  # the paired case: as the server declares, nothing is said
    deep = rlvr("validate", "--deep", "--format", "json", experiment / CONTRACT).json()["files"][0]["diagnostics"]
    assert [d for d in deep if d["path"].startswith("environment.")] == []


def test_single_turn_exploit_arms_catch_a_verifier_that_reads_only_the_start(tmp_path: Path) -> None:
    """With room for a sentence, an answer followed by its contradiction must be rejected: a
    verifier that reads only the opening number is caught; within two tokens the arm is left
    out (the policy cannot write it) and the audit says so."""
    folder = tmp_path / "arith"
    assert rlvr("init", folder, "--no-model").code == 0
    short = rlvr("audit", "verifier", folder / CONTRACT, "--tasks", "3")
    assert short.code == 0 and "exploit arm(s)" in short.stdout and "left out" in short.stdout
    edit(folder, "max_response_tokens: 2", "max_response_tokens: 64")
    (folder / "verifier.py").write_text(
        "from rlvr_cli.env import Verdict\n"
        "def verify(task, response):\n"
        "    ok = float(response.split()[0] == task['answer']) if response.split() else 0.0\n"
        "    return Verdict('ok', ok, {'correct': ok, 'format': 1.0})\n"
    )
    opening = rlvr("audit", "verifier", folder / CONTRACT, "--tasks", "3", "--format", "json")
    assert opening.code == 1
    wrong = {o["name"].split("/")[-1] for o in json.loads(opening.stdout)["outcomes"] if o["got"] != o["expected"]}
    assert wrong == {"answer then contradiction"}
    (folder / "verifier.py").write_text(  # finds the number anywhere, and gives format credit anyway
        "import re\n"
        "from rlvr_cli.env import Verdict\n"
        "def verify(task, response):\n"
        "    numbers = re.findall(r'-?\\d+', response)\n"
        "    ok = float(numbers == [task['answer']])\n"
        "    return Verdict('ok', ok, {'correct': ok, 'format': 1.0})\n"
    )
    anywhere = rlvr("audit", "verifier", folder / CONTRACT, "--tasks", "3", "--format", "json")
    wrong = {o["name"].split("/")[-1] for o in json.loads(anywhere.stdout)["outcomes"] if o["got"] != o["expected"]}
    assert anywhere.code == 1 and wrong == {"answer in a wrong format"}
    (folder / "verifier.py").write_text(
        "from rlvr_cli.env import Verdict\n"
        "def verify(task, response):\n"
        "    ok = float(response.strip() == task['answer'])\n"
        "    return Verdict('ok', ok, {'correct': ok, 'format': 1.0})\n"
    )
    assert rlvr("audit", "verifier", folder / CONTRACT, "--tasks", "3").code == 0


def test_a_temp_folder_of_another_process_that_vanishes_while_listed_does_not_stop_the_audit(
    tmp_path: Path, monkeypatch
) -> None:
    from rlvr_cli.audit import disk

    marker = "rlvr-marker-0-0123456789ab"
    kept = tmp_path / "left-by-a-session"
    kept.mkdir()
    (kept / "state.json").write_text(marker)
    gone = tmp_path / "another-process"
    gone.mkdir()
    listed = Path.rglob

    def vanishing(self: Path, pattern: str):  # the other process removes its folder mid-listing
        if self == gone:
            self.rmdir()
            raise FileNotFoundError(2, "No such file or directory", str(self))
        return listed(self, pattern)

    monkeypatch.setattr(Path, "rglob", vanishing)
    assert not disk.holds_marker(gone, [marker])
    assert disk.holds_marker(kept, [marker])  # a folder that stays is still read
