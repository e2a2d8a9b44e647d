"""`rlvr audit verifier` for a set verifier (`objective.reward.unit: set`): the control group is
made of sets — `set_size` responses judged together by `verify(task, responses)`.

The user's candidates give their sets as `responses:`; at least one must be expected to pass (a
verifier that rejects every set would otherwise pass its audit). Generated arms hold only what
no set verifier may accept, whatever it rewards (best-of-k, right-and-different): for every
task with an `answer`, a set of empty responses, a set of distinct wrong answers, a set of
refusals, and a set of the single-response exploits the policy could write (the answer hidden
in an enumeration, the answer then its contradiction). Sets whose members are judged as they
come are not the policy's: members are sampled independently, so a set's reward must not
depend on their order — every set with different members is judged again reversed, and a
reward that changes is a finding (the verifier reads positions, e.g. only the first member)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from rlvr_cli.audit.candidates import Candidate, resolve_task
from rlvr_cli.errors import CannotRun


def check_candidates(candidates: list[Candidate], size: int, source: Path) -> None:
    """Every candidate a set of `size` responses, one of them expected to pass."""
    for c in candidates:
        name = c.name or f"{c.kind} on task {c.task!r}"
        if c.responses is None or c.response is not None or c.trajectory is not None:
            raise CannotRun(
                f"{source}: candidate {name!r}: objective.reward.unit is set, so a candidate is a set of "
                f"responses judged together: give `responses:` (a list of {size}), not `response`/`trajectory`"
            )
        if len(c.responses) != size:
            raise CannotRun(
                f"{source}: candidate {name!r} holds {len(c.responses)} responses; a set holds "
                f"objective.reward.set_size = {size}"
            )
    if not any(c.expected == "accept" for c in candidates):
        raise CannotRun(
            f"{source} has no candidate set expected to be accepted; the control group of a set verifier "
            "needs at least one known-good set (`responses:` with `expected: accept`)"
        )


def _wrong_answers(answer: str, size: int) -> list[str]:
    if answer.lstrip("-").isdigit():
        return [str(int(answer) + d) for d in range(1, size + 1)]
    return [answer + "x" * d for d in range(1, size + 1)]


def set_arms(
    tasks: list[dict[str, Any]], exploits: list[Candidate], chosen_ids: set[str], size: int
) -> list[Candidate]:
    """The generated sets (every one expected to be rejected) for the tasks the single-response
    arms chose; `exploits` are the single-response exploits the policy could write."""
    arms: list[Candidate] = []
    by_task: dict[str, list[str]] = {}
    for e in exploits:
        by_task.setdefault(str(e.task["id"]), []).append(e.response or "")  # type: ignore[index]
    for task in tasks:
        tid = str(task["id"])
        if tid not in chosen_ids:
            continue

        def arm(name: str, kind: str, members: list[str], task: dict[str, Any] = task, tid: str = tid) -> Candidate:
            return Candidate(name=f"{tid}/{name}", task=task, kind=kind, expected="reject", responses=members)

        arms.append(arm("set of empty responses", "empty", [""] * size))
        if "answer" not in task:
            continue
        arms.append(arm("set of wrong answers", "wrong", _wrong_answers(str(task["answer"]), size)))
        arms.append(arm("set of refusals", "format_error", ["I cannot say."] * size))
        found = by_task.get(tid, [])
        if found:
            arms.append(arm("set of exploits", "wrong", [found[i % len(found)] for i in range(size)]))
    return arms


def run_sets(pool: Any, judge: Any, todo: list[Candidate], tasks: dict[str, dict[str, Any]]) -> tuple[list, list[str]]:
    """[(candidate, task, verdict, got, reward)], findings: each set judged as written and, where
    its members differ, reversed."""
    items = [(resolve_task(c.task, tasks), list(c.responses or [])) for c in todo]
    flipped = [i for i, (_, members) in enumerate(items) if len(set(members)) > 1]
    verdicts = [v for v, _ in pool.verify_many(items + [(items[i][0], items[i][1][::-1]) for i in flipped])]
    judged = []
    for c, (task, _), verdict in zip(todo, items, verdicts, strict=False):
        got, reward = judge(verdict)
        judged.append((c, task, verdict, got, reward))
    findings = []
    for i, verdict in zip(flipped, verdicts[len(items) :], strict=True):
        c, task, _, got, reward = judged[i]
        again, reward_again = judge(verdict)
        if (again, reward_again) != (got, reward) and not _close(reward, reward_again):
            findings.append(
                f"the reward of a set depends on the order of its members: {c.name or c.kind} (task "
                f"{task.get('id')}) got {got} ({reward}) as written and {again} ({reward_again}) reversed — the "
                "verifier reads positions, but a set's members are sampled independently"
            )
    return judged, findings


def _close(a: float | None, b: float | None) -> bool:
    return a is not None and b is not None and abs(a - b) <= 1e-9
