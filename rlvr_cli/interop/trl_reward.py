"""The reward functions `rlvr export --to trl` hands TRL: one per reward component of the contract,
each the component's value from the contract's own verifier (run once per completion, in its worker
process with its timeout), so GRPOConfig's `reward_weights` are the contract's weights. TRL calls
each as `fn(prompts=..., completions=..., completion_ids=..., rlvr_task=[...], ...)`; an invalid
verdict is None from every function (TRL's unscorable completion) under `on_invalid: exclude`, and
stops the run under `fail`."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from rlvr_cli.env.verdict import INVALID
from rlvr_cli.interop.verl_reward import ContractReward


def _text(completion: Any) -> str:
    """A completion as TRL passes it: text, or a conversational list of messages."""
    if isinstance(completion, str):
        return completion
    if isinstance(completion, list) and completion and isinstance(completion[-1], dict):
        return str(completion[-1].get("content", ""))
    raise TypeError(f"a completion TRL passes is text or messages, not {type(completion).__name__}")


class Components:
    """The contract's reward components as TRL reward functions, sharing one verifier."""

    def __init__(self, contract_path: str | Path) -> None:
        self.reward = ContractReward(contract_path)
        self._last: tuple[tuple[str, ...], list[dict[str, Any]]] | None = None

    def scores(self, completions: list[Any], tasks: list[str]) -> list[dict[str, Any]]:
        key = tuple(tasks) + tuple(_text(c) for c in completions)
        if self._last is None or self._last[0] != key:  # every component function asks for the same batch
            scored = [
                self.reward("rlvr", _text(c), None, {"rlvr_task": task})
                for c, task in zip(completions, tasks, strict=True)
            ]
            self._last = (key, scored)
        return self._last[1]

    def function(self, name: str) -> Any:
        def component(completions: list[Any], rlvr_task: list[str], **_: Any) -> list[float | None]:
            return [None if s["verdict"] in INVALID else float(s[name]) for s in self.scores(completions, rlvr_task)]

        component.__name__ = name  # TRL logs each function's mean under its name
        return component

    def functions(self) -> list[Any]:
        contract = self.reward.contract()
        return [self.function(c.name) for c in contract.objective.reward.components]


def rows(tasks: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """TRL's conversational dataset rows: the prompt as messages and the task for the verifier."""
    from rlvr_cli.contract.tasks import messages_of

    return [{"prompt": messages_of(task), "rlvr_task": json.dumps(task, sort_keys=True)} for task in tasks]
