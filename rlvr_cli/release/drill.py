"""The rollback drill's evidence: conversations recorded with a bundle's own policy when it is
built (greedy, on the first holdout tasks, through the one rollout path: tool calls, their
results and the environment's effects as the resources server logged them, and the verdict), and
replayed against the restored bundle, which must give the same outcome, token for token."""

from __future__ import annotations

import shutil
import tempfile
from pathlib import Path
from typing import Any

from rlvr_cli.errors import RlvrError
from rlvr_cli.files import sha256_file
from rlvr_cli.release.bundle import read_manifest

#: fields that carry time, not outcome
CLOCK = frozenset({"time", "seconds", "duration", "elapsed", "at", "verify_seconds"})


def _timeless(value: Any) -> Any:
    if isinstance(value, dict):
        return {k: _timeless(v) for k, v in value.items() if k not in CLOCK}
    if isinstance(value, list):
        return [_timeless(v) for v in value]
    return value


def record(contract: Any, folder: Path, policy: Path, tasks: int) -> list[dict[str, Any]]:
    """Greedy conversations of the policy at `policy` on the first `tasks` holdout tasks."""
    from transformers.utils import logging

    from rlvr_cli.audit.evaluate import load_policy
    from rlvr_cli.chat.render import ChatRenderer
    from rlvr_cli.contract.tasks import read_split
    from rlvr_cli.engine.engines import PolicyEngine
    from rlvr_cli.rollout.base import Draw
    from rlvr_cli.rollout.rollouts import open_rollout

    logging.set_verbosity_error()
    logging.disable_progress_bar()
    chosen = read_split(folder / contract.data.splits.holdout.path, "holdout")[:tasks]
    renderer = ChatRenderer.from_contract(contract, folder)
    engine = PolicyEngine.of("lean", load_policy(contract, folder, policy))
    with open_rollout(contract, folder, renderer, engine) as rollout:
        rows = rollout.sample(chosen, Draw(group_size=1, seed=0, greedy=True))
    import json

    out = []
    for row in rows:
        verdict = row.verdict
        out.append(
            _timeless(
                {
                    "task": row.task["id"],
                    "response_ids": list(row.response_ids),
                    "text": row.text,
                    "finish": row.finish,
                    "transcript": row.transcript,
                    "verdict": verdict.as_json() if verdict is not None else None,
                }
            )
        )
    return json.loads(json.dumps(out))  # as the recording reads back from drill.json


def environment_changes(bundle: Path, manifest: dict[str, Any]) -> list[str]:
    """Where the experiment the drill replays in is no longer the one the bundle was built from."""
    folder = Path(manifest["experiment"])
    found = []
    contract = manifest["contract"]["file"]
    here = folder / Path(contract).name
    if not here.is_file():
        return [f"{here}: the bundle's experiment has no contract any more"]
    if sha256_file(here) != manifest["files"][contract]:
        found.append(f"{here}: changed since the bundle was built")
    base = manifest.get("base") or {}
    if base.get("path"):
        from rlvr_cli.release.bundle import base_files

        where = Path(base["path"])
        if not where.is_dir() or base_files(where) != base["files"]:
            found.append(f"{where}: the adapter's base policy changed since the bundle was built")
    source = manifest["verifier"].get("source")
    if source and sha256_file(folder / Path(source).name) != manifest["verifier"]["sha256"]:
        found.append(f"{folder / Path(source).name}: the verifier changed since the bundle was built")
    return found


def drill(bundle: Path) -> list[str]:
    """Restore the bundle (its policy copied out, as a deployment would) and replay its recorded
    conversations; the differences, empty when the outcome equals the recording."""
    import json

    from rlvr_cli.contract.load import load

    manifest = read_manifest(bundle)
    changed = environment_changes(bundle, manifest)
    if changed:
        raise RlvrError("the drill cannot replay:\n" + "\n".join(f"  {c}" for c in changed))
    recorded = json.loads((bundle / "drill.json").read_text(encoding="utf-8"))
    folder = Path(manifest["experiment"])
    contract = load(folder / Path(manifest["contract"]["file"]).name)
    with tempfile.TemporaryDirectory(prefix="rlvr-drill-") as scratch:
        restored = Path(scratch) / "policy"
        shutil.copytree(bundle / "policy", restored)
        replayed = record(contract, folder, restored, len(recorded))
    return compare(recorded, replayed)


def compare(recorded: list[dict[str, Any]], replayed: list[dict[str, Any]]) -> list[str]:
    found = []
    if [r["task"] for r in recorded] != [r["task"] for r in replayed]:
        return ["the replay ran other tasks than the recording"]
    for old, new in zip(recorded, replayed, strict=True):
        for key in ("response_ids", "text", "finish", "transcript", "verdict"):
            if old.get(key) != new.get(key):
                found.append(f"task {old['task']}: {key} differs from the recording")
    return found
