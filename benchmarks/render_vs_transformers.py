"""Render + loss mask throughput: rlvr's ChatRenderer vs transformers' assistant-token mask.

Same conversations, same tiny tokenizer, same template (ChatML with {% generation %} tags,
which transformers needs for `return_assistant_tokens_mask`). rlvr does more per
conversation: it renders the prefixes that locate every assistant turn, checks the
generation prompt, history rewriting, stop tokens, BOS, dropped tool traffic and
retokenization. Each timed pass builds a fresh renderer, so no rendering is reused across
passes. `--group G` builds the conversations as RL produces them: G completions per prompt
(the completions differ, the prompt is shared). Usage:

    .venv/bin/python benchmarks/render_vs_transformers.py [--conversations 400] [--repeat 3] [--group 8]
"""

from __future__ import annotations

import argparse
import random
import tempfile
import time
from pathlib import Path

from rlvr_cli.chat.families import CHATML_GENERATION
from rlvr_cli.chat.render import ChatRenderer, Conversation
from rlvr_cli.toy.tiny import build_tokenizer


def conversations(n: int, max_turns: int = 4, seed: int = 0, group: int = 1) -> list[list[dict]]:
    """n conversations; with group > 1, n // group prompts with `group` completions each."""
    rng = random.Random(seed)
    out = []
    while len(out) < n:
        system = [{"role": "system", "content": "You add numbers."}] if rng.random() < 0.5 else []
        a, b = rng.randint(0, 999), rng.randint(0, 999)
        prompt = [*system, {"role": "user", "content": f"What is {a}+{b}? Show your work."}]
        turns = rng.randint(1, max_turns)
        for _ in range(min(group, n - len(out))):
            messages = list(prompt)
            for t in range(turns):
                if t:
                    c, d = rng.randint(0, 999), rng.randint(0, 999)
                    messages.append({"role": "user", "content": f"What is {c}+{d}? Show your work."})
                    a, b = c, d
                answer = f"{a} plus {b} makes {a + b}. " * rng.randint(1, 5)
                messages.append({"role": "assistant", "content": answer})
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
    parser.add_argument("--group", type=int, default=1, help="completions per prompt (1: all distinct)")
    parser.add_argument("--template-file", type=Path, help="another ChatML template with generation tags")
    args = parser.parse_args()
    template = args.template_file.read_text(encoding="utf-8") if args.template_file else CHATML_GENERATION
    tok = build_tokenizer(Path(tempfile.mkdtemp()) / "tok", "chatml-generation", chat_template=template)
    convs = conversations(args.conversations, args.max_turns, group=args.group)
    renderer = ChatRenderer(tok, template, ["<|im_end|>"])
    print(f"prefixes read off one rendering: {renderer.compiled.tracker is not None}")

    def ours() -> None:
        fresh = ChatRenderer(tok, template, ["<|im_end|>"])  # nothing cached from an earlier pass
        for messages in convs:
            fresh.render(Conversation(messages))

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
