"""A stand-in OpenAI-compatible chat endpoint for reward profiling tests: a rule, not a model.
Model `sum` answers "a+b=" prompts with the right sum, `wrong` with the sum plus one; `slow`
sleeps, `malformed` answers text that is not JSON, `few` gives one choice whatever n asks. On
the tool-use template's tasks, `editor` calls `replace_in_file` on the file the prompt names (its
native function calling) and then says it is done, `talker` says it is done without a call. It
records each request's Authorization header and the tools it was offered."""

from __future__ import annotations

import json
import re
import time
from typing import Any

from fastapi import FastAPI, Request
from fastapi.responses import PlainTextResponse


def make_app() -> FastAPI:
    app = FastAPI()
    app.state.keys = []
    app.state.tools = []

    @app.post("/v1/chat/completions")
    async def complete(request: Request) -> Any:
        app.state.keys.append(request.headers.get("authorization", ""))
        body = await request.json()
        model, n = body.get("model"), int(body.get("n") or 1)
        app.state.tools.append([t["function"]["name"] for t in body.get("tools") or []])
        if model in ("editor", "talker"):
            return _agent(model, body["messages"])
        if model == "slow":
            time.sleep(3)
        if model == "malformed":
            return PlainTextResponse("this is not JSON")
        found = re.search(r"(\d+)\+(\d+)=", body["messages"][-1]["content"])
        total = int(found[1]) + int(found[2]) if found else 0
        answer = str(total + (1 if model == "wrong" else 0))
        choices = [
            {"index": i, "message": {"role": "assistant", "content": answer}, "finish_reason": "stop"}
            for i in range(1 if model == "few" else n)
        ]
        return {
            "id": "standin",
            "object": "chat.completion",
            "created": int(time.time()),
            "model": model,
            "choices": choices,
            "usage": {"prompt_tokens": 4, "completion_tokens": n, "total_tokens": 4 + n},
        }

    return app


def _agent(model: str, messages: list[dict[str, Any]]) -> dict[str, Any]:
    message: dict[str, Any] = {"role": "assistant", "content": "Done."}
    target = re.search(r"in (\S+) and touch", str(messages[-1].get("content")))
    if model == "editor" and messages[-1]["role"] == "user" and target:
        arguments = {"path": target[1], "old": "version = 1", "new": "version = 2"}
        function = {"name": "replace_in_file", "arguments": json.dumps(arguments)}
        message = {
            "role": "assistant",
            "content": None,
            "tool_calls": [{"id": "c1", "type": "function", "function": function}],
        }
    finish = "tool_calls" if message.get("tool_calls") else "stop"
    return {
        "id": "standin",
        "object": "chat.completion",
        "created": int(time.time()),
        "model": model,
        "choices": [{"index": 0, "message": message, "finish_reason": finish}],
        "usage": {"prompt_tokens": 4, "completion_tokens": 3, "total_tokens": 7},
    }
