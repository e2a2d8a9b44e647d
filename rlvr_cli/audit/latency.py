"""Latency as a release gate measures it: a split's prompts in batches of the stated concurrency,
each batch timed by the contract's own engine (greedy) twice — to the first token (`ttft_s`) and
to the end (`latency_s`); `tpot_s` is the time per token after the first, over the batch's longest
answer (zero, not below, where the two timings' noise exceeds it). Each batch is timed `repeats`
times and the fastest run counts (the first warms caches)."""

from __future__ import annotations

import time
from dataclasses import replace
from pathlib import Path
from typing import Any

from rlvr_cli.contract.models import Contract


def measure(contract: Contract, folder: Path, policy: Path, split: str) -> dict[str, dict[str, list[float]]]:
    """{item id: {"ttft_s": [s], "latency_s": [s], "tpot_s": [s]}} for every task of `split`."""
    from rlvr_cli.audit.evaluate import load_policy
    from rlvr_cli.chat.render import ChatRenderer
    from rlvr_cli.contract.tasks import read_split
    from rlvr_cli.engine.engines import PolicyEngine
    from rlvr_cli.engine.types import SamplingParams
    from rlvr_cli.rollout.prompts import Prompts

    spec = contract.acceptance.latency
    assert spec is not None  # RLV003: a latency gate needs acceptance.latency
    tasks = read_split(folder / getattr(contract.data.splits, split).path, split)
    renderer = ChatRenderer.from_contract(contract, folder)
    sampling = contract.hyperparameters.sampling
    engine = PolicyEngine.of(sampling.engine, load_policy(contract, folder, policy), server=sampling.server)
    prompts = Prompts(contract, renderer)
    params = SamplingParams.of(contract, renderer, greedy=True)
    out: dict[str, dict[str, list[float]]] = {}
    for start in range(0, len(tasks), spec.concurrency):
        batch = tasks[start : start + spec.concurrency]
        ids = [prompts.ids(task) for task in batch]
        first = _fastest(engine, ids, replace(params, max_new_tokens=1), spec.repeats)[0]
        whole, generations = _fastest(engine, ids, params, spec.repeats)
        steps = max(len(g.response_ids) for g in generations)
        # the two are timed apart: where answers are a token or two, the noise between the runs
        # can exceed the tokens' time, and a time is never below zero
        per_token = max(whole - first, 0.0) / max(steps - 1, 1)
        for task in batch:
            out[str(task["id"])] = {"ttft_s": [first], "latency_s": [whole], "tpot_s": [per_token]}
    return out


def _fastest(engine: Any, ids: list[list[int]], params: Any, repeats: int) -> tuple[float, list[Any]]:
    best, generations = float("inf"), []
    for _ in range(repeats):
        began = time.perf_counter()
        generations = engine.sample(ids, params, seed=0, revision=0)
        best = min(best, time.perf_counter() - began)
    return best, generations
