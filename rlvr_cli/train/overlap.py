"""Sampling ahead, within `max_policy_lag`: while step t updates the policy, the first round of
groups of the steps up to t + depth is sampled by copies of the weights as they are at step t,
`depth` = max_policy_lag − (updates_per_batch · mini_batches − 1) (1 when the lag budget has room
for one step more than the update's own optimizer steps; 2 with max_policy_lag 2 and one: lag 2).

- When: the contract asks (`hyperparameters.sample_ahead: true`), its lag budget has room
  (`max_policy_lag ≥ updates_per_batch · mini_batches`: the update's own optimizer steps use
  one less, sampling ahead one more; RLV303 otherwise). Otherwise nothing here runs: strictly
  on-policy. Under torchrun each process samples its share of the next steps' groups ahead,
  as it samples a step's (`sample_share`), with its own copies of the whole weights (fsdp2:
  gathered into a model of the policy's structure, in the dtype sampling computes in, by every
  process at each launch: `Lender.whole_copy`).
- Where it pays: sampling on its own device or cores. On two shared CPU cores it does not
  (benchmarks/README.md: the update slows by more than the sampling it hides).
- How: one worker thread, and `depth` engines each on its own copy of the policy (the memory of
  `depth` more models), one per step in flight, given the trainer's weights
  (`PolicyEngine.sync`) at its launch — the weights of the last optimizer step, never older.
  The steps in flight are a bounded queue in step order: at most `depth`, each sampled by the
  thread in turn. A served engine (`sampling.server`) is its own copy: the server samples the
  next step with the weights it holds while the trainer updates, and is handed the new weights
  once that sampling has ended (`before_sync`), so depth 1 only (RLV010). The worker runs the
  contract's rollout as training does (`train/collect.py` `sample_groups`): single-turn samples
  are scored on the verifier worker, tool-use episodes run against the resources server, on
  this thread. Holdout evaluation waits for it.
- The objective: these samples were drawn by weights one optimizer step older than those they
  train, so the contract must say which log-probs divide their ratio (`objective.ratio`,
  RLV003 without it): the engine's as it sampled (`Sample.sampling_logp`), or the trainer's
  recomputed under the current weights, then best with an importance correction
  (`objective.correction`: train/importance.py); each sample's measured lag is in the records
  (`policy_lag`).
- Exact resume: a checkpoint waits for the sampling in flight and stores every step's samples whole
  (`Sample.as_json`: ids, log-probs, verdicts, transcripts, with their tasks' indices; under
  torchrun every process's share, gathered); a resumed run takes those samples instead of
  drawing new ones (each process its share: group g on rank g mod N, whatever N wrote them),
  so it continues exactly.
"""

from __future__ import annotations

import copy
import time
from collections import deque
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any

import torch

from rlvr_cli.engine.engines import PolicyEngine
from rlvr_cli.env.sample import Sample
from rlvr_cli.errors import RlvrError
from rlvr_cli.rollout.base import Rollout, Times
from rlvr_cli.train import distributed as dist
from rlvr_cli.train.collect import sample_groups


def allowed(setup: Any) -> bool:
    return setup.contract.hyperparameters.ahead_steps >= 1


@dataclass
class Launched:
    step: int
    indices: list[int]
    result: Future[tuple[list[Sample], list[dict[str, Any]]]] | tuple[list[Sample], list[dict[str, Any]]]
    started: float = field(default_factory=time.monotonic)  # when its sampling began (a restored one: resume)

    def samples(self) -> tuple[list[Sample], list[dict[str, Any]]]:
        if isinstance(self.result, Future):
            self.result = self.result.result()
        return self.result

    def as_json(self) -> dict[str, Any]:
        """Every sample whole (under torchrun: every process's share), its task by its index in
        the train split (group g, numbered from 0 in its step, is task `indices[g]`)."""
        samples = sorted((s for part in dist.gather(self.samples()[0]) for s in part), key=lambda s: (s.group, s.index))
        return {
            "step": self.step,
            "indices": self.indices,
            "samples": [s.as_json(self.indices[s.group]) for s in samples],
        }


class Ahead:
    """The next steps' first rounds, sampling in the background, `depth` steps at most."""

    def __init__(self, setup: Any) -> None:
        self.setup = setup
        self.depth = setup.contract.hyperparameters.ahead_steps
        # a served engine samples ahead itself, with the weights it holds (one step ahead: RLV010)
        self.served = bool(getattr(setup.engine.engine, "remote", False))
        engines = [setup.engine] if self.served else [self._engine() for _ in range(self.depth)]
        self.engines = engines  # step s samples with engines[s % depth]
        # one intra-op thread for the sampler (a per-thread setting): the trainer keeps its own
        self.worker = ThreadPoolExecutor(
            max_workers=1, thread_name_prefix="rlvr-sample-ahead", initializer=torch.set_num_threads, initargs=(1,)
        )
        self.launched: deque[Launched] = deque()  # in step order
        self.age = 0.0

    def _engine(self) -> PolicyEngine:
        lender = self.setup.engine.lender  # a sharded policy: a copy of its whole weights (fsdp2)
        model = lender.whole_copy(self.setup.device) if lender else copy.deepcopy(self.setup.policy).eval()
        for parameter in model.parameters():
            parameter.requires_grad_(False)
        sampling = self.setup.contract.hyperparameters.sampling
        return PolicyEngine.of(sampling.engine, model, self.setup.engine.revision, self.setup.compute)

    def launch(self, state: Any, rollout: Rollout) -> None:
        """During step `state.step`, before its update: take the tasks of each step up to
        `state.step + depth` not launched yet (the contract's last step at most) and sample them
        from the weights as they are now."""
        setup, hp = self.setup, self.setup.contract.hyperparameters
        step = self.launched[-1].step + 1 if self.launched else state.step + 1
        while step <= state.step + self.depth and step < hp.max_steps:
            engine = self.engines[step % self.depth]  # the step it sampled last was taken by now
            indices = state.sampler.take(hp.prompts_per_step)
            if setup.engine.lender is not None:  # fsdp2: every unit gathered once, copied, resharded
                with setup.engine.lender() as whole:
                    engine.sync(whole, state.optimizer_steps)
            else:
                engine.sync(setup.policy, state.optimizer_steps)
            mine, revision = rollout.using(engine), state.optimizer_steps
            future = self.worker.submit(sample_groups, setup, mine, indices, step, 0, revision, 0, Times())
            self.launched.append(Launched(step, indices, future))
            step += 1

    def take(self, step: int) -> tuple[list[Sample], list[dict[str, Any]]] | None:
        """What was sampled ahead for `step` (waiting for it), or None."""
        if not self.launched or self.launched[0].step != step:
            return None
        launched = self.launched.popleft()
        samples = launched.samples()
        self.age = time.monotonic() - launched.started  # `rollout_age_s`: how old the samples are when used
        return samples

    def before_sync(self) -> None:
        """Before the trainer hands the engine new weights: a served engine's sampling in flight
        ends first, every process's (under torchrun process 0 hands them over for all), so that
        no step's samples come from two revisions."""
        if self.served:
            self.wait()
            dist.barrier()

    def wait(self) -> None:
        """Until the sampling in flight is done (it shares the reward source with the caller)."""
        for launched in self.launched:
            launched.samples()

    def settle(self, state: Any) -> None:
        """Before a checkpoint: wait for the sampling in flight and put it in the state."""
        state.ahead = [launched.as_json() for launched in self.launched] or None

    def restore(self, data: list[dict[str, Any]] | dict[str, Any] | None) -> None:
        """A resumed run: the samples the checkpoint holds are the ones in flight (one step's, as
        releases before sampling several steps ahead wrote it, or a list)."""
        rank, world = self.setup.rank, self.setup.world
        for one in [data] if isinstance(data, dict) else data or []:
            if "samples" not in one:
                raise RlvrError(
                    "the checkpoint holds samples drawn ahead in an older layout (token ids without verdicts); "
                    "resume it with the rlvr release that wrote it, or start the run again"
                )
            tasks, indices = self.setup.train_tasks, list(one["indices"])
            samples = [Sample.from_json(row, tasks) for row in one["samples"]]
            if dist.active():  # this process's share, as it samples a step's (rollout/base.py)
                samples = [s for s in samples if s.group % world == rank]
                indices_mine = indices[rank::world]
            else:
                indices_mine = indices
            self.launched.append(Launched(int(one["step"]), indices, (samples, [tasks[i] for i in indices_mine])))

    def close(self) -> None:
        self.worker.shutdown(wait=True, cancel_futures=True)
