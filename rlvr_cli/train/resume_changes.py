"""What may change in the contract between a checkpoint and the run that resumes from it.

A resume continues the same experiment, so the contract must say what it said: every value,
read as the trainer reads it (defaults filled in). Comments, layout and quoting are not values.
The description is words about the experiment and may change. A few keys say how the same
numbers are computed, not which numbers: the micro-batch size (the
loss divides by global counts, so a micro-batch only orders the sums) and how a sharded policy
runs its passes: whether each process holds the whole model or 1/N of it (`parallel.strategy`:
a checkpoint of whole weights loads into shards and shards load whole, train/restore.py),
recomputing activations, keeping units gathered, accumulating whole gradients, offloading. Those
may change, so that `train`'s advice when a plan does not fit the devices it finds (fsdp2,
activation checkpointing, smaller micro-batches) can be followed by a run already under way, on
one GPU or on a cluster; the run then continues to float tolerance rather than bit for bit, and
says so. Anything else refuses the resume, naming each key that changed. No `parallel` section
reads as the section's defaults (`strategy: ddp`), so writing those out changes nothing.
"""

from __future__ import annotations

from typing import Any

from rlvr_cli.errors import RlvrError

#: keys that change how the step's numbers are computed, never which numbers
HOW = (
    "hyperparameters.micro_batch_sequences",
    "hyperparameters.parallel.strategy",
    "hyperparameters.parallel.activation_checkpointing",
    "hyperparameters.parallel.reshard_after_forward",
    "hyperparameters.parallel.accumulate_whole_gradients",
    "hyperparameters.parallel.cpu_offload",
)
#: words about the experiment, not part of it
WORDS = ("description",)
SHOWN = 6


def values(text: str) -> dict[str, Any] | None:
    """The contract's values at dotted paths, defaults filled in; None if the text is not a
    contract this version reads."""
    from rlvr_cli.contract import yaml12
    from rlvr_cli.contract.models import Contract

    try:
        contract = Contract.model_validate(yaml12.parse(text).data)
    except Exception:  # whatever the reason it does not read, the answer is the same: not comparable
        return None
    tree = contract.model_dump(mode="json")
    tree["hyperparameters"]["parallel"] = contract.hyperparameters.strategy.model_dump(mode="json")  # none: ddp
    return _flat(tree)


def _flat(tree: Any, prefix: str = "") -> dict[str, Any]:
    """{"a": {"b": 1}} → {"a.b": 1}; lists and scalars are leaves."""
    if not isinstance(tree, dict) or (prefix and not tree):
        return {prefix: tree}
    out: dict[str, Any] = {}
    for key, value in tree.items():
        out.update(_flat(value, f"{prefix}.{key}" if prefix else str(key)))
    return out


def changed(before: str, after: str) -> list[tuple[str, Any, Any]] | None:
    """(key, before, after) for each value that differs; None when either text does not read."""
    old, new = values(before), values(after)
    if old is None or new is None:
        return None
    return [(k, old.get(k), new.get(k)) for k in sorted(set(old) | set(new)) if old.get(k) != new.get(k)]


def check(before: str | None, after: str, checkpoint: str) -> list[str]:
    """The changes a resume from `checkpoint` may go on with, in words (empty: none, or only
    comments and layout); raises naming the keys when any other value changed."""
    diff = changed(before, after) if before is not None else None
    if diff is None:
        raise RlvrError(
            f"the contract changed since checkpoint {checkpoint}; resume refuses a different experiment "
            "(start a new run with --run-dir)"
        )
    refused = [d for d in diff if d[0] not in HOW + WORDS]
    if refused:
        listed = "; ".join(f"{k}: {_short(a)} → {_short(b)}" for k, a, b in refused[:SHOWN])
        more = f"; and {len(refused) - SHOWN} more" if len(refused) > SHOWN else ""
        raise RlvrError(
            f"the contract changed since checkpoint {checkpoint} ({listed}{more}); resume refuses a different "
            "experiment: restore those values, or start a new run with --run-dir. On resume only the description "
            "and how the same numbers are computed may change (hyperparameters.micro_batch_sequences, and "
            "hyperparameters.parallel's strategy, activation_checkpointing, reshard_after_forward, "
            "accumulate_whole_gradients, cpu_offload)"
        )
    return [f"{k}: {_short(a)} → {_short(b)}" for k, a, b in diff if k in HOW]


def _short(value: Any) -> str:
    text = "unset" if value is None else str(value)
    return text if len(text) <= 60 else text[:57] + "..."
