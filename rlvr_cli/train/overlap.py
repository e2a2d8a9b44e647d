"""Sampling ahead, within `max_policy_lag`: while step t updates the policy, the next step's
first round of groups is sampled by a copy of the weights step t started from.

- When: the contract asks (`hyperparameters.sample_ahead: true`), its lag budget has room
  (`max_policy_lag ≥ updates_per_batch`: the update's own passes use `updates_per_batch − 1`
  of it, sampling ahead one more; RLV303 otherwise) and one process trains (under torchrun
  every rank samples on-policy). Otherwise nothing here runs: strictly on-policy.
- Where it pays: sampling on its own device or cores. On two shared CPU cores it does not
  (benchmarks/README.md: the update slows by more than the sampling it hides).
- How: one worker thread and its own copy of the policy, refreshed from the trainer's weights
  before each launch (after the optimizer step that produced them: `engine.load_weights`).
  Prompt ids are rendered on the main thread; the worker only samples.
- The objective: these samples were drawn by weights one optimizer step older than those they
  train, so their importance ratio is taken against the log-probs the engine returned when
  sampling (`Sample.sampling_logp`), as the contract's ratio is defined; each sample's
  measured lag is in the records (`policy_lag`).
- Exact resume: a checkpoint waits for the sampling in flight and stores its result (token
  ids, log-probs, finish reasons, with the task indices, seed and weights revision); a resumed
  run takes those samples instead of drawing new ones, so it continues exactly.
"""

from __future__ import annotations

import copy
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any

import torch

from rlvr_cli.engine.engines import engine_for
from rlvr_cli.engine.types import Generation, SamplingParams
from rlvr_cli.train import distributed as dist
from rlvr_cli.train import hints


def allowed(setup: Any) -> bool:
    hp = setup.contract.hyperparameters
    return hp.sample_ahead and hp.max_policy_lag >= hp.updates_per_batch and not dist.active()


@dataclass
class Launched:
    step: int
    indices: list[int]
    seed: int
    revision: int
    hinted: int
    prompt_ids: list[list[int]]
    shown: list[str | None]
    result: Future[list[Generation]] | list[Generation]

    def generations(self) -> list[Generation]:
        if isinstance(self.result, Future):
            self.result = self.result.result()
        return self.result

    def as_json(self) -> dict[str, Any]:
        return {
            "step": self.step,
            "indices": self.indices,
            "seed": self.seed,
            "revision": self.revision,
            "hinted": self.hinted,
            "generations": [[g.response_ids, g.logprobs, g.finish] for g in self.generations()],
        }


class Ahead:
    """The next step's first round, sampling in the background."""

    def __init__(self, setup: Any) -> None:
        self.setup = setup
        self.model = copy.deepcopy(setup.policy).eval()
        for parameter in self.model.parameters():
            parameter.requires_grad_(False)
        self.engine = engine_for(setup.contract.hyperparameters.sampling.engine, self.model)
        # one intra-op thread for the sampler (a per-thread setting): the trainer keeps its own
        self.worker = ThreadPoolExecutor(
            max_workers=1, thread_name_prefix="rlvr-sample-ahead", initializer=torch.set_num_threads, initargs=(1,)
        )
        self.launched: Launched | None = None

    def launch(self, state: Any, prompts: Any, seed: int) -> None:
        """During step `state.step`, before its update: take the next step's tasks and sample
        them from the weights as they are now."""
        setup, hp = self.setup, self.setup.contract.hyperparameters
        indices = state.sampler.take(hp.prompts_per_step)
        tasks = [setup.train_tasks[i] for i in indices]
        hinted = hints.hinted_per_group(setup.contract, state.step + 1)
        k = hp.group_size
        shown = [hints.hint_of(setup.contract, t) if j < hinted else None for t in tasks for j in range(k)]
        prompt_ids = [prompts.ids(tasks[i // k], shown[i] is not None) for i in range(len(shown))]
        self.engine.load_weights(setup.policy)
        params = SamplingParams(
            setup.contract.length.max_response_tokens,
            hp.sampling.temperature,
            hp.sampling.top_p,
            hp.sampling.top_k,
            tuple(setup.renderer.stop_ids),
            setup.renderer.pad_id,
        )
        future = self.worker.submit(self.engine.sample, prompt_ids, params, seed)
        self.launched = Launched(
            state.step + 1, indices, seed, state.optimizer_steps, hinted, prompt_ids, shown, future
        )

    def take(self, step: int) -> Launched | None:
        """What was sampled ahead for `step` (waiting for it), or None."""
        launched, self.launched = self.launched, None
        if launched is None or launched.step != step:
            return None
        launched.generations()
        return launched

    def settle(self, state: Any) -> None:
        """Before a checkpoint: wait for the sampling in flight and put it in the state."""
        state.ahead = self.launched.as_json() if self.launched is not None else None

    def restore(self, data: dict[str, Any] | None, prompts: Any) -> None:
        """A resumed run: the samples the checkpoint holds are the ones in flight."""
        if not data:
            return
        setup, k = self.setup, self.setup.contract.hyperparameters.group_size
        tasks = [setup.train_tasks[i] for i in data["indices"]]
        shown = [hints.hint_of(setup.contract, t) if j < data["hinted"] else None for t in tasks for j in range(k)]
        prompt_ids = [prompts.ids(tasks[i // k], shown[i] is not None) for i in range(len(shown))]
        generations = [
            Generation(ids, [1] * len(ids), finish, data["seed"], logps) for ids, logps, finish in data["generations"]
        ]
        self.launched = Launched(
            data["step"],
            data["indices"],
            data["seed"],
            data["revision"],
            data["hinted"],
            prompt_ids,
            shown,
            generations,
        )

    def close(self) -> None:
        self.worker.shutdown(wait=True, cancel_futures=True)
