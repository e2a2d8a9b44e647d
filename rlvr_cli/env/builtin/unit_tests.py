"""The built-in unit-test verifier (`environment.unit_tests`): the response's code runs against
the task's test cases in the bubblewrap sandbox (`env/sandbox.py`); what it printed or returned
is compared with the expected values here, outside, where the code cannot reach them.

Tests, in the task's `tests_field`:
- `{kind: stdio, cases: [{stdin: "1 2\\n", stdout: "3\\n"}]}`: the code is run as a program;
  its stdout must equal the expected one up to trailing whitespace on each line and trailing
  blank lines;
- `{kind: call, function: add, cases: [{args: [1, 2], kwargs: {}, expected: 3}]}`: the code is
  loaded as a module, the function called; its return value, as JSON, must equal `expected`:
  integers and strings exactly (`1e20` is not `10**20 + 1`), floats within `tolerance` relative
  and 1e-9 absolute — the tests' own key, which tests with a float expectation must give (0 for
  exact) — and `true` is not `1`. A case `{args: ["x"], raises: ValueError, match: "invalid"}`
  expects the call to raise that exception (or a subclass), its message matching the optional
  regular expression. With the
  tests' `strict_types: true` the types must match too (a tuple is not a list, `3.0` is not `3`);
  a case's `args_after` (and `kwargs_after`) are what the arguments must hold after the call (an
  in-place sort), and the tests' `unchanged_args: true` asks every call to leave them as given;
- a call case `{steps: [{call: Stack, as: s}, {call: s.push, args: [1]}, {call: s.pop, expected: 1}]}`
  runs a sequence of calls in one process: `call` names a function of the code, or a method of a
  value an earlier step kept `as` a name; each step expects a value, an exception, or (neither)
  only not to raise.

Verdicts: `ok` with `tests` (all-or-nothing or the fraction passed, as declared) and `format` 1;
`format_error` when there is no code where the contract says; `sandbox_error` when the sandbox
failed before any of the model's code ran; `timeout` when the sandbox did not answer in time;
`verifier_error` for a task whose tests are malformed. A case that runs past its time, exits
without a result, prints too much, leaves processes behind or kills the runner fails.
"""

from __future__ import annotations

import json
import math
import re
from dataclasses import dataclass
from typing import Any

from rlvr_cli.env.sandbox import Limits, problem, run
from rlvr_cli.env.verdict import Verdict
from rlvr_cli.errors import RlvrError

_FENCE = re.compile(r"^```[ \t]*([\w+.-]*)[ \t]*\n(.*?)^```[ \t]*$", re.DOTALL | re.MULTILINE)
CODE_CAP = 256 * 1024


class BadTests(ValueError):
    """The task's tests are malformed: the task's fault, never the response's."""


def extract_code(response: str, mode: str) -> str | None:
    """The code the response gives: its last fenced block, or the whole response."""
    if mode == "whole":
        code = response
    else:
        blocks = _FENCE.findall(response)
        code = blocks[-1][1] if blocks else ""
    return code if code.strip() else None


def parse_tests(tests: Any) -> tuple[dict[str, Any], list[Any]]:
    """(what the sandbox gets: mode, function and inputs; the expected values, kept outside)."""
    if not isinstance(tests, dict) or tests.get("kind") not in ("stdio", "call"):
        raise BadTests("tests must be an object with kind stdio or call")
    cases = tests.get("cases")
    if not isinstance(cases, list) or not cases or not all(isinstance(c, dict) for c in cases):
        raise BadTests("tests.cases must be a non-empty list of objects")
    if tests["kind"] == "stdio":
        for i, case in enumerate(cases):
            if not isinstance(case.get("stdin", ""), str) or not isinstance(case.get("stdout"), str):
                raise BadTests(f"tests.cases[{i}] needs stdout (and stdin) as strings")
        inputs = [{"stdin": c.get("stdin", "")} for c in cases]
        return {"mode": "stdio", "cases": inputs}, [c["stdout"] for c in cases]
    function = tests.get("function")
    if not all("steps" in c for c in cases) and not (isinstance(function, str) and function.isidentifier()):
        raise BadTests("tests.function must name a function")
    tolerance = tests.get("tolerance", 0.0)
    if not isinstance(tolerance, (int, float)) or isinstance(tolerance, bool) or not 0 <= tolerance < 1:
        raise BadTests("tests.tolerance must be a number in [0, 1) (relative, for floats)")
    if "tolerance" not in tests and _has_float(cases):  # the task says how close a float must be
        raise BadTests("an expected value is a float: give tests.tolerance (0 for exact, or a relative tolerance)")
    flags = {k: tests.get(k, False) for k in ("strict_types", "unchanged_args")}
    if not all(isinstance(v, bool) for v in flags.values()):
        raise BadTests("tests.strict_types and tests.unchanged_args must be true or false")
    rules = Rules(float(tolerance), **flags)
    inputs, expected = [], []
    for i, case in enumerate(cases):
        if "steps" in case:
            steps = case["steps"]
            if not isinstance(steps, list) or not steps or not all(isinstance(st, dict) for st in steps):
                raise BadTests(f"tests.cases[{i}].steps must be a non-empty list of objects")
            for j, step in enumerate(steps):
                _check_call(step, f"tests.cases[{i}].steps[{j}]", needs_expectation=False)
            keys = ("call", "args", "kwargs", "as")  # the sandbox gets the inputs only
            inputs.append({"steps": [{k: st[k] for k in keys if k in st} for st in steps]})
            expected.append([Expect.of(st, rules) for st in steps])
            continue
        _check_call(case, f"tests.cases[{i}]", needs_expectation=True)
        inputs.append({"args": case.get("args", []), "kwargs": case.get("kwargs", {})})
        expected.append(Expect.of(case, rules))
    return {"mode": "call", "function": function, "cases": inputs}, expected


_CALL = re.compile(r"^[A-Za-z_]\w*(\.[A-Za-z_]\w*)?$")


def _check_call(case: dict[str, Any], where: str, *, needs_expectation: bool) -> None:
    """One call's keys: arguments, what it expects (a value, an exception, or for a step
    nothing but not raising), and a step's `call` and `as`."""
    if not isinstance(case.get("args", []), list) or not isinstance(case.get("kwargs", {}), dict):
        raise BadTests(f"{where}: args must be a list, kwargs an object")
    both, neither = "expected" in case and "raises" in case, "expected" not in case and "raises" not in case
    if both or (needs_expectation and neither):
        raise BadTests(f"{where} needs an expected value or the exception it raises (one of them)")
    if "raises" in case and not (isinstance(case["raises"], str) and case["raises"].isidentifier()):
        raise BadTests(f"{where}.raises must name an exception class")
    if not needs_expectation and not (isinstance(case.get("call"), str) and _CALL.match(case["call"])):
        raise BadTests(f"{where}.call must name a function, or `name.method` of a value kept `as` name")
    if "as" in case and not (isinstance(case["as"], str) and case["as"].isidentifier()):
        raise BadTests(f"{where}.as must be a name")
    if not isinstance(case.get("args_after", []), list) or not isinstance(case.get("kwargs_after", {}), dict):
        raise BadTests(f"{where}: args_after must be a list, kwargs_after an object (the arguments after the call)")
    if "match" in case:
        try:
            re.compile(str(case["match"]))
        except re.error as exc:
            raise BadTests(f"{where}.match is not a regular expression: {exc}") from None


def _has_float(cases: list[dict[str, Any]]) -> bool:
    """A float among what the cases expect: values, arguments after the call, steps' values."""
    calls = [c for case in cases for c in [case, *(case.get("steps") or [])] if isinstance(c, dict)]
    wanted = [c.get(k) for c in calls for k in ("expected", "args_after", "kwargs_after")]
    return any(_float_in(v) for v in wanted)


def _float_in(value: Any) -> bool:
    if isinstance(value, float):
        return True
    if isinstance(value, (list, dict)):
        return any(_float_in(v) for v in (value.values() if isinstance(value, dict) else value))
    return False


@dataclass(frozen=True)
class Rules:
    """How the tests compare: the float tolerance, types as strictly as values (a tuple is not
    a list, 3.0 is not 3), and arguments the call must leave as they were."""

    tolerance: float = 0.0
    strict_types: bool = False
    unchanged_args: bool = False


class Expect:
    """What one call expects: a value (compared by the tests' rules), an exception, or — a step
    of a sequence — only not to raise; and, optionally, its arguments after the call."""

    def __init__(
        self,
        value: Any = None,
        raises: str | None = None,
        match: str | None = None,
        *,
        has_value: bool = True,
        rules: Rules = Rules(),
        args_after: list | None = None,
    ) -> None:
        self.value, self.raises, self.match = value, raises, match
        self.has_value, self.rules, self.args_after = has_value, rules, args_after

    @classmethod
    def of(cls, case: dict[str, Any], rules: Rules) -> Expect:
        args = [case.get("args", []), case.get("kwargs", {})]
        after = None
        if "args_after" in case or "kwargs_after" in case:
            after = [case.get("args_after", args[0]), case.get("kwargs_after", args[1])]
        if after is None and rules.unchanged_args and "call" not in case:
            after = args
        if "raises" in case:
            return cls(raises=case["raises"], match=None if case.get("match") is None else str(case["match"]))
        return cls(case.get("expected"), has_value="expected" in case, rules=rules, args_after=after)

    def judge(self, answer: dict[str, Any]) -> str | None:
        if "missing" in answer:
            return f"no {answer['missing']} to call"
        raised = answer.get("raised")
        if self.raises is None:
            if raised is not None:
                return f"raised {raised}"
            return self._value(answer) or self._after(answer)
        if raised is None:
            return f"returned instead of raising {self.raises}"
        if self.raises not in (answer.get("kinds") or [raised]):
            return f"raised {raised}, not {self.raises}"
        if self.match is not None and not re.search(self.match, str(answer.get("message", ""))):
            return f"raised {raised} with another message"
        return None

    def _value(self, answer: dict[str, Any]) -> str | None:
        if not self.has_value:
            return None
        if "unjsonable" in answer:
            return f"returned a {answer['unjsonable']}, not a JSON value"
        if not same(answer.get("value"), self.value, self.rules.tolerance):
            return "wrong return value"
        if self.rules.strict_types and answer.get("types") != json_types(self.value):
            return "a return value of other types"
        return None

    def _after(self, answer: dict[str, Any]) -> str | None:
        if self.args_after is None or same(answer.get("args_after"), self.args_after, self.rules.tolerance):
            return None
        return "changed its arguments" if self.rules.unchanged_args else "wrong arguments after the call"


def json_types(value: Any) -> Any:
    """The Python types a JSON value reads as (the harness reports a return value's the same way)."""
    if isinstance(value, list):
        return ["list", [json_types(v) for v in value]]
    if isinstance(value, dict):
        return ["dict", {k: json_types(v) for k, v in value.items()}]
    return type(value).__name__


def _lines(text: str) -> list[str]:
    lines = [line.rstrip() for line in text.replace("\r\n", "\n").split("\n")]
    while lines and not lines[-1]:
        lines.pop()
    return lines


def same(got: Any, expected: Any, tolerance: float = 0.0) -> bool:
    """JSON values equal: integers and strings exactly, floats within `tolerance` relative (and
    1e-9 absolute; 0: exactly); a bool is not a number."""
    if isinstance(expected, bool) or isinstance(got, bool):
        return type(got) is type(expected) and got == expected
    if isinstance(expected, (int, float)) and isinstance(got, (int, float)):
        if isinstance(expected, int) or not tolerance:  # an integer is exact: 1e20 is not 10**20 + 1
            return got == expected
        return math.isclose(got, expected, rel_tol=tolerance, abs_tol=1e-9)
    if isinstance(expected, list) and isinstance(got, list):
        return len(got) == len(expected) and all(same(g, e, tolerance) for g, e in zip(got, expected, strict=True))
    if isinstance(expected, dict) and isinstance(got, dict):
        return got.keys() == expected.keys() and all(same(got[k], expected[k], tolerance) for k in expected)
    return type(got) is type(expected) and got == expected


def judge_case(mode: str, result: dict[str, Any] | None, expected: Any) -> str | None:
    """None when the case passed, else why it failed (in a few words)."""
    if result is None:
        return "no result (the runner was killed)"
    status = result.get("status")
    if status != "done":
        return {
            "timeout": "timed out",
            "budget": "not run: the verification's time ran out",
            "output_limit": "printed too much",
            "strays": "left processes running",
        }.get(str(status), f"status {status}")
    if mode == "stdio":
        return None if _lines(str(result.get("stdout", ""))) == _lines(expected) else "wrong output"
    if result.get("exit") != 0 or not result.get("value"):
        return f"no return value (exit {result.get('exit')})"
    try:
        answer = json.loads(result["value"])
    except ValueError:
        return "unreadable return value"
    if not isinstance(answer, dict):
        return "unreadable return value"
    if isinstance(expected, list):  # a sequence of calls: every step as it expects
        steps = answer.get("steps")
        if not isinstance(steps, list) or len(steps) != len(expected) or not all(isinstance(a, dict) for a in steps):
            return "unreadable return value"
        failed = ((j, e.judge(a)) for j, (a, e) in enumerate(zip(steps, expected, strict=True)))
        return next((f"step {j}: {why}" for j, why in failed if why is not None), None)
    return expected.judge(answer)


class UnitTests:
    """`verify(task, response)` as the contract's `unit_tests` configures it; `deadline_s` is
    what the verifier pool allows one verdict (environment.timeout_s), less a margin."""

    def __init__(self, extract: str, reward: str, tests_field: str = "tests", deadline_s: float = 30.0, **limits: Any):
        why = problem()
        if why is not None:
            raise RlvrError(why)
        limits.pop("solution_field", None)
        self.mode, self.reward, self.field = extract, reward, tests_field
        self.limits = Limits(**limits)
        self.deadline_s = deadline_s

    def __call__(self, task: dict[str, Any], response: str) -> Verdict:
        try:
            sent, expected = parse_tests(task.get(self.field))
        except BadTests as exc:
            return Verdict("verifier_error", detail=f"task {task.get('id')!r}: {exc}")
        code = extract_code(response, self.mode)
        if code is None:
            return Verdict("format_error", 0.0, {"tests": 0.0, "format": 0.0}, "no code in the response")
        if len(code.encode()) > CODE_CAP:
            return Verdict("format_error", 0.0, {"tests": 0.0, "format": 0.0}, "code over 256 KiB")
        outcome = run({**sent, "code": code}, self.limits, self.deadline_s)
        if outcome.timed_out and not outcome.ready:
            return Verdict("timeout", detail=f"the sandbox did not start within {self.deadline_s} s")
        if not outcome.ready:
            why = outcome.stderr.strip().splitlines()[-1:] or [f"exit {outcome.returncode}"]
            return Verdict("sandbox_error", detail=f"the sandbox failed before the code ran: {why[0]}")
        if outcome.timed_out:
            return Verdict("timeout", detail=f"the sandbox did not finish within {self.deadline_s} s")
        failures = {
            i: why
            for i, want in enumerate(expected)
            if (why := judge_case(sent["mode"], outcome.cases.get(i), want)) is not None
        }
        passed = len(expected) - len(failures)
        score = passed / len(expected) if self.reward == "fraction" else float(not failures)
        detail = f"{passed}/{len(expected)} passed" + "".join(f"; {i}: {why}" for i, why in list(failures.items())[:5])
        return Verdict("ok", score, {"tests": score, "format": 1.0}, detail)
