"""The canary: a candidate bundle and the current one answer the same share of live-like requests
(a tasks file), with tool calls limited to a declared allowlist; the candidate is promoted only if
it is not worse (paired, by interval), causes no more invalid verdicts, and calls no tool outside
the allowlist. The report is kept in the registry either way."""

from __future__ import annotations

import hashlib
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from rlvr_cli.errors import RlvrError, UsageProblem


@dataclass(frozen=True)
class Traffic:
    tasks: Path
    share: float
    seed: int
    allow: frozenset[str] | None  # None: every tool the environment offers
    margin: float
    confidence: float


def chosen(rows: list[dict[str, Any]], share: float, seed: int) -> list[dict[str, Any]]:
    """A stable `share` of the requests: each row in or out by the hash of its id and the seed."""
    picked = [r for r in rows if int(hashlib.sha256(f"{seed}:{r['id']}".encode()).hexdigest(), 16) / 2**256 < share]
    return picked or rows[:1]


def _answers(contract: Any, folder: Path, policy: Path, tasks: list[dict[str, Any]], allow: Any) -> dict[str, Any]:
    from rlvr_cli.audit.evaluate import sample_policy

    permitted = set(allow) if allow is not None else None
    out = {}
    for row in sample_policy(contract, folder, policy, tasks, permitted=permitted):
        calls = [c for t in (row.transcript or {}).get("turns", []) for c in t.get("tool_calls", [])]
        out[str(row.task["id"])] = {
            "reward": row.reward if row.valid else None,
            "status": row.verdict.status if row.verdict is not None else "not_verified",
            "outside": sorted({c["name"] for c in calls if allow is not None and c["name"] not in allow}),
        }
    return out


def run(registry: Any, candidate: str, traffic: Traffic) -> dict[str, Any]:
    """Both bundles on the same requests; the decision and its evidence."""
    from rlvr_cli.audit.evaluate import bootstrap
    from rlvr_cli.contract.load import load
    from rlvr_cli.contract.tasks import read_split
    from rlvr_cli.release.bundle import read_manifest
    from rlvr_cli.release.drill import environment_changes

    current = registry.current
    if current is None:
        raise UsageProblem("no current bundle to compare with: promote the first bundle with rlvr release promote")
    if current == candidate:
        raise UsageProblem(f"{candidate} is already current")
    for bundle_id in (candidate, current):
        registry.check(bundle_id)
    manifest = read_manifest(registry.bundle(candidate))
    changed = environment_changes(registry.bundle(candidate), manifest)
    if changed:
        raise RlvrError("the canary cannot run:\n" + "\n".join(f"  {c}" for c in changed))
    folder = Path(manifest["experiment"])
    contract = load(folder / Path(manifest["contract"]["file"]).name)
    if traffic.allow is not None and contract.environment.kind != "tool_use":
        raise UsageProblem("--allow-tools limits tool calls; this contract's environment has no tools")
    requests = chosen(read_split(traffic.tasks, "canary"), traffic.share, traffic.seed)
    answers = {
        role: _answers(contract, folder, registry.bundle(b) / "policy", requests, traffic.allow)
        for role, b in (("candidate", candidate), ("current", current))
    }
    return decide(candidate, current, requests, answers, traffic, bootstrap)


def decide(candidate: str, current: str, requests: list, answers: dict, traffic: Traffic, bootstrap: Any) -> dict:
    cand, curr = answers["candidate"], answers["current"]
    ids = [str(r["id"]) for r in requests]
    paired = [
        (cand[i]["reward"] or 0.0) - (curr[i]["reward"] or 0.0)
        for i in ids
        if cand[i]["reward"] is not None and curr[i]["reward"] is not None
    ]
    errors = {role: sum(a[i]["reward"] is None for i in ids) for role, a in answers.items()}
    outside = sorted({t for i in ids for t in cand[i]["outside"]})
    mean, low, high = bootstrap(paired, traffic.confidence) if paired else (0.0, 0.0, 0.0)
    why = []
    if not paired:
        why.append("no request got a valid verdict from both bundles")
    if low < -traffic.margin:
        why.append(f"reward difference {mean:+.3f} [{low:+.3f}, {high:+.3f}] may be below −{traffic.margin}")
    if errors["candidate"] > errors["current"]:
        why.append(f"{errors['candidate']} invalid verdicts against the current bundle's {errors['current']}")
    if outside:
        why.append(f"called tools outside the allowlist: {', '.join(outside)}")
    return {
        "candidate": candidate,
        "current": current,
        "at": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        "requests": len(ids),
        "share": traffic.share,
        "allow": sorted(traffic.allow) if traffic.allow is not None else None,
        "difference": {"mean": mean, "low": low, "high": high, "confidence": traffic.confidence},
        "invalid": errors,
        "outside_allowlist": outside,
        "decision": "refuse" if why else "promote",
        "why": why,
        "answers": answers,
    }
