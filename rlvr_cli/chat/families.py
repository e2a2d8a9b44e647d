"""Chat templates of the common families, written for tiny local tokenizers.

They reproduce the traits that matter for masks and checks — where BOS comes from, what
ends an assistant turn, glue after the stop token, roles a family lacks, history
rewriting — so tests and examples run against the same traps as real checkpoints.
"""

from __future__ import annotations

_TOOLS_SYSTEM = (
    "{%- set ns = namespace(skip=false) -%}"
    "{%- if tools -%}"
    "{{- '<|im_start|>system\\n' -}}"
    "{%- if messages and messages[0].role == 'system' -%}"
    "{{- messages[0].content + '\\n\\n' -}}{%- set ns.skip = true -%}"
    "{%- endif -%}"
    "{{- '# Tools\\n' -}}{%- for tool in tools -%}{{- tool | tojson + '\\n' -}}{%- endfor -%}"
    "{{- '<|im_end|>\\n' -}}"
    "{%- endif -%}"
)
_TOOL_CALLS = (
    "{%- if message.tool_calls -%}{%- for call in message.tool_calls -%}"
    "{{- '<tool_call>' + {'name': call.function.name, 'arguments': call.function.arguments} | tojson"
    " + '</tool_call>' -}}"
    "{%- endfor -%}{%- endif -%}"
)

CHATML = (
    _TOOLS_SYSTEM + "{%- for message in messages -%}"
    "{%- if not (loop.first and ns.skip) -%}"
    "{{- '<|im_start|>' + message.role + '\\n' + (message.content or '') -}}" + _TOOL_CALLS + "{{- '<|im_end|>\\n' -}}"
    "{%- endif -%}"
    "{%- endfor -%}"
    "{%- if add_generation_prompt -%}{{- '<|im_start|>assistant\\n' -}}{%- endif -%}"
)

# ChatML with {% generation %} tags, so transformers can return the assistant-token mask.
CHATML_GENERATION = (
    _TOOLS_SYSTEM + "{%- for message in messages -%}"
    "{%- if not (loop.first and ns.skip) -%}"
    "{{- '<|im_start|>' + message.role + '\\n' -}}"
    "{%- if message.role == 'assistant' -%}"
    "{%- generation -%}{{- message.content or '' -}}" + _TOOL_CALLS + "{{- '<|im_end|>' -}}"
    "{%- endgeneration -%}{{- '\\n' -}}"
    "{%- else -%}{{- (message.content or '') + '<|im_end|>\\n' -}}{%- endif -%}"
    "{%- endif -%}"
    "{%- endfor -%}"
    "{%- if add_generation_prompt -%}{{- '<|im_start|>assistant\\n' -}}{%- endif -%}"
)

# Llama 3: BOS inside the template, header tokens, <|eot_id|>, tool results as `ipython`.
LLAMA3 = (
    "{{- bos_token -}}"
    "{%- for message in messages -%}"
    "{%- set role = 'ipython' if message.role == 'tool' else message.role -%}"
    "{{- '<|start_header_id|>' + role + '<|end_header_id|>\\n\\n' + (message.content or '') -}}"
    "{%- if message.tool_calls -%}{%- for call in message.tool_calls -%}"
    "{{- {'name': call.function.name, 'parameters': call.function.arguments} | tojson -}}"
    "{%- endfor -%}{%- endif -%}"
    "{{- '<|eot_id|>' -}}"
    "{%- endfor -%}"
    "{%- if add_generation_prompt -%}"
    "{{- '<|start_header_id|>assistant<|end_header_id|>\\n\\n' -}}{%- endif -%}"
)

# Mistral: [INST] … [/INST] answer</s>; a system message is folded into the first user turn.
MISTRAL = (
    "{{- bos_token -}}"
    "{%- set ns = namespace(system='') -%}"
    "{%- for message in messages -%}"
    "{%- if message.role == 'system' -%}{%- set ns.system = message.content + '\\n\\n' -%}"
    "{%- elif message.role == 'user' -%}"
    "{{- '[INST] ' + ns.system + message.content + ' [/INST]' -}}{%- set ns.system = '' -%}"
    "{%- elif message.role == 'assistant' -%}{{- message.content + eos_token -}}"
    "{%- else -%}{{- raise_exception('role ' + message.role + ' is not supported') -}}"
    "{%- endif -%}"
    "{%- endfor -%}"
)

# Gemma: <start_of_turn>model … <end_of_turn>, and no system role at all.
GEMMA = (
    "{{- bos_token -}}"
    "{%- for message in messages -%}"
    "{%- if message.role == 'system' -%}"
    "{{- raise_exception('System role not supported') -}}{%- endif -%}"
    "{%- set role = 'model' if message.role == 'assistant' else message.role -%}"
    "{{- '<start_of_turn>' + role + '\\n' + message.content + '<end_of_turn>\\n' -}}"
    "{%- endfor -%}"
    "{%- if add_generation_prompt -%}{{- '<start_of_turn>model\\n' -}}{%- endif -%}"
)

# A reasoning template: ChatML that drops the <think> block of every assistant turn but
# the last, so appending a turn rewrites the history the policy was trained on.
REASONING = (
    "{%- for message in messages -%}"
    "{%- set content = message.content or '' -%}"
    "{%- if message.role == 'assistant' and not loop.last and '</think>' in content -%}"
    "{%- set content = content.split('</think>')[-1].lstrip() -%}"
    "{%- endif -%}"
    "{{- '<|im_start|>' + message.role + '\\n' + content + '<|im_end|>\\n' -}}"
    "{%- endfor -%}"
    "{%- if add_generation_prompt -%}{{- '<|im_start|>assistant\\n' -}}{%- endif -%}"
)

# family → (template, special tokens: bos, eos (the assistant stop token), pad)
FAMILIES: dict[str, tuple[str, dict[str, str | None]]] = {
    "chatml": (CHATML, {"bos": None, "eos": "<|im_end|>", "pad": "<pad>"}),
    "chatml-generation": (CHATML_GENERATION, {"bos": None, "eos": "<|im_end|>", "pad": "<pad>"}),
    "llama3": (LLAMA3, {"bos": "<|begin_of_text|>", "eos": "<|eot_id|>", "pad": "<pad>"}),
    "mistral": (MISTRAL, {"bos": "<s>", "eos": "</s>", "pad": "<pad>"}),
    "gemma": (GEMMA, {"bos": "<bos>", "eos": "<end_of_turn>", "pad": "<pad>"}),
    "reasoning": (REASONING, {"bos": None, "eos": "<|im_end|>", "pad": "<pad>"}),
}

SPECIAL_TOKENS = (
    "<unk>",
    "<pad>",
    "<s>",
    "</s>",
    "<|im_start|>",
    "<|im_end|>",
    "<|begin_of_text|>",
    "<|start_header_id|>",
    "<|end_header_id|>",
    "<|eot_id|>",
    "[INST]",
    "[/INST]",
    "<bos>",
    "<start_of_turn>",
    "<end_of_turn>",
    "<think>",
    "</think>",
    "<tool_call>",
    "</tool_call>",
)
