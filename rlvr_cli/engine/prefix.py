"""The update forward with each distinct prompt once, through the model's own forward: one row per
distinct prompt holding the prompt, then every response to it, with an attention mask that lets
each response see the prompt and its own earlier tokens only, and positions that continue from
the prompt for each response. Each response sees exactly what it sees alone.

Unlike the shared-prompt forward (engine/shared.py), which runs the layers' parts itself, this is
one call of the model, so it runs under FSDP2, whose units gather their weights only in their
own forward, and on GPT-2 as on the Llama family (a test compares both with the model's own
forward). A model whose own masks do more than causality (sliding windows) is refused by
`why_not_prefix`: a 4-D mask given to it replaces them. It
pays where prompts are long next to the answers (a group's prompt computed once, not once per
answer); where answers are long, rows of a whole group cost more attention than one row per
answer, and `pays` says no.
"""

from __future__ import annotations

from typing import Any

import torch

from rlvr_cli.engine.forward import Batch, distinct_prompts


def why_not_prefix(model: Any) -> str | None:
    """Why rows of whole groups cannot be computed for this model, or None when they can."""
    from rlvr_cli.engine.fused import why_not

    config = getattr(model, "config", None)
    if getattr(config, "model_type", None) == "gpt2" and getattr(config, "_attn_implementation", "sdpa") in (
        "sdpa",
        "eager",
    ):
        return None
    return why_not(model)


def pays(batch: Batch) -> bool:
    """Whether rows of whole groups cost less attention (Σ rows²) than one row per answer."""
    first, owner = distinct_prompts(batch)
    if len(first) == batch.input_ids.size(0):
        return False  # no prompt is repeated: nothing to share
    prompt = batch.attention_mask[:, : batch.prompt_width].sum(dim=1)  # (B,)
    answer = batch.attention_mask[:, batch.prompt_width :].sum(dim=1)  # (B,)
    rows = prompt[first] + torch.zeros_like(prompt[first]).index_add_(0, owner, answer)  # (G,)
    return float((rows.float() ** 2).sum()) < float(((prompt + answer).float() ** 2).sum())


def _layout(batch: Batch) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
    """Rows `(G, C)` of ids and positions, the additive mask `(G, 1, C, C)`, and per answer row
    `(B,)` the row and, per response slot `(B, T)`, the column that predicts it."""
    P, T = batch.prompt_width, batch.response_mask.shape[1]
    first, owner = distinct_prompts(batch)
    prompt_len = batch.attention_mask[:, :P].sum(dim=1).tolist()  # left-padded: the real tokens are last
    answer_len = batch.attention_mask[:, P:].sum(dim=1).tolist()
    G, B = len(first), batch.input_ids.size(0)
    rows: list[list[int]] = [[] for _ in range(G)]
    positions: list[list[int]] = [[] for _ in range(G)]
    block: list[list[int]] = [[] for _ in range(G)]  # -1: the prompt, b: answer b
    for g, b in enumerate(first.tolist()):
        n = int(prompt_len[b])
        rows[g] += batch.input_ids[b, P - n : P].tolist()
        positions[g] += list(range(n))
        block[g] += [-1] * n
    predict = torch.zeros(B, T, dtype=torch.long)
    for b, g in enumerate(owner.tolist()):
        n, start = int(answer_len[b]), len(rows[g])
        rows[g] += batch.input_ids[b, P : P + n].tolist()
        positions[g] += list(range(int(prompt_len[first[g]]), int(prompt_len[first[g]]) + n))
        block[g] += [b] * n
        # the prompt's last token predicts the first answer token; answer token t - 1 predicts token t
        predict[b, :n] = torch.tensor([int(prompt_len[first[g]]) - 1, *range(start, start + n - 1)][:n])
    width = max(len(r) for r in rows)
    ids = torch.tensor([r + [0] * (width - len(r)) for r in rows])
    pos = torch.tensor([p + [0] * (width - len(p)) for p in positions])
    blocks = torch.tensor([k + [-2] * (width - len(k)) for k in block])  # -2: padding
    causal = torch.ones(width, width, dtype=torch.bool).tril()[None]
    same = blocks[:, :, None] == blocks[:, None, :]
    sees_prompt = (blocks[:, :, None] >= 0) & (blocks[:, None, :] == -1)
    allowed = causal & (same | sees_prompt) & (blocks[:, :, None] != -2)
    allowed |= torch.eye(width, dtype=torch.bool)[None]  # padding attends to itself: no NaN
    mask = torch.zeros(allowed.shape).masked_fill(~allowed, torch.finfo(torch.float32).min)[:, None]
    return ids, pos, mask, owner, predict


def prefix_logprobs(
    model: Any, batch: Batch, temperature: float, with_entropy: bool = False
) -> tuple[torch.Tensor, torch.Tensor | None]:
    """Log-probs `(B, T)` of the response tokens (and their entropy): what `token_logprobs` gives
    on the same batch, each distinct prompt computed once."""
    device = batch.input_ids.device
    ids, pos, mask, owner, predict = (t.to(device) for t in _layout(batch.to(torch.device("cpu"))))
    dtype = next(model.parameters()).dtype
    logits = model(input_ids=ids, position_ids=pos, attention_mask=mask.to(dtype), use_cache=False).logits
    logits = logits[owner[:, None], predict].float()  # (B, T, V)
    if temperature > 0 and temperature != 1.0:
        logits = logits / temperature
    logp_all = torch.log_softmax(logits, dim=-1)
    logp = logp_all.gather(-1, batch.response_ids.unsqueeze(-1)).squeeze(-1)  # (B, T)
    valid = batch.attention_mask[:, batch.prompt_width :].bool()
    logp = torch.where(valid, logp, torch.zeros_like(logp))
    entropy = None
    if with_entropy:
        entropy = torch.where(valid, -(logp_all.exp() * logp_all).sum(dim=-1), torch.zeros_like(logp))
    return logp, entropy
