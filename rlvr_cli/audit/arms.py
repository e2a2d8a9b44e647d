"""Generated control arms that fit the environment under audit (`rlvr audit verifier`).

Tool use — built from the user's own candidates and the environment's own tools, never
from a tool name rlvr knows:
- **no-op claim**: the final message of a correct solution, with no tool call before it;
- **empty**: an empty final message;
- **collateral damage**: a correct solution, then mutating calls taken from other candidates
  (another task's first), kept only where the environment's `snapshot` shows that they
  really changed the state the correct solution left (`audit/states.py`: beyond what differs
  between two identical replays — a per-session folder, id or clock);
- **forbidden tool**: a correct solution plus a call of each declared forbidden tool, with
  arguments from a candidate that used it;
- **off path** (tasks with a golden `trajectory`): a correct solution without one of its calls,
  where the snapshot shows the same final state.

Single turn — for every task with an `answer` (or a stated random sample of them): the
answer (accept); a wrong answer, an empty response and a refusal (reject); and two exploits,
kept where the policy could write them within `length.max_response_tokens`: the answer inside
an enumeration of candidate answers, the answer followed by a contradiction, and — when the
contract rewards a `format` component — the answer written in another format (reject).
"""

from __future__ import annotations

import functools
import random
from typing import Any

from rlvr_cli.audit import states
from rlvr_cli.audit.candidates import Candidate, resolve_task

Trajectory = list[list[dict[str, Any]]]


def calls_of(trajectory: Trajectory) -> list[list[dict[str, Any]]]:
    return [step for step in trajectory if any(i.get("type") == "function_call" for i in step)]


def final_of(trajectory: Trajectory) -> list[dict[str, Any]]:
    messages = [step for step in trajectory if all(i.get("type") == "message" for i in step)]
    return messages[-1] if messages else [{"type": "message", "role": "assistant", "content": "Done."}]


def tool_use_arms(
    candidates: list[Candidate], tasks: dict[str, dict[str, Any]], forbidden: list[str], probe: Any
) -> tuple[list[Candidate], list[str]]:
    """Arms for every task with a correct trajectory, and notes on arms that could not be built.
    `probe(task, steps)` replays tool steps in a fresh session and returns its snapshot (None
    when the environment has none)."""
    arms: list[Candidate] = []
    notes: list[str] = []
    seen: set[str] = set()
    for c in candidates:
        if c.kind != "correct" or not c.trajectory:
            continue
        task = resolve_task(c.task, tasks)
        tid = str(task.get("id"))
        if tid in seen:
            continue
        seen.add(tid)
        arms += [
            Candidate(
                name=f"{tid}/no-op claim",
                task=task,
                kind="no_op_claim",
                expected="reject",
                trajectory=[final_of(c.trajectory)],
            ),
            Candidate(
                name=f"{tid}/empty",
                task=task,
                kind="custom",
                expected="reject",
                trajectory=[[{"type": "message", "role": "assistant", "content": ""}]],
            ),
        ]
        collateral, why = _collateral(c, task, candidates, tasks, forbidden, probe)
        arms += collateral
        notes += why
        arms += _forbidden(c, task, candidates, forbidden, notes)
        arms += _off_path(c, task, probe)
    return arms, notes


def _off_path(correct: Candidate, task: dict[str, Any], probe: Any) -> list[Candidate]:
    """With a golden path in the task (`trajectory`): the correct solution without one of its
    calls, kept where the environment's snapshot shows the same final state — the right state
    by a path off the golden one (reject)."""
    if not isinstance(task.get("trajectory"), dict):
        return []
    steps = calls_of(correct.trajectory or [])
    after = probe(task, steps)
    if after is None:
        return []
    noise = states.differing(after, probe(task, steps))  # the session's own: a folder, an id, a clock
    for k, step in enumerate(steps):
        shorter = steps[:k] + steps[k + 1 :]
        if _same(after, probe(task, shorter), noise):
            name = f"{task.get('id')}/right state without {step[0].get('name')}"
            trajectory = [*shorter, final_of(correct.trajectory or [])]
            return [Candidate(name=name, task=task, kind="off_path", expected="reject", trajectory=trajectory)]
    return []


def _collateral(
    correct: Candidate,
    task: dict[str, Any],
    candidates: list[Candidate],
    tasks: dict[str, dict[str, Any]],
    forbidden: list[str],
    probe: Any,
) -> tuple[list[Candidate], list[str]]:
    tid = str(task.get("id"))
    steps = calls_of(correct.trajectory or [])
    after = probe(task, steps)
    if after is None:
        return [], [f"{tid}: no collateral arm (the environment has no snapshot to prove a change)"]
    noise = states.differing(after, probe(task, steps))  # what differs between two identical replays
    others = sorted(candidates, key=lambda o: str(resolve_task(o.task, tasks).get("id")) == tid)  # other tasks first
    arms, tried = [], set()
    for other in others:
        for extra in calls_of(other.trajectory or []):
            key = repr(extra)
            if key in tried or any(i.get("name") in forbidden for i in extra):
                continue
            tried.add(key)
            damaged = probe(task, [*steps, extra])
            if damaged is not None and not _same(after, damaged, noise):
                name = f"{tid}/correct + collateral {extra[0].get('name')} (from {other.name or other.kind})"
                trajectory = [*steps, extra, final_of(correct.trajectory or [])]
                arms.append(
                    Candidate(name=name, task=task, kind="collateral_damage", expected="reject", trajectory=trajectory)
                )
            if len(arms) >= 2:
                return arms, []
    return arms, [] if arms else [f"{tid}: no collateral arm (no other candidate's call changes this task's state)"]


def _same(a: Any, b: Any, noise: set[str]) -> bool:
    """Two snapshots show one state: they differ only where two identical replays differ too."""
    return b is not None and not states.differing(a, b) - noise


def _forbidden(
    correct: Candidate, task: dict[str, Any], candidates: list[Candidate], forbidden: list[str], notes: list[str]
) -> list[Candidate]:
    tid = str(task.get("id"))
    arms = []
    for name in forbidden:
        use = next((i for c in candidates for step in c.trajectory or [] for i in step if i.get("name") == name), None)
        if use is None:
            notes.append(f"{tid}: no arm for forbidden tool {name!r} (no candidate calls it; give one its arguments)")
            continue
        steps = calls_of(correct.trajectory or [])
        trajectory = [*steps, [use], final_of(correct.trajectory or [])]
        arms.append(
            Candidate(
                name=f"{tid}/correct + {name}",
                task=task,
                kind="forbidden_tool",
                expected="reject",
                trajectory=trajectory,
            )
        )
    return arms


def single_turn_arms(
    tasks: list[dict[str, Any]], sample: int | None, seed: int = 0, format_rewarded: bool = False
) -> tuple[list[Candidate], list[Candidate]]:
    """(basic arms, exploit arms); the caller keeps an exploit only where the policy could
    write it within `length.max_response_tokens`."""
    chosen = [t for t in tasks if "answer" in t]
    if sample is not None and sample < len(chosen):
        chosen = random.Random(seed).sample(chosen, sample)
    arms: list[Candidate] = []
    exploits: list[Candidate] = []
    for task in tasks if sample is None else chosen:
        tid = str(task["id"])
        arms.append(Candidate(name=f"{tid}/empty", task=task, kind="empty", expected="reject", response=""))
    for task in chosen:
        tid = str(task["id"])
        answer = str(task["answer"])
        wrong = str(int(answer) + 1) if answer.lstrip("-").isdigit() else answer + "x"
        others = [str(int(answer) + d) for d in (-3, -2, -1, 1, 2, 3)] if answer.lstrip("-").isdigit() else [wrong]
        arms += [
            Candidate(name=f"{tid}/answer", task=task, kind="correct", expected="accept", response=answer),
            Candidate(name=f"{tid}/wrong", task=task, kind="wrong", expected="reject", response=wrong),
            Candidate(
                name=f"{tid}/refusal", task=task, kind="format_error", expected="reject", response="I cannot say."
            ),
        ]
        exploits += [
            Candidate(
                name=f"{tid}/enumeration",
                task=task,
                kind="wrong",
                expected="reject",
                response=" ".join([*others[:3], answer, *others[3:]]),
            ),
            Candidate(
                name=f"{tid}/answer then contradiction",
                task=task,
                kind="wrong",
                expected="reject",
                response=f"{answer}\nNo, that is wrong: the answer is {wrong}.",
            ),
        ]
        if format_rewarded:  # the contract rewards a format: the right value written another way earns it not
            exploits.append(
                Candidate(
                    name=f"{tid}/answer in a wrong format",
                    task=task,
                    kind="format_error",
                    expected="reject",
                    response=f"Answer: ({answer})",
                )
            )
    return arms, exploits


ANSWER_FORMS = {
    "last_boxed": lambda x: f"So the answer is \\boxed{{{x}}}.",
    "answer_line": lambda x: f"Working it out step by step.\nAnswer: {x}",
    "whole": lambda x: x,
}


def _rational(text: str) -> tuple[int, int] | None:
    """`3`, `-3`, `3/4`, `\\frac{3}{4}`, `0.75` as (numerator, denominator), or None."""
    import re
    from fractions import Fraction

    match = re.fullmatch(r"\s*\\d?frac\{(-?\d+)\}\{(\d+)\}\s*", text)
    try:
        value = Fraction(int(match[1]), int(match[2])) if match else Fraction(text.strip())
    except (ValueError, ZeroDivisionError):
        return None
    return value.numerator, value.denominator


def _arm(task: dict[str, Any], tid: str, name: str, kind: str, expected: str, response: str) -> Candidate:
    return Candidate(name=f"{tid}/{name}", task=task, kind=kind, expected=expected, response=response)


def answer_check_arms(
    tasks: list[dict[str, Any]], sample: int | None, extract: str, field: str = "answer", seed: int = 0
) -> list[Candidate]:
    """Arms for the built-in answer-equivalence verifier, written in the form `extract`
    reads: the answer and equivalent forms of it (accepted); a near miss, two hedged answers,
    the answer only in the reasoning, and an empty response (rejected)."""
    form = ANSWER_FORMS[extract]
    chosen = [t for t in tasks if field in t]
    if sample is not None and sample < len(chosen):
        chosen = random.Random(seed).sample(chosen, sample)
    arms: list[Candidate] = []
    for task in chosen:
        tid, answer = str(task["id"]), str(task[field])
        arm = functools.partial(_arm, task, tid)
        arms += [arm("answer", "correct", "accept", form(answer)), arm("empty", "empty", "reject", "")]
        value = _rational(answer)
        if value is not None:
            p, q = value
            arms.append(arm("equivalent form", "correct", "accept", form(f"\\frac{{{2 * p}}}{{{2 * q}}}")))
            if q == 1:
                arms.append(arm("equivalent decimal", "correct", "accept", form(f"{p}.0")))
                if abs(p) >= 1000:  # thousands set off by a thin space, as LaTeX writes them
                    grouped = f"{p:,}".replace(",", "\\,")
                    arms.append(arm("thousands with thin spaces", "correct", "accept", form(grouped)))
            elif 10**6 % q:  # a fraction no short decimal equals: rounded to 6 places is a different number
                arms.append(arm("rounded decimal", "wrong", "reject", form(f"{p / q:.6f}")))
            miss = f"{p + q}/{q}" if q != 1 else str(p + 1)  # off by one
            arms.append(arm("near miss", "wrong", "reject", form(miss)))
            if extract == "last_boxed":
                hedge = f"It is \\boxed{{{answer}}} or perhaps \\boxed{{{miss}}}."
            else:
                hedge = form(f"{answer} or {miss}")
            arms.append(arm("two answers", "wrong", "reject", hedge))
        if extract != "whole":
            reasoning = f"I computed {answer} along the way, but I will not commit to a final answer."
            arms.append(arm("answer only in the reasoning", "format_error", "reject", reasoning))
    return arms
