"""`rlvr audit verifier`: prove the verifier on a control group before training.

Candidates come from `audit/candidates.yaml` beside the contract (schema:
`schemas/audit-candidates.schema.json`) plus arms generated here. A candidate *passes*
when the contract's reward equals the best reward the components allow; `expected:
accept` means it must pass, `expected: reject` that it must not. Invalid verdicts
(verifier_error, timeout, sandbox_error) are reported as such — never as a reward of 0 —
and always disagree with the expectation.

Generated arms — tool use: for every task with a correct trajectory, a no-op claim (a final
message, nothing changed), an empty response, and the correct trajectory replayed with one
extra collateral edit. Single turn: an empty response, and for tasks with an `answer`,
the answer (accept), a wrong answer and a format error (reject).
"""

from __future__ import annotations

import json
from collections import Counter, defaultdict
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field

from rlvr_cli.contract.models import Contract
from rlvr_cli.errors import RlvrError

Kind = Literal[
    "correct",
    "alternate_correct",
    "collateral_damage",
    "forbidden_tool",
    "no_op_claim",
    "custom",
    "wrong",
    "format_error",
    "empty",
]


class Candidate(BaseModel):
    """One control-group candidate: a task, what kind of solution it is, what must happen."""

    model_config = ConfigDict(extra="forbid")
    name: str | None = None
    task: str | dict[str, Any] = Field(description="A task id from the contract's splits, or an inline task.")
    kind: Kind
    expected: Literal["accept", "reject"]
    trajectory: list[list[dict[str, Any]]] | None = Field(
        None, description="tool_use: model outputs per step, in Responses API item shapes."
    )
    response: str | None = Field(None, description="single_turn: the response text.")


class CandidateFile(BaseModel):
    model_config = ConfigDict(extra="forbid")
    candidates: list[Candidate]


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

    @property
    def disagreements(self) -> list[Outcome]:
        return [o for o in self.outcomes if not o.agrees]

    def matrix(self, key: str) -> dict[str, Counter]:
        table: dict[str, Counter] = defaultdict(Counter)
        for o in self.outcomes:
            name = o.candidate.kind if key == "kind" else str(o.task.get("id"))
            table[name][f"{o.candidate.expected}→{o.got}"] += 1
        return dict(table)


def load_candidates(path: Path) -> list[Candidate]:
    import yaml
    from pydantic import ValidationError

    if not path.is_file():
        return []
    try:
        data = yaml.safe_load(path.read_text(encoding="utf-8")) or {"candidates": []}
        return CandidateFile.model_validate(data).candidates
    except (yaml.YAMLError, ValidationError) as exc:
        raise RlvrError(f"{path}: {exc}") from None


def resolve_task(task: str | dict[str, Any], tasks: dict[str, dict[str, Any]]) -> dict[str, Any]:
    if isinstance(task, dict):
        return task
    if task not in tasks:
        raise RlvrError(f"candidate task {task!r} is in no split of the contract")
    return tasks[task]


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


# ── generated arms ────────────────────────────────────────────────────────────────────


def single_turn_arms(tasks: list[dict[str, Any]]) -> list[Candidate]:
    arms = []
    for task in tasks:
        tid = str(task["id"])
        arms.append(Candidate(name=f"{tid}/empty", task=task, kind="empty", expected="reject", response=""))
        if "answer" in task:
            answer = str(task["answer"])
            wrong = str(int(answer) + 1) if answer.lstrip("-").isdigit() else answer + "x"
            arms += [
                Candidate(name=f"{tid}/answer", task=task, kind="correct", expected="accept", response=answer),
                Candidate(name=f"{tid}/wrong", task=task, kind="wrong", expected="reject", response=wrong),
                Candidate(
                    name=f"{tid}/format", task=task, kind="format_error", expected="reject", response="I cannot say."
                ),
            ]
    return arms


def tool_use_arms(candidates: list[Candidate], tasks: dict[str, dict[str, Any]]) -> list[Candidate]:
    arms = []
    seen: set[str] = set()
    for c in candidates:
        if c.kind != "correct" or not c.trajectory:
            continue
        task = resolve_task(c.task, tasks)
        tid = str(task.get("id"))
        if tid in seen:
            continue
        seen.add(tid)
        claim = [{"type": "message", "role": "assistant", "content": "Done: the version is now 2."}]
        collateral = [
            {"type": "function_call", "name": "write_file", "arguments": {"path": "README.md", "content": "# edited\n"}}
        ]
        arms += [
            Candidate(name=f"{tid}/no-op claim", task=task, kind="no_op_claim", expected="reject", trajectory=[claim]),
            Candidate(
                name=f"{tid}/empty",
                task=task,
                kind="custom",
                expected="reject",
                trajectory=[[{"type": "message", "role": "assistant", "content": ""}]],
            ),
            Candidate(
                name=f"{tid}/correct + collateral edit",
                task=task,
                kind="collateral_damage",
                expected="reject",
                trajectory=[*c.trajectory[:-1], collateral, *c.trajectory[-1:]],
            ),
        ]
    return arms


# ── running ───────────────────────────────────────────────────────────────────────────


def all_tasks(contract: Contract, folder: Path) -> dict[str, dict[str, Any]]:
    from rlvr_cli.contract.tasks import read_split

    tasks: dict[str, dict[str, Any]] = {}
    for name in ("train", "holdout"):  # sealed_eval is never read outside the final evaluation
        for task in read_split(folder / getattr(contract.data.splits, name).path, name):
            tasks[str(task["id"])] = task
    return tasks


def audit_single_turn(contract: Contract, folder: Path, candidates: list[Candidate], limit: int) -> AuditReport:
    from rlvr_cli.env.single_turn import VerifierPool

    tasks = all_tasks(contract, folder)
    todo = candidates + single_turn_arms(list(tasks.values())[:limit])
    report = AuditReport()
    with VerifierPool.for_contract(contract, folder) as pool:
        items = [(resolve_task(c.task, tasks), c.response or "") for c in todo]
        for candidate, (task, response), (verdict, _) in zip(todo, items, pool.verify_many(items), strict=True):
            got, reward = judge(contract, verdict)
            report.outcomes.append(Outcome(candidate, task, got, reward, verdict.as_json(), {"response": response}))
    return report


def audit_tool_use(contract: Contract, folder: Path, candidates: list[Candidate]) -> AuditReport:
    from rlvr_cli.env.agent import EnvClient, environment, run_episode
    from rlvr_cli.env.model import ScriptedModel

    tasks = all_tasks(contract, folder)
    todo = candidates + tool_use_arms(candidates, tasks)
    report = AuditReport()
    env = contract.environment
    with environment(env.server, folder) as url:  # type: ignore[arg-type]
        client = EnvClient(url, timeout_s=env.timeout_s)
        try:
            client.check_declaration(env.tools, env.forbidden_tools)
            for candidate in todo:
                task = resolve_task(candidate.task, tasks)
                transcript = run_episode(ScriptedModel(candidate.trajectory or []), client, task, env.max_steps or 1)
                got, reward = judge(contract, transcript.verdict)
                report.outcomes.append(
                    Outcome(candidate, task, got, reward, transcript.verdict.as_json(), transcript.as_json())
                )
        finally:
            client.close()
    return report


def run_audit(contract: Contract, folder: Path, candidates_path: Path, limit: int = 5) -> AuditReport:
    candidates = load_candidates(candidates_path)
    if contract.environment.kind == "tool_use":
        if not any(c.kind == "correct" and c.trajectory for c in candidates):
            raise RlvrError(
                f"{candidates_path} has no 'correct' candidate with a trajectory; the control group "
                "needs at least one known-good solution"
            )
        return audit_tool_use(contract, folder, candidates)
    return audit_single_turn(contract, folder, candidates, limit)


def report_text(report: AuditReport) -> str:
    lines = ["confusion by kind (expected→got):"]
    for kind, counts in sorted(report.matrix("kind").items()):
        lines.append(f"  {kind:<18} " + "  ".join(f"{k} {v}" for k, v in sorted(counts.items())))
    lines.append("by task:")
    for task, counts in sorted(report.matrix("task").items()):
        lines.append(f"  {task:<18} " + "  ".join(f"{k} {v}" for k, v in sorted(counts.items())))
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
