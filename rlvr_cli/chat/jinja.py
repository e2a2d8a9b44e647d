"""A chat template compiled once and rendered exactly as `apply_chat_template` renders it.

Same sandboxed Jinja environment, same filters and globals (transformers compiles it), same
inputs: the messages rebuilt from plain JSON types, reasoning fields aliased
(`reasoning_content`/`thinking`/`reasoning`), the tokenizer's special tokens as variables.
What differs is the bookkeeping: a conversation is prepared once and any number of its
prefixes rendered from it, so locating turns costs one Jinja pass per prefix and nothing else.
"""

from __future__ import annotations

import json
from collections import OrderedDict
from typing import Any

_CACHE_SIZE = 4096


def _transformers_helpers() -> tuple[Any, Any, Any]:
    from transformers.utils import chat_template_utils as ctu

    compile_ = getattr(ctu, "_compile_jinja_template", None)
    plain = getattr(ctu, "_plain_template_data", None) or (lambda value: value)
    alias = getattr(ctu, "_alias_reasoning_fields", None) or (lambda chat: chat)
    return compile_, plain, alias


class CompiledTemplate:
    def __init__(self, template: str, variables: dict[str, Any], *, read_prefixes: bool = True) -> None:
        compile_, self._plain, self._alias = _transformers_helpers()
        self.source = template
        self._compiled = compile_(template) if compile_ is not None else None
        self._variables = self._plain(dict(variables))
        self.tracker = self._tracker() if read_prefixes else None
        self._cache: OrderedDict[tuple, str | Exception] = OrderedDict()

    def prepare(self, messages: list[dict[str, Any]]) -> list[dict[str, Any]]:
        """The messages as the template sees them (a copy; the caller's stay untouched)."""
        return self._alias(self._plain(messages))

    def render(self, chat: list[dict[str, Any]], tools: list[dict] | None, add_generation_prompt: bool) -> str:
        """Render prepared messages; raises whatever the template raises."""
        if self._compiled is None:  # a transformers without the compile helper: its public path
            from transformers.utils.chat_template_utils import render_jinja_template

            return render_jinja_template(
                conversations=[chat],
                tools=tools,
                chat_template=self.source,
                add_generation_prompt=add_generation_prompt,
                **self._variables,
            )[0][0]
        return self._compiled.render(
            messages=chat,
            tools=self._plain(tools),
            documents=None,
            add_generation_prompt=add_generation_prompt,
            **self._variables,
        )

    def _tracker(self) -> Any:
        """A TrackedRender where prefixes may be read off one rendering (chat/tracked.py)."""
        from rlvr_cli.chat import tracked

        mode = None if self._compiled is None else tracked.eligible(self._compiled.environment, self.source)
        if mode is None:
            return None
        tracker = tracked.TrackedRender(self._compiled, self._variables, mode)
        return tracker if tracker.usable else None

    def keys(self, chat: list[dict[str, Any]], tools: list[dict] | None) -> tuple[str, list[str]]:
        """Cache keys: the tools and each message as canonical JSON."""
        dump = lambda value: json.dumps(value, sort_keys=True, ensure_ascii=False, default=str)  # noqa: E731
        return dump(tools), [dump(message) for message in chat]

    def cached(
        self, chat: list[dict[str, Any]], keys: tuple[str, list[str]], count: int, tools: list[dict] | None, gen: bool
    ) -> str:
        """messages[:count] rendered, from a bounded cache of prefix renderings shared across
        conversations that start alike (a group's completions share their prompt). A refusal
        is cached too and raised again."""
        key = (keys[0], gen, tuple(keys[1][:count]))
        entries = self._cache
        if key in entries:
            entries.move_to_end(key)
            found = entries[key]
        else:
            try:
                found = self.render(chat[:count], tools, gen)
            except Exception as exc:
                found = exc
            entries[key] = found
            if len(entries) > _CACHE_SIZE:
                entries.popitem(last=False)
        if isinstance(found, Exception):
            raise found
        return found

    def text(self, messages: list[dict[str, Any]], tools: list[dict] | None, add_generation_prompt: bool) -> str:
        return self.render(self.prepare(messages), tools, add_generation_prompt) if messages else ""
