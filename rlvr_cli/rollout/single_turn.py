"""Single-turn rollouts: every task's group sampled in one batched call of the engine, then
scored in one round trip to the verifier worker (`env/verifier_pool.py`)."""

from __future__ import annotations

import time
from collections.abc import Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from rlvr_cli.contract.models import Contract
from rlvr_cli.engine.engines import PolicyEngine
from rlvr_cli.engine.generate import response_text
from rlvr_cli.engine.types import SamplingParams
from rlvr_cli.env.sample import Sample
from rlvr_cli.env.scoring import score_all
from rlvr_cli.env.verifier_pool import VerifierPool
from rlvr_cli.rollout import hints, sets
from rlvr_cli.rollout.base import Draw, Times, sample_together
from rlvr_cli.rollout.prompts import Prompts


@dataclass
class SingleTurn:
    contract: Contract
    renderer: Any
    engine: PolicyEngine
    pool: VerifierPool
    prompts: Prompts

    @staticmethod
    def reward_source(contract: Contract, folder: Path, log_dir: Path | None = None) -> VerifierPool:
        return VerifierPool.for_contract(contract, folder)

    @classmethod
    def of(cls, contract: Contract, renderer: Any, engine: PolicyEngine, pool: VerifierPool) -> SingleTurn:
        return cls(contract, renderer, engine, pool, Prompts(contract, renderer))

    def using(self, engine: PolicyEngine) -> SingleTurn:
        return replace(self, engine=engine)

    def sample(self, tasks: Sequence[dict[str, Any]], draw: Draw, times: Times | None = None) -> list[Sample]:
        times = times if times is not None else Times()
        start = time.perf_counter()
        k, greedy = sets.members(self.contract, draw.group_size), draw.greedy and not sets.judged(self.contract)
        shown = [hints.hint_of(self.contract, t) if j < draw.hinted else None for t in tasks for j in range(k)]
        prompt_ids = [self.prompts.ids(tasks[i // k], shown[i] is not None) for i in range(len(shown))]
        params = SamplingParams.of(self.contract, self.renderer, greedy)
        gens = self.engine.sample(prompt_ids, params, draw.seed, draw.revision)
        prefix = hints.prefix(self.contract)
        numbers = draw.numbers(len(tasks))
        samples = [
            Sample(
                task=tasks[i // k],
                group=numbers[i // k],
                index=i % k,
                prompt_ids=prompt_ids[i],
                response_ids=gen.response_ids,
                mask=gen.mask,
                finish=gen.finish,
                seed=draw.seed,
                round=draw.round,
                text=response_text(self.renderer.tokenizer, gen.response_ids, gen.finish),
                revision=draw.revision,
                hint=shown[i],
                answer_prefix=shown[i] if shown[i] is not None and prefix else "",
                sampling_logp=list(gen.logprobs),
            )
            for i, gen in enumerate(gens)
        ]
        scored = time.perf_counter()
        times.generate += scored - start
        score_all(self.contract, samples, self.pool)
        times.score += time.perf_counter() - scored
        return samples

    def sample_share(
        self, tasks: Sequence[dict[str, Any]], draw: Draw, rank: int, world: int, times: Times | None = None
    ) -> tuple[list[Sample], list[dict[str, Any]]]:
        """Each group of this process's share sampled alone with its own seed, so samples do
        not depend on the number of processes; with `parallel.sample_groups: together`, the share
        in one batch seeded by rank, as a tool-use rollout samples it (fuller decode steps)."""
        if self.contract.hyperparameters.strategy.sample_groups == "together":
            return sample_together(self, tasks, draw, rank, world, times)
        samples: list[Sample] = []
        numbers = draw.numbers(len(tasks))  # the step's group numbers (later rounds go on from the earlier ones')
        for g in range(rank, len(tasks), world):
            samples += self.sample([tasks[g]], replace(draw, seed=draw.seed * 10_007 + g, groups=[numbers[g]]), times)
        return samples, list(tasks[rank::world])
