"""The verifier of this experiment: `verify(task, response) -> Verdict`.

`task` is the whole JSONL row (id, prompt, answer, domain, difficulty, ...); `response` is
the policy's text up to its stop token. Return `format_error` when the answer cannot be
read, `ok` with the reward otherwise. An exception or a timeout becomes a
`verifier_error`/`timeout` verdict, which `objective.reward.on_invalid` handles; it is
never silently a reward of 0.
"""

from rlvr_cli.env import Verdict


def verify(task: dict, response: str) -> Verdict:
    text = response.strip()
    number = text[: len(text) - len(text.lstrip("0123456789"))]
    if not number:
        return Verdict("format_error", 0.0, {"correct": 0.0, "format": 0.0}, "no number at the start")
    correct = float(int(number) == int(task["answer"]))
    return Verdict("ok", correct, {"correct": correct, "format": 1.0})
