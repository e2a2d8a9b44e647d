"""The training loop as a short story: rollout → score → advantages → update → log →
check rules → checkpoint. The plumbing lives in the helpers below and in sibling modules."""

from __future__ import annotations

import math
import time
from pathlib import Path
from typing import Any

import torch

from rlvr_cli.chat.render import ChatRenderer
from rlvr_cli.contract.models import Contract
from rlvr_cli.env.single_turn import VerifierPool
from rlvr_cli.errors import RlvrError
from rlvr_cli.train import distributed as dist
from rlvr_cli.train import objective as obj
from rlvr_cli.train.data import Sampler, messages_of, read_split
from rlvr_cli.train.metrics import StepLog, StepResult
from rlvr_cli.train.records import RecordStore
from rlvr_cli.train.rollout import Batch, generate, make_batch, token_logprobs
from rlvr_cli.train.score import Sample, answer_and_score, response_text, score_all
from rlvr_cli.train.setup import ModelSetup

DTYPES = {"fp32": torch.float32, "bf16": torch.bfloat16, "fp16": torch.float16}


class Trainer(ModelSetup, StepLog):
    """Holds the models, optimizer, data cursor and record store of one run."""

    def __init__(self, contract: Contract, folder: Path, run_dir: Path) -> None:
        from transformers.utils import logging

        logging.set_verbosity_error()
        logging.disable_progress_bar()
        self.c, self.folder, self.run_dir = contract, folder, run_dir
        hp = contract.hyperparameters
        if contract.data.hints is not None and contract.data.hints.used:
            raise RlvrError("hint-assisted rollouts (data.hints.used) are not implemented in rlvr train yet")
        if hp.precision == "fp16" and not torch.cuda.is_available():
            raise RlvrError("precision fp16 needs a GPU; use fp32 or bf16 on CPU")
        self.rank, self.world = dist.rank_world()
        self.per_group_seeds = dist.active()  # samples must not depend on the number of processes
        if self.world > 1:
            self._check_shardable()
        self.device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
        self.dtype = DTYPES[hp.precision]
        torch.manual_seed(hp.seed)
        self.renderer = ChatRenderer.from_contract(contract, folder)
        self.tokenizer = self.renderer.tokenizer
        self.pad_id = self._pad_id()
        self.policy = self._load_model(self._artifact_path(contract.artifacts.policy, "policy"))
        self.reference = self._load_reference()
        self.optimizer = self._optimizer()
        self.scheduler = self._scheduler()
        splits = contract.data.splits
        self.train_tasks = read_split(folder / splits.train.path, "train")
        self.holdout_tasks = read_split(folder / splits.holdout.path, "holdout")
        self.sampler = Sampler(len(self.train_tasks), hp.seed)
        # one process owns the record store: opening it also clears orphans of interrupted writes
        self.records = RecordStore(run_dir / "records", contract.records.shard_rows) if self.rank == 0 else None
        self.step = 0
        self.optimizer_steps = 0
        self.totals = {"rollouts": 0, "verifier_calls": 0, "tokens": 0}
        self.holdout_history: list[tuple[int, float, float]] = []  # (step, train reward, holdout reward)
        self.monitor_state: list[list[Any]] = []
        self._prompt_cache: dict[str, list[int]] = {}

    def restore(self, state: dict[str, Any]) -> None:
        """Counters and cursors from a checkpoint (weights, optimizer and RNG are restored by it)."""
        self.step, self.optimizer_steps = state["step"], state["optimizer_steps"]
        self.totals = dict(state["totals"])
        sampler = state["sampler"]
        if sampler["size"] != len(self.train_tasks):
            raise RlvrError("the train split changed size since the checkpoint; resume would not be exact")
        self.sampler.epoch, self.sampler.position = sampler["epoch"], sampler["position"]
        self.holdout_history = [tuple(h) for h in state["holdout_history"]]
        self.monitor_state = state["monitor"]

    # ── set-up helpers ────────────────────────────────────────────────────────────────

    def _check_shardable(self) -> None:
        hp, ds = self.c.hyperparameters, self.c.length.dynamic_sampling
        if hp.prompts_per_step % self.world:
            raise RlvrError(f"prompts_per_step ({hp.prompts_per_step}) must be divisible by the {self.world} processes")
        if ds and ds.drop_uniform_groups:
            raise RlvrError("dynamic sampling runs in one process for now; drop --nproc or drop_uniform_groups")

    # ── rollout and scoring ───────────────────────────────────────────────────────────

    def prompt_ids(self, task: dict[str, Any]) -> list[int]:
        key = str(task["id"])
        if key not in self._prompt_cache:
            ids = self.renderer.prompt_ids(messages_of(task))
            limit = self.c.length.max_prompt_tokens
            if len(ids) > limit:
                if self.c.length.prompt_truncation == "error":
                    raise RlvrError(
                        f"task {key}: the prompt is {len(ids)} tokens, over max_prompt_tokens={limit} "
                        "(length.prompt_truncation: error)"
                    )
                ids = ids[-limit:]
            self._prompt_cache[key] = ids
        return self._prompt_cache[key]

    def sample_groups(self, tasks: list[dict[str, Any]], seed: int, round_: int, first_group: int) -> list[Sample]:
        hp, length = self.c.hyperparameters, self.c.length
        prompts = [self.prompt_ids(t) for t in tasks for _ in range(hp.group_size)]
        gens = generate(
            self.policy,
            prompts,
            max_new_tokens=length.max_response_tokens,
            temperature=hp.sampling.temperature,
            top_p=hp.sampling.top_p,
            top_k=hp.sampling.top_k,
            stop_ids=self.renderer.stop_ids,
            pad_id=self.pad_id,
            seed=seed,
        )
        samples = []
        for i, gen in enumerate(gens):
            task = tasks[i // hp.group_size]
            sample = Sample(
                task,
                first_group + i // hp.group_size,
                i % hp.group_size,
                prompts[i],
                gen.response_ids,
                gen.mask,
                gen.finish,
                seed,
                round_,
            )
            sample.text = response_text(self.tokenizer, gen.response_ids, gen.finish)
            samples.append(sample)
        return samples

    def sample_own_groups(self, tasks: list[dict[str, Any]], seed: int, round_: int) -> list[Sample]:
        """This rank's groups (g ≡ rank mod world), each sampled alone with its own seed."""
        samples: list[Sample] = []
        for g in range(self.rank, len(tasks), self.world):
            for s in self.sample_groups([tasks[g]], seed * 10_007 + g, round_, g):
                samples.append(s)
        return samples

    def collect(self, pool: VerifierPool) -> StepResult:
        """Rollout and score `prompts_per_step` groups; with dynamic sampling, drop all-equal
        groups and sample again, up to `max_rounds` rounds."""
        hp = self.c.hyperparameters
        ds = self.c.length.dynamic_sampling
        drop = bool(ds and ds.drop_uniform_groups)
        rounds = ds.max_rounds if drop else 1
        result = StepResult()
        for round_ in range(rounds):
            missing = hp.prompts_per_step - len(result.accepted)
            if missing <= 0:
                break
            tasks = [self.train_tasks[i] for i in self.sampler.take(missing)]
            seed = hp.seed * 1_000_003 + self.step * 101 + round_
            start = time.perf_counter()
            if self.per_group_seeds:
                samples = self.sample_own_groups(tasks, seed, round_)
                tasks = tasks[self.rank :: self.world]
            else:
                samples = self.sample_groups(tasks, seed, round_, len(result.generated) // hp.group_size)
            result.seconds["generate"] += time.perf_counter() - start
            start = time.perf_counter()
            score_all(self.c, samples, pool)
            result.seconds["score"] += time.perf_counter() - start
            result.generated += samples
            result.rounds = round_ + 1
            for g in range(len(tasks)):
                group = samples[g * hp.group_size : (g + 1) * hp.group_size]
                if drop and _uniform(group):
                    for s in group:
                        s.kept, s.reason = False, s.reason or "uniform_group"
                else:
                    result.accepted.append(group)
        return result

    # ── the update ────────────────────────────────────────────────────────────────────

    def forward_batches(self, samples: list[Sample]) -> tuple[Batch, list[torch.Tensor]]:
        """One rectangle for all kept samples, cut into the micro-batches of every forward."""
        batch = make_batch(
            [s.prompt_ids for s in samples], [s.response_ids for s in samples], [s.mask for s in samples], self.pad_id
        ).to(self.device)
        size = self.c.hyperparameters.micro_batch_sequences or len(samples)
        return batch, list(torch.arange(len(samples)).split(size))

    @staticmethod
    def rows(batch: Batch, index: torch.Tensor) -> Batch:
        return Batch(
            batch.input_ids[index], batch.attention_mask[index], batch.prompt_width, batch.response_mask[index]
        )

    @torch.no_grad()
    def logprobs(self, model: Any, batch: Batch, parts: list[torch.Tensor]) -> torch.Tensor:
        temperature = self.c.hyperparameters.sampling.temperature
        return torch.cat([token_logprobs(model, self.rows(batch, part), temperature)[0] for part in parts])

    def update(
        self,
        samples: list[Sample],
        advantages: torch.Tensor,
        batch: Batch,
        parts: list[torch.Tensor],
        old: torch.Tensor | None,
        ref: torch.Tensor | None,
    ) -> dict[str, float]:
        """`updates_per_batch` optimizer passes over the micro-batches.

        Without precomputed old log-probs, the first pass's own log-probs (detached) are the
        old ones: they come from the policy that sampled, before any optimizer step, through
        the same forward — so the first ratio is exactly 1 and no extra forward is paid."""
        hp, o = self.c.hyperparameters, self.c.objective
        totals = {
            "total_tokens": dist.total(float(batch.response_mask.sum()) if batch is not None else 0.0),
            "total_sequences": dist.total(float(len(samples))),
        }
        olds: list[torch.Tensor | None] = [None if old is None else old[part] for part in parts]
        metrics: dict[str, float] = {"nonfinite_count": 0.0}
        for _ in range(hp.updates_per_batch):
            self.optimizer.zero_grad(set_to_none=True)
            stats, loss_sum = None, 0.0
            for i, part in enumerate(parts):
                mb = self.rows(batch, part)  # type: ignore[arg-type]
                logp, entropy = token_logprobs(self.policy, mb, hp.sampling.temperature, with_entropy=True)
                if olds[i] is None:
                    olds[i] = logp.detach()
                loss, st = obj.policy_loss(
                    logp,
                    olds[i],
                    None if ref is None else ref[part],
                    advantages[part],
                    mb.response_mask,
                    o,
                    max_response_tokens=self.c.length.max_response_tokens,
                    entropy=entropy,
                    **totals,
                )
                loss = self.fault_hook(loss)
                metrics["nonfinite_count"] += float(not torch.isfinite(loss)) + float((~torch.isfinite(logp)).sum())
                loss.backward()
                loss_sum += float(loss.detach())
                stats = st if stats is None else stats.add(st)
            dist.sum_gradients(self.policy)  # every rank now holds the whole batch's gradient
            metrics["nonfinite_count"] = dist.total(metrics["nonfinite_count"])
            metrics["nonfinite_count"] += float(
                sum(int((~torch.isfinite(p.grad)).sum()) for p in self.policy.parameters() if p.grad is not None)
            )
            grad_norm = float(
                torch.nn.utils.clip_grad_norm_(self.policy.parameters(), hp.optimizer.grad_clip or float("inf"))
            )
            if metrics["nonfinite_count"] == 0:  # never let a NaN into the weights
                self.optimizer.step()
                self.scheduler.step()
                self.optimizer_steps += 1
        for sample, lp in zip(samples, torch.cat(olds).tolist() if olds else [], strict=True):  # type: ignore[arg-type]
            sample.old_logp = lp[: len(sample.response_ids)]
        if dist.active():  # every rank reports the global numbers
            stats = stats or obj.LossStats(0.0, 0.0, 1.0, 0.0, 0.0, 0.0)
            stats = obj.LossStats(
                dist.total(stats.tokens),
                dist.total(stats.clipped),
                dist.maximum(stats.ratio_max),
                dist.total(stats.kl_sum),
                dist.total(stats.entropy_sum),
                dist.total(stats.pg_loss),
            )
            loss_sum = dist.total(loss_sum)
        tokens = max(stats.tokens, 1.0) if stats else 1.0
        metrics.update(
            {
                "loss": loss_sum,
                "pg_loss": stats.pg_loss if stats else 0.0,
                "kl": stats.kl_sum / tokens if stats and ref is not None else 0.0,
                "entropy": stats.entropy_sum / tokens if stats else 0.0,
                "clip_fraction": stats.clipped / tokens if stats else 0.0,
                "ratio_max": stats.ratio_max if stats else 1.0,
                "grad_norm": grad_norm,
                "lr": self.scheduler.get_last_lr()[0],
            }
        )
        return metrics

    def fault_hook(self, loss: torch.Tensor) -> torch.Tensor:
        """Tests poison one step's loss through RLVR_FAULT=nan_loss@STEP (see train/monitor)."""
        from rlvr_cli.train.faults import poison

        return poison(loss, self.step)

    # ── one step ──────────────────────────────────────────────────────────────────────

    def train_step(self, pool: VerifierPool) -> tuple[dict[str, float], list[Sample]]:
        started = time.perf_counter()
        result = self.collect(pool)
        kept = [s for group in result.accepted for s in group if s.kept]
        start = time.perf_counter()
        learned = self.learn(result.accepted) if dist.total(float(len(kept))) else {}
        result.seconds["update"] = time.perf_counter() - start
        if dist.active():  # metrics and records cover every rank's samples, in group order
            result.generated = sorted(
                (s for part in dist.gather(result.generated) for s in part), key=lambda s: (s.round, s.group, s.index)
            )
            result.accepted = [g for part in dist.gather(result.accepted) for g in part]
        metrics = self.rollout_metrics(result)
        metrics.update(learned)
        wall = time.perf_counter() - started
        generated_tokens = sum(len(s.response_ids) for s in result.generated)
        metrics.update({f"time_{k}_s": v for k, v in result.seconds.items()})
        metrics.update(
            {
                "tokens_per_s": generated_tokens / max(wall, 1e-9),
                "step_seconds": wall,
                "policy_lag": float(self.c.hyperparameters.updates_per_batch - 1),
            }
        )
        self.totals["rollouts"] += len(result.generated)
        self.totals["verifier_calls"] += sum(s.verdict is not None for s in result.generated)
        self.totals["tokens"] += generated_tokens
        metrics.update({f"total_{k}": float(v) for k, v in self.totals.items()})
        return metrics, result.generated

    def learn(self, groups: list[list[Sample]]) -> dict[str, float]:
        """Advantages over the accepted groups, reference log-probs, the update."""
        o = self.c.objective
        flat = [s for g in groups for s in g]
        index = torch.tensor([i for i, s in enumerate(flat) if s.kept], dtype=torch.long)
        trained = [flat[i] for i in index.tolist()]
        if not trained:  # another rank has samples: join its collectives with an empty batch
            self.global_advantages(flat, torch.tensor([math.nan] * len(flat), dtype=torch.float64))
            return self.update([], torch.zeros(0), None, [], None, None)
        batch, parts = self.forward_batches(trained)
        ref = self.logprobs(self.reference, batch, parts) if self.reference is not None else None  # (B, T)
        rewards = torch.tensor([s.reward if s.kept else math.nan for s in flat], dtype=torch.float64)  # (N,)
        old = None
        if ref is not None and o.kl.placement == "reward" and o.kl.coef > 0:
            old = self.logprobs(self.policy, batch, parts)  # the KL penalty must exist before advantages
            kl = obj.sequence_kl(old, ref, batch.response_mask, o.kl.estimator).double().cpu()
            rewards[index] -= o.kl.coef * kl
        adv = self.global_advantages(flat, rewards)  # (N,)
        for s, a in zip(flat, adv.tolist(), strict=True):
            s.advantage = a
        return self.update(trained, adv[index].to(self.device), batch, parts, old, ref)

    def global_advantages(self, flat: list[Sample], rewards: torch.Tensor) -> torch.Tensor:
        """Advantages over the whole (all-rank) batch, returned for this rank's samples."""
        hp, o = self.c.hyperparameters, self.c.objective
        if not dist.active():
            return obj.advantages(rewards, hp.group_size, o).float()
        everyone = dist.gather([(s.group, s.index, r) for s, r in zip(flat, rewards.tolist(), strict=True)])
        ordered = sorted(item for part in everyone for item in part)
        position = {(g, i): k for k, (g, i, _) in enumerate(ordered)}
        adv = obj.advantages(torch.tensor([r for _, _, r in ordered], dtype=torch.float64), hp.group_size, o)
        return torch.stack([adv[position[(s.group, s.index)]] for s in flat]).float()

    @torch.no_grad()
    def evaluate_holdout(self, pool: VerifierPool) -> float:
        """Greedy answer to every holdout task (never with hints); the mean reward."""
        prompts = [self.prompt_ids(t) for t in self.holdout_tasks]
        rows = answer_and_score(
            self.c,
            self.policy,
            self.tokenizer,
            prompts,
            self.holdout_tasks,
            pool,
            stop_ids=self.renderer.stop_ids,
            pad_id=self.pad_id,
        )
        return sum(s.reward if s.valid else 0.0 for s in rows) / len(rows)


def _uniform(group: list[Sample]) -> bool:
    rewards = [s.reward for s in group if s.valid]
    return len(rewards) <= 1 or max(rewards) == min(rewards)
