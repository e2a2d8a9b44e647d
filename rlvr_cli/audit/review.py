"""`rlvr tasks review`: what generated (or hand-written) tasks must survive before they are
trained on, each a finding at its row, all judged by the contract's own verifier:
- the reference fails its own check (a code task's solution its tests, an answer its verifier);
- the verifier cannot judge the task at all (malformed tests: a verifier_error);
- a trivial program passes the tests (returns None, 0, "", [], its first argument, or the first
  case's expected value; prints nothing, its input, or the first expected output);
- the tests do not discriminate: every mutant of the reference (a comparison flipped, a constant
  off by one, an arithmetic or boolean operator swapped) still passes;
- the statement leaks the answer (the reference answer, or an expected value, in the prompt);
- the task copies or nearly copies a task of the contract's splits.
Tool-use tasks are judged by replaying their golden path against the resources server
(`audit/review_tools.py`)."""

from __future__ import annotations

import ast
import json
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

#: finding codes: errors fail the review (exit 1), warnings are shown
CODES = {
    "reference_fails": "error",
    "unjudgeable": "error",
    "trivial_passes": "error",
    "no_discrimination": "error",
    "leaked_answer": "warning",
    "duplicate": "error",
    "near_duplicate": "warning",
    "no_reference": "warning",
    "not_reproducible": "warning",
}
SWAPS: dict[type, type] = {
    ast.Lt: ast.GtE,
    ast.GtE: ast.Lt,
    ast.Gt: ast.LtE,
    ast.LtE: ast.Gt,
    ast.Eq: ast.NotEq,
    ast.NotEq: ast.Eq,
    ast.Add: ast.Sub,
    ast.Sub: ast.Add,
    ast.Mult: ast.FloorDiv,
    ast.And: ast.Or,
    ast.Or: ast.And,
}
MAX_MUTANTS = 12


@dataclass(frozen=True)
class Finding:
    line: int
    task: str
    code: str
    message: str

    @property
    def severity(self) -> str:
        return CODES[self.code]

    def as_json(self) -> dict[str, Any]:
        return {
            "line": self.line,
            "task": self.task,
            "code": self.code,
            "severity": self.severity,
            "message": self.message,
        }


def mutants(source: str) -> list[str]:
    """Small wrong versions of `source`, one change each (at most MAX_MUTANTS)."""
    try:
        tree = ast.parse(source)
    except SyntaxError:
        return []
    sites = [n for n in ast.walk(tree) if _mutable(n)]
    out: list[str] = []
    for index in range(len(sites)):
        for variant in _variants(sites[index]):
            copy = ast.parse(source)
            target = [n for n in ast.walk(copy) if _mutable(n)][index]
            variant(target)
            text = ast.unparse(copy)
            if text != ast.unparse(tree) and text not in out:
                out.append(text)
        if len(out) >= MAX_MUTANTS:
            break
    return out[:MAX_MUTANTS]


def _mutable(node: ast.AST) -> bool:
    if isinstance(node, ast.Compare):
        return type(node.ops[0]) in SWAPS
    if isinstance(node, (ast.BinOp, ast.BoolOp)):
        return type(node.op) in SWAPS
    if isinstance(node, ast.Constant):
        return isinstance(node.value, int) and not isinstance(node.value, bool)
    return False


def _variants(node: ast.AST) -> Iterator[Any]:
    if isinstance(node, ast.Compare):
        yield lambda n: n.ops.__setitem__(0, SWAPS[type(n.ops[0])]())
    elif isinstance(node, (ast.BinOp, ast.BoolOp)):
        yield lambda n: setattr(n, "op", SWAPS[type(n.op)]())
    elif isinstance(node, ast.Constant):
        yield lambda n: setattr(n, "value", n.value + 1)
        yield lambda n: setattr(n, "value", n.value - 1)


def trivial_programs(tests: dict[str, Any]) -> list[str]:
    """Programs that do no work: return a constant, the first expected value (memorised), or
    their first argument; print nothing, or their input back."""
    cases = tests.get("cases") if isinstance(tests.get("cases"), list) else []
    first = cases[0] if cases and isinstance(cases[0], dict) else {}
    if tests.get("kind") == "stdio":
        said = json.dumps(str(first.get("stdout", "")))
        return ["pass\n", "import sys\nprint(sys.stdin.read(), end='')\n", f"print({said}, end='')\n"]
    name = str(tests.get("function", "f"))
    bodies = ["return None", "return 0", "return ''", "return []", "return args[0] if args else None"]
    if "expected" in first:
        bodies.append(f"return {first['expected']!r}")
    return [f"def {name}(*args, **kwargs):\n    {body}\n" for body in bodies]


def fenced(code: str, extract: str) -> str:
    return code if extract == "whole" else f"```python\n{code}\n```\n"


def leaks(task: dict[str, Any], answer_field: str | None, tests_field: str | None) -> list[str]:
    """Answers found verbatim in the prompt: the reference answer, or an expected value that is
    not also one of the case's own inputs (at least 3 characters: short numbers recur everywhere)."""
    prompt = (
        json.dumps(task.get("prompt"), ensure_ascii=False)
        if not isinstance(task.get("prompt"), str)
        else task["prompt"]
    )
    found = []
    answer = task.get(answer_field) if answer_field else None
    if isinstance(answer, str) and len(answer.strip()) >= 3 and answer.strip() in prompt:
        found.append(answer.strip())
    tests = task.get(tests_field) if tests_field else None
    for case in (tests or {}).get("cases", []) if isinstance(tests, dict) else []:
        expected = case.get("expected", case.get("stdout"))
        text = expected if isinstance(expected, str) else json.dumps(expected)
        inputs = json.dumps([case.get("args"), case.get("kwargs"), case.get("stdin")])
        if expected is not None and len(text.strip()) >= 3 and text.strip() in prompt and text.strip() not in inputs:
            found.append(text.strip())
    return found


def review(contract: Any, folder: Path, rows: list[tuple[int, dict[str, Any]]]) -> list[Finding]:
    """Every finding of the rows (line, task), judged by the contract's verifier."""
    from rlvr_cli.env.verifier_pool import VerifierPool

    env = contract.environment
    if env.kind == "tool_use":  # golden paths replayed against the resources server
        from rlvr_cli.audit.review_tools import review_tool_rows

        findings = [Finding(*found) for found in review_tool_rows(contract, folder, rows)]
    else:
        checks = _candidates(contract, rows)
        with VerifierPool.for_contract(contract, folder) as pool:
            verdicts = pool.verify_many([(task, response) for _, task, _, response in checks]) if checks else []
        findings = _judge(contract, checks, [v for v, _ in verdicts], rows)
    findings += _duplicates(contract, folder, rows)
    answer = env.answer_check.answer_field if env.answer_check else ("answer" if env.unit_tests is None else None)
    tests = env.unit_tests.tests_field if env.unit_tests else None
    for line, task in rows:
        for text in leaks(task, answer, tests):
            findings.append(
                Finding(line, str(task.get("id")), "leaked_answer", f"the prompt holds the answer {text!r}")
            )
    return sorted(findings, key=lambda f: (f.line, f.code))


def _candidates(contract: Any, rows: list[tuple[int, dict[str, Any]]]) -> list[tuple[int, dict, str, str]]:
    """(line, task, arm, response) for every response the review sends to the verifier."""
    env = contract.environment
    out = []
    for line, task in rows:
        if env.unit_tests is not None:
            ut = env.unit_tests
            reference, tests = task.get(ut.solution_field), task.get(ut.tests_field)
            if not isinstance(reference, str) or not isinstance(tests, dict):
                continue
            out.append((line, task, "reference", fenced(reference, ut.extract)))
            out += [(line, task, "trivial", fenced(code, ut.extract)) for code in trivial_programs(tests)]
            out += [(line, task, "mutant", fenced(code, ut.extract)) for code in mutants(reference)]
        else:
            field = env.answer_check.answer_field if env.answer_check else "answer"
            if isinstance(task.get(field), (str, int, float)):
                out.append((line, task, "reference", str(task[field])))
    return out


def _judge(contract: Any, checks: list, verdicts: list, rows: list) -> list[Finding]:
    from rlvr_cli.env.scoring import weighted_reward

    best = contract.objective.reward.best
    by_row: dict[int, dict[str, list]] = {}
    for (line, _task, arm, _), verdict in zip(checks, verdicts, strict=True):
        try:
            passed = verdict.valid and weighted_reward(contract, verdict) >= best - 1e-9
        except KeyError:
            passed = False
        by_row.setdefault(line, {}).setdefault(arm, []).append((verdict, passed))
    findings = []
    for line, task in rows:
        tid, arms = str(task.get("id")), by_row.get(line)
        if arms is None:
            findings.append(
                Finding(line, tid, "no_reference", "no reference solution or answer to check the task with")
            )
            continue
        (verdict, passed), *_ = arms["reference"]
        if not verdict.valid:
            findings.append(
                Finding(line, tid, "unjudgeable", f"the verifier cannot judge it: {verdict.status} ({verdict.detail})")
            )
            continue
        if not passed:
            findings.append(
                Finding(line, tid, "reference_fails", f"the reference is rejected: {verdict.detail or verdict.status}")
            )
        if any(p for _, p in arms.get("trivial", [])):
            findings.append(Finding(line, tid, "trivial_passes", "a trivial program passes its tests"))
        mutated = arms.get("mutant", [])
        if mutated and passed and all(p for _, p in mutated):
            findings.append(
                Finding(line, tid, "no_discrimination", f"all {len(mutated)} mutants of the reference pass its tests")
            )
    return findings


def _duplicates(contract: Any, folder: Path, rows: list[tuple[int, dict[str, Any]]]) -> list[Finding]:
    from rlvr_cli.contract.tasks import read_split
    from rlvr_cli.data.near import confirm

    known = []
    for split in ("train", "holdout", "sealed_eval"):
        path = folder / getattr(contract.data.splits, split).path
        if path.is_file():
            known += [(split, t) for t in read_split(path, split)]
    out = []
    for line, task in rows:
        text = str(task.get("prompt"))
        for split, other in known:
            other_text = str(other.get("prompt"))
            if text == other_text:
                out.append(
                    Finding(
                        line, str(task.get("id")), "duplicate", f"the same prompt as {split} task {other.get('id')}"
                    )
                )
                break
            similarity = confirm(text, other_text, 0.8, 5)
            if similarity is not None:
                message = f"nearly the prompt of {split} task {other.get('id')} (Jaccard {similarity:.2f})"
                out.append(Finding(line, str(task.get("id")), "near_duplicate", message))
                break
    return out
