"""`rlvr audit isolation`: parallel sessions must never see each other's state.

N sessions run concurrently, each seeded with a unique marker value, with their tool calls
interleaved. The audit checks that no marker appears in another session's outputs or
verdicts, that re-seeding resets state, that verify changes nothing, that closed sessions
are gone, that tool calls before seeding fail, and that nothing is left on disk. A
`session_id` field proves nothing by itself; these probes do.
"""

from __future__ import annotations

import json
import secrets
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from rlvr_cli.contract.models import Contract
from rlvr_cli.errors import RlvrError

PROBE_FILE = "notes/probe.txt"


@dataclass
class IsolationReport:
    sessions: int
    findings: list[dict[str, Any]] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        return not self.findings

    def add(self, check: str, evidence: str) -> None:
        self.findings.append({"check": check, "evidence": evidence})


def _probe_session(client: Any, task: dict[str, Any], marker: str) -> dict[str, Any]:
    """Seed, write the marker, read everything back, verify twice; all outputs returned."""
    session = client.seed({**task, "marker": marker})
    outputs = [str(client.call(session, "list_files", {}))]
    outputs.append(str(client.call(session, "write_file", {"path": PROBE_FILE, "content": marker})))
    listing = client.call(session, "list_files", {})
    outputs.append(str(listing))
    for path in listing if isinstance(listing, list) else []:
        outputs.append(str(client.call(session, "read_file", {"path": path})))
    first = client.verify(session, marker)
    after_verify = client.call(session, "list_files", {})
    second = client.verify(session, marker)
    return {
        "session": session,
        "marker": marker,
        "outputs": outputs,
        "listing": listing,
        "after_verify": after_verify,
        "verdicts": [first, second],
    }


def run_isolation(contract: Contract, folder: Path, sessions: int) -> IsolationReport:
    from rlvr_cli.audit.verifier import all_tasks
    from rlvr_cli.env.agent import EnvClient, EnvHTTPError, environment

    if contract.environment.kind != "tool_use":
        raise RlvrError("isolation audits need a tool_use environment (a resources server)")
    tasks = list(all_tasks(contract, folder).values())
    report = IsolationReport(sessions)
    spec = contract.environment.server or ""
    with environment(spec, folder) as endpoint:
        local = endpoint.server
        client = EnvClient(endpoint, timeout_s=contract.environment.timeout_s)
        try:
            client.check_declaration(contract.environment.tools, contract.environment.forbidden_tools)
            unknown = secrets.token_urlsafe(24)
            try:
                client.call(unknown, "list_files", {})
                report.add("calls before seeding fail", "a tool call with an unseeded session id was served")
            except EnvHTTPError as exc:
                if exc.status != 404:
                    report.add("calls before seeding fail", f"expected 404, got {exc.status}")
            markers = [f"rlvr-marker-{i}-{secrets.token_hex(6)}" for i in range(sessions)]
            with ThreadPoolExecutor(max_workers=min(sessions, 32)) as pool:
                results = list(
                    pool.map(lambda i: _probe_session(client, tasks[i % len(tasks)], markers[i]), range(sessions))
                )
            _check_leaks(report, results, markers)
            _check_verify_is_read_only(report, results)
            _check_reseed(report, client, tasks[0])
            roots = _state_folders(local, [r["session"] for r in results])
            _check_close(report, client, results)
        finally:
            client.close()
    _check_disk(report, local, roots)
    return report


def _state_folders(server: Any, sessions: list[str]) -> list[Path]:
    """Folders the in-process server's sessions hold (a remote server's disk is not visible)."""
    if server is None:
        return []
    roots = []
    for sid in sessions:
        try:
            root = getattr(server.session(sid).state, "root", None)
        except KeyError:
            continue
        if isinstance(root, Path):
            roots.append(root)
    return roots


def _check_disk(report: IsolationReport, server: Any, roots: list[Path]) -> None:
    left = [str(r) for r in roots if r.exists()]
    if left:
        report.add("nothing left on disk", f"{len(left)} session folder(s) remain after close: {left[:3]}")
    if server is not None and getattr(server, "open_sessions", 0):
        report.add("closed sessions free their state", f"the server still holds {server.open_sessions} session(s)")


def _check_leaks(report: IsolationReport, results: list[dict[str, Any]], markers: list[str]) -> None:
    for result in results:
        seen = " ".join(result["outputs"]) + json.dumps([v.detail for v in result["verdicts"]])
        foreign = [m for m in markers if m != result["marker"] and m in seen]
        if foreign:
            report.add("no marker in another session", f"session with {result['marker']} saw {foreign[:3]}")


def _check_verify_is_read_only(report: IsolationReport, results: list[dict[str, Any]]) -> None:
    for result in results:
        first, second = result["verdicts"]
        if result["after_verify"] != result["listing"] or (first.reward, first.components) != (
            second.reward,
            second.components,
        ):
            report.add("verify changes nothing", f"session {result['marker']}: state or verdict changed after verify")


def _check_reseed(report: IsolationReport, client: Any, task: dict[str, Any]) -> None:
    fresh = client.seed(task)
    try:
        listing = client.call(fresh, "list_files", {})
        if PROBE_FILE in (listing if isinstance(listing, list) else []):
            report.add("re-seeding resets state", f"a fresh session already holds {PROBE_FILE}: {listing}")
    finally:
        client.close_session(fresh)


def _check_close(report: IsolationReport, client: Any, results: list[dict[str, Any]]) -> None:
    from rlvr_cli.env.agent import EnvHTTPError

    for result in results:
        client.close_session(result["session"])
        try:
            client.call(result["session"], "list_files", {})
            report.add("closed sessions free their state", f"session {result['marker']} still answers after close")
        except EnvHTTPError as exc:
            if exc.status != 404:
                report.add("closed sessions free their state", f"expected 404 after close, got {exc.status}")


def report_text(report: IsolationReport) -> str:
    if report.ok:
        return f"{report.sessions} concurrent sessions: no leak, re-seed resets, verify is read-only, close frees"
    lines = [f"{report.sessions} concurrent sessions: {len(report.findings)} finding(s)"]
    lines += [f"  LEAK [{f['check']}] {f['evidence']}" for f in report.findings]
    return "\n".join(lines)
