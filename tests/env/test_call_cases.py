"""What a `call` test can ask beyond the value, each in the real sandbox and each with a solution
that passes and one that a value-only comparison would have accepted: types as strict as values,
the arguments after the call (in place, or untouched), and a sequence of calls in one process."""

from __future__ import annotations

import pytest

from rlvr_cli.env.builtin.unit_tests import UnitTests
from rlvr_cli.env.sandbox import problem

pytestmark = pytest.mark.skipif(problem() is not None, reason=f"needs a working bubblewrap: {problem()}")


@pytest.fixture(scope="module")
def check() -> UnitTests:
    return UnitTests("whole", "all_or_nothing", case_timeout_s=1.0, memory_mb=256, processes=8, deadline_s=12)


def task(**tests: object) -> dict:
    return {"id": "t", "tests": {"kind": "call", **tests}}


PAIRS = {"function": "pairs", "cases": [{"args": [[2, 1]], "expected": [[1, 2], [2, 1]]}]}
AS_LISTS = "def pairs(xs):\n    return [[x, y] for x in sorted(xs) for y in sorted(xs, reverse=True) if x != y]\n"
AS_TUPLES = "def pairs(xs):\n    return [(x, y) for x in sorted(xs) for y in sorted(xs, reverse=True) if x != y]\n"


def test_strict_types_tell_a_tuple_from_a_list_and_a_float_from_an_int(check: UnitTests) -> None:
    assert check(task(**PAIRS), AS_TUPLES).reward == 1.0  # JSON alone cannot tell them apart
    strict = task(**PAIRS, strict_types=True)
    assert check(strict, AS_LISTS).reward == 1.0
    wrong = check(strict, AS_TUPLES)
    assert wrong.reward == 0.0 and "a return value of other types" in (wrong.detail or ""), wrong
    three = task(function="f", strict_types=True, cases=[{"args": [], "expected": 3}])
    assert check(three, "def f():\n    return 3.0\n").reward == 0.0
    assert check(task(function="f", cases=[{"args": [], "expected": 3}]), "def f():\n    return 3.0\n").reward == 1.0
    obj = check(three, "def f():\n    return object()\n")
    assert obj.reward == 0.0 and "returned a object, not a JSON value" in (obj.detail or "")


SORTED_COPY = "def top(xs):\n    return sorted(xs)[-1]\n"
SORTS_INPUT = "def top(xs):\n    xs.sort()\n    return xs[-1]\n"


def test_the_arguments_after_the_call_are_compared(check: UnitTests) -> None:
    top = {"function": "top", "cases": [{"args": [[3, 9, 4]], "expected": 9}]}
    assert check(task(**top), SORTS_INPUT).reward == 1.0  # the value is right
    untouched = task(**top, unchanged_args=True)
    assert check(untouched, SORTED_COPY).reward == 1.0
    mutated = check(untouched, SORTS_INPUT)
    assert mutated.reward == 0.0 and "changed its arguments" in (mutated.detail or ""), mutated
    in_place = task(
        function="sort_in_place", cases=[{"args": [[3, 1, 2]], "expected": None, "args_after": [[1, 2, 3]]}]
    )
    assert check(in_place, "def sort_in_place(xs):\n    xs.sort()\n").reward == 1.0
    copy = check(in_place, "def sort_in_place(xs):\n    xs = sorted(xs)\n")
    assert copy.reward == 0.0 and "wrong arguments after the call" in (copy.detail or ""), copy


STACK = {
    "cases": [
        {
            "steps": [
                {"call": "Stack", "as": "s"},
                {"call": "s.push", "args": [4]},
                {"call": "s.push", "args": [7]},
                {"call": "s.pop", "expected": 7},
                {"call": "s.pop", "expected": 4},
                {"call": "s.pop", "raises": "IndexError"},
            ]
        }
    ]
}
GOOD_STACK = """class Stack:
    def __init__(self):
        self.items = []
    def push(self, x):
        self.items.append(x)
    def pop(self):
        return self.items.pop()
"""
FORGETFUL = (
    GOOD_STACK.replace("        self.items = []\n", "        pass\n")
    .replace("class Stack:\n", "ITEMS = []\nclass Stack:\n")
    .replace("self.items", "ITEMS")
)
QUEUE = GOOD_STACK.replace("self.items.pop()", "self.items.pop(0)")
LENIENT = GOOD_STACK.replace("return self.items.pop()", "return self.items.pop() if self.items else None")


@pytest.mark.parametrize(
    ("code", "reward", "why"),
    [(GOOD_STACK, 1.0, None), (QUEUE, 0.0, "step 3: wrong return value"), (LENIENT, 0.0, "step 5: returned instead")],
    ids=["a stack", "a queue", "pops from empty"],
)
def test_a_sequence_of_calls_shares_one_process(check: UnitTests, code: str, reward: float, why: str | None) -> None:
    verdict = check(task(**STACK), code)
    assert verdict.status == "ok" and verdict.reward == reward, verdict
    assert why is None or why in (verdict.detail or ""), verdict


def test_a_sequence_starts_fresh_in_each_case(check: UnitTests) -> None:
    """Module state does not carry from one case to the next: each case is its own process."""
    twice = {"cases": [STACK["cases"][0], STACK["cases"][0]]}
    assert check(task(**twice), FORGETFUL).reward == 1.0


def test_malformed_steps_are_the_tasks_fault(check: UnitTests) -> None:
    for bad, said in [
        ({"cases": [{"steps": []}]}, "steps must be a non-empty list"),
        ({"cases": [{"steps": [{"call": "s..pop"}]}]}, "call must name a function"),
        ({"cases": [{"steps": [{"call": "Stack", "as": "1s"}]}]}, "as must be a name"),
        ({"cases": [{"steps": [{"call": "f", "expected": 1, "raises": "E"}]}]}, "one of them"),
        ({"function": "f", "strict_types": "yes", "cases": [{"expected": 1}]}, "strict_types"),
        ({"function": "f", "cases": [{"expected": 1, "args_after": {}}]}, "args_after must be a list"),
        ({"cases": [{"expected": 1}]}, "tests.function must name a function"),
    ]:
        verdict = check(task(**bad), GOOD_STACK)
        assert verdict.status == "verifier_error" and said in (verdict.detail or ""), (bad, verdict)


def test_a_name_the_code_does_not_define_is_never_an_expected_exception(check: UnitTests) -> None:
    """A case that expects KeyError (or AttributeError) is not passed by code that defines nothing."""
    lookup = task(function="lookup", cases=[{"args": [{}, "k"], "raises": "KeyError"}])
    assert check(lookup, "def lookup(d, k):\n    return d[k]\n").reward == 1.0
    nothing = check(lookup, "x = 1\n")
    assert nothing.reward == 0.0 and "no lookup to call" in (nothing.detail or ""), nothing
    steps = task(cases=[{"steps": [{"call": "Box", "as": "b"}, {"call": "b.open", "raises": "AttributeError"}]}])
    assert check(steps, "class Box:\n    def open(self):\n        raise AttributeError('stuck')\n").reward == 1.0
    lidless = check(steps, "class Box:\n    pass\n")
    assert lidless.reward == 0.0 and "step 1: no b.open to call" in (lidless.detail or ""), lidless
