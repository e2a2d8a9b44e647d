"""What a newcomer meets at the command line: help that is not cut off, `-V`, shell completion,
a folder where a contract is asked for, one exit code for one situation, and messages that
point the right way."""

from __future__ import annotations

import os
import re
import sys
from pathlib import Path

from tests.conftest import rlvr

GROUPS = ("", "data", "audit")


def test_every_command_has_a_whole_one_line_description() -> None:
    for group in GROUPS:
        shown = rlvr(*([group] if group else []), "--help")
        assert shown.code == 0
        listing = shown.stdout.split("Commands:", 1)[1].strip().splitlines()
        assert listing, group
        for line in listing:
            assert not line.rstrip().endswith(("...", "…")), f"cut off in `rlvr {group} --help`: {line!r}"


def test_short_version_flag_and_shell_completion() -> None:
    from rlvr_cli import __version__

    assert rlvr("-V").stdout.strip() == f"rlvr {__version__}"
    assert "--install-completion" in rlvr("--help").stdout
    import subprocess

    env = {**os.environ, "_RLVR_COMPLETE": "complete_bash", "COMP_WORDS": "rlvr tr", "COMP_CWORD": "1"}
    done = subprocess.run([sys.executable, "-m", "rlvr_cli"], env=env, capture_output=True, text=True, timeout=60)
    assert done.stdout.split() == ["train"], done.stdout + done.stderr


def test_an_experiment_folder_is_accepted_where_a_contract_is_asked_for(tool_use: Path, tmp_path: Path) -> None:
    by_file = rlvr("plan", tool_use / "experiment.rlvr.yaml")
    by_folder = rlvr("plan", tool_use)
    assert by_folder.code == by_file.code and by_folder.stderr == by_file.stderr
    empty = tmp_path / "empty"
    empty.mkdir()
    refused = rlvr("train", empty)
    assert refused.code == 2 and "no contract (*.rlvr.yaml)" in refused.stderr
    (empty / "a.rlvr.yaml").write_text("{}")
    (empty / "b.rlvr.yaml").write_text("{}")
    refused = rlvr("train", empty)
    assert refused.code == 2 and "holds 2 contracts (a.rlvr.yaml, b.rlvr.yaml)" in refused.stderr


def test_a_missing_model_is_reported_where_the_contract_names_it_with_how_to_build_one(
    tool_use: Path, tmp_path: Path
) -> None:
    """`init --no-model` says how to build the model later; `train` and `plan` point at the
    contract line that names the missing folder (as `validate --deep` does), not a bare path."""
    made = rlvr("init", tmp_path / "exp", "-t", "tool-use", "--no-model")
    assert made.code == 0 and "python -m rlvr_cli.toy.tiny" in made.stderr
    for args in (("train", tmp_path / "exp"), ("plan", tmp_path / "exp")):
        shown = rlvr(*args)
        assert shown.code == 1, shown.stderr
        assert re.search(r"experiment\.rlvr\.yaml:\d+:\d+: error\[RLV901\] artifacts\.policy\.path", shown.stderr)
        assert "does not exist" in shown.stderr and "python -m rlvr_cli.toy.tiny" in shown.stderr
        assert "Traceback" not in shown.stderr
    deep = rlvr("validate", "--deep", tmp_path / "exp")
    assert "RLV901" in deep.stdout and "does not exist" in deep.stdout


def test_status_and_report_agree_on_what_is_not_a_run(tmp_path: Path) -> None:
    (tmp_path / "plain").mkdir()
    for target, code in ((tmp_path / "plain", 1), (tmp_path / "absent", 2)):
        assert [rlvr(cmd, target).code for cmd in ("status", "report")] == [code, code], target
        assert rlvr("audit", "rollouts", target).code == code


def test_an_unknown_rule_names_both_families_and_the_near_codes() -> None:
    shown = rlvr("rule", "RLV999")
    assert shown.code == 2 and "RLV001–" in shown.stderr and "(rlvr validate)" in shown.stderr
    assert re.search(r"RLT001–RLT\d+ \(rlvr render\)", shown.stderr)
    near = rlvr("rule", "RLV30").stderr
    assert "did you mean RLV30" in near and "RLV304" in near
    example = rlvr("rule", "RLV304").stdout
    assert "example that fires RLV304:" in example  # a contract that fails, said as such


def test_a_reader_that_goes_away_ends_the_command_quietly_not_as_a_bug() -> None:
    """`rlvr schema contract | head -1`: once the reader has closed the pipe, writing raises
    BrokenPipeError, which was reported as an internal error (exit 3, "a bug in rlvr")."""
    import subprocess

    command = [sys.executable, "-m", "rlvr_cli", "schema", "contract"]
    done = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    assert done.stdout is not None and done.stderr is not None
    done.stdout.close()  # before the command writes a byte (its start takes a few tenths of a second)
    err = done.stderr.read().decode()
    assert done.wait(timeout=60) == 141 and err == "", err
