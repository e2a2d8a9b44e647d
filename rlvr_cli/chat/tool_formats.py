"""How a model family writes a tool call, and how rlvr reads one back from what was sampled.

A format is chosen from the chat template (`detect`: the markup the template renders calls
with) or named by the contract (`environment.tool_format`); `rlvr render` and `plan.json` show
which. Each turn's sampled text, stop token included, is split into the message the model wrote
and its calls; a block that is not a well-formed call stays in the message (no call is made).

- `hermes` (Qwen2.5, Qwen3, Hermes, SmolLM3): `<tool_call>{"name": …, "arguments": {…}}</tool_call>`,
  one block per call, any number a turn.
- `llama3_json` (Llama 3.1, 3.2, 3.3): the whole message is `{"name": …, "parameters": {…}}`, after
  `<|python_tag|>` or not; one call a turn.
- `mistral` (Mistral 7B v0.3, Nemo, Small): `[TOOL_CALLS]` then a JSON list of
  `{"name", "arguments", "id"}` (the model writes the 9-character ids).
- `harmony` (gpt-oss): ` to=functions.NAME<|channel|>commentary json<|message|>{…}<|call|>`; one
  call a turn; the message is the `final` channel's text.
- `deepseek` (DeepSeek-R1 distills, V3): `<｜tool▁call▁begin｜>function<｜tool▁sep｜>NAME`, a
  json code block and `<｜tool▁call▁end｜>` per call, inside `<｜tool▁calls▁begin｜>…`; V3.1 and
  later write `<｜tool▁call▁begin｜>NAME<｜tool▁sep｜>{…}<｜tool▁call▁end｜>`, read the same.
- `glm` (GLM-4.5, 4.6): `<tool_call>NAME` then `<arg_key>K</arg_key><arg_value>V</arg_value>` per
  argument, `</tool_call>`; any number a turn. A value is written bare (a string as it is, any
  other value as JSON), so it is read as JSON where it parses, except where the tool's schema
  types the argument `string` (`typed_arguments`: GLM's own reading).
- `qwen_xml` (Qwen3-Coder, Qwen3.5): `<tool_call>\n<function=NAME>\n<parameter=K>\nV\n</parameter>…
  </function>\n</tool_call>`; any number a turn; values bare as GLM's (Qwen3-Coder's template
  writes a non-string as Python's `str`: read as a Python literal where JSON fails).
"""

from __future__ import annotations

import ast
import json
import re
import secrets
import string
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

Call = dict[str, Any]  # {"name": str, "arguments": JSON text, "id": str | None}


@dataclass(frozen=True)
class ToolFormat:
    name: str
    families: str
    marker: str  # what a chat template that renders this format contains
    parallel: bool  # several calls in one turn
    id_length: int | None  # the template requires call ids of this length (Mistral: 9)
    arguments: str  # how the template wants a call's arguments: "mapping" or "string" (JSON text)
    split: Callable[[str], tuple[str, list[Call]]]

    def new_id(self, counter: Callable[[], str]) -> str:
        """An id for a call the model did not name: the counter's, or random of the required length."""
        if self.id_length is None:
            return counter()
        return "".join(secrets.choice(string.ascii_letters + string.digits) for _ in range(self.id_length))


def _json(text: str) -> Any:
    """`json.loads` of model output: a nesting deeper than the parser's recursion (a policy that
    writes `[[[[…` for thousands of tokens) is not JSON, a ValueError like any other."""
    try:
        return json.loads(text)
    except RecursionError:
        raise ValueError("nested too deeply to read") from None


def _json_prefix(text: str) -> tuple[Any, int]:
    """`raw_decode` of model output, with the same guard as `_json`."""
    try:
        return json.JSONDecoder().raw_decode(text)
    except RecursionError:
        raise ValueError("nested too deeply to read") from None


def _call(name: Any, arguments: Any, call_id: Any = None) -> Call | None:
    """A call of `name` with `arguments` as the model wrote them (any JSON value: one that is
    not an object reaches the model as a tool error, never the server)."""
    if name is None or isinstance(name, dict | list) or str(name) == "":
        return None
    return {"name": str(name), "arguments": json.dumps(arguments), "id": call_id if isinstance(call_id, str) else None}


def _call_text(name: str, arguments: str) -> Call | None:
    """A call whose arguments are JSON text (harmony, deepseek); not JSON: no call."""
    try:
        return _call(name, _json(arguments) if arguments.strip() else {})
    except ValueError:
        return None


_HERMES = re.compile(r"<tool_call>(.*?)</tool_call>", re.S)


def _hermes(text: str) -> tuple[str, list[Call]]:
    calls: list[Call] = []

    def take(match: re.Match[str]) -> str:
        try:
            data = _json(match.group(1))
            call = _call(data.get("name"), data.get("arguments", {}), data.get("id"))
        except (ValueError, AttributeError):
            call = None
        if call is None:
            return match.group(0)
        calls.append(call)
        return ""

    return _HERMES.sub(take, text).strip(), calls


def _llama3(text: str) -> tuple[str, list[Call]]:
    body = text.strip().removeprefix("<|python_tag|>").strip()
    for end in ("<|eom_id|>", "<|eot_id|>"):
        body = body.removesuffix(end).strip()
    if body.startswith("{"):
        try:
            data = _json(body)
            call = _call(data.get("name"), data.get("parameters", data.get("arguments", {})))
        except (ValueError, AttributeError):
            call = None
        if call is not None:
            return "", [call]
    return text.strip(), []


def _mistral(text: str) -> tuple[str, list[Call]]:
    before, marker, rest = text.partition("[TOOL_CALLS]")
    if not marker:
        return text.strip(), []
    rest = rest.strip().removesuffix("</s>").strip()
    try:
        data, _ = _json_prefix(rest)
    except ValueError:
        return text.strip(), []
    items = data if isinstance(data, list) else [data]
    calls = [_call(d.get("name"), d.get("arguments", {}), d.get("id")) if isinstance(d, dict) else None for d in items]
    if not calls or any(c is None for c in calls):
        return text.strip(), []
    return before.strip(), [c for c in calls if c is not None]


_HARMONY_CALL = re.compile(
    r"to=functions\.([^\s<]+)\s*<\|channel\|>[^<]*?(?:<\|constrain\|>[^<]*)?<\|message\|>(.*?)<\|call\|>", re.S
)
_HARMONY_FINAL = re.compile(r"<\|channel\|>final<\|message\|>(.*?)(?:<\|return\|>|<\|end\|>|$)", re.S)
_HARMONY_MARKUP = re.compile(r"<\|start\|>\w+[^<]*|<\|(?:end|return|call|message|constrain)\|>|<\|channel\|>\w*")


def _harmony(text: str) -> tuple[str, list[Call]]:
    calls = []
    for match in _HARMONY_CALL.finditer(text):
        call = _call_text(match.group(1), match.group(2))
        if call is None:
            return _harmony_message(text), []
        calls.append(call)
    return _harmony_message(_HARMONY_CALL.sub("", text)), calls


def _harmony_message(text: str) -> str:
    final = _HARMONY_FINAL.search(text)
    if final is not None:
        return final.group(1).strip()
    return _HARMONY_MARKUP.sub(
        "", re.sub(r"<\|channel\|>analysis<\|message\|>.*?<\|end\|>", "", text, flags=re.S)
    ).strip()


_DEEPSEEK_CALL = re.compile(r"<｜tool▁call▁begin｜>(.*?)<｜tool▁call▁end｜>", re.S)
_DEEPSEEK_FENCED = re.compile(r"\s*([^\n<]+?)\s*\n```(?:json)?\s*\n(.*?)\n```\s*", re.S)
_DEEPSEEK_BLOCK = re.compile(r"<｜tool▁calls▁begin｜>.*?(?:<｜tool▁calls▁end｜>|$)", re.S)


def _deepseek(text: str) -> tuple[str, list[Call]]:
    block = _DEEPSEEK_BLOCK.search(text)
    if block is None:
        return text.strip(), []
    calls = [_deepseek_call(body) for body in _DEEPSEEK_CALL.findall(block.group(0))]
    if not calls or any(c is None for c in calls):
        return text.strip(), []
    message = (text[: block.start()] + text[block.end() :]).replace("<｜end▁of▁sentence｜>", "")
    return message.strip(), [c for c in calls if c is not None]


def _deepseek_call(body: str) -> Call | None:
    """R1 and V3: `function<｜tool▁sep｜>NAME` and the arguments in a json code block;
    V3.1 and later: `NAME<｜tool▁sep｜>` and the arguments as they are."""
    head, sep, rest = body.partition("<｜tool▁sep｜>")
    if not sep:
        return None
    fenced = _DEEPSEEK_FENCED.fullmatch(rest)
    if fenced is not None:
        return _call_text(fenced.group(1), fenced.group(2))
    return _call_text(head.strip(), rest)


_GLM_CALL = re.compile(
    r"<tool_call>\s*([^<\n]+?)\s*((?:<arg_key>.*?</arg_key>\s*<arg_value>.*?</arg_value>\s*)*)</tool_call>", re.S
)
_GLM_ARG = re.compile(r"<arg_key>(.*?)</arg_key>\s*<arg_value>(.*?)</arg_value>", re.S)


def _glm(text: str) -> tuple[str, list[Call]]:
    return _bare_calls(text, _GLM_CALL, _GLM_ARG)


def _bare_calls(text: str, call: re.Pattern[str], argument: re.Pattern[str]) -> tuple[str, list[Call]]:
    """Calls whose values are written bare, one tag pair per argument (GLM's, Qwen's XML): `call`
    finds each call (its name, then its arguments' text), `argument` each (key, value) in it;
    anything else between the arguments makes the block no call. Each call keeps the values as
    written, for `typed_arguments`."""
    calls: list[Call] = []

    def take(match: re.Match[str]) -> str:
        written = {key.strip(): value for key, value in argument.findall(match.group(2))}
        found = _call(match.group(1).strip(), {key: _bare(value) for key, value in written.items()})
        if found is None or argument.sub("", match.group(2)).strip():
            return match.group(0)
        calls.append({**found, "written": written})
        return ""

    return call.sub(take, text).strip(), calls


def _bare(value: str) -> Any:
    """A value as GLM's or Qwen's XML template writes it: JSON where it parses, else a Python
    literal (`True`, `{'a': 1}`: Qwen3-Coder's `| string`), else the string itself."""
    try:
        return _json(value)
    except ValueError:
        pass
    if len(value) <= 10_000:  # model output: only literals are read, and only short ones
        try:
            return ast.literal_eval(value.strip())
        except (ValueError, TypeError, SyntaxError, MemoryError, RecursionError):
            pass
    return value


_QWEN_CALL = re.compile(r"<tool_call>\s*<function=([^>\n]+)>(.*?)</function>\s*</tool_call>", re.S)
_QWEN_ARG = re.compile(r"<parameter=([^>\n]+)>\n?(.*?)\n?</parameter>", re.S)


def _qwen_xml(text: str) -> tuple[str, list[Call]]:
    return _bare_calls(text, _QWEN_CALL, _QWEN_ARG)


def typed_arguments(call: Call, schemas: list[dict[str, Any]] | None) -> str:
    """A call's arguments (JSON text); a format that writes values without their type (GLM, Qwen's
    XML) has each argument the tool's schema types `string` restored to the text as written."""
    written = call.get("written")
    if not written or not schemas:
        return call["arguments"]
    function = next(
        (s.get("function") or {} for s in schemas if (s.get("function") or {}).get("name") == call["name"]), {}
    )
    properties = (function.get("parameters") or {}).get("properties") or {}
    arguments = json.loads(call["arguments"])
    for key, value in written.items():
        kind = (properties.get(key) or {}).get("type")
        kinds = kind if isinstance(kind, list) else [kind]
        if "string" in kinds and not (arguments[key] is None and "null" in kinds):
            arguments[key] = value
    return json.dumps(arguments)


FORMATS: dict[str, ToolFormat] = {
    f.name: f
    for f in (
        ToolFormat("harmony", "gpt-oss", "<|call|>", False, None, "mapping", _harmony),
        ToolFormat("deepseek", "DeepSeek-R1 (distills), V3, V3.1", "tool▁calls▁begin", True, None, "string", _deepseek),
        ToolFormat("mistral", "Mistral 7B v0.3, Nemo, Small", "[TOOL_CALLS]", True, 9, "mapping", _mistral),
        ToolFormat("llama3_json", "Llama 3.1, 3.2, 3.3", '"parameters": ', False, None, "mapping", _llama3),
        ToolFormat("glm", "GLM-4.5, 4.6", "<arg_key>", True, None, "mapping", _glm),
        ToolFormat("qwen_xml", "Qwen3-Coder, Qwen3.5", "<function=", True, None, "mapping", _qwen_xml),
        ToolFormat("hermes", "Qwen2.5, Qwen3, Hermes, SmolLM3", "<tool_call>", True, None, "mapping", _hermes),
    )
}
NAMES = tuple(FORMATS)


def detect(template: str | None) -> ToolFormat | None:
    """The format the chat template renders tool calls in, or None (it renders none rlvr knows)."""
    for fmt in FORMATS.values():  # most specific marker first
        if template and fmt.marker in template:
            return fmt
    return None


def chosen(template: str | None, named: str | None) -> ToolFormat | None:
    """The contract's `environment.tool_format`, else the template's."""
    return FORMATS[named] if named is not None else detect(template)
