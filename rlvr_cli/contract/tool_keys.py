"""The environment's keys read by tool-use episodes only (`environment.kind: tool_use`; with
`single_turn` each is refused, RLV003): rollout/tool_use.py runs them."""

from typing import Literal

from pydantic import Field

ToolFormatName = Literal["hermes", "llama3_json", "mistral", "harmony", "deepseek", "glm", "qwen_xml"]
TOOL_KEYS = ("max_tool_output_bytes", "calls_without_room", "tool_format", "max_sessions")

MAX_TOOL_OUTPUT_BYTES = Field(
    None,
    description="UTF-8 bytes of one tool result passed to the model (tool_use); a longer result is cut "
    "with a marker saying so. None: 16 bytes per token of length.max_response_tokens, at least 4096.",
)
CALLS_WITHOUT_ROOM = Field(
    None,
    description="tool_use: a call whose result cannot fit the token budget left is skip (not run: the default) or "
    "execute (run for its effects, which verify then sees; the model never reads its result).",
)
TOOL_FORMAT = Field(
    None,
    description="tool_use: how the policy writes tool calls — hermes (Qwen, Hermes: <tool_call>), llama3_json "
    "(Llama 3.x), mistral ([TOOL_CALLS]), harmony (gpt-oss), deepseek (DeepSeek-R1/V3), glm (GLM-4.5/4.6: "
    "<arg_key>), qwen_xml (Qwen3-Coder, Qwen3.5: <function=…>). None: the one the chat template renders "
    "(rlvr render and plan.json say which).",
)
MAX_SESSIONS = Field(
    None,
    description="tool_use: sessions (contexts) one episode may hold — the first and the children its tools open by "
    "compressing or forking (docs/environments.md). None: 1, and a tool asking for a child session gets a tool error.",
)
