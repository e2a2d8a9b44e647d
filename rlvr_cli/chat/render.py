"""Render conversations with a tokenizer's own chat template and find every turn's tokens.

The template is compiled once (chat/jinja.py: transformers' own sandboxed environment, the
inputs `apply_chat_template` passes) and turns are located by comparing prefix renderings
with the full one (chat/masks.py), never by searching for a message's content. The full
text is tokenized once, explicitly with `add_special_tokens=False`, with character offsets
that map turn boundaries to tokens.
"""

from __future__ import annotations

import functools
from pathlib import Path
from typing import Any

from rlvr_cli.chat import checks, masks, tool_formats
from rlvr_cli.chat.conversation import (
    Check,
    Conversation,
    Offsets,
    Rendered,
    RenderError,
    Span,
    parse_conversation,
    read_conversations,
)
from rlvr_cli.chat.jinja import CompiledTemplate
from rlvr_cli.errors import UsageProblem

__all__ = [
    "ChatRenderer",
    "Check",
    "Conversation",
    "RenderError",
    "Rendered",
    "Span",
    "load_tokenizer",
    "pad_id",
    "parse_conversation",
    "read_conversations",
]


class ChatRenderer:
    """A tokenizer plus the chat template and stop tokens the contract names."""

    def __init__(
        self,
        tokenizer: Any,
        template: str,
        stop_tokens: list[str],
        *,
        max_prompt_tokens: int | None = None,
        prompt_truncation: str = "error",
        read_prefixes: bool = True,
        tool_format: str | None = None,
    ) -> None:
        if not template:
            raise RenderError("the tokenizer has no chat template and the contract names no template file")
        self.tokenizer = tokenizer
        self.template = template
        self.stop_tokens = list(stop_tokens)
        self.stop_ids = [self._token_id(t) for t in stop_tokens]
        self.max_prompt_tokens = max_prompt_tokens
        self.prompt_truncation = prompt_truncation
        self._vocab: list[str] | None = None
        # read_prefixes=False renders every prefix for real (the reference the fast path is tested against)
        self.compiled = CompiledTemplate(template, tokenizer.special_tokens_map, read_prefixes=read_prefixes)
        # how the policy writes tool calls: the contract's environment.tool_format, else the template's
        self.tool_format = tool_formats.chosen(template, tool_format)

    @functools.cached_property
    def probe(self) -> tuple[str, str] | None:
        """A one-user-message conversation rendered without and with the generation prompt;
        None when the template refuses it."""
        user = [{"role": "user", "content": "rlvr-probe-user"}]
        try:
            return self.compiled.text(user, None, False), self.compiled.text(user, None, True)
        except Exception:
            return None

    @functools.cached_property
    def opening_closing(self) -> tuple[str, str]:
        """What `add_generation_prompt=True` appends after a user turn (the opening), and what
        a rendering without it appends after the last turn only (the closing, e.g. Phi-3.5's
        eos), cut at a token boundary; ('', '') when the probe is refused."""
        if self.probe is None:
            return "", ""
        plain, opened = self.probe
        char = masks.common_prefix(plain, opened)
        starts = [{start for start, _ in self.encode(text)[1]} | {len(text)} for text in (plain, opened)]
        while char > 0 and not all(char in s for s in starts):
            char -= 1
        return opened[char:], plain[char:]

    @functools.cached_property
    def template_checks(self) -> list[Check]:
        """The template's own traps, found once per renderer (chat/checks.py)."""
        return checks.template_checks(self)

    @property
    def pad_id(self) -> int:
        return pad_id(self.tokenizer)

    def _token_id(self, token: str) -> int:
        ids = self.tokenizer.convert_tokens_to_ids([token])
        unk = self.tokenizer.unk_token_id
        if not ids or ids[0] is None or (ids[0] == unk and token != self.tokenizer.unk_token):
            raise RenderError(f"stop token {token!r} is not a token of the tokenizer")
        return int(ids[0])

    @classmethod
    def from_contract(cls, contract: Any, folder: Path) -> ChatRenderer:
        """Load the tokenizer from disk (never the network) with the contract's template."""
        ref = contract.artifacts.tokenizer
        tokenizer = load_tokenizer(folder / ref.path if ref.path else None, ref.id, ref.revision)
        if ref.chat_template == "native":
            template = tokenizer.chat_template
        else:
            path = folder / ref.chat_template
            if not path.is_file():
                raise RenderError(f"chat template file {ref.chat_template} does not exist")
            template = path.read_text(encoding="utf-8")
        length = contract.length
        return cls(
            tokenizer,
            template,
            length.stop_tokens,
            max_prompt_tokens=length.max_prompt_tokens,
            prompt_truncation=length.prompt_truncation,
            tool_format=contract.environment.tool_format,
        )

    def texts(
        self, conversations: list[list[dict[str, Any]]], tools: list[dict] | None, add_generation_prompt: bool
    ) -> list[str]:
        """Render several conversations; an empty conversation renders as ''."""
        return [self.compiled.text(c, tools, add_generation_prompt) for c in conversations]

    def encode(self, text: str) -> tuple[list[int], list[tuple[int, int]]]:
        """Token ids and character offsets, explicitly without added special tokens."""
        return self.encode_many([text])[0]

    def encode_offsets(self, text: str) -> tuple[list[int], Offsets]:
        """Token ids and an Offsets view that stays in the Rust encoding until asked."""
        backend = getattr(self.tokenizer, "backend_tokenizer", None)
        if backend is None:
            ids, pairs = self.encode(text)
            return ids, Offsets(pairs=pairs)
        encoding = backend.encode(text, add_special_tokens=False)
        ids = encoding.ids
        return ids, Offsets(encoding, count=len(ids))

    def encode_many(self, texts: list[str]) -> list[tuple[list[int], list[tuple[int, int]]]]:
        backend = getattr(self.tokenizer, "backend_tokenizer", None)
        if backend is not None:  # the Rust tokenizer itself, no Python per-token work
            if len(texts) < 8:  # a batch call's thread pool costs more than it saves on a few texts
                encodings = [backend.encode(text, add_special_tokens=False) for text in texts]
            else:
                encodings = backend.encode_batch(texts, add_special_tokens=False)
            return [(e.ids, e.offsets) for e in encodings]
        enc = self.tokenizer(texts, add_special_tokens=False, return_offsets_mapping=True, return_attention_mask=False)
        return [
            (list(i), [tuple(o) for o in off]) for i, off in zip(enc["input_ids"], enc["offset_mapping"], strict=True)
        ]

    def ids_of(self, texts: list[str]) -> list[list[int]]:
        """Token ids only (no offsets), explicitly without added special tokens."""
        backend = getattr(self.tokenizer, "backend_tokenizer", None)
        if backend is None:
            return [ids for ids, _ in self.encode_many(texts)]
        return [backend.encode(text, add_special_tokens=False).ids for text in texts]

    def tokens(self, ids: list[int]) -> list[str]:
        """Token strings for ids, from a vocabulary table built once."""
        if self._vocab is None:
            size = max(len(self.tokenizer), max(ids, default=0) + 1)
            self._vocab = self.tokenizer.convert_ids_to_tokens(list(range(size)))
        try:
            return list(map(self._vocab.__getitem__, ids))
        except IndexError:  # an id past the table (a tokenizer that grew): ask the tokenizer
            return self.tokenizer.convert_ids_to_tokens(ids)

    def prompt_ids(self, messages: list[dict[str, Any]], tools: list[dict] | None = None) -> list[int]:
        """The tokens a policy continues from: the conversation plus the generation prompt."""
        text = self.texts([messages], tools, add_generation_prompt=True)[0]
        return self.encode(text)[0]

    def render(self, conversation: Conversation) -> Rendered:
        """Tokens, loss mask, spans and checks of one conversation."""
        try:
            located = masks.locate(self, conversation)
        except Exception as exc:
            return Rendered([], [], [], [], checks.template_failure(self, conversation, exc))
        rendered = masks.to_rendered(self, located)
        rendered.checks = checks.run_all(self, conversation, located, rendered)
        return rendered

    def continuation(
        self,
        messages: list[dict[str, Any]],
        added: list[dict[str, Any]],
        tools: list[dict] | None = None,
        sampled_stop: int | None = None,
    ) -> list[int]:
        """Ids to append after the stop token of the last assistant turn of `messages` for the
        `added` tool/user turns and the next generation prompt (token-in/token-out);
        `sampled_stop`: the stop token the policy ended that turn with."""
        return masks.continuation(self, messages, added, tools, sampled_stop)


def pad_id(tokenizer: Any) -> int:
    """The id that pads a batch: the tokenizer's pad token, else its eos token."""
    pad = tokenizer.pad_token_id if tokenizer.pad_token_id is not None else tokenizer.eos_token_id
    if pad is None:
        raise RenderError("the tokenizer has neither a pad nor an eos token to pad with")
    return int(pad)


def load_tokenizer(path: Path | None, hub_id: str | None = None, revision: str | None = None) -> Any:
    """AutoTokenizer from a local folder, or from the local hub cache; never downloads."""
    from transformers import AutoTokenizer
    from transformers.utils import logging

    logging.set_verbosity_error()
    source = str(path) if path is not None else hub_id
    if path is not None and not path.is_dir():
        raise UsageProblem(f"tokenizer folder {path} does not exist")
    try:
        return AutoTokenizer.from_pretrained(source, revision=revision, local_files_only=True)
    except (OSError, ValueError) as exc:
        raise RenderError(f"the tokenizer at {source} cannot be loaded: {exc}") from None
