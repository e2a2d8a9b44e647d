"""Warm-start a tiny local model on demonstration conversations (supervised, assistant tokens only).

A random tiny model cannot emit a tool call by chance, so the learning examples first teach
it the format from a few hundred conversations, rendered through its own chat template with
the same loss mask `rlvr render` shows. What RL then adds is measured from that start.

    python -m rlvr_cli.toy.tiny MODEL_DIR --warm-up CONVERSATIONS.jsonl [--warm-up-steps N]
"""

from __future__ import annotations

import random
import sys
import time
from dataclasses import replace
from pathlib import Path
from typing import Any

from rlvr_cli.chat.conversation import RenderError, read_conversations
from rlvr_cli.chat.jinja import CompiledTemplate


def rendered_texts(conversations: Path, template: str, specials: dict[str, str | None]) -> list[str]:
    """Each conversation rendered through `template` (no tokenizer needed): the corpus a tiny
    tokenizer learns its merges from. `specials`: {"bos": ..., "eos": ...} as in families.py."""
    compiled = CompiledTemplate(template, {f"{k}_token": v for k, v in specials.items() if v})
    return [compiled.text(c.messages, c.tools, False) for c in read_conversations(conversations)]


def warm_up(
    folder: str | Path,
    conversations: Path,
    *,
    steps: int = 300,
    lr: float = 1e-2,
    batch: int = 16,
    seed: int = 0,
    schemas: bool = True,
    ramp: int = 0,
) -> float:
    """Train the model in `folder` on the assistant turns of `conversations` (the loss mask
    `rlvr render` shows) and save it there; returns the last batch's loss. `schemas=False`:
    on the conversations rendered without their tool schemas (training_rows). `ramp`: the rate
    rises linearly over the first `ramp` steps (0: constant from the first)."""
    import torch
    from transformers import AutoModelForCausalLM

    from rlvr_cli.chat.render import ChatRenderer, load_tokenizer

    folder = Path(folder)
    tokenizer = load_tokenizer(folder)
    renderer = ChatRenderer(tokenizer, tokenizer.chat_template, [tokenizer.eos_token])
    rows = training_rows(renderer, conversations, schemas=schemas)
    torch.manual_seed(seed)
    draw = random.Random(seed)
    model = AutoModelForCausalLM.from_pretrained(folder)
    model.train()
    optimizer = torch.optim.AdamW(model.parameters(), lr=lr, weight_decay=0.0)
    rate = torch.optim.lr_scheduler.LambdaLR(optimizer, lambda step: min(1.0, (step + 1) / ramp) if ramp else 1.0)
    loss = torch.tensor(0.0)
    started = time.monotonic()
    for step in range(steps):
        if step and step % max(steps // 10, 1) == 0:  # minutes on a small machine: say how far it is
            took = time.monotonic() - started
            print(
                f"  warm-up step {step}/{steps}, loss {loss.item():.3f}, {took:.0f} s so far "
                f"(~{took / step * (steps - step):.0f} s to go)",
                file=sys.stderr,
                flush=True,
            )
        ids, labels, attention = _batch([draw.choice(rows) for _ in range(batch)], renderer.pad_id)
        loss = model(input_ids=ids, attention_mask=attention, labels=labels).loss
        optimizer.zero_grad()
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        optimizer.step()
        rate.step()
    model.save_pretrained(folder)
    return float(loss.detach())


def training_rows(renderer: Any, conversations: Path, *, schemas: bool = True) -> list[tuple[list[int], list[int]]]:
    """(token ids, loss mask) of each conversation as `rlvr render` shows it.

    `schemas=False` leaves out the tool schemas: the same assistant tokens after a shorter
    context. A warm start's first phase on these can let a tiny model learn to copy a tool's
    answer that a long tool preamble hides (Llama 3.1's template, 2,000 demonstrations: 1.9 nats
    on the copied digit after 600 steps, 0.002 when 300 steps without the schemas came first) —
    not always: benchmarks/README.md "The lookup task through other families' published templates"."""
    rows = []
    for conversation in read_conversations(conversations):
        if not schemas:
            conversation = replace(conversation, tools=None)
        rendered = renderer.render(conversation)
        if not rendered.input_ids:
            raise RenderError(f"{conversations}:{conversation.line}: the chat template cannot render it")
        if not any(rendered.loss_mask):
            raise RenderError(f"{conversations}:{conversation.line}: no assistant token to learn from")
        rows.append((rendered.input_ids, rendered.loss_mask))
    return rows


def _batch(rows: list[tuple[list[int], list[int]]], pad: int) -> tuple:
    import torch

    width = max(len(ids) for ids, _ in rows)
    ids = torch.full((len(rows), width), pad, dtype=torch.long)
    labels = torch.full((len(rows), width), -100, dtype=torch.long)
    attention = torch.zeros((len(rows), width), dtype=torch.long)
    for i, (row, mask) in enumerate(rows):
        ids[i, : len(row)] = torch.tensor(row)
        attention[i, : len(row)] = 1
        labels[i, : len(row)] = torch.tensor([t if m else -100 for t, m in zip(row, mask, strict=True)])
    return ids, labels, attention
