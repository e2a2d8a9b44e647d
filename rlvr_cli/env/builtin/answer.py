"""The built-in answer-equivalence verifier (`environment.answer_check`): read the answer
where the contract says, then compare it with the task's reference answer through HF's
`math-verify` (numbers, fractions, LaTeX expressions, sets, intervals), each comparison
bounded in time.

Verdicts: `ok` with `correct` 1 or 0 and `format` 1; `format_error` (reward 0) when no answer
is where the contract says, or when several different boxed answers hedge; `timeout` when
parsing or comparing runs past `timeout_s`. The reference answer is parsed the same way.
"""

from __future__ import annotations

import re
from typing import Any

from rlvr_cli.env.verdict import Verdict

_ANSWER_LINE = re.compile(r"^\s*(?:final\s+)?answer\s*[:：]\s*(.+?)\s*$", re.IGNORECASE | re.MULTILINE)
_BOX = re.compile(r"\\(?:boxed|fbox)\s*\{")


def boxed(text: str) -> list[str]:
    """The contents of every `\\boxed{...}` / `\\fbox{...}`, braces balanced, in order."""
    found = []
    for match in _BOX.finditer(text):
        depth, start = 1, match.end()
        for i in range(start, len(text)):
            depth += {"{": 1, "}": -1}.get(text[i], 0)
            if depth == 0:
                found.append(text[start:i].strip())
                break
    return found


def extract(response: str, mode: str) -> tuple[str | None, str]:
    """(the answer text, or None with the reason)."""
    if mode == "whole":
        text = response.strip()
        return (text, "") if text else (None, "empty response")
    if mode == "answer_line":
        lines = _ANSWER_LINE.findall(response)
        return (lines[-1], "") if lines else (None, "no 'Answer: ...' line")
    found = [b for b in boxed(response) if b]
    if not found:
        return None, "no \\boxed{} answer"
    if len({re.sub(r"\s+", "", b) for b in found}) > 1:
        return None, f"{len(found)} different boxed answers"
    return found[-1], ""


# The policy over math-verify's own defaults (docs/verifiers.md): a decimal equals a fraction only
# to 10 places (math-verify rounds to 6, so 0.333333 passed for 1/3 and 0.5000001 for 1/2), and
# an inequality equals the interval it describes (`2 \le x < 5` is `[2, 5)`).
POLICY = {"float_rounding": 10, "allow_set_relation_comp": True}
_THOUSANDS = re.compile(r"(?<=\d)(?:\\[,;:! ]|\{,\})(?=\d{3}(?!\d))")


class AnswerCheck:
    """`verify(task, response)` as the contract's `answer_check` configures it."""

    def __init__(self, extract: str, answer_field: str = "answer", timeout_s: float = 5.0) -> None:
        import math_verify  # noqa: F401 - fail at load time, not on the first verdict

        self.mode, self.field, self.timeout = extract, answer_field, max(1, round(timeout_s))
        self._gold: dict[str, Any] = {}

    def _parse(self, text: str) -> Any:
        from math_verify import parse

        text = _THOUSANDS.sub("", text)  # `1\,000` is one thousand (math-verify reads it as 1·0)
        # already math mode when it holds a `$` of its own; `\$` is an escaped dollar sign (`\boxed{\$5}`)
        delimited = "$" in text.replace("\\$", "")
        wrapped = text if delimited or "\\boxed" in text else f"${text}$"
        return parse(wrapped, parsing_timeout=self.timeout, raise_on_error=True)

    def __call__(self, task: dict[str, Any], response: str) -> Verdict:
        from math_verify import verify
        from math_verify.errors import TimeoutException

        reference = task.get(self.field)
        if reference is None:
            return Verdict("verifier_error", detail=f"task has no '{self.field}' field")
        answer, why = extract(response, self.mode)
        if answer is None:
            return Verdict("format_error", 0.0, {"correct": 0.0, "format": 0.0}, why)
        unreadable = Verdict("format_error", 0.0, {"correct": 0.0, "format": 0.0}, f"cannot read {answer[:40]!r}")
        try:
            key = str(reference)
            if key not in self._gold:
                self._gold[key] = self._parse(key)  # an unreadable reference raises: verifier_error
            if not self._gold[key]:
                return Verdict("verifier_error", detail=f"reference answer {key!r} cannot be parsed")
            try:
                target = self._parse(answer)
            except TimeoutException:
                raise
            except Exception:  # the model's answer is not mathematics math-verify reads
                return unreadable
            if not target:
                return unreadable
            correct = verify(self._gold[key], target, timeout_seconds=self.timeout, raise_on_error=True, **POLICY)
        except (TimeoutException, TimeoutError):
            return Verdict("timeout", detail=f"parsing or comparing took over {self.timeout} s")
        return Verdict("ok", float(correct), {"correct": float(correct), "format": 1.0})
