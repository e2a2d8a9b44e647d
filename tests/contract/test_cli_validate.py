"""`rlvr validate`: output shapes, exit codes, file discovery, and no heavy imports."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

from tests.conftest import EXAMPLES, ROOT, rlvr

GOOD = ROOT / "contracts" / "grpo-cpu.rlvr.yaml"
BAD = EXAMPLES / "invalid" / "RLV002-unknown-key.rlvr.yaml"
WARN = EXAMPLES / "invalid" / "RLV802-no-critical-gate.rlvr.yaml"
WAIVED = EXAMPLES / "invalid" / "waived-warning.rlvr.yaml"


def test_text_line_shape_and_suggestion() -> None:
    run = rlvr("validate", BAD)
    assert run.code == 1
    assert run.stdout.strip() == (
        f"{BAD}:22:3: error[RLV002] objective.entropy_coeff: unknown key 'entropy_coeff' (did you mean 'entropy_coef'?)"
    )
    assert "1 invalid" in run.stderr  # the summary goes to stderr, stdout is the report


def test_json_shape() -> None:
    run = rlvr("validate", "--format", "json", GOOD, BAD)
    data = run.json()
    assert [f["valid"] for f in data["files"]] == [True, False]
    diag = data["files"][1]["diagnostics"][0]
    assert set(diag) == {"code", "severity", "path", "line", "column", "message", "suggestion"}
    assert (diag["code"], diag["line"], diag["column"], diag["suggestion"]) == ("RLV002", 22, 3, "entropy_coef")


def test_github_annotations() -> None:
    run = rlvr("validate", "--format", "github", BAD, WARN, WAIVED)
    lines = run.stdout.splitlines()
    assert lines[0].startswith(f"::error file={BAD},line=22,col=3,title=RLV002 objective.entropy_coeff::")
    assert any(line.startswith("::warning ") and "RLV802" in line for line in lines)
    assert any(line.startswith("::notice ") and "waived" in line for line in lines)


def test_exit_codes(tmp_path: Path) -> None:
    assert rlvr("validate", GOOD).code == 0
    assert rlvr("validate", BAD).code == 1
    assert rlvr("validate", WARN).code == 0
    assert rlvr("validate", "--strict", WARN).code == 1
    assert rlvr("validate", "--strict", WAIVED).code == 0  # a waived warning no longer fails
    missing = rlvr("validate", GOOD, tmp_path / "nope.rlvr.yaml")
    assert missing.code == 2 and "no such file" in missing.stderr
    assert rlvr("validate", "--format", "xml", GOOD).code == 2
    assert rlvr("validate").code == 2


def test_a_path_that_is_not_a_regular_file_is_a_usage_error(tmp_path: Path) -> None:
    import os

    fifo = tmp_path / "pipe.rlvr.yaml"
    os.mkfifo(fifo)  # reading it would block forever: it must be refused, not opened
    run = rlvr("validate", GOOD, fifo, timeout=20)
    assert run.code == 2 and "not a regular file" in run.stderr
    assert len(run.stdout.strip().splitlines()) == 0  # the good file has nothing to report


def test_folders_are_searched_for_contracts(tmp_path: Path) -> None:
    (tmp_path / "sub").mkdir()
    (tmp_path / "sub" / "a.rlvr.yaml").write_text(GOOD.read_text())
    (tmp_path / "b.rlvr.yml").write_text(BAD.read_text())
    (tmp_path / "ignored.yaml").write_text("not: a contract\n")
    run = rlvr("validate", "--format", "json", tmp_path)
    assert sorted(Path(f["path"]).name for f in run.json()["files"]) == ["a.rlvr.yaml", "b.rlvr.yml"]
    assert run.code == 1
    empty = tmp_path / "empty"
    empty.mkdir()
    assert rlvr("validate", empty).code == 2


def test_many_files_in_one_call_report_each() -> None:
    files = sorted((EXAMPLES / "invalid").glob("*.rlvr.yaml"))
    run = rlvr("validate", "--format", "json", *files)
    assert len(run.json()["files"]) == len(files)


def test_validate_imports_no_torch_or_transformers() -> None:
    code = (
        "import sys\n"
        "from rlvr_cli.__main__ import main\n"
        f"sys.argv = ['rlvr', 'validate', {str(GOOD)!r}]\n"
        "try:\n    main()\nexcept SystemExit as e:\n    assert e.code == 0, e.code\n"
        "heavy = [m for m in ('torch', 'transformers', 'fastapi', 'typer', 'rich') if m in sys.modules]\n"
        "print(heavy)\n"
    )
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert proc.stdout.strip().splitlines()[-1] == "[]"


def test_no_color_by_default_and_color_when_forced() -> None:
    import os

    env = {**os.environ, "FORCE_COLOR": "1"}
    env.pop("NO_COLOR", None)
    assert "\033[31m" in rlvr("validate", BAD, env=env).stdout
    assert "\033[" not in rlvr("validate", BAD, env={**env, "NO_COLOR": "1"}).stdout


def test_internal_error_exits_3_without_traceback(tmp_path: Path) -> None:
    # A reporter that raises stands in for any bug past the point of reading the file.
    code = (
        "import sys\n"
        "from rlvr_cli.commands.validate import main\n"
        "from rlvr_cli.commands import formats\n"
        "def boom(checked):\n    raise RuntimeError('boom')\n"
        "formats.REPORTERS['validate']['text'] = boom\n"
        f"sys.exit(main([{str(GOOD)!r}]))\n"
    )
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert proc.returncode == 3
    assert "internal error: RuntimeError: boom" in proc.stderr and "Traceback" not in proc.stderr


def test_waived_line_is_visible_with_its_reason() -> None:
    run = rlvr("validate", WAIVED)
    assert "waived[RLV802] acceptance.gates:" in run.stdout
    assert "(waived: smoke test, no release)" in run.stdout
    data = json.loads(rlvr("validate", "--format", "json", WAIVED).stdout)
    diag = data["files"][0]["diagnostics"][0]
    assert diag["severity"] == "waived" and diag["waiver"]["severity"] == "warning"
