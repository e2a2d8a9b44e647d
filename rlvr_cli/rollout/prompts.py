"""Prompt token ids per task, rendered once per rollout, with or without the task's hint:
the one place a task becomes the ids a policy is shown (both rollouts use it)."""

from __future__ import annotations

import sys
from typing import Any

from rlvr_cli.contract.models import Contract
from rlvr_cli.contract.tasks import fit_prompt, messages_of
from rlvr_cli.rollout import hints


class Prompts:
    """Keyed by the task row itself (its identity), never by its id: two rows with one id must
    not share a prompt. `schemas`: the tools a tool-use prompt lists."""

    def __init__(self, contract: Contract, renderer: Any, schemas: list[dict[str, Any]] | None = None) -> None:
        self.contract, self.renderer, self.schemas = contract, renderer, schemas
        self._cache: dict[tuple[int, bool], list[int]] = {}
        self._rows: list[dict[str, Any]] = []  # keeps every cached row alive, so no id is reused
        self._warned = False  # an unknown token in a prompt is said once

    def ids(self, task: dict[str, Any], hinted: bool = False) -> list[int]:
        """The prompt's token ids; `hinted`: with the task's hint (in the prompt, or as the
        response's first tokens, as `data.hints.placement` says)."""
        key = (id(task), hinted)
        if key not in self._cache:
            self._rows.append(task)
            self._cache[key] = self._render(task, hints.hint_of(self.contract, task) if hinted else None)
        return self._cache[key]

    def _render(self, task: dict[str, Any], hint: str | None) -> list[int]:
        contract = self.contract
        messages = self.messages(task, hint)
        what = "the prompt with the tool schemas" if self.schemas else "the prompt"
        ids = self.renderer.prompt_ids(messages, self.schemas or None)
        said = None if self._warned else unknown_tokens(self.renderer.tokenizer, ids, f"task {task.get('id')}: {what}")
        if said is not None:
            self._warned = True
            print(said, file=sys.stderr)
        ids = fit_prompt(contract.length, task, ids, what)
        if hint is not None and hints.prefix(contract):
            ids = ids + self.renderer.tokenizer.encode(hint, add_special_tokens=False)
        return ids

    def messages(self, task: dict[str, Any], hint: str | None) -> list[dict[str, Any]]:
        """The chat the prompt renders: the task's messages, its hint in the last user message
        when the hint goes in the prompt."""
        messages = messages_of(task)
        if hint is not None and not hints.prefix(self.contract):
            messages = hints.hinted_messages(self.contract, messages, hint)
        return messages


def unknown_tokens(tokenizer: Any, ids: list[int], what: str) -> str | None:
    """What to say of a prompt that holds the tokenizer's unknown token (RLT016): text the
    tokenizer cannot encode — a character of the data, of a tool schema or of the template —
    that the model reads as one token, never what was written. None: it holds none."""
    unk = tokenizer.unk_token_id
    if unk is None or unk not in ids:
        return None
    at = ids.index(unk)
    pad = ", which is also the pad token" if unk == tokenizer.pad_token_id else ""
    context = tokenizer.decode(ids[max(at - 8, 0) : at + 8], skip_special_tokens=False)
    return (
        f"warning[RLT016]: {what} holds the unknown token {tokenizer.unk_token!r}{pad} {ids.count(unk)} time(s), "
        f"first at token {at} ({context!r}): the tokenizer cannot encode a character the data, a tool schema or "
        "the template puts there (`rlvr render` shows where); said once per run"
    )
