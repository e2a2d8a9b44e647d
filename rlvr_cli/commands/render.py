"""`rlvr render`: what the model sees, which tokens are trained, and the template's traps."""

from __future__ import annotations

import json
import sys
from pathlib import Path

from rlvr_cli.chat.render import ChatRenderer, Rendered, read_conversations
from rlvr_cli.commands.common import load_valid_contract

LEGEND = "legend: trained tokens (loss mask 1) in green, untrained dimmed; ⏎ is a newline in the text"


def run_render(contract_path: Path, conversations: Path, fmt: str) -> int:
    contract = load_valid_contract(contract_path)
    renderer = ChatRenderer.from_contract(contract, contract_path.resolve().parent)
    rows = read_conversations(conversations)
    results = [renderer.render(conv) for conv in rows]
    if fmt == "json":
        print(json.dumps([r.as_json() for r in results], ensure_ascii=False))
    else:
        _print_text(results, [c.line for c in rows])
    errors = sum(c.severity == "error" for r in results for c in r.checks)
    warnings = sum(c.severity == "warning" for r in results for c in r.checks)
    print(f"{len(results)} conversation(s) rendered: {errors} error(s), {warnings} warning(s)", file=sys.stderr)
    return 1 if errors else 0


def _visible(text: str) -> str:
    return text.replace("\n", "⏎\n")


def _print_text(results: list[Rendered], lines: list[int]) -> None:
    from rich.console import Console
    from rich.text import Text

    console = Console(highlight=False, soft_wrap=True)
    console.print(LEGEND, style="italic")
    for result, line in zip(results, lines, strict=True):
        trained = sum(result.loss_mask)
        console.rule(f"conversation on line {line}: {len(result.input_ids)} tokens, {trained} trained")
        for span in result.spans:
            state = "trained" if span.trainable else "not trained"
            header = f"[turn {span.turn} {span.role} {span.part}, tokens {span.start}-{span.end}, {state}]"
            console.print(Text(header, style="bold" if span.trainable else "dim"))
            console.print(
                Text(_visible(result.text_of(span.start, span.end)), style="green" if span.trainable else "dim")
            )
        for check in result.checks:
            style = "bold red" if check.severity == "error" else "yellow"
            console.print(Text(f"{check.severity}[{check.code}] {check.message}", style=style))
