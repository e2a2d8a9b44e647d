"""`rlvr audit isolation`: parallel sessions never see each other's state, for any environment.

What the audit needs from an environment (docs/environments.md): `snapshot(state)` — a JSON
view of the whole session state — and a `seed` that keeps `task["marker"]` in the state; the
tool traffic comes from the user's own candidate solutions (`audit/candidates.yaml`: every
candidate with a trajectory), so nothing here knows any tool by name.

N sessions are seeded at once, each with a unique marker planted through its task; their
candidates' tool calls are replayed concurrently, one call of every session before the next
of any. A leak is another session's marker in a session's tool outputs, snapshots or
verdicts. Then: verify is read-only (snapshots right before and after it are equal), re-seeding
a task gives the state it gave the first time (`audit/states.py`: what differs between any two
seeds is the session's own), unseeded and closed sessions are refused, and
closing frees the session and every resource it registered (`folder()`, `hold()`), and each
candidate replayed alone afterwards gets the verdict and the final state it got among the
concurrent sessions; for a
server in this process, folders created during the audit that still hold a marker after
every session closed are reported too. Every seeded session is closed, also when the audit
stops early. A finding is exit 1 with its evidence; an audit that cannot run is exit 3.
"""

from __future__ import annotations

import contextlib
import json
import secrets
import tempfile
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from rlvr_cli.audit import disk, states
from rlvr_cli.contract.models import Contract
from rlvr_cli.errors import CannotRun


@dataclass
class IsolationReport:
    sessions: int
    findings: list[dict[str, Any]] = field(default_factory=list)
    calls: int = 0
    refused: int = 0

    @property
    def ok(self) -> bool:
        return not self.findings

    def add(self, check: str, evidence: str) -> None:
        self.findings.append({"check": check, "evidence": evidence})


@dataclass
class _Session:
    task: dict[str, Any]
    marker: str
    calls: list[tuple[str, dict[str, Any]]]
    sid: str = ""
    seen: list[str] = field(default_factory=list)  # every output, snapshot and verdict, as text
    seeded: Any = None  # the snapshot right after seeding (the first session only: the re-seed check)
    final: Any = None  # the snapshot after its traffic
    verdict: dict[str, Any] | None = None  # its verdict after its traffic
    resources: list[Any] = field(default_factory=list)


def traffic(candidates: list[Any], tasks: dict[str, dict[str, Any]]) -> list[tuple[dict, list]]:
    """(task, tool calls) of every candidate with a trajectory: the user's own tool traffic."""
    from rlvr_cli.audit.verifier import resolve_task

    out = []
    for candidate in candidates:
        calls = [
            (item["name"], _arguments(item.get("arguments")))
            for step in candidate.trajectory or []
            for item in step
            if item.get("type") == "function_call" and isinstance(item.get("name"), str)
        ]
        if calls:
            out.append((resolve_task(candidate.task, tasks), calls))
    return out


def _arguments(raw: Any) -> dict[str, Any]:
    if isinstance(raw, str):
        with contextlib.suppress(json.JSONDecodeError):
            raw = json.loads(raw)
    return raw if isinstance(raw, dict) else {}


def run_isolation(contract: Contract, folder: Path, sessions: int, candidates_path: Path) -> IsolationReport:
    from rlvr_cli.audit.verifier import all_tasks, load_candidates
    from rlvr_cli.env.agent import EnvClient, EnvHTTPError, environment

    if not contract.environment.server:
        raise CannotRun("isolation audits need a tool_use environment (a resources server)")
    plan = traffic(load_candidates(candidates_path), all_tasks(contract, folder))
    if not plan:
        raise CannotRun(f"{candidates_path} holds no candidate with tool calls to replay")
    runs = [
        _Session(
            task=plan[i % len(plan)][0], calls=plan[i % len(plan)][1], marker=f"rlvr-marker-{i}-{secrets.token_hex(6)}"
        )
        for i in range(sessions)
    ]
    report = IsolationReport(sessions)
    system_temp = Path(tempfile.gettempdir())
    before = disk.temp_entries(system_temp)
    with disk.private_temp() as scratch, environment(contract.environment.server or "", folder) as endpoint:
        started = disk.entries(scratch)  # what the server made before any session: its own, not theirs
        client = EnvClient(endpoint, timeout_s=contract.environment.timeout_s)
        try:
            if not _declaration(client, contract, report):
                return report  # the contract's tool lists are not the server's: a finding, exit 1
            try:
                _probe(report, client, endpoint.server, runs)
            except EnvHTTPError as exc:  # the server failed mid-audit: no evidence either way
                raise CannotRun(f"the resources server failed during the audit: {exc}") from None
            _close_all(client, runs)
            _check_closed(report, client, runs[0])
            _check_alone(report, client, runs[: len(plan)])
        finally:
            _close_all(client, runs)
            client.close()
        if endpoint.server is not None:
            _check_freed(report, endpoint.server, runs, before, system_temp)
            left = sorted(disk.entries(scratch) - started)
            if left:
                report.add(
                    "nothing left on disk",
                    f"{len(left)} file(s) or folder(s) the server created during the audit remain after every "
                    f"session closed: {left[:3]}",
                )
    return report


def _declaration(client: Any, contract: Contract, report: IsolationReport) -> bool:
    """The server answers and offers what the contract declares; a server that fails here
    means the audit cannot run (exit 3), a declaration mismatch is the contract's: a finding
    (exit 1), in the report of every format."""
    from rlvr_cli.env.agent import DeclarationMismatch, EnvHTTPError

    try:
        client.check_declaration(contract.environment.tools, contract.environment.forbidden_tools)
    except DeclarationMismatch as exc:
        report.add("the contract declares the server's tools", str(exc))
        return False
    except EnvHTTPError as exc:
        raise CannotRun(f"the resources server failed to list its tools: {exc}") from None
    return True


def _probe(report: IsolationReport, client: Any, local: Any, runs: list[_Session]) -> None:
    _calibrate(client, runs[0])
    _check_unseeded(report, client)
    with ThreadPoolExecutor(max_workers=min(len(runs), 32)) as pool:
        list(pool.map(lambda run: _seed(client, local, run, run is runs[0]), runs))
        for step in range(max(len(run.calls) for run in runs)):  # one call of every session, then the next
            active = [run for run in runs if step < len(run.calls)]
            for refused in pool.map(lambda run, j=step: _call(client, run, j), active):
                report.calls += 1
                report.refused += refused
        results = list(pool.map(lambda run: _verify_observed(client, run), runs))
    for run, problem in zip(runs, results, strict=True):
        if problem:
            report.add("verify changes nothing", f"session {run.marker}: {problem}")
    _check_leaks(report, runs)
    _check_reseed(report, client, runs[0])


def _calibrate(client: Any, run: _Session) -> None:
    """One session alone first: the server can snapshot, and keeps the marker in its state."""
    from rlvr_cli.env.agent import EnvHTTPError

    marker = f"rlvr-calibration-{secrets.token_hex(6)}"
    try:
        sid = client.seed({**run.task, "marker": marker})
    except EnvHTTPError as exc:
        raise CannotRun(f"seeding task {run.task.get('id')!r} failed: HTTP {exc.status} {exc.body[:300]}") from None
    try:
        view = client.snapshot(sid)
    except EnvHTTPError as exc:
        why = "the server has no snapshot(state)" if exc.status == 501 else f"snapshot failed: HTTP {exc.status}"
        raise CannotRun(f"{why}; the audit compares session states {exc.body[:200]}") from None
    finally:
        with contextlib.suppress(EnvHTTPError):
            client.close_session(sid)
    if marker not in json.dumps(view):
        raise CannotRun(
            "the server's snapshot does not hold task['marker']: seed() must keep it in the session "
            "state, so that a leak of one session into another can be seen (docs/environments.md)"
        )


def _seed(client: Any, local: Any, run: _Session, first: bool) -> None:
    run.sid = client.seed({**run.task, "marker": run.marker})
    if first:
        run.seeded = client.snapshot(run.sid)
        run.seen.append(json.dumps(run.seeded))
    if local is not None:
        with contextlib.suppress(KeyError):
            run.resources = local.resources(run.sid)


def _call(client: Any, run: _Session, step: int) -> int:
    from rlvr_cli.env.agent import EnvHTTPError

    name, arguments = run.calls[step]
    try:
        run.seen.append(json.dumps(client.call(run.sid, name, arguments)))
    except EnvHTTPError as exc:
        if exc.status == 404:
            raise CannotRun(f"session {run.marker} vanished mid-episode (HTTP 404 on {name})") from None
        return 1  # refused (a tool not offered): not traffic, not a finding
    return 0


def _verify_observed(client: Any, run: _Session) -> str | None:
    before, verdict, after = client.verify_observed(run.sid, run.marker)
    run.seen += [json.dumps(before), json.dumps(after), json.dumps(verdict.as_json())]
    run.final, run.verdict = after, verdict.as_json()
    if before != after:
        return f"the state changed during verify: {states.evidence(before, after, states.differing(before, after))}"
    return None


def _check_alone(report: IsolationReport, client: Any, runs: list[_Session]) -> None:
    """Each candidate replayed alone, after every concurrent session closed, must get the
    verdict and the final state it got among them (its own marker aside; what differs between
    two lone replays is per-session noise): sessions that share state without sharing markers
    (each marker kept beside data they all write) pass the leak check and fail this one."""
    for run in runs:
        alone = _replay(client, run)
        if _outcome(alone.verdict) != _outcome(run.verdict):
            report.add(
                "the same verdict alone as among concurrent sessions",
                f"the candidate for task {run.task.get('id')!r} gets {_outcome(alone.verdict)} alone but "
                f"{_outcome(run.verdict)} among {len(runs)} concurrent session(s): the sessions share state",
            )
            continue
        among, lone = states.normalized(run.final, run.marker), states.normalized(alone.final, alone.marker)
        changed = states.differing(among, lone)
        if changed:  # what a second lone replay also changes is the session's own (a folder, an id, a clock)
            again = _replay(client, run)
            changed -= states.differing(lone, states.normalized(again.final, again.marker))
        if changed:
            report.add(
                "the same final state alone as among concurrent sessions",
                f"the candidate for task {run.task.get('id')!r} ends in another state among {len(runs)} concurrent "
                f"session(s) than alone: {states.evidence(lone, among, changed)}",
            )


def _replay(client: Any, run: _Session) -> _Session:
    alone = _Session(task=run.task, calls=run.calls, marker=f"rlvr-alone-{secrets.token_hex(6)}")
    _seed(client, None, alone, first=False)
    try:
        for step in range(len(alone.calls)):
            _call(client, alone, step)
        _verify_observed(client, alone)
    finally:
        _close_all(client, [alone])
    return alone


def _outcome(verdict: dict[str, Any] | None) -> str:
    if verdict is None:
        return "no verdict"
    reward = verdict.get("reward")
    return (
        f"{verdict.get('status')} (reward {reward:g})"
        if isinstance(reward, (int, float))
        else str(verdict.get("status"))
    )


def _check_leaks(report: IsolationReport, runs: list[_Session]) -> None:
    markers = [run.marker for run in runs]
    lost = [run.marker for run in runs if run.marker not in json.dumps(run.final)]
    if lost:
        report.add("each session keeps its own state", f"{len(lost)} session(s) lost their marker at once: {lost[:3]}")
    for run in runs:
        seen = "\n".join(run.seen)
        foreign = [m for m in markers if m != run.marker and m in seen]
        if foreign:
            where = next(text for text in run.seen if foreign[0] in text)
            report.add("no marker in another session", f"session {run.marker} saw {foreign[:3]} in {where[:300]}")


def _check_reseed(report: IsolationReport, client: Any, run: _Session) -> None:
    def seeded() -> Any:
        fresh = client.seed({**run.task, "marker": run.marker})
        try:
            return client.snapshot(fresh)
        finally:
            client.close_session(fresh)

    again = seeded()
    changed = states.differing(run.seeded, again)
    if changed:  # what differs between two more seeds too is the session's own (a folder, an id)
        changed -= states.differing(again, seeded())
    if changed:
        detail = states.evidence(run.seeded, again, changed)
        report.add("re-seeding resets state", f"task {run.task.get('id')!r} seeded again: {detail}")


def _check_unseeded(report: IsolationReport, client: Any) -> None:
    from rlvr_cli.env.agent import EnvHTTPError

    unknown = secrets.token_urlsafe(24)
    try:
        client.snapshot(unknown)
        report.add("unseeded sessions are refused", "a snapshot of a session id never seeded was served")
    except EnvHTTPError as exc:
        if exc.status != 404:
            report.add("unseeded sessions are refused", f"expected 404 for an unseeded session, got {exc.status}")


def _check_closed(report: IsolationReport, client: Any, run: _Session) -> None:
    from rlvr_cli.env.agent import EnvHTTPError

    for probe in (lambda: client.snapshot(run.sid), lambda: client.call(run.sid, run.calls[0][0], run.calls[0][1])):
        try:
            probe()
            report.add("closed sessions are refused", f"session {run.marker} still answers after close")
            return
        except EnvHTTPError as exc:
            if exc.status != 404:
                report.add("closed sessions are refused", f"expected 404 after close, got {exc.status}")
                return


def _close_all(client: Any, runs: list[_Session]) -> None:
    from rlvr_cli.env.agent import EnvHTTPError

    for run in runs:
        if run.sid:
            with contextlib.suppress(EnvHTTPError, OSError):
                client.close_session(run.sid)


def _check_freed(
    report: IsolationReport, server: Any, runs: list[_Session], before: set[str], system_temp: Path
) -> None:
    still = [run.marker for run in runs if run.sid and _answers(server, run.sid)]
    if still:
        report.add("closed sessions are refused", f"{len(still)} closed session(s) still answer: {still[:3]}")
    if server.open_sessions:
        report.add("close frees the session", f"the server still holds {server.open_sessions} session(s)")
    kept = [r for run in runs for r in run.resources if _alive(r)]
    if kept:
        report.add("close frees every registered resource", f"{len(kept)} still alive after close: {kept[:3]}")
    markers = [run.marker for run in runs]
    left = [p for p in disk.temp_entries(system_temp) - before if disk.holds_marker(Path(p), markers)]
    if left:
        report.add("nothing left on disk", f"{len(left)} folder(s) with session markers remain after close: {left[:3]}")


def _answers(server: Any, sid: str) -> bool:
    try:
        server.session(sid)
    except KeyError:
        return False
    return True


def _alive(resource: Any) -> bool:
    if isinstance(resource, Path):
        return resource.exists()
    return getattr(resource, "closed", None) is False


def report_text(report: IsolationReport) -> str:
    head = f"{report.sessions} concurrent sessions, {report.calls} tool calls replayed"
    if report.refused:
        head += f" ({report.refused} refused by the server)"
    if report.ok:
        return f"{head}: no leak, verify is read-only, re-seed resets, close frees"
    lines = [f"{head}: {len(report.findings)} finding(s)"]
    lines += [f"  FINDING [{f['check']}] {f['evidence']}" for f in report.findings]
    return "\n".join(lines)
