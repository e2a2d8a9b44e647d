"""Hint-assisted rollouts (`data.hints`): on a hard task, a share of each group is sampled
with the task's hint so that the group can hold a correct answer to learn from.

- Which samples: the first `n` of each group, `n = round(share(step) · group_size)`, where
  `share(step)` falls linearly from `hints.share` at step 0 to none at `hints.until_step`;
  a task without a hint (its field absent or empty) gets none. Deterministic in the step, so
  a resumed run samples the same hints.
- Where the hint goes: `placement: prompt` rewrites the last user message with `hints.format`;
  `placement: response_prefix` starts the response with the hint's tokens, which sit in the
  context like the prompt's and are never trained; the verifier reads hint + continuation.
- Advantages: `advantage: group` compares every sample of a group together; `subgroup`
  compares hinted samples with hinted ones and unhinted with unhinted (each its own mean and
  std, as the contract's advantage section says): train/objective.py `hinted_advantages`.
- Both rollouts show hints: a single-turn response and a tool-use episode's first turn (its
  prompt, or the start of its first response).
- Holdout evaluation, gates and audits never show a hint: they do not call this module.
"""

from __future__ import annotations

import math
from typing import Any

from rlvr_cli.contract.models import Contract
from rlvr_cli.env.sample import Sample

DEFAULT_FORMAT = "{prompt}\n\nHint: {hint}"


def active(contract: Contract) -> bool:
    return contract.data.hints is not None and contract.data.hints.used


def share_at(contract: Contract, step: int) -> float:
    """The hinted share of each group at `step` (0 once `until_step` is reached)."""
    hints = contract.data.hints
    if hints is None or not hints.used:
        return 0.0
    return float(hints.share) * max(0.0, 1.0 - step / hints.until_step)  # type: ignore[arg-type, operator]


def hinted_per_group(contract: Contract, step: int) -> int:
    return math.floor(share_at(contract, step) * contract.hyperparameters.group_size + 0.5)


def hint_of(contract: Contract, task: dict[str, Any]) -> str | None:
    """The task's hint text, or None when it has none."""
    hints = contract.data.hints
    if hints is None or not hints.used or hints.field is None:
        return None
    value = task.get(hints.field)
    if value is None or value == "":
        return None
    return value if isinstance(value, str) else str(value)


def hinted_messages(contract: Contract, messages: list[dict[str, Any]], hint: str) -> list[dict[str, Any]]:
    """placement prompt: the last user message with its hint, as `hints.format` says."""
    template = contract.data.hints.format or DEFAULT_FORMAT  # type: ignore[union-attr]
    out = [dict(m) for m in messages]
    for message in reversed(out):
        if message.get("role") == "user":
            content = str(message.get("content") or "")
            message["content"] = template.replace("{prompt}", content).replace("{hint}", hint)
            break
    return out


def prefix(contract: Contract) -> bool:
    return active(contract) and contract.data.hints.placement == "response_prefix"  # type: ignore[union-attr]


def subgroup(contract: Contract) -> bool:
    """`hints.advantage: subgroup`: hinted samples compared with hinted ones only
    (train/objective.py `hinted_advantages`)."""
    return active(contract) and contract.data.hints.advantage == "subgroup"  # type: ignore[union-attr]


def metrics(contract: Contract, generated: list[Sample]) -> dict[str, float]:
    """Hint dependence: the hinted share, and hinted vs unhinted reward over the groups that
    sampled both kinds (the same tasks), so a rule can fire when the unhinted reward lags."""
    if not active(contract):
        return {}
    size = contract.hyperparameters.group_size
    hinted_rewards, plain_rewards = [], []
    for start in range(0, len(generated), size):
        group = generated[start : start + size]
        with_hint = [s.reward for s in group if s.hint is not None and s.valid]
        without = [s.reward for s in group if s.hint is None and s.valid]
        if with_hint and without:
            hinted_rewards += with_hint
            plain_rewards += without
    mean = lambda xs: sum(xs) / len(xs) if xs else math.nan  # noqa: E731
    out = {"hint_share": sum(s.hint is not None for s in generated) / max(len(generated), 1)}
    out["reward_hinted_mean"] = mean(hinted_rewards)
    out["reward_unhinted_mean"] = mean(plain_rewards)
    out["hint_gap"] = out["reward_hinted_mean"] - out["reward_unhinted_mean"]
    return out
