"""A stand-in task generator behind an OpenAI-compatible endpoint: a rule, not a model. The
request's seed decides the task; seeds ending in 3 carry a wrong reference (its own cases claim
a + b, its solution returns a − b), in 5 tests no mutant fails (a clamp tested only inside its
range), in 7 an answer leaked in the statement, in 9 a reply that is not JSON. `fail_after`
answers HTTP 500 to every request past that many (a generator that goes down mid-run)."""

from __future__ import annotations

import json
import time
from typing import Any

from fastapi import FastAPI, HTTPException, Request


def answer_task(seed: int) -> str:
    """An answer task: the statement and a program that prints its answer (seed 2: it prints nothing)."""
    program = "pass" if seed == 2 else f"print({seed + 11} * 3)"
    return json.dumps({"prompt": f"What is {seed + 11} times 3?", "program": program})


def tool_task(seed: int) -> str:
    """A file-edit task for the tool-use template and a reference solution (seed 2: a wrong one)."""
    new = "version = 3" if seed == 2 else "version = 2"
    solution = {
        "calls": [
            {"tool": "replace_in_file", "arguments": {"path": "config/app.toml", "old": "version = 1", "new": new}}
        ],
        "final_message": "Set version to 2.",
    }
    fields = {"target": "config/app.toml", "key": "version", "value": "2", "domain": "file_edit"}
    prompt = f"Set `version` to 2 in config/app.toml and touch nothing else (variant {seed})."
    return json.dumps({"prompt": prompt, "fields": fields, "solution": solution})


def task_for(seed: int) -> str:
    if seed % 10 == 9:
        return "Sorry, I cannot help with that."
    if seed % 10 == 3:
        task = {
            "prompt": f"Write a Python function plus{seed}(a, b) that returns a + b.",
            "function": f"plus{seed}",
            "solution": f"def plus{seed}(a, b):\n    return a - b\n",
            "inputs": [[1, 2], [5, 5]],
            "cases": [{"args": [1, 2], "expected": 3}, {"args": [5, 5], "expected": 10}],
        }
    elif seed % 10 == 5:
        task = {
            "prompt": f"Write a Python function clamp{seed}(x) that limits x to the range 0..10.",
            "function": f"clamp{seed}",
            "solution": f"def clamp{seed}(x):\n    return max(0, min(10, x))\n",
            "inputs": [[5], [7]],
        }
    elif seed % 10 == 7:
        task = {
            "prompt": f"Write a Python function label{seed}(n) returning 'item-' and n: label{seed}(4) is 'item-4'.",
            "function": f"label{seed}",
            "solution": f"def label{seed}(n):\n    return 'item-' + str(n)\n",
            "inputs": [[4], [10], [0]],
        }
    else:
        task = {
            "prompt": f"Write a Python function shift{seed}(a, b) that returns a + b + {seed}, or 0 when a < b.",
            "function": f"shift{seed}",
            "solution": f"def shift{seed}(a, b):\n    if a < b:\n        return 0\n    return a + b + {seed}\n",
            "inputs": [[3, 2], [1, 2], [9, 4], [2, 2]],
        }
    return "```json\n" + json.dumps(task) + "\n```"


def make_app(fail_after: int | None = None) -> FastAPI:
    app = FastAPI()
    app.state.requests = 0

    @app.post("/v1/chat/completions")
    async def complete(request: Request) -> Any:
        app.state.requests += 1
        if fail_after is not None and app.state.requests > fail_after:
            raise HTTPException(500, "the generator is down")
        body = await request.json()
        write = {"answers": answer_task, "tools": tool_task}.get(body.get("model"), task_for)
        return {
            "id": f"gen-{app.state.requests}",
            "object": "chat.completion",
            "created": int(time.time()),
            "model": body.get("model"),
            "choices": [
                {
                    "index": 0,
                    "message": {
                        "role": "assistant",
                        "content": write(int(body["seed"])),
                    },
                    "finish_reason": "stop",
                }
            ],
        }

    return app
