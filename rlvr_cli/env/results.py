"""A tool's result as the model reads it: the one function every endpoint answers through.

A tool may return text or any JSON value. What JSON cannot carry — NaN, ±inf, a set, bytes, an
arbitrary object — is a tool error the model reads, never an HTTP 500 (and never a NaN quietly
turned into null by one endpoint and not by the other). A result longer than the server's
`max_output_bytes` (UTF-8 bytes of its JSON text) is cut there with a marker saying how much was
left out: the model reads that the result was truncated, and a tool that returns 30 MB cannot
exhaust the trainer's memory. The cut result is text (a cut JSON value is no longer JSON).
"""

from __future__ import annotations

import json
from typing import Any

DEFAULT_MAX_OUTPUT_BYTES = 65_536
MIN_MAX_OUTPUT_BYTES = 4_096
BYTES_PER_TOKEN = 16  # no tokenizer in use has longer tokens on ordinary text


def output_cap(max_response_tokens: int, stated: int | None = None) -> int:
    """`environment.max_tool_output_bytes`, or its default: 16 bytes per token of the episode's
    budget (`length.max_response_tokens`, which tool results count against), at least 4 KiB —
    a longer result could never fit the episode anyway."""
    if stated is not None:
        return stated
    return max(MIN_MAX_OUTPUT_BYTES, BYTES_PER_TOKEN * max_response_tokens)


def tool_output(name: str, output: Any, max_bytes: int) -> Any:
    """`output` as it is answered: a str or a JSON value, within `max_bytes`, or a tool error."""
    if isinstance(output, str):
        text, structured = output, False
    else:
        try:
            text = json.dumps(output, allow_nan=False, ensure_ascii=False)
        except (TypeError, ValueError, RecursionError) as exc:
            return f"error: {name} returned {_kind(output, exc)}, which is not JSON; a tool returns text or JSON values"
        structured = True
    size = len(text.encode("utf-8", errors="surrogatepass"))
    if size <= max_bytes:
        clean = _clean(text)
        if not structured:
            return clean
        return output if clean is text else json.loads(clean)
    kept = text.encode("utf-8", errors="surrogatepass")[:max_bytes].decode("utf-8", errors="ignore")
    return _clean(kept) + f"\n…[{name}: output truncated: {size:,} bytes, the first {max_bytes:,} kept]"


def _clean(text: str) -> str:
    """Lone surrogates cannot be encoded as UTF-8 (nor tokenized): each becomes U+FFFD."""
    try:
        text.encode("utf-8")
        return text
    except UnicodeEncodeError:
        return "".join("\ufffd" if 0xD800 <= ord(c) <= 0xDFFF else c for c in text)


def _kind(output: Any, exc: BaseException) -> str:
    if isinstance(exc, ValueError) and "Out of range float" in str(exc):
        return "a non-finite number (NaN or infinity)"
    if isinstance(exc, RecursionError):
        return "a value nested too deeply"
    return (
        f"a value of type {type(output).__name__}"
        if not isinstance(output, (list, dict))
        else "a non-JSON value inside"
    )
