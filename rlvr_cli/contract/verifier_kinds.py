"""The built-in verifier kinds of `environment` (single_turn): answer equivalence, sandboxed
unit tests and a model judge. The user's own `verifier: module:function` is the fourth."""

from collections.abc import Iterator
from typing import Any, Literal

from pydantic import Field

from rlvr_cli.contract.diagnostics import Finding, error
from rlvr_cli.contract.sections import PositiveInt, Section

BUILTIN_KINDS = ("answer_check", "unit_tests", "judge")


class AnswerCheck(Section):
    """The built-in answer-equivalence verifier (single_turn), through HF's `math-verify`."""

    extract: Literal["last_boxed", "answer_line", "whole"] = Field(
        description="Where the answer is read: the last `\\boxed{}` (several different boxed answers are refused), "
        "the last `Answer: ...` line, or the whole response."
    )
    answer_field: str = Field("answer", min_length=1, description="The task field holding the reference answer.")
    timeout_s: float = Field(
        5.0,
        gt=0,
        le=60,
        description="Bound for one comparison (parsing and equivalence), in whole seconds (math-verify's timer; "
        "rounded, at least 1); past it, a timeout verdict.",
    )


class UnitTests(Section):
    """Code answers run against the task's tests in a bubblewrap sandbox (no network, read-only
    system, private /tmp, own pid namespace, rlimits). Expected outputs never enter the sandbox."""

    extract: Literal["last_code_block", "whole"] = Field(
        description="Where the code is read: the last fenced code block of the response, or the whole response."
    )
    reward: Literal["all_or_nothing", "fraction"] = Field(
        description="Component `tests`: 1 only when every case passes, or the fraction of cases passed."
    )
    tests_field: str = Field(
        "tests",
        min_length=1,
        description="The task field holding the tests: `{kind: stdio, cases: [{stdin, stdout}]}` or "
        "`{kind: call, function, cases: [{args, kwargs, expected}]}`.",
    )
    solution_field: str = Field(
        "solution", min_length=1, description="The task field with a reference solution (audit arms only)."
    )
    case_timeout_s: float = Field(
        2.0, gt=0, le=60, description="Wall-clock bound of one case; past it (or past its CPU time) the case fails."
    )
    memory_mb: int = Field(512, ge=64, le=65536, description="Address space of the code under test (MiB).")
    processes: int = Field(16, ge=1, le=1024, description="Processes the code under test may hold at once.")
    file_mb: PositiveInt = Field(16, le=4096, description="Largest file it may write (MiB); its /tmp holds 4x this.")
    output_kb: PositiveInt = Field(
        256, le=65536, description="Output one case may print (KiB); past it, the case fails."
    )


class Judge(Section):
    """A model judge behind an OpenAI-compatible endpoint, at temperature 0, with a strict
    reply format; its failures are verifier_error verdicts, never a reward."""

    base_url: str = Field(pattern=r"^https?://\S+$", description="The endpoint, e.g. `http://127.0.0.1:8000/v1`.")
    model: str = Field(min_length=1, description="The judge model's name at that endpoint.")
    rubric: str = Field(min_length=1, description="What a passing response does; the judge sees it with the task.")
    scoring: Literal["pass_fail", "score_0_10"] = Field(
        description='The reply the judge must give: `{"verdict": "pass"|"fail"}` (component `judge` 1/0) or '
        '`{"score": 0..10}` (component `judge` = score / 10).'
    )
    reference_field: str | None = Field(
        None, min_length=1, description="A task field shown to the judge as the reference answer."
    )
    api_key_env: str | None = Field(
        None,
        pattern=r"^[A-Za-z_][A-Za-z0-9_]*$",
        description="The environment variable holding the API key (a key is never written in the contract).",
    )
    retries: int = Field(3, ge=0, le=10, description="Retries of a failed request, with exponential backoff.")
    backoff_s: float = Field(1.0, gt=0, le=60, description="The first backoff; doubled after each retry.")
    request_timeout_s: float = Field(60.0, gt=0, le=600, description="Bound of one request.")
    max_tokens: PositiveInt = Field(256, le=8192, description="Longest reply the judge may write.")
    cache: str | None = Field(
        None,
        min_length=1,
        description="A JSONL file (beside the contract) of judgements keyed by (model, rubric, task, response); "
        "reused across audits and runs. Always cached in memory.",
    )


def verifier_kind_findings(env: Any) -> Iterator[Finding]:
    """single_turn: exactly one of `verifier` and the built-in kinds; tool_use: none of the built-ins."""
    given = [k for k in ("verifier", *BUILTIN_KINDS) if getattr(env, k) is not None]
    if env.kind == "single_turn" and not given:
        when = "kind is single_turn (or " + ", ".join(BUILTIN_KINDS) + ")"
        yield error("RLV003", ("environment",), f"missing required key 'verifier' (required when {when})")
    for extra in given[1:]:
        yield error("RLV003", ("environment", extra), f"give one verifier kind, not both: {given[0]} and {extra}")
    if env.kind == "tool_use":
        for key in (k for k in BUILTIN_KINDS if getattr(env, k) is not None):
            yield error("RLV003", ("environment", key), f"{key} verifies single_turn responses")
    if env.unit_tests is not None and env.timeout_s < env.unit_tests.case_timeout_s + 2:
        yield error(
            "RLV003",
            ("environment", "timeout_s"),
            f"timeout_s {env.timeout_s} leaves no time for one case of {env.unit_tests.case_timeout_s} s "
            "and the sandbox's start (needs case_timeout_s + 2)",
        )
