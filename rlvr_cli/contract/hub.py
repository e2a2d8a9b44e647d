"""Hub artifacts (`id` + `revision`) from the local Hugging Face cache — never the network.

The cache is the folder `huggingface_hub` fills (`HF_HUB_CACHE`, else `HF_HOME/hub`, else
`~/.cache/huggingface/hub`): `models--ORG--NAME/snapshots/COMMIT/` holds the files of one
commit and `refs/BRANCH` names a branch's commit. rlvr reads that layout itself (no import on
the validate path) and records the commit it resolved in the plan and the lock file.
"""

from __future__ import annotations

import os
import re
from pathlib import Path

_COMMIT = re.compile(r"^[0-9a-f]{40}$")


def cache_dir() -> Path:
    if os.environ.get("HF_HUB_CACHE"):
        return Path(os.environ["HF_HUB_CACHE"])
    home = Path(os.environ.get("HF_HOME") or Path.home() / ".cache" / "huggingface")
    return home / "hub"


def repo_folder(repo_id: str) -> Path:
    return cache_dir() / ("models--" + repo_id.replace("/", "--"))


def commit(repo_id: str, revision: str | None) -> str | None:
    """The commit `revision` (a commit, or a branch such as `main`) names in the cache, or None."""
    folder = repo_folder(repo_id)
    rev = revision or "main"
    if _COMMIT.match(rev):
        return rev if (folder / "snapshots" / rev).is_dir() else None
    ref = folder / "refs" / rev
    if not ref.is_file():
        return None
    found = ref.read_text(encoding="utf-8").strip()
    return found if (folder / "snapshots" / found).is_dir() else None


def snapshot(repo_id: str, revision: str | None) -> Path | None:
    """The local folder of that commit's files, or None when the cache does not hold it."""
    found = commit(repo_id, revision)
    return repo_folder(repo_id) / "snapshots" / found if found else None


def missing(repo_id: str, revision: str | None) -> str:
    return (
        f"{repo_id}@{revision or 'main'} is not in the local Hugging Face cache ({cache_dir()}); rlvr never "
        f"downloads — fetch it first (`hf download {repo_id}" + (f" --revision {revision}" if revision else "") + "`)"
    )
