"""Single-turn rollouts: every task's group sampled in one batched call of the engine, then
scored in one round trip to the verifier worker (`env/single_turn.py`)."""

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
from rlvr_cli.env.single_turn import VerifierPool
from rlvr_cli.rollout import hints
from rlvr_cli.rollout.base import Times
from rlvr_cli.rollout.prompts import Prompts


@dataclass
class SingleTurn:
    contract: Contract
    renderer: Any
    engine: PolicyEngine
    pool: VerifierPool
    prompts: Prompts

    @staticmethod
    def reward_source(contract: Contract, folder: Path) -> VerifierPool:
        return VerifierPool.for_contract(contract, folder)

    @classmethod
    def of(cls, contract: Contract, renderer: Any, engine: PolicyEngine, pool: VerifierPool) -> SingleTurn:
        return cls(contract, renderer, engine, pool, Prompts(contract, renderer))

    def using(self, engine: PolicyEngine) -> SingleTurn:
        return replace(self, engine=engine)

    def sample(
        self,
        tasks: Sequence[dict[str, Any]],
        *,
        group_size: int,
        seed: int,
        round_: int = 0,
        revision: int = 0,
        greedy: bool = False,
        hinted: int = 0,
        groups: Sequence[int] | None = None,
        times: Times | None = None,
    ) -> list[Sample]:
        times = times if times is not None else Times()
        start = time.perf_counter()
        k = group_size
        shown = [hints.hint_of(self.contract, t) if j < hinted else None for t in tasks for j in range(k)]
        prompt_ids = [self.prompts.ids(tasks[i // k], shown[i] is not None) for i in range(len(shown))]
        params = SamplingParams.of(self.contract, self.renderer, greedy)
        gens = self.engine.sample(prompt_ids, params, seed, revision)
        prefix = hints.prefix(self.contract)
        numbers = list(groups) if groups is not None else list(range(len(tasks)))
        samples = [
            Sample(
                task=tasks[i // k],
                group=numbers[i // k],
                index=i % k,
                prompt_ids=prompt_ids[i],
                response_ids=gen.response_ids,
                mask=gen.mask,
                finish=gen.finish,
                seed=seed,
                round=round_,
                text=response_text(self.renderer.tokenizer, gen.response_ids, gen.finish),
                revision=revision,
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
        self,
        tasks: Sequence[dict[str, Any]],
        *,
        rank: int,
        world: int,
        group_size: int,
        seed: int,
        round_: int,
        revision: int,
        hinted: int,
        times: Times | None = None,
    ) -> tuple[list[Sample], list[dict[str, Any]]]:
        """Each group of this process's share sampled alone with its own seed, so samples do
        not depend on the number of processes."""
        samples: list[Sample] = []
        for g in range(rank, len(tasks), world):
            samples += self.sample(
                [tasks[g]],
                group_size=group_size,
                seed=seed * 10_007 + g,
                round_=round_,
                revision=revision,
                hinted=hinted,
                groups=[g],
                times=times,
            )
        return samples, list(tasks[rank::world])
