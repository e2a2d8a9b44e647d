"""Hub artifacts: `id` + `revision` load from the local Hugging Face cache (offline, as a user's
pre-fetched cache), and the commit they resolved to is in the plan and the lock file."""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path

import pytest

from tests.conftest import copy_experiment, edit, rlvr

CONTRACT = "experiment.rlvr.yaml"
COMMIT = "0123456789abcdef0123456789abcdef01234567"


@pytest.fixture
def cached(single_turn: Path, tmp_path: Path) -> tuple[Path, dict]:
    """The scaffold's tiny model placed in a Hugging Face cache as `rlvr-test/tiny` (main → COMMIT)."""
    repo = tmp_path / "hf" / "hub" / "models--rlvr-test--tiny"
    shutil.copytree(single_turn / "model", repo / "snapshots" / COMMIT)
    (repo / "refs").mkdir()
    (repo / "refs" / "main").write_text(COMMIT)
    folder = copy_experiment(single_turn, tmp_path / "exp")
    shutil.rmtree(folder / "model")  # nothing local: the hub cache is the only source
    edit(folder, "policy: {path: model}", f"policy: {{id: rlvr-test/tiny, revision: {COMMIT}}}")
    edit(
        folder,
        "tokenizer: {path: model, chat_template: native}",
        f"tokenizer: {{id: rlvr-test/tiny, revision: {COMMIT}, chat_template: native}}",
    )
    env = {**os.environ, "HF_HOME": str(tmp_path / "hf"), "HF_HUB_OFFLINE": "1"}
    env.pop("HF_HUB_CACHE", None)
    return folder, env


@pytest.mark.slow  # trains or runs rlvr train: make test runs it, make test-fast does not
def test_a_pinned_hub_model_trains_from_the_cache(cached: tuple[Path, dict], tmp_path: Path) -> None:
    folder, env = cached
    checked = rlvr("validate", "--deep", "--strict", folder / CONTRACT, env=env)
    assert checked.code == 0, checked.stdout + checked.stderr
    locked = rlvr("lock", folder / CONTRACT, env=env)
    assert locked.code == 0, locked.stderr
    lock = json.loads((folder / "experiment.lock.json").read_text())
    assert lock["files"][f"hub:rlvr-test/tiny@{COMMIT}"] == COMMIT
    run_dir = tmp_path / "run"
    done = rlvr("train", folder / CONTRACT, "--run-dir", run_dir, "--max-steps", "1", env=env, timeout=300)
    assert done.code == 0, done.stderr[-2000:]
    plan = json.loads((run_dir / "plan.json").read_text())
    assert plan["artifacts"]["policy"] == {"id": "rlvr-test/tiny", "revision": COMMIT, "commit": COMMIT}


def test_a_hub_model_missing_from_the_cache_is_named(cached: tuple[Path, dict], tmp_path: Path) -> None:
    folder, env = cached
    edit(
        folder,
        f"policy: {{id: rlvr-test/tiny, revision: {COMMIT}}}",
        f"policy: {{id: rlvr-test/other, revision: {COMMIT}}}",
    )
    checked = rlvr("validate", "--deep", folder / CONTRACT, env=env)
    assert checked.code == 1 and "rlvr-test/other" in checked.stdout and "never downloads" in checked.stdout
    run = rlvr("train", folder / CONTRACT, "--run-dir", tmp_path / "run", "--max-steps", "1", env=env, timeout=300)
    assert run.code == 1 and "not in the local Hugging Face cache" in run.stderr
