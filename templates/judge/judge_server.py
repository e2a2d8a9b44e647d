"""A stand-in judge for `rlvr init --template judge`: an OpenAI-compatible `/v1/chat/completions`
endpoint that grades by rule (pass when the text after the response's last "answer is" equals
the reference answer, case and punctuation aside) and replies in the strict format rlvr asks for.

It lets the template validate, audit and train on a machine with no model server. Replace it with
a real judge model behind any OpenAI-compatible server (for example `vllm serve MODEL --port 8011`)
and set `environment.judge.model` to that model's name.

    python judge_server.py --port 8011
"""

from __future__ import annotations

import argparse
import json
import re
import time
from collections.abc import Callable
from typing import Any

from fastapi import FastAPI, HTTPException, Request

_SECTION = re.compile(r"^(RUBRIC|TASK|REFERENCE ANSWER|RESPONSE \(a JSON string\)):\n", re.MULTILINE)


def sections(text: str) -> dict[str, str]:
    """The user message's sections, by heading."""
    parts = _SECTION.split(text)
    return {parts[i]: parts[i + 1].strip() for i in range(1, len(parts) - 1, 2)}


def _norm(text: str) -> str:
    return re.sub(r"[^\w/.-]+", " ", text.lower()).strip(" .")


def by_rule(reference: str, response: str) -> bool:
    """Pass when what follows the last "answer is" is the reference answer."""
    found = re.split(r"answer is", response, flags=re.IGNORECASE)
    return len(found) > 1 and _norm(found[-1]) == _norm(reference)


def make_app(
    decide: Callable[[dict[str, str], str], str] | None = None, fail: Callable[[int], int] | None = None
) -> FastAPI:
    """The endpoint; `decide(sections, response) -> reply text` and `fail(request_number) -> HTTP
    status or 0` let tests build judges that misbehave."""
    app = FastAPI()
    app.state.requests = 0

    def honest(parts: dict[str, str], response: str) -> str:
        passed = by_rule(parts.get("REFERENCE ANSWER", ""), response)
        return json.dumps({"verdict": "pass" if passed else "fail", "reason": "compared with the reference"})

    @app.post("/v1/chat/completions")
    async def complete(request: Request) -> dict[str, Any]:
        app.state.requests += 1
        status = fail(app.state.requests) if fail else 0
        if status:
            raise HTTPException(status, "scripted failure")
        body = await request.json()
        parts = sections(body["messages"][-1]["content"])
        response = json.loads(parts.get("RESPONSE (a JSON string)", '""'))
        reply = (decide or honest)(parts, response)
        return {
            "id": f"judge-{app.state.requests}",
            "object": "chat.completion",
            "created": int(time.time()),
            "model": body.get("model", "judge"),
            "choices": [{"index": 0, "message": {"role": "assistant", "content": reply}, "finish_reason": "stop"}],
            "usage": {"prompt_tokens": 0, "completion_tokens": 0, "total_tokens": 0},
        }

    return app


app = make_app()

if __name__ == "__main__":
    import uvicorn

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--port", type=int, default=8011)
    uvicorn.run(app, host="127.0.0.1", port=parser.parse_args().port, log_level="warning")
