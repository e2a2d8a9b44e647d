"""The `rlvr-validate` pre-commit hook: its declaration, and a real run of pre-commit."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from tests.conftest import EXAMPLES, ROOT

HOOKS = yaml.safe_load((ROOT / ".pre-commit-hooks.yaml").read_text())


def hook(hook_id: str) -> dict:
    return next(h for h in HOOKS if h["id"] == hook_id)


@pytest.mark.parametrize(
    ("name", "matches"),
    [
        ("experiment.rlvr.yaml", True),
        ("contracts/grpo.rlvr.yml", True),
        ("rlvr.yaml", True),
        ("a/b/c.d.rlvr.yaml", True),
        ("experiment.yaml", False),
        ("myrlvr.yaml", False),
        ("x.rlvr.yaml.bak", False),
        ("rlvr.json", False),
    ],
)
def test_hook_file_pattern(name: str, matches: bool) -> None:
    assert bool(re.search(hook("rlvr-validate")["files"], name)) == matches


def test_hook_entry_is_the_fast_command() -> None:
    entry = hook("rlvr-validate")
    assert entry["entry"] == "rlvr validate" and entry["language"] == "python"


def git(*args: str, cwd: Path) -> None:
    subprocess.run(
        ["git", *args],
        cwd=cwd,
        check=True,
        capture_output=True,
        env={
            **os.environ,
            "GIT_AUTHOR_NAME": "t",
            "GIT_AUTHOR_EMAIL": "t@t",
            "GIT_COMMITTER_NAME": "t",
            "GIT_COMMITTER_EMAIL": "t@t",
        },
    )


@pytest.mark.slow
def test_pre_commit_runs_the_hook_from_this_checkout(tmp_path: Path) -> None:
    """pre-commit installs this checkout as a hook repo and blocks a bad contract."""
    repo = tmp_path / "user-repo"
    repo.mkdir()
    git("init", "-q", cwd=repo)
    shutil.copyfile(EXAMPLES / "invalid" / "RLV002-unknown-key.rlvr.yaml", repo / "exp.rlvr.yaml")
    (repo / "notes.yaml").write_text("not: [a contract\n")  # not matched by the hook
    git("add", ".", cwd=repo)
    env = {**os.environ, "PRE_COMMIT_HOME": str(tmp_path / "cache"), "PRE_COMMIT_COLOR": "never"}
    command = [sys.executable, "-m", "pre_commit", "try-repo", str(ROOT), "rlvr-validate", "--all-files"]
    bad = subprocess.run(command, cwd=repo, capture_output=True, text=True, env=env, timeout=600)
    assert bad.returncode == 1, bad.stdout + bad.stderr
    assert "exp.rlvr.yaml:22:3: error[RLV002] objective.entropy_coeff" in bad.stdout
    shutil.copyfile(ROOT / "contracts" / "grpo-cpu.rlvr.yaml", repo / "exp.rlvr.yaml")
    git("add", ".", cwd=repo)
    good = subprocess.run(command, cwd=repo, capture_output=True, text=True, env=env, timeout=600)
    assert good.returncode == 0, good.stdout + good.stderr
    assert "Passed" in good.stdout
