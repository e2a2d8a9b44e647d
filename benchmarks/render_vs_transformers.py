"""Render + loss mask throughput: rlvr's ChatRenderer vs transformers' assistant-token mask.

Same conversations, same tiny tokenizer, same template (ChatML with {% generation %} tags,
which transformers needs for `return_assistant_tokens_mask`). rlvr does more per
conversation: it renders every prefix, checks the generation prompt, history rewriting,
stop tokens, BOS and retokenization. Usage:

    .venv/bin/python benchmarks/render_vs_transformers.py [--conversations 400] [--repeat 3]
"""

from __future__ import annotations

import argparse
import random
import tempfile
import time
from pathlib import Path

from rlvr_cli.chat.families import CHATML_GENERATION
from rlvr_cli.chat.render import ChatRenderer, Conversation
from rlvr_cli.chat.tiny import build_tokenizer


def conversations(n: int, max_turns: int = 4, seed: int = 0) -> list[list[dict]]:
    rng = random.Random(seed)
    out = []
    for _ in range(n):
        messages = [{"role": "system", "content": "You add numbers."}] if rng.random() < 0.5 else []
        for _ in range(rng.randint(1, max_turns)):
            a, b = rng.randint(0, 999), rng.randint(0, 999)
            messages.append({"role": "user", "content": f"What is {a}+{b}? Show your work."})
            messages.append({"role": "assistant", "content": f"{a} plus {b} makes {a + b}. " * rng.randint(1, 5)})
        out.append(messages)
    return out


def best_of(repeat: int, fn) -> float:
    times = []
    for _ in range(repeat):
        start = time.perf_counter()
        fn()
        times.append(time.perf_counter() - start)
    return min(times)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--conversations", type=int, default=400)
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--max-turns", type=int, default=4, help="user/assistant pairs per conversation")
    args = parser.parse_args()
    tok = build_tokenizer(Path(tempfile.mkdtemp()) / "tok", "chatml-generation")
    convs = conversations(args.conversations, args.max_turns)
    renderer = ChatRenderer(tok, CHATML_GENERATION, ["<|im_end|>"])

    def ours() -> None:
        for messages in convs:
            renderer.render(Conversation(messages))

    def theirs() -> None:
        for messages in convs:
            tok.apply_chat_template(messages, tokenize=True, return_dict=True, return_assistant_tokens_mask=True)

    def prefixes() -> None:
        """The same capability without tags: apply_chat_template on every prefix, tokenized."""
        for messages in convs:
            for k in range(1, len(messages) + 1):
                tok.apply_chat_template(messages[:k], tokenize=True, return_dict=True)
                if messages[k - 1]["role"] == "assistant":
                    tok.apply_chat_template(
                        messages[: k - 1], tokenize=True, return_dict=True, add_generation_prompt=True
                    )

    ours(), theirs(), prefixes()  # warm the template caches
    t_ours, t_theirs = best_of(args.repeat, ours), best_of(args.repeat, theirs)
    t_prefixes = best_of(args.repeat, prefixes)
    n = len(convs)
    tokens = sum(len(renderer.render(Conversation(m)).input_ids) for m in convs) / n
    print(f"conversations: {n}, mean {tokens:.0f} tokens, best of {args.repeat}")
    print(f"rlvr ChatRenderer.render (mask + checks): {n / t_ours:8.0f} conversations/s")
    print(f"transformers apply_chat_template (mask):  {n / t_theirs:8.0f} conversations/s")
    print(f"apply_chat_template on every prefix:      {n / t_prefixes:8.0f} conversations/s")
    print(f"ratio rlvr / tagged mask throughput:   {t_theirs / t_ours:.2f}")
    print(f"ratio rlvr / per-prefix throughput:    {t_prefixes / t_ours:.2f}")


if __name__ == "__main__":
    main()
