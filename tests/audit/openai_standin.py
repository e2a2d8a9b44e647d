"""A stand-in OpenAI-compatible chat endpoint for reward profiling tests: a rule, not a model.
Model `sum` answers "a+b=" prompts with the right sum, `wrong` with the sum plus one; `slow`
sleeps, `malformed` answers text that is not JSON, `few` gives one choice whatever n asks. It
records each request's Authorization header."""

from __future__ import annotations

import re
import time
from typing import Any

from fastapi import FastAPI, Request
from fastapi.responses import PlainTextResponse


def make_app() -> FastAPI:
    app = FastAPI()
    app.state.keys = []

    @app.post("/v1/chat/completions")
    async def complete(request: Request) -> Any:
        app.state.keys.append(request.headers.get("authorization", ""))
        body = await request.json()
        model, n = body.get("model"), int(body.get("n") or 1)
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
