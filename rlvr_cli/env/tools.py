"""A tool's parameters: the JSON schema the policy is shown, and argument validation.

Both come from the method's annotations, through pydantic: `int`, `float`, `bool`, `str`,
`Literal[...]` and enums, `list[...]`, `dict[str, ...]`, optional values and pydantic models.
A parameter without an annotation is a string. Arguments are validated before the tool runs;
a bad call is answered with a tool error the model can read (which argument, what was
expected), never a crash. Unknown arguments are refused.
"""

from __future__ import annotations

import functools
import inspect
import typing
from collections.abc import Callable
from typing import Any

from pydantic import BaseModel, ConfigDict, ValidationError, create_model


class ToolArgumentError(ValueError):
    """Arguments that do not fit the tool's parameters; the message is for the model."""


class _Arguments(BaseModel):
    model_config = ConfigDict(extra="forbid", arbitrary_types_allowed=False)


@functools.cache
def _model(fn: Callable[..., Any]) -> type[BaseModel]:
    fields: dict[str, Any] = {}
    try:  # annotations written as strings (`from __future__ import annotations`) resolved
        hints = typing.get_type_hints(fn)
    except Exception:
        hints = {}
    for param in inspect.signature(fn).parameters.values():
        if param.name in ("self", "state") or param.kind in (param.VAR_POSITIONAL, param.VAR_KEYWORD):
            continue
        annotation = hints.get(param.name, param.annotation)
        annotation = str if annotation is inspect.Parameter.empty else annotation
        default = ... if param.default is inspect.Parameter.empty else param.default
        fields[param.name] = (annotation, default)
    return create_model(f"{fn.__name__}_arguments", __base__=_Arguments, **fields)


def checked_shown(name: str, shown: Any) -> dict[str, Any]:
    """A schema written for the policy (`@tool(shown=...)`): a mapping of `description` and
    `parameters` (a JSON Schema object), or a TypeError at class definition saying what is wrong."""
    if not isinstance(shown, dict) or set(shown) - {"description", "parameters"}:
        raise TypeError(f"tool {name}: shown= takes a mapping of 'description' and 'parameters', got {shown!r:.80}")
    parameters = shown.get("parameters", {"type": "object", "properties": {}})
    if not isinstance(parameters, dict) or parameters.get("type") != "object":
        raise TypeError(f"tool {name}: shown['parameters'] must be a JSON Schema with type 'object'")
    return {"description": str(shown.get("description", "")), "parameters": parameters}


def schema(name: str, fn: Callable[..., Any]) -> dict[str, Any]:
    """The OpenAI-style function schema of one tool: as written with `@tool(shown=...)`, else
    typed from its annotations."""
    shown = getattr(fn, "__rlvr_shown__", None)
    if shown is not None:
        return {"type": "function", "function": {"name": name, **shown}}
    parameters = _model(fn).model_json_schema()
    parameters.pop("title", None)
    for prop in parameters.get("properties", {}).values():
        prop.pop("title", None)
    parameters.setdefault("required", [])
    return {
        "type": "function",
        "function": {
            "name": name,
            "description": (fn.__doc__ or "").strip().split("\n")[0],
            "parameters": parameters,
        },
    }


def validate(name: str, fn: Callable[..., Any], arguments: Any) -> dict[str, Any]:
    """The arguments as the tool's annotations type them, or ToolArgumentError saying why."""
    if not isinstance(arguments, dict):
        raise ToolArgumentError(f"bad arguments for {name}: expected an object of named arguments")
    try:
        parsed = _model(fn).model_validate(arguments)
    except ValidationError as exc:
        problems = "; ".join(
            f"{'.'.join(str(p) for p in err['loc']) or 'arguments'}: {err['msg']}" for err in exc.errors()[:5]
        )
        raise ToolArgumentError(f"bad arguments for {name}: {problems}") from None
    return {field: getattr(parsed, field) for field in type(parsed).model_fields}
