"""Model interfaces for the agent loop: `respond(items, tools) -> output items`.

- `ScriptedModel` replays a given trajectory (audits, tests);
- `TransformersModel` samples from a local causal LM through its chat template and parses
  `<tool_call>{"name", "arguments"}</tool_call>` blocks;
- `OpenAIModel` calls an OpenAI-compatible `/v1/chat/completions` endpoint (e.g. vLLM).
"""

from __future__ import annotations

import itertools
import json
from typing import Any

from rlvr_cli.chat.tool_formats import FORMATS, ToolFormat, typed_arguments


class CallIds:
    """Call ids `call_0, call_1, ...`, counted per model interface (one per episode or audit)."""

    def __init__(self) -> None:
        self._next = itertools.count()

    def __call__(self) -> str:
        return f"call_{next(self._next)}"


class ScriptedModel:
    """Replays `steps`: each step is the list of output items of one model call."""

    def __init__(self, steps: list[list[dict[str, Any]]]) -> None:
        self.steps = list(steps)
        self.calls = 0
        self.call_id = CallIds()

    def respond(self, items: list[dict[str, Any]], tools: list[dict[str, Any]]) -> list[dict[str, Any]]:
        if self.calls >= len(self.steps):
            return [{"type": "message", "role": "assistant", "content": ""}]
        step = [dict(i) for i in self.steps[self.calls]]
        self.calls += 1
        for item in step:
            if item.get("type") == "function_call":
                item.setdefault("call_id", self.call_id())
                if not isinstance(item.get("arguments", ""), str):
                    item["arguments"] = json.dumps(item["arguments"])
        return step


def to_chat(items: list[dict[str, Any]], arguments: str = "mapping") -> list[dict[str, Any]]:
    """Responses items → chat messages (assistant tool_calls, tool results); `arguments`: how the
    template wants a call's arguments, a mapping (transformers' convention) or JSON text."""
    messages: list[dict[str, Any]] = []
    for item in items:
        kind = item.get("type")
        if kind == "message":
            messages.append({"role": item.get("role", "user"), "content": str(item.get("content", ""))})
        elif kind == "function_call":
            call = {
                "type": "function",
                "id": item.get("call_id"),
                "function": {"name": item["name"], "arguments": _arguments(item.get("arguments", "{}"), arguments)},
            }
            if messages and messages[-1]["role"] == "assistant":  # the calls of the turn that said it
                messages[-1].setdefault("tool_calls", []).append(call)
            else:
                messages.append({"role": "assistant", "content": "", "tool_calls": [call]})
        elif kind == "function_call_output":
            messages.append({"role": "tool", "tool_call_id": item.get("call_id"), "content": str(item.get("output"))})
    return messages


def _arguments(raw: Any, form: str = "mapping") -> Any:
    """Chat templates render a call's arguments as a mapping (transformers' convention); a
    string that is not a JSON object stays a string. `form` "string": JSON text as it is."""
    if form == "string":
        return raw if isinstance(raw, str) else json.dumps(raw)
    if isinstance(raw, str):
        try:
            parsed = json.loads(raw)
        except ValueError:
            return raw
        return parsed if isinstance(parsed, dict) else raw
    return raw


def parse_completion(
    text: str,
    call_id: CallIds | None = None,
    end: str = "",
    fmt: ToolFormat | None = None,
    schemas: list[dict[str, Any]] | None = None,
) -> list[dict[str, Any]]:
    """Generated text → a message item and function_call items, in the model family's tool-call
    format (`chat/tool_formats.py`; Hermes by default); a malformed call block stays in the
    message text (the environment never sees it, the transcript does). `text` is all that was
    sampled, the stop token included, so a call whose closing tag is the stop token (a turn that
    ends on its call) is a call; `end`, the stop token's text, is not part of the message. A
    call keeps the id the model wrote (Mistral's), else gets one; `schemas`, the tools offered,
    type the arguments of a format that writes them untyped (GLM's, Qwen's XML)."""
    fmt = fmt or FORMATS["hermes"]
    call_id = call_id or CallIds()
    message, found = fmt.split(text)
    if not found and end and text.rstrip().endswith(end.strip()):  # a format whose call is the whole turn
        message, found = fmt.split(text.rstrip()[: -len(end.strip())])
    if end and message.endswith(end.strip()):
        message = message[: len(message) - len(end.strip())].rstrip()
    calls = [
        {
            "type": "function_call",
            "call_id": c["id"] or fmt.new_id(call_id),
            "name": c["name"],
            "arguments": typed_arguments(c, schemas),
        }
        for c in found
    ]
    out: list[dict[str, Any]] = (
        [{"type": "message", "role": "assistant", "content": message}] if message or not calls else []
    )
    return out + calls


class TransformersModel:
    """A local causal LM, sampled through the chat template with the tools offered."""

    def __init__(
        self,
        model: Any,
        tokenizer: Any,
        *,
        max_new_tokens: int,
        stop_ids: list[int],
        temperature: float = 1.0,
        top_p: float = 1.0,
        top_k: int = 0,
        seed: int = 0,
    ) -> None:
        self.model, self.tokenizer = model, tokenizer
        self.kwargs = {
            "max_new_tokens": max_new_tokens,
            "temperature": temperature,
            "top_p": top_p,
            "top_k": top_k,
            "stop_ids": stop_ids,
        }
        self.seed = seed
        self.call_id = CallIds()

    def respond(self, items: list[dict[str, Any]], tools: list[dict[str, Any]]) -> list[dict[str, Any]]:
        from rlvr_cli.chat.render import pad_id
        from rlvr_cli.engine.generate import generate, sampled_text

        text = self.tokenizer.apply_chat_template(
            to_chat(items), tools=tools or None, tokenize=False, add_generation_prompt=True
        )
        prompt = self.tokenizer(text, add_special_tokens=False)["input_ids"]
        self.seed += 1
        gen = generate(self.model, [prompt], pad_id=pad_id(self.tokenizer), seed=self.seed, **self.kwargs)[0]
        whole, end = sampled_text(self.tokenizer, gen.response_ids, gen.finish)
        return parse_completion(whole, self.call_id, end)


class OpenAIModel:
    """An OpenAI-compatible chat completions endpoint (vLLM, SGLang, a hosted API)."""

    def __init__(
        self,
        base_url: str,
        model: str,
        *,
        api_key: str = "none",
        temperature: float = 1.0,
        max_tokens: int = 512,
        timeout_s: float = 120.0,
    ) -> None:
        import httpx

        self.http = httpx.Client(
            base_url=base_url.rstrip("/"), timeout=timeout_s, headers={"Authorization": f"Bearer {api_key}"}
        )
        self.body = {"model": model, "temperature": temperature, "max_tokens": max_tokens}
        self.call_id = CallIds()

    def respond(self, items: list[dict[str, Any]], tools: list[dict[str, Any]]) -> list[dict[str, Any]]:
        body = {**self.body, "messages": to_chat(items)}
        if tools:
            body["tools"] = tools
        response = self.http.post("/v1/chat/completions", json=body)
        response.raise_for_status()
        message = response.json()["choices"][0]["message"]
        out: list[dict[str, Any]] = []
        if message.get("content"):
            out.append({"type": "message", "role": "assistant", "content": message["content"]})
        for call in message.get("tool_calls") or []:
            out.append(
                {
                    "type": "function_call",
                    "call_id": call.get("id") or self.call_id(),
                    "name": call["function"]["name"],
                    "arguments": call["function"].get("arguments", "{}"),
                }
            )
        return out or [{"type": "message", "role": "assistant", "content": ""}]
