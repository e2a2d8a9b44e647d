"""`holdout_nll`: a token-normalised validation loss, on holdout steps, when the holdout tasks
carry a reference response (`monitoring.reference_answers: <field>`).

Each reference is scored as the policy would have to produce it after the task's prompt: the
field's text tokenized as the response, then the template's stop token. The value is the mean
negative log-likelihood per token over every reference token of the holdout (temperature 1: the
policy's own distribution), so it does not grow with answer length and is comparable across
steps of a run. Greedy holdout rewards say whether the answer is right; this says how far the
policy moved from the reference way of writing it — a rising value while the reward holds is the
policy drifting from its data.
"""

from __future__ import annotations

import math
from typing import Any

import torch

from rlvr_cli.engine.forward import make_batch, token_logprobs
from rlvr_cli.engine.precision import autocast
from rlvr_cli.errors import RlvrError
from rlvr_cli.rollout.prompts import Prompts
from rlvr_cli.train import distributed as dist
from rlvr_cli.train.sharding import Lockstep, is_sharded


def references(setup: Any) -> list[tuple[list[int], list[int]]]:
    """(prompt ids, reference response ids) of every holdout task with the field."""
    field = setup.contract.monitoring.reference_answers
    if not field:
        return []
    prompts, renderer = Prompts(setup.contract, setup.renderer), setup.renderer
    out = []
    for task in setup.holdout_tasks:
        text = task.get(field)
        if isinstance(text, str) and text:
            response = renderer.tokenizer.encode(text, add_special_tokens=False) + renderer.stop_ids[:1]
            out.append((prompts.ids(task), response))
    if not out:
        raise RlvrError(
            f"monitoring.reference_answers names '{field}', which no holdout task has (a non-empty string): "
            "add the reference responses to the holdout split, or drop the key"
        )
    return out


@torch.no_grad()
def holdout_nll(setup: Any, rows: list[tuple[list[int], list[int]]]) -> float:
    """Mean negative log-likelihood per reference token under the policy as it is now; the run's
    random state is as it was (a dropout drawing here must not change the training that follows)."""
    devices = [setup.device] if setup.device.type == "cuda" else []
    with torch.random.fork_rng(devices=devices):
        return _nll(setup, rows)


def _nll(setup: Any, rows: list[tuple[list[int], list[int]]]) -> float:
    """Under torchrun the processes share the micro-batches (batch k on rank k mod N; a sharded
    policy's process with fewer runs empty forwards in lockstep) and sum them in batch order, so
    the value is one process's whatever N."""
    size = setup.contract.hyperparameters.micro_batch_sequences or len(rows)
    starts = list(range(0, len(rows), size))
    mine = starts[setup.rank :: setup.world]
    sums = []
    for start in mine:
        part = rows[start : start + size]
        batch = make_batch(
            [p for p, _ in part], [r for _, r in part], [[1] * len(r) for _, r in part], setup.renderer.pad_id
        ).to(setup.device)
        with autocast(setup.compute, setup.device.type):
            logp, _ = token_logprobs(setup.policy, batch, 1.0)
        mask = batch.response_mask.bool()
        sums.append((start, float(-logp[mask].double().sum()), int(mask.sum())))
    if is_sharded(setup.policy):  # every process runs as many forwards through the units
        lockstep = Lockstep(setup.renderer.pad_id, setup.device)
        for _ in range(-(-len(starts) // setup.world) - len(mine)):
            with autocast(setup.compute, setup.device.type):
                lockstep.forward(setup.policy)
    every = sorted(s for part in dist.gather(sums) for s in part)
    total, count = sum(t for _, t, _ in every), sum(c for _, _, c in every)
    return total / count if count else math.nan
