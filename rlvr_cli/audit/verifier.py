"""`rlvr audit verifier`: prove the verifier on a control group before training.

Candidates come from `audit/candidates.yaml` beside the contract (schema:
`schemas/audit-candidates.schema.json`) plus arms generated here. A candidate *passes*
when the contract's reward equals the best reward the components allow; `expected:
accept` means it must pass, `expected: reject` that it must not. Invalid verdicts
(verifier_error, timeout, sandbox_error) are reported as such — never as a reward of 0 —
and always disagree with the expectation.

Generated arms (audit/arms.py) fit the environment: built from the user's own candidates and
the environment's own tools and snapshots; an arm the server refuses is reported as "could
not run", never judged.
"""

from __future__ import annotations

import contextlib
import json
from collections import Counter, defaultdict
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from rlvr_cli.audit.candidates import Candidate, CandidateFile, load_candidates, resolve_task
from rlvr_cli.contract.models import Contract
from rlvr_cli.errors import CannotRun

__all__ = ["AuditReport", "Candidate", "CandidateFile", "Outcome", "load_candidates", "resolve_task", "run_audit"]


@dataclass
class Outcome:
    candidate: Candidate
    task: dict[str, Any]
    got: str  # accept | reject | invalid
    reward: float | None
    verdict: dict[str, Any]
    transcript: dict[str, Any] | None = None

    @property
    def agrees(self) -> bool:
        return self.got == self.candidate.expected

    def as_json(self) -> dict[str, Any]:
        return {
            "name": self.candidate.name,
            "task": self.task.get("id"),
            "kind": self.candidate.kind,
            "expected": self.candidate.expected,
            "got": self.got,
            "reward": self.reward,
            "verdict": self.verdict,
            "transcript": self.transcript,
        }


@dataclass
class AuditReport:
    outcomes: list[Outcome] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)  # arms that could not be built, and why
    findings: list[str] = field(default_factory=list)  # failures beyond disagreements (a sandbox breach)

    @property
    def disagreements(self) -> list[Outcome]:
        return [o for o in self.outcomes if not o.agrees and o.got != "not_run"]

    @property
    def failed(self) -> bool:
        return bool(self.disagreements or self.findings)

    @property
    def not_run(self) -> list[Outcome]:
        return [o for o in self.outcomes if o.got == "not_run"]

    def matrix(self, key: str) -> dict[str, Counter]:
        table: dict[str, Counter] = defaultdict(Counter)
        for o in self.outcomes:
            name = o.candidate.kind if key == "kind" else str(o.task.get("id"))
            table[name][f"{o.candidate.expected}→{o.got}"] += 1
        return dict(table)


def judge(contract: Contract, verdict: Any) -> tuple[str, float | None]:
    """accept when the contract's reward reaches the best possible, reject otherwise."""
    from rlvr_cli.env.scoring import weighted_reward

    if not verdict.valid:
        return "invalid", None
    try:
        reward = weighted_reward(contract, verdict)
    except KeyError:
        return "invalid", None
    return ("accept" if reward >= contract.objective.reward.best - 1e-9 else "reject"), reward


# ── running ───────────────────────────────────────────────────────────────────────────


def all_tasks(contract: Contract, folder: Path) -> dict[str, dict[str, Any]]:
    from rlvr_cli.contract.tasks import read_split

    tasks: dict[str, dict[str, Any]] = {}
    for name in ("train", "holdout"):  # sealed_eval is never read outside the final evaluation
        for task in read_split(folder / getattr(contract.data.splits, name).path, name):
            tasks[str(task["id"])] = task
    return tasks


def audit_single_turn(contract: Contract, folder: Path, candidates: list[Candidate], sample: int | None) -> AuditReport:
    from rlvr_cli.env.verifier_pool import VerifierPool

    tasks = all_tasks(contract, folder)
    report = AuditReport()
    with contextlib.ExitStack() as outside:
        arms, exploits, after = _arms_for(contract, list(tasks.values()), sample, report, outside)
        kept, count = _producible(contract, folder, exploits)
        if len(kept) < len(exploits):
            report.notes.append(
                f"{len(exploits) - len(kept)} exploit arm(s) (enumeration, contradiction, wrong format) left out: "
                f"longer than length.max_response_tokens={contract.length.max_response_tokens} ({count}), "
                "the policy cannot write them"
            )
        todo = candidates + arms + kept
        with VerifierPool.for_contract(contract, folder) as pool:
            items = [(resolve_task(c.task, tasks), c.response or "") for c in todo]
            for candidate, (task, response), (verdict, _) in zip(todo, items, _verify_all(pool, items), strict=True):
                got, reward = judge(contract, verdict)
                report.outcomes.append(Outcome(candidate, task, got, reward, verdict.as_json(), {"response": response}))
        report.findings += after(report.outcomes)
    return report


def audit_sets(contract: Contract, folder: Path, candidates: list[Candidate], sample: int | None) -> AuditReport:
    """The control group of a set verifier (audit/set_arms.py): the user's sets, sets no
    verifier may accept, and each set with different members judged again reversed."""
    from rlvr_cli.audit.arms import single_turn_arms
    from rlvr_cli.audit.set_arms import run_sets, set_arms
    from rlvr_cli.env.verifier_pool import VerifierPool

    tasks = all_tasks(contract, folder)
    report = AuditReport()
    singles, exploits = single_turn_arms(list(tasks.values()), sample)
    chosen = {str(a.task["id"]) for a in singles}  # type: ignore[index]
    arms = set_arms(
        list(tasks.values()),
        _producible(contract, folder, exploits)[0],
        chosen,
        contract.objective.reward.set_size or 2,
    )
    with VerifierPool.for_contract(contract, folder) as pool:
        judged, report.findings = run_sets(pool, lambda v: judge(contract, v), candidates + arms, tasks)
    for candidate, task, verdict, got, reward in judged:
        report.outcomes.append(
            Outcome(candidate, task, got, reward, verdict.as_json(), {"responses": candidate.responses})
        )
    return report


def _verify_all(pool: Any, items: list[tuple[dict[str, Any], str]], chunk: int = 25) -> list[Any]:
    """Every item through the pool, in chunks, saying how far it is on stderr: a sandboxed code
    verifier takes tens of seconds for a full audit, and a silent one looks hung."""
    import sys
    import time

    started, verdicts = time.monotonic(), []
    for first in range(0, len(items), chunk):
        verdicts += pool.verify_many(items[first : first + chunk])
        if len(items) > chunk:
            took = time.monotonic() - started
            print(f"  verified {len(verdicts)}/{len(items)} candidates ({took:.0f} s)", file=sys.stderr, flush=True)
    return verdicts


def _arms_for(
    contract: Contract, tasks: list[dict[str, Any]], sample: int | None, report: AuditReport, outside: Any
) -> tuple[list[Candidate], list[Candidate], Any]:
    """(arms, exploit arms the policy must be able to write, a check of the outcomes that returns
    findings) for the contract's kind of verifier."""
    env = contract.environment
    if env.answer_check is not None:  # arms written the way the answer check reads answers
        from rlvr_cli.audit.arms import answer_check_arms

        check = env.answer_check
        return answer_check_arms(tasks, sample, check.extract, check.answer_field), [], lambda _: []
    if env.unit_tests is not None:  # the sandbox's own exploits, against a world planted outside it
        from rlvr_cli.audit.code_arms import planted, unit_test_arms

        scratch, plant = planted()
        outside.callback(scratch.cleanup)
        outside.enter_context(plant)
        arms, report.notes = unit_test_arms(tasks, sample, env.unit_tests, plant)
        return arms, [], lambda _: plant.breaches()
    if env.judge is not None:
        from rlvr_cli.audit.judge_arms import judge_arms, padding_findings

        arms, report.notes = judge_arms(tasks, sample, env.judge)
        return arms, [], padding_findings
    from rlvr_cli.audit.arms import single_turn_arms

    formats = any("format" in c.name for c in contract.objective.reward.components)
    arms, exploits = single_turn_arms(tasks, sample, format_rewarded=formats)
    return arms, exploits, lambda _: []


def _producible(contract: Contract, folder: Path, arms: list[Candidate]) -> tuple[list[Candidate], str]:
    """The arms a policy could write within max_response_tokens, counted with the contract's
    tokenizer where it loads, else in characters (never fewer than tokens for ASCII text)."""
    limit = contract.length.max_response_tokens
    count, how = len, "counted in characters"
    try:
        from rlvr_cli.chat.render import load_tokenizer

        ref = contract.artifacts.tokenizer
        tokenizer = load_tokenizer(folder / ref.path if ref.path else None, ref.id, ref.revision)
        count, how = (lambda text: len(tokenizer(text, add_special_tokens=False)["input_ids"])), "in tokens"
    except Exception:  # no train extra, no model folder: characters bound the tokens from above
        pass
    return [a for a in arms if count(a.response or "") <= limit], how


def audit_tool_use(contract: Contract, folder: Path, candidates: list[Candidate]) -> AuditReport:
    from rlvr_cli.audit.arms import tool_use_arms
    from rlvr_cli.env.agent import EnvClient, environment

    tasks = all_tasks(contract, folder)
    report = AuditReport()
    env = contract.environment
    with environment(env.server, folder) as url:  # type: ignore[arg-type]
        client = EnvClient(url, timeout_s=env.timeout_s)
        try:
            if not _declaration(client, contract, report.findings):
                return report  # the contract's tool lists are not the server's: a finding, exit 1
            arms, report.notes = tool_use_arms(
                candidates, tasks, list(env.forbidden_tools or []), lambda task, steps: _probe(client, task, steps)
            )
            for candidate in candidates + arms:
                report.outcomes.append(_episode(contract, client, candidate, resolve_task(candidate.task, tasks)))
        finally:
            client.close()
    return report


def _declaration(client: Any, contract: Contract, findings: list[str]) -> bool:
    """Whether the server declares the contract's tool lists; a mismatch is added to `findings`
    (exit 1, in the report of every format), a server that cannot say is CannotRun (exit 3)."""
    from rlvr_cli.env.agent import DeclarationMismatch, EnvHTTPError
    from rlvr_cli.errors import CannotRun

    try:
        client.check_declaration(contract.environment.tools, contract.environment.forbidden_tools)
    except DeclarationMismatch as exc:
        findings.append(str(exc))
        return False
    except EnvHTTPError as exc:
        raise CannotRun(f"the resources server failed to list its tools: {exc}") from None
    return True


def _episode(contract: Contract, client: Any, candidate: Candidate, task: dict[str, Any]) -> Outcome:
    from rlvr_cli.env.agent import run_episode
    from rlvr_cli.env.model import ScriptedModel

    env = contract.environment
    steps = (env.max_steps or 1) * (env.max_sessions or 1)  # a compression goes on in the same server session
    transcript = run_episode(ScriptedModel(candidate.trajectory or []), client, task, steps)
    refused = [
        o["output"]
        for step in transcript.steps
        for o in step["tool_outputs"]
        if str(o["output"]).startswith("error: HTTP 403")
    ]
    if refused and candidate.kind not in (
        "correct",
        "alternate_correct",
    ):  # a generated or custom arm the server refuses
        return Outcome(candidate, task, "not_run", None, {"refused": refused[:3]}, transcript.as_json())
    got, reward = judge(contract, transcript.verdict)
    return Outcome(candidate, task, got, reward, transcript.verdict.as_json(), transcript.as_json())


def _probe(client: Any, task: dict[str, Any], steps: list[list[dict[str, Any]]]) -> Any:
    """The snapshot after replaying `steps` in a fresh session; None without snapshot()."""
    from rlvr_cli.env.agent import EnvHTTPError, call_tool

    session = client.seed(task)
    try:
        for step in steps:
            for item in step:
                if item.get("type") == "function_call":
                    call_tool(client, session, item)
        return client.snapshot(session)
    except EnvHTTPError:
        return None
    finally:
        with contextlib.suppress(EnvHTTPError):
            client.close_session(session)


def _single_turn(
    contract: Contract, folder: Path, candidates: list[Candidate], sample: int | None, source: Path
) -> AuditReport:
    if contract.objective.reward.unit == "set":
        from rlvr_cli.audit.set_arms import check_candidates

        check_candidates(candidates, contract.objective.reward.set_size or 2, source)
        return audit_sets(contract, folder, candidates, sample)
    return audit_single_turn(contract, folder, candidates, sample)


def _tool_use(
    contract: Contract, folder: Path, candidates: list[Candidate], _: int | None, source: Path
) -> AuditReport:
    if not any(c.kind == "correct" and c.trajectory for c in candidates):
        raise CannotRun(
            f"{source} has no 'correct' candidate with a trajectory; the control group "
            "needs at least one known-good solution"
        )
    return audit_tool_use(contract, folder, candidates)


#: environment.kind → its audit: the verifier function's, or the resources server's
AUDITS = {"single_turn": _single_turn, "tool_use": _tool_use}


def run_audit(contract: Contract, folder: Path, candidates_path: Path, sample: int | None = None) -> AuditReport:
    candidates = load_candidates(candidates_path)
    return AUDITS[contract.environment.kind](contract, folder, candidates, sample, candidates_path)


def report_text(report: AuditReport) -> str:
    lines = ["confusion by kind (expected→got):"]
    for kind, counts in sorted(report.matrix("kind").items()):
        lines.append(f"  {kind:<18} " + "  ".join(f"{k} {v}" for k, v in sorted(counts.items())))
    lines.append("by task:")
    for task, counts in sorted(report.matrix("task").items()):
        lines.append(f"  {task:<18} " + "  ".join(f"{k} {v}" for k, v in sorted(counts.items())))
    for o in report.not_run:
        lines.append(
            f"could not run: {o.candidate.name or o.candidate.kind} (the server refused {o.verdict['refused']})"
        )
    lines += [f"note: {note}" for note in report.notes]
    lines += [f"FINDING: {finding}" for finding in report.findings]
    bad = report.disagreements
    if bad:  # the one-line summary goes to stderr (commands/audit.py); here, the evidence
        lines.append("disagreements:")
    for o in bad:
        what = "false accept" if o.got == "accept" else "false reject" if o.got == "reject" else "invalid verdict"
        lines.append(
            f"  {what}: {o.candidate.name or o.candidate.kind} (task {o.task.get('id')}, kind "
            f"{o.candidate.kind}) expected {o.candidate.expected}, got {o.got}; verdict {o.verdict}"
        )
        lines.append(f"    transcript: {json.dumps(o.transcript)[:600]}")
    return "\n".join(lines)
