"""The published chat templates of real model families (tests/chat/templates, sources in
SOURCES.md) on tiny local tokenizers with each family's special tokens.

A tokenizer here is character level apart from the family's special tokens, which are single
tokens as in the real checkpoint; expectations are written as text segments and split the
same way by `split`, independently of rlvr.
"""

from __future__ import annotations

import re
import string
from dataclasses import dataclass, field
from pathlib import Path

TEMPLATES = Path(__file__).parent / "templates"


@dataclass(frozen=True)
class Family:
    name: str
    template: str  # file under templates/
    specials: tuple[str, ...]
    stops: tuple[str, ...]  # the contract's stop tokens
    eos: str
    bos: str | None = None
    pad: str = "<rlvr-pad>"
    variables: dict[str, object] = field(default_factory=dict)

    @property
    def source(self) -> str:
        return (TEMPLATES / self.template).read_text(encoding="utf-8")


CHATML = ("<|im_start|>", "<|im_end|>", "<|endoftext|>")
QWEN = (*CHATML, "<tool_call>", "</tool_call>", "<tool_response>", "</tool_response>", "<think>", "</think>")
LLAMA = (
    "<|begin_of_text|>",
    "<|start_header_id|>",
    "<|end_header_id|>",
    "<|eot_id|>",
    "<|eom_id|>",
    "<|python_tag|>",
)
MISTRAL = (
    "<s>",
    "</s>",
    "[INST]",
    "[/INST]",
    "[TOOL_CALLS]",
    "[AVAILABLE_TOOLS]",
    "[/AVAILABLE_TOOLS]",
    "[TOOL_RESULTS]",
    "[/TOOL_RESULTS]",
)
GEMMA = ("<bos>", "<eos>", "<start_of_turn>", "<end_of_turn>", "<start_of_image>")
DEEPSEEK = (
    "<｜begin▁of▁sentence｜>",
    "<｜end▁of▁sentence｜>",
    "<｜User｜>",
    "<｜Assistant｜>",
    "<think>",
    "</think>",
    "<｜tool▁calls▁begin｜>",
    "<｜tool▁call▁begin｜>",
    "<｜tool▁sep｜>",
    "<｜tool▁call▁end｜>",
    "<｜tool▁calls▁end｜>",
    "<｜tool▁outputs▁begin｜>",
    "<｜tool▁output▁begin｜>",
    "<｜tool▁output▁end｜>",
    "<｜tool▁outputs▁end｜>",
)
GLM = (
    "[gMASK]",
    "<sop>",
    "<|system|>",
    "<|user|>",
    "<|assistant|>",
    "<|observation|>",
    "<|endoftext|>",
    "<think>",
    "</think>",
    "<tool_call>",
    "</tool_call>",
    "<arg_key>",
    "</arg_key>",
    "<arg_value>",
    "</arg_value>",
    "<tool_response>",
    "</tool_response>",
)
HARMONY = ("<|start|>", "<|end|>", "<|message|>", "<|channel|>", "<|return|>", "<|call|>", "<|endoftext|>")

FAMILIES = {
    f.name: f
    for f in [
        Family("qwen2.5", "qwen2.5.jinja", QWEN, ("<|im_end|>",), "<|im_end|>"),
        Family("qwen3", "qwen3.jinja", QWEN, ("<|im_end|>",), "<|im_end|>"),
        Family("llama-3.1", "llama-3.1.jinja", LLAMA, ("<|eot_id|>", "<|eom_id|>"), "<|eot_id|>", "<|begin_of_text|>"),
        Family("llama-3.2", "llama-3.2.jinja", LLAMA, ("<|eot_id|>", "<|eom_id|>"), "<|eot_id|>", "<|begin_of_text|>"),
        Family("mistral-7b-v0.3", "mistral-7b-v0.3.jinja", MISTRAL, ("</s>",), "</s>", "<s>"),
        Family("mistral-nemo", "mistral-nemo.jinja", MISTRAL, ("</s>",), "</s>", "<s>"),
        Family(
            "mistral-small-3.1",
            "mistral-small-3.1.jinja",
            (*MISTRAL, "[SYSTEM_PROMPT]", "[/SYSTEM_PROMPT]", "[IMG]"),
            ("</s>",),
            "</s>",
            "<s>",
        ),
        Family("gemma-2", "gemma-2.jinja", GEMMA, ("<end_of_turn>",), "<eos>", "<bos>"),
        Family("gemma-3", "gemma-3.jinja", GEMMA, ("<end_of_turn>",), "<eos>", "<bos>"),
        Family(
            "phi-3.5",
            "phi-3.5.jinja",
            ("<|system|>", "<|user|>", "<|assistant|>", "<|end|>", "<|endoftext|>"),
            ("<|end|>",),
            "<|endoftext|>",
            "<s>",
        ),
        Family("phi-4", "phi-4.jinja", (*CHATML, "<|im_sep|>"), ("<|im_end|>",), "<|im_end|>"),
        Family(
            "deepseek-r1-distill",
            "deepseek-r1-distill.jinja",
            DEEPSEEK,
            ("<｜end▁of▁sentence｜>",),
            "<｜end▁of▁sentence｜>",
            "<｜begin▁of▁sentence｜>",
        ),
        Family(
            "deepseek-v3.1",
            "deepseek-v3.1.jinja",
            DEEPSEEK,
            ("<｜end▁of▁sentence｜>",),
            "<｜end▁of▁sentence｜>",
            "<｜begin▁of▁sentence｜>",
        ),
        Family("smollm2", "smollm2.jinja", CHATML, ("<|im_end|>",), "<|im_end|>"),
        Family("smollm3", "smollm3.jinja", QWEN, ("<|im_end|>",), "<|im_end|>"),
        Family("gpt-oss", "gpt-oss.jinja", HARMONY, ("<|return|>", "<|call|>"), "<|return|>"),
        # a turn ends where the next opens: the policy stops by writing <|user|> or <|observation|>
        Family("glm-4.6", "glm-4.6.jinja", GLM, ("<|user|>", "<|observation|>", "<|endoftext|>"), "<|endoftext|>"),
    ]
}

ALPHABET = string.printable.replace("\x0b", "").replace("\x0c", "").replace("\r", "")


def build(folder: Path, family: Family):
    """A character-level tokenizer with the family's special tokens and its published template."""
    from tokenizers import AddedToken, Tokenizer, decoders, models
    from transformers import PreTrainedTokenizerFast

    specials = ["<unk>", family.pad, *(t for t in family.specials if t != family.pad)]
    vocab = {tok: i for i, tok in enumerate([*specials, *sorted(set(ALPHABET))])}
    core = Tokenizer(models.BPE(vocab=vocab, merges=[], unk_token="<unk>"))
    core.decoder = decoders.Fuse()
    core.add_special_tokens([AddedToken(t, special=True, normalized=False) for t in specials])
    tokenizer = PreTrainedTokenizerFast(
        tokenizer_object=core, unk_token="<unk>", pad_token=family.pad, eos_token=family.eos, bos_token=family.bos
    )
    tokenizer.chat_template = family.source
    folder.mkdir(parents=True, exist_ok=True)
    tokenizer.save_pretrained(folder)
    return tokenizer


def split(text: str, family: Family) -> list[str]:
    """Special tokens whole, every other character a token: independent of rlvr."""
    pattern = re.compile("|".join(re.escape(t) for t in sorted(family.specials, key=len, reverse=True)))
    out: list[str] = []
    pos = 0
    for match in pattern.finditer(text):
        out.extend(text[pos : match.start()])
        out.append(match.group(0))
        pos = match.end()
    out.extend(text[pos:])
    return out


def expect(family: Family, *segments: tuple[str, int]) -> tuple[list[str], list[int]]:
    tokens: list[str] = []
    mask: list[int] = []
    for text, trained in segments:
        pieces = split(text, family)
        tokens += pieces
        mask += [trained] * len(pieces)
    return tokens, mask
