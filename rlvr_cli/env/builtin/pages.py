"""`pages`: read a code page by page where a context holds one page — compress between pages.

Each task hides a code of `PAGES` digits, one per page. `read_next` returns the next page's
digit, one page per context: a second read in the same context is refused until the agent calls
`compress(notes)`, which ends the session and continues the episode in a fresh one whose prompt
is the task and the notes (`NewSession.compress`, env/server.py). So the agent must carry what
it read in its own notes. The verifier reads the server's state and the final message:
`correct` is 1 when every page was read and the final message is exactly the code, `read_all`
when every page was read (`compressed` says whether it compressed). The example (`rlvr init
--template compress`) warm-starts a tiny model on demonstrations of the whole path, then trains
on episodes of `PAGES` sessions.
"""

from __future__ import annotations

import json
import random
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from rlvr_cli.env.builtin.lookup import write_rows
from rlvr_cli.env.server import NewSession, ResourcesServer, ToolError, tool
from rlvr_cli.env.verdict import Verdict

PAGES = 2
PROMPT = "Read the code in ledger {ledger}, one page at a time."
NOTES = "{prompt}\nNotes: {notes}"


@dataclass
class Ledger:
    code: str
    prompt: str
    marker: str | None
    read: int = 0
    in_context: int = 0  # pages read since the last compression


class PagesServer(ResourcesServer):
    offered = ("read_next", "compress")

    def seed(self, task: dict[str, Any]) -> Ledger:
        code = task.get("code")
        if not isinstance(code, str) or not code.isdigit():
            raise ToolError("a pages task hides a 'code' string of digits")
        marker = task.get("marker")  # isolation audits plant a unique value per session
        return Ledger(code, str(task.get("prompt", "")), None if marker is None else str(marker))

    def snapshot(self, state: Ledger) -> dict[str, Any]:
        # what verify judges: the pages read (the per-context count only paces the reads; a compression
        # that changes nothing else is no collateral damage)
        return {"code": state.code, "read": state.read, "marker": state.marker}

    @tool
    def read_next(self, state: Ledger) -> str:
        """Read the next page of the ledger: one digit."""
        if state.read >= len(state.code):
            return "no pages left"
        if state.in_context:
            return "error: this context holds one page; compress your notes first"
        state.read, state.in_context = state.read + 1, 1
        digit = state.code[state.read - 1]
        return digit if state.marker is None else f"{digit} {state.marker}"

    @tool
    def compress(self, state: Ledger, notes: str) -> NewSession:
        """Carry your notes into a fresh context and go on reading there."""
        state.in_context = 0
        return NewSession.compress(NOTES.format(prompt=state.prompt, notes=notes[:200]), "compressed")

    def verify(self, state: Ledger, task: dict[str, Any], calls: list[dict[str, Any]], final_message: str) -> Verdict:
        whole = state.read == len(state.code)
        correct = float(whole and final_message.strip() == state.code)
        compressed = float(any(call.get("tool") == "compress" for call in calls))
        return Verdict("ok", correct, {"correct": correct, "read_all": float(whole), "compressed": compressed})


# ── the example's data ───────────────────────────────────────────────────────────────────


def _code(draw: random.Random) -> str:
    return "".join(str(draw.randrange(10)) for _ in range(PAGES))


def tasks(seed: int = 0) -> list[dict[str, Any]]:
    """600 ledgers with a random code each; split by ledger, so no holdout ledger is trained on."""
    draw = random.Random(seed)
    return [
        {
            "id": f"ledger-{n}",
            "prompt": PROMPT.format(ledger=n),
            "code": _code(draw),
            "domain": "pages",
            "difficulty": "medium",
        }
        for n in range(600)
    ]


def write_splits(folder: Path, seed: int = 0) -> dict[str, Path]:
    """train/holdout/sealed_eval JSONL files (and all.jsonl, the source) in `folder`."""
    return write_rows(folder, tasks(seed))


def _reads(digits: str, first: int) -> list[dict[str, Any]]:
    out: list[dict[str, Any]] = []
    for n, digit in enumerate(digits, start=first):
        call = {"type": "function", "id": f"call_{n}", "function": {"name": "read_next", "arguments": {}}}
        out += [
            {"role": "assistant", "content": "", "tool_calls": [call]},
            {"role": "tool", "tool_call_id": f"call_{n}", "content": digit},
        ]
    return out


def demonstrations(count: int = 400, seed: int = 1) -> list[dict[str, Any]]:
    """Every session of whole episodes, each a conversation a tiny model is warm-started on
    (`python -m rlvr_cli.toy.tiny --warm-up`): read a page and compress with every digit read so
    far as the notes; in the last session, read the last page and answer with the code.
    Ledgers 600–999: none of the tasks'."""
    draw = random.Random(seed)
    schemas = PagesServer().schemas()
    out = []
    while len(out) < count:
        ledger, code = draw.randrange(600, 1000), _code(draw)
        prompt = PROMPT.format(ledger=ledger)
        for page in range(PAGES):
            user = prompt if page == 0 else NOTES.format(prompt=prompt, notes=code[:page])
            messages = [{"role": "user", "content": user}, *_reads(code[page], page)]
            if page < PAGES - 1:
                notes = {"notes": code[: page + 1]}
                squeeze = {"type": "function", "id": "call_9", "function": {"name": "compress", "arguments": notes}}
                messages.append({"role": "assistant", "content": "", "tool_calls": [squeeze]})
            else:
                messages.append({"role": "assistant", "content": code})
            out.append({"messages": messages, "tools": schemas})
    return out[:count]


def write_demonstrations(path: Path, count: int = 400, seed: int = 1) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("".join(json.dumps(c) + "\n" for c in demonstrations(count, seed)), encoding="utf-8")
    return path
