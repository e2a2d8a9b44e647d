"""`lookup`: the answer is a digit only a tool can tell; look it up, then answer with it.

Each task names a box and hides its digit (`secret`, never in the prompt). The one tool,
`open_box`, returns the digit of the session's box. The verifier reads the server's own call
log and the final message: `correct` is 1 when the box was opened and the final message is
exactly its digit — an answer given without looking earns nothing, even a lucky one. Digits
are drawn at random per task, so memorising the training boxes is worth nothing on boxes
never trained on (the holdout): the reward rises only by learning to call the tool and to
copy its result. The learning example (`rlvr init --template
lookup`) trains a tiny model on it in minutes on CPU.
"""

from __future__ import annotations

import json
import random
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from rlvr_cli.env.server import ResourcesServer, ToolError, tool
from rlvr_cli.env.verdict import Verdict


@dataclass
class Box:
    secret: str
    marker: str | None


class LookupServer(ResourcesServer):
    offered = ("open_box",)

    def seed(self, task: dict[str, Any]) -> Box:
        secret = task.get("secret")
        if not isinstance(secret, str) or not secret:
            raise ToolError("a lookup task hides a non-empty 'secret' string")
        marker = task.get("marker")  # isolation audits plant a unique value per session
        return Box(secret, None if marker is None else str(marker))

    def snapshot(self, state: Box) -> dict[str, Any]:
        return {"secret": state.secret, "marker": state.marker}  # opening the box changes nothing

    @tool
    def open_box(self, state: Box) -> str:
        """Open the box and read the digit inside."""
        return state.secret if state.marker is None else f"{state.secret} {state.marker}"

    def verify(self, state: Box, task: dict[str, Any], calls: list[dict[str, Any]], final_message: str) -> Verdict:
        looked = any(call.get("tool") == "open_box" for call in calls)
        correct = float(looked and final_message.strip() == state.secret)
        return Verdict("ok", correct, {"correct": correct, "looked": float(looked)})


# ── the learning example's data ──────────────────────────────────────────────────────────

PROMPT = "What is in box {box}?"
SPLITS = {"train": range(0, 400), "holdout": range(400, 500), "sealed_eval": range(500, 600)}


def tasks(seed: int = 0) -> list[dict[str, Any]]:
    """600 boxes with a random digit each; the split is by box, so no holdout box is trained on."""
    draw = random.Random(seed)
    return [
        {
            "id": f"box-{box}",
            "prompt": PROMPT.format(box=box),
            "secret": str(draw.randrange(10)),
            "domain": "lookup",
            "difficulty": "easy",
        }
        for box in range(600)
    ]


def write_splits(folder: Path, seed: int = 0) -> dict[str, Path]:
    """train/holdout/sealed_eval JSONL files (and all.jsonl, the source) in `folder`."""
    return write_rows(folder, tasks(seed))


def write_rows(folder: Path, rows: list[dict[str, Any]]) -> dict[str, Path]:
    """600 generated tasks as the splits `SPLITS` cuts them (and all.jsonl, the source) in
    `folder`: the split is by task, so no holdout task is trained on."""
    parts = {name: [rows[i] for i in span] for name, span in SPLITS.items()} | {"all": rows}
    folder.mkdir(parents=True, exist_ok=True)
    paths = {}
    for name, part in parts.items():
        paths[name] = folder / f"{name}.jsonl"
        paths[name].write_text("".join(json.dumps(r) + "\n" for r in part), encoding="utf-8")
    return paths


#: the demonstrations' call id: 9 letters and digits, which Mistral's templates require (ChatML
#: and the other families' templates do not render it)
CALL_ID = "c4llb0x00"


def demonstrations(count: int = 400, seed: int = 1, look: float = 0.5) -> list[dict[str, Any]]:
    """Conversations a tiny model is warm-started on (`python -m rlvr_cli.toy.tiny --warm-up`):
    a share `look` open the box and answer with its digit, the rest guess "0" without looking.
    Their boxes (600–999) are none of the tasks'. After 600 warm-up steps the model copies the
    digit whenever it looks but looks only about half the time: what RL adds is measured from
    there. (With `look` 0.35 the copying is only half learnt, and GRPO at lr 2e-3 can lose
    the tool altogether: every group then earns 0 and nothing brings it back.)"""
    draw = random.Random(seed)
    schemas = LookupServer().schemas()
    out = []
    for _ in range(count):
        box, secret = draw.randrange(600, 1000), str(draw.randrange(10))
        messages: list[dict[str, Any]] = [{"role": "user", "content": PROMPT.format(box=box)}]
        if draw.random() < look:
            call = {"type": "function", "id": CALL_ID, "function": {"name": "open_box", "arguments": {}}}
            messages += [
                {"role": "assistant", "content": "", "tool_calls": [call]},
                {"role": "tool", "tool_call_id": CALL_ID, "content": secret},
                {"role": "assistant", "content": secret},
            ]
        else:
            messages.append({"role": "assistant", "content": "0"})
        out.append({"messages": messages, "tools": schemas})
    return out


def write_demonstrations(path: Path, count: int = 400, seed: int = 1) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("".join(json.dumps(c) + "\n" for c in demonstrations(count, seed)), encoding="utf-8")
    return path
