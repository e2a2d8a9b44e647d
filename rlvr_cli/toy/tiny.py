"""Build a tiny tokenizer and a tiny causal LM with random weights in a local folder.

Tests, examples and `rlvr init` use these instead of downloaded checkpoints; they load
with `from_pretrained` exactly as a real model would. Needs the `train` extra.
"""

from __future__ import annotations

import string
from pathlib import Path

from rlvr_cli.chat.families import FAMILIES, SPECIAL_TOKENS

PRINTABLE = string.printable.replace("\x0b", "").replace("\x0c", "").replace("\r", "")
ARITHMETIC = string.ascii_lowercase + string.digits + "+-*=?:. \n"
DIGITS = string.digits + "spel \n"  # the hints example's prompts ("spell 472") and nothing more
ALPHABETS = {"arithmetic": ARITHMETIC, "printable": PRINTABLE, "digits": DIGITS}


# Pieces merges may not cross: every digit alone (so a number is copied digit by digit, as
# in Llama 3 and Qwen tokenizers), words with their leading space, punctuation runs, spaces.
PIECES = r"\d| ?[A-Za-z_]+| ?[^\sA-Za-z_\d]+|\s+"


def build_tokenizer(
    folder: Path,
    family: str = "chatml",
    alphabet: str = PRINTABLE,
    chat_template: str | None = None,
    corpus: list[str] | None = None,
    specials: tuple[str, ...] = (),
):
    """A tokenizer with the family's special tokens and chat template: one token per
    character, or BPE merges learned from `corpus` (rendered conversations) on top of them.
    `specials`: more special tokens, one id each (a published template's own)."""
    from tokenizers import AddedToken, Regex, Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import PreTrainedTokenizerFast

    template, named = FAMILIES[family]
    every = [*SPECIAL_TOKENS, *(t for t in specials if t not in SPECIAL_TOKENS)]
    chars = sorted(set(alphabet))
    if corpus is None:
        vocab = {tok: i for i, tok in enumerate([*every, *chars])}
        core = Tokenizer(models.BPE(vocab=vocab, merges=[], unk_token="<unk>"))
    else:
        core = Tokenizer(models.BPE(unk_token="<unk>"))
        core.pre_tokenizer = pre_tokenizers.Split(Regex(PIECES), behavior="isolated")
        trainer = trainers.BpeTrainer(
            vocab_size=len(every) + len(chars) + 512,
            special_tokens=every,
            initial_alphabet=chars,
            show_progress=False,
        )
        core.train_from_iterator(corpus, trainer)
    core.decoder = decoders.Fuse()
    core.add_special_tokens([AddedToken(t, special=True, normalized=False) for t in every])
    tokenizer = PreTrainedTokenizerFast(
        tokenizer_object=core,
        unk_token="<unk>",
        pad_token=named["pad"],
        eos_token=named["eos"],
        bos_token=named["bos"],
    )
    tokenizer.chat_template = chat_template or template
    folder.mkdir(parents=True, exist_ok=True)
    tokenizer.save_pretrained(folder)
    return tokenizer


def build_model(
    folder: Path,
    vocab_size: int,
    *,
    eos_id: int,
    pad_id: int,
    bos_id: int | None,
    hidden: int = 64,
    layers: int = 2,
    heads: int = 4,
    seed: int = 0,
):
    """A Llama-architecture causal LM with random weights, saved as safetensors."""
    import torch
    from transformers import GenerationConfig, LlamaConfig, LlamaForCausalLM

    config = LlamaConfig(
        vocab_size=vocab_size,
        hidden_size=hidden,
        intermediate_size=hidden * 2,
        num_hidden_layers=layers,
        num_attention_heads=heads,
        num_key_value_heads=heads,
        max_position_embeddings=512,
        tie_word_embeddings=True,
        eos_token_id=eos_id,
        pad_token_id=pad_id,
        bos_token_id=bos_id,
    )
    torch.manual_seed(seed)
    model = LlamaForCausalLM(config)
    model.generation_config = GenerationConfig(eos_token_id=eos_id, pad_token_id=pad_id, bos_token_id=bos_id)
    model.save_pretrained(folder)
    return model


def build_tiny(
    folder: str | Path,
    family: str = "chatml",
    *,
    alphabet: str = PRINTABLE,
    chat_template: str | None = None,
    seed: int = 0,
    hidden: int = 64,
    layers: int = 2,
    corpus: list[str] | None = None,
    specials: tuple[str, ...] = (),
) -> Path:
    """Tokenizer and model in one folder, loadable with `from_pretrained(folder)`; with a
    `corpus`, the tokenizer's merges are learned from it."""
    from transformers.utils import logging

    logging.disable_progress_bar()
    folder = Path(folder)
    tokenizer = build_tokenizer(folder, family, alphabet, chat_template, corpus, specials)
    build_model(
        folder,
        len(tokenizer),
        eos_id=tokenizer.eos_token_id,
        pad_id=tokenizer.pad_token_id,
        bos_id=tokenizer.bos_token_id,
        hidden=hidden,
        layers=layers,
        seed=seed,
    )
    return folder


def build_warm(
    folder: str | Path, conversations: Path, *, family: str = "chatml", steps: int = 600, seed: int = 0
) -> Path:
    """A tiny model whose tokenizer merges are learned from `conversations` (a JSONL file
    `rlvr render` reads) and which is then warm-started on them (toy/warmup.py)."""
    from rlvr_cli.toy import warmup

    corpus = warmup.rendered_texts(conversations, *FAMILIES[family])
    build_tiny(folder, family, seed=seed, corpus=corpus)
    warmup.warm_up(folder, conversations, steps=steps, seed=seed)
    return Path(folder)


def main(argv: list[str] | None = None) -> None:
    """`python -m rlvr_cli.toy.tiny DIR [--family F] [--alphabet A] [--warm-up CONVERSATIONS]`."""
    import argparse

    parser = argparse.ArgumentParser(
        prog="python -m rlvr_cli.toy.tiny", description="Build a tiny random-weight model and tokenizer in DIR."
    )
    parser.add_argument("folder", type=Path)
    parser.add_argument("--family", choices=sorted(FAMILIES), default="chatml")
    parser.add_argument("--alphabet", choices=sorted(ALPHABETS), default="printable")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument(
        "--warm-up",
        type=Path,
        metavar="CONVERSATIONS",
        help="learn the tokenizer's merges from these conversations (JSONL), then train on their assistant turns",
    )
    parser.add_argument("--warm-up-steps", type=int, default=600)
    args = parser.parse_args(argv)
    if args.warm_up is not None:
        print(build_warm(args.folder, args.warm_up, family=args.family, steps=args.warm_up_steps, seed=args.seed))
        return
    print(build_tiny(args.folder, args.family, alphabet=ALPHABETS[args.alphabet], seed=args.seed))


if __name__ == "__main__":
    main()
