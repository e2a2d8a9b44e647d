"""`rlvr plan`'s update-phase activation terms: what one micro-batch's forward keeps for its backward.

The activation term follows Korthikanti et al. 2022 (https://arxiv.org/abs/2205.05198): ≈ 34·s·b·h·L
bytes at 16-bit (doubled at fp32) with memory-efficient attention (PyTorch SDPA), which never
materializes the 5·a·s²·b·L attention scores; with activation checkpointing each layer keeps its
input and one layer's activations are alive at a time. Its tokens are those the update's forward
runs (`update_tokens`).

Where the update shares each group's prompt (engine/shared.py), every row also attends over a
copy of its prompt's keys and values, which its attention keeps for the backward
(`prompt_copies`): on a GPU with each key head repeated for the query heads that read it (the
memory-efficient kernel takes no grouped queries with a mask: engine/precision.py), in the
compute dtype; on a CPU in fp32, the key heads as they are, and none where the responses attend
in two parts instead (engine/two_part.py).
"""

from __future__ import annotations

import math

from rlvr_cli.contract.layout import Layout
from rlvr_cli.contract.models import Contract

BYTES = {"fp32": 4, "bf16": 2, "fp16": 2}  # by dtype name


def activation_terms(contract: Contract, shape: Layout, micro: float, cpu: bool) -> dict[str, float]:
    """The update's `activations` and, where its forward shares prompts, the rows' copies of
    their prompt's keys and values, in bytes per device for one micro-batch of `micro` rows."""
    bc = BYTES[contract.hyperparameters.dtypes.compute]
    per_token_layer = 34 * (2 if bc == 4 else 1)  # bytes per token, hidden unit and layer
    tokens = update_tokens(contract, shape, micro)
    if contract.hyperparameters.strategy.activation_checkpointing:
        activations = tokens * shape.hidden * (shape.layers * bc + per_token_layer)
    else:
        activations = tokens * shape.hidden * shape.layers * per_token_layer
    terms = {"activations": activations}
    if copies := prompt_copies(contract, shape, micro, cpu):
        terms["prompt K/V copies"] = copies
    return terms


def _groups(contract: Contract, micro: float) -> float:
    size = contract.hyperparameters.group_size
    return min(micro, math.ceil(micro / size) + (1 if micro % size else 0))  # a micro-batch may cut a group


def _shared_forward(contract: Contract, shape: Layout) -> bool:
    """engine/shared.py runs the update: the Llama family, left padding, no packing, no activation
    checkpointing, groups of several answers."""
    from rlvr_cli.engine.limits import FAMILIES

    hp, length = contract.hyperparameters, contract.length
    if length.packing is not None or length.padding_side == "right" or hp.group_size < 2:
        return False
    return shape.model_type in FAMILIES and not hp.strategy.activation_checkpointing


def prompt_copies(contract: Contract, shape: Layout, micro: float, cpu: bool) -> float:
    """Bytes of the rows' copies of their prompt's keys and values, all layers (0: no copies)."""
    from rlvr_cli.engine.limits import in_two_parts

    if not _shared_forward(contract, shape):
        return 0.0
    prompt = contract.length.max_prompt_tokens
    if cpu:
        if in_two_parts(micro, _groups(contract, micro), shape.kv_heads, prompt, shape.head_dim):
            return 0.0
        heads, size = shape.kv_heads, 4
    else:
        heads, size = shape.heads, BYTES[contract.hyperparameters.dtypes.compute]
    return 2.0 * micro * prompt * heads * shape.head_dim * size * shape.layers


def update_tokens(contract: Contract, shape: Layout, micro: float) -> float:
    """Tokens whose activations one micro-batch of the update keeps, at the contract's longest
    prompt and response. Each group's prompt counts once where the update shares it: the
    shared-prompt forward (engine/shared.py), or rows of whole groups (engine/prefix.py), which
    the update takes where they cost less attention than one row per answer. Otherwise every
    row is counted whole."""
    from rlvr_cli.engine.limits import FAMILIES

    hp, length = contract.hyperparameters, contract.length
    prompt, response, size = length.max_prompt_tokens, length.max_response_tokens, hp.group_size
    whole = micro * (prompt + response)
    if length.packing is not None or length.padding_side == "right" or size < 2:
        return whole
    groups = _groups(contract, micro)
    shared = groups * prompt + micro * response
    if _shared_forward(contract, shape):
        return shared
    rows_pay = groups * (prompt + micro / groups * response) ** 2 < micro * (prompt + response) ** 2
    if shape.model_type in (*FAMILIES, "gpt2") and rows_pay:
        return shared
    return whole
