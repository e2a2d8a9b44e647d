"""The record store's checks: every shard present and matching its sha256, nothing unlisted, and
the shards a checkpoint pinned still what it pinned (`rlvr audit rollouts`, resume)."""

from __future__ import annotations

from pathlib import Path

from rlvr_cli.errors import RlvrError
from rlvr_cli.store.records import MANIFEST, read_manifest, shards_sha256


def pin_problems(folder: Path, cursor: int, expected: str, where: str) -> list[str]:
    """The first `cursor` shards of the manifest must be what `where` (a checkpoint) pinned."""
    try:
        shards = read_manifest(folder)
    except RlvrError as exc:
        return [str(exc)]
    if len(shards) < cursor:
        return [f"{where} pinned {cursor} record shard(s); the manifest lists {len(shards)}"]
    if shards_sha256(shards[:cursor]) != expected:
        return [
            f"the first {cursor} record shard(s) are not what {where} pinned "
            "(a shard and its manifest entry were changed after they were written)"
        ]
    return []


def verify_manifest(folder: Path) -> list[str]:
    """Problems with the record store: a shard missing, extra, or not matching its sha256."""
    from rlvr_cli.files import sha256_file

    if not (folder / MANIFEST).is_file():
        return [f"{folder / MANIFEST} is missing"]
    try:
        shards = read_manifest(folder)
    except RlvrError as exc:
        return [str(exc)]
    problems = []
    listed = set()
    for shard in shards:
        path = folder / shard["file"]
        listed.add(shard["file"])
        if not path.is_file():
            problems.append(f"{shard['file']} is listed but missing")
        elif sha256_file(path) != shard.get("sha256"):
            problems.append(f"{shard['file']} does not match its sha256 (changed after it was written)")
    for path in sorted(folder.glob("*.parquet")):
        if path.name not in listed:
            problems.append(f"{path.name} is not listed in the manifest (foreign or partial file)")
    return problems
