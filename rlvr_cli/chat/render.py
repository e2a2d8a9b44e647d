"""Render conversations with a tokenizer's own chat template and find every turn's tokens.

Turns are located by rendering growing prefixes of the conversation and comparing them,
never by searching for a message's content: prefix k-1 must be a prefix of prefix k, and
the tokens between the two are turn k. For an assistant turn, rendering the conversation
before it with `add_generation_prompt=True` says where the generated part starts; the
first stop token after that ends the trainable part (the stop token is trained, template
glue after it is not). Everything is rendered through transformers' own Jinja environment
(`render_jinja_template`, as `apply_chat_template` does) and tokenized once, explicitly with
`add_special_tokens=False`, with character offsets that map turn boundaries to tokens.
"""

from __future__ import annotations

import functools
from pathlib import Path
from typing import Any

from rlvr_cli.chat import checks, masks
from rlvr_cli.chat.conversation import (
    Check,
    Conversation,
    Rendered,
    RenderError,
    Span,
    parse_conversation,
    read_conversations,
)
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
        )

    def texts(
        self, conversations: list[list[dict[str, Any]]], tools: list[dict] | None, add_generation_prompt: bool
    ) -> list[str]:
        """Render several conversations in one call; an empty conversation renders as ''."""
        from transformers.utils.chat_template_utils import render_jinja_template

        if not conversations:
            return []
        out = ["" for _ in conversations]
        todo = [i for i, c in enumerate(conversations) if c]
        if todo:
            rendered, _ = render_jinja_template(
                conversations=[conversations[i] for i in todo],
                tools=tools,
                chat_template=self.template,
                add_generation_prompt=add_generation_prompt,
                **self.tokenizer.special_tokens_map,
            )
            for i, text in zip(todo, rendered, strict=True):
                out[i] = text
        return out

    def encode(self, text: str) -> tuple[list[int], list[tuple[int, int]]]:
        """Token ids and character offsets, explicitly without added special tokens."""
        return self.encode_many([text])[0]

    def encode_many(self, texts: list[str]) -> list[tuple[list[int], list[tuple[int, int]]]]:
        backend = getattr(self.tokenizer, "backend_tokenizer", None)
        if backend is not None:  # the Rust tokenizer itself: one batched call, no Python per-token work
            encodings = backend.encode_batch(texts, add_special_tokens=False)
            return [(e.ids, e.offsets) for e in encodings]
        enc = self.tokenizer(texts, add_special_tokens=False, return_offsets_mapping=True, return_attention_mask=False)
        return [
            (list(i), [tuple(o) for o in off]) for i, off in zip(enc["input_ids"], enc["offset_mapping"], strict=True)
        ]

    def tokens(self, ids: list[int]) -> list[str]:
        """Token strings for ids, from a vocabulary table built once."""
        if self._vocab is None:
            size = max(len(self.tokenizer), max(ids, default=0) + 1)
            self._vocab = self.tokenizer.convert_ids_to_tokens(list(range(size)))
        if ids and max(ids) >= len(self._vocab):
            return self.tokenizer.convert_ids_to_tokens(ids)
        return [self._vocab[i] for i in ids]

    def prompt_ids(self, messages: list[dict[str, Any]], tools: list[dict] | None = None) -> list[int]:
        """The tokens a policy continues from: the conversation plus the generation prompt."""
        text = self.texts([messages], tools, add_generation_prompt=True)[0]
        return self.encode(text)[0]

    def render(self, conversation: Conversation) -> Rendered:
        try:
            located = masks.locate(self, conversation)
        except Exception as exc:
            return Rendered([], [], [], [], checks.template_failure(self, conversation, exc))
        rendered = masks.to_rendered(self, located)
        rendered.checks = checks.run_all(self, conversation, located, rendered)
        return rendered


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
