"""A policy behind an OpenAI-compatible endpoint on a tool-use contract, for reward profiling:
each of the k episodes per task is the agent loop against the contract's resources server — the
task's chat sent with the server's tool schemas (OpenAI function schemas), the endpoint's own
function calling (`tool_calls`: the serving engine parses its model's call format), each call run
on the server and its output sent back as a `tool` message, until a turn without a call or
`environment.max_steps` turns — and the session is judged by the server's verify, as training
judges an episode."""

from __future__ import annotations

import os
import time
from pathlib import Path
from typing import Any

from rlvr_cli.contract.models import Contract
from rlvr_cli.errors import CannotRun


class EndpointModel:
    """`respond(items, tools)` (env/model.py's interface) through the `openai` client."""

    def __init__(self, client: Any, model: str, contract: Contract, seed: int, url: str) -> None:
        sampling = contract.hyperparameters.sampling
        self.client, self.url = client, url
        self.request = {
            "model": model,
            "temperature": sampling.temperature,
            "top_p": sampling.top_p,
            "max_tokens": contract.length.max_response_tokens,
            "seed": seed,
        }
        self.tokens = 0

    def respond(self, items: list[dict[str, Any]], tools: list[dict[str, Any]]) -> list[dict[str, Any]]:
        from rlvr_cli.env.model import to_chat

        extra = {"tools": tools} if tools else {}  # the server's schemas are OpenAI function tools already
        reply = self.client.chat.completions.create(messages=to_chat(items, "string"), **self.request, **extra)
        choices = getattr(reply, "choices", None)
        if not isinstance(choices, list) or len(choices) != 1:
            got = len(choices) if isinstance(choices, list) else "no"
            raise CannotRun(f"{self.url} answered {got} choices for one turn of a tool-use episode (1 was asked)")
        self.tokens += getattr(getattr(reply, "usage", None), "completion_tokens", None) or 0
        message = choices[0].message
        out: list[dict[str, Any]] = []
        if message.content:
            out.append({"type": "message", "role": "assistant", "content": str(message.content)})
        for i, call in enumerate(message.tool_calls or []):
            function = call.function
            name, arguments = str(function.name), function.arguments or "{}"
            out.append(
                {"type": "function_call", "call_id": call.id or f"call_{i}", "name": name, "arguments": arguments}
            )
        return out or [{"type": "message", "role": "assistant", "content": ""}]


def episode(model: EndpointModel, env: Any, task: dict[str, Any], max_steps: int) -> tuple[Any, int, float]:
    """(verdict, calls run, seconds verify took) of one episode; the session is always closed."""
    from rlvr_cli.contract.tasks import messages_of
    from rlvr_cli.env.agent import call_tool
    from rlvr_cli.env.verdict import Verdict

    client = env.client
    session = client.seed(task)
    items: list[dict[str, Any]] = [{"type": "message", **m} for m in messages_of(task)]
    final, calls_run = "", 0
    try:
        for _ in range(max_steps):
            output = model.respond(items, env.schemas)
            items += output
            calls = [i for i in output if i["type"] == "function_call"]
            for call in calls:
                items.append(call_tool(client, session, call))
                calls_run += 1
            if not calls:
                final = "".join(str(i.get("content", "")) for i in output if i["type"] == "message")
                break
        started = time.perf_counter()
        try:
            verdict = client.verify(session, final)
        except (ValueError, TypeError) as error:
            verdict = Verdict("verifier_error", detail=str(error))
    finally:
        client.close_session(session)
    return verdict, calls_run, time.perf_counter() - started


def evaluate_tool_endpoint(
    contract: Contract, folder: Path, spec: str, tasks: list[dict[str, Any]], k: int, timeout_s: float, seed: int
) -> dict[str, dict[str, Any]]:
    """k episodes per task with the endpoint as the policy, in `evaluate`'s item form."""
    import openai

    from rlvr_cli.audit.endpoint import parse, said
    from rlvr_cli.env.scoring import weighted_reward
    from rlvr_cli.env.tool_env import ToolEnv

    name, url = parse(spec)
    client = openai.OpenAI(base_url=url, api_key=os.environ.get("OPENAI_API_KEY", "unused"), timeout=timeout_s)
    client = client.with_options(max_retries=2)
    out: dict[str, dict[str, Any]] = {}
    names = [c.name for c in contract.objective.reward.components]
    with ToolEnv(contract, folder) as env:
        for task in tasks:
            item = out.setdefault(str(task["id"]), {"task": task, "rewards": [], "components": [], "statuses": []})
            item.update(lengths=[], generated=[], verify_seconds=[], calls=[])
            for j in range(k):
                model = EndpointModel(client, name, contract, seed + j, url)
                try:
                    verdict, calls, seconds = episode(model, env, task, contract.environment.max_steps)
                except Exception as error:
                    raise said(url, timeout_s, error) from None
                valid = verdict.valid and all(n in verdict.components for n in names)
                item["rewards"].append(weighted_reward(contract, verdict) if valid else None)
                item["components"].append(dict(verdict.components) if valid else None)
                item["statuses"].append(verdict.status)
                item["lengths"].append(model.tokens)
                item["generated"].append(model.tokens)
                item["verify_seconds"].append(seconds)
                item["calls"].append(calls)
    return out
