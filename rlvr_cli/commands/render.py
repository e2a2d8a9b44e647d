"""`rlvr render`: what the model sees, which tokens are trained, and the template's traps."""

from __future__ import annotations

import io
import json
import os
import sys
from pathlib import Path

from rlvr_cli.chat.conversation import Rendered, read_conversations
from rlvr_cli.commands.common import load_valid_contract, require_extra
from rlvr_cli.commands.formats import check, emit, reporter

LEGEND = "legend: trained tokens (loss mask 1) in green, untrained dimmed; ⏎ is a newline in the text"


def run_render(contract_path: Path, conversations: Path, fmt: str) -> int:
    check("render", fmt)
    contract = load_valid_contract(contract_path)
    rows = read_conversations(conversations)  # a malformed file is refused before any model loads
    require_extra("train", "transformers", "tokenizers")
    from rlvr_cli.chat.render import ChatRenderer

    renderer = ChatRenderer.from_contract(contract, contract_path.resolve().parent)
    results = [renderer.render(conv) for conv in rows]
    for result, conv in zip(results, rows, strict=True):
        result.line = conv.line
    emit("render", fmt, results)
    errors = sum(c.severity == "error" for r in results for c in r.checks)
    warnings = sum(c.severity == "warning" for r in results for c in r.checks)
    print(f"{len(results)} conversation(s) rendered: {errors} error(s), {warnings} warning(s)", file=sys.stderr)
    fmt, named = renderer.tool_format, contract.environment.tool_format
    said = "environment.tool_format" if named else "detected from the chat template"
    print(
        f"tool calls read as: {fmt.name} ({fmt.families}; {said})" if fmt else "tool calls: none rlvr reads",
        file=sys.stderr,
    )
    return 1 if errors else 0


@reporter("render", "json")
def _json(results: list[Rendered]) -> str:
    return json.dumps([r.as_json() for r in results], ensure_ascii=False)


def _visible(text: str) -> str:
    return text.replace("\n", "⏎\n")


@reporter("render", "text")
def _text(results: list[Rendered]) -> str:
    from rich.console import Console
    from rich.text import Text

    out = io.StringIO()
    color = sys.stdout.isatty() and not os.environ.get("NO_COLOR")
    console = Console(file=out, highlight=False, soft_wrap=True, force_terminal=color, no_color=not color)
    console.print(LEGEND, style="italic")
    for result in results:
        trained = sum(result.loss_mask)
        console.rule(f"conversation on line {result.line}: {len(result.input_ids)} tokens, {trained} trained")
        for span in result.spans:
            state = "trained" if span.trainable else "not trained"
            turns = f"turn {span.turn} {span.role}"
            if span.last_turn != span.turn:  # the template renders these turns as one (or rewrote them)
                turns = f"turns {span.turn}-{span.last_turn} from {span.role}"
            header = f"[{turns} {span.part}, tokens {span.start}-{span.end}, {state}]"
            console.print(Text(header, style="bold" if span.trainable else "dim"))
            console.print(
                Text(_visible(result.text_of(span.start, span.end)), style="green" if span.trainable else "dim")
            )
        for c in result.checks:
            style = "bold red" if c.severity == "error" else "yellow"
            console.print(Text(f"{c.severity}[{c.code}] {c.message}", style=style))
    return out.getvalue().rstrip("\n")
