"""The update, one function per stage of `train_step` (train/loop.py): the reference's
log-probs, the KL penalty in the reward (when placed there), advantages (train/objective.py),
the ratio's denominator, then `updates_per_batch` optimizer passes over the micro-batches of
one step's kept samples (one optimizer step per mini-batch a pass) with the contract's objective."""

from __future__ import annotations

import contextlib
import dataclasses
import math

import torch

from rlvr_cli.contract.models import Contract
from rlvr_cli.engine.precision import autocast
from rlvr_cli.env.sample import Sample
from rlvr_cli.rollout import hints
from rlvr_cli.train import credit, lora
from rlvr_cli.train import distributed as dist
from rlvr_cli.train import objective as obj
from rlvr_cli.train.entropy_mask import entropy_keep
from rlvr_cli.train.forward_pass import Forward, forward_description  # noqa: F401  (update.Forward, as ever)
from rlvr_cli.train.importance import engine_logprobs
from rlvr_cli.train.layer_stats import LayerWatch, unseen
from rlvr_cli.train.setup import Setup
from rlvr_cli.train.sharding import before_backward, is_sharded
from rlvr_cli.train.state import TrainState
from rlvr_cli.train.update_metrics import global_stats, update_metrics


@torch.no_grad()
def sampling_logprobs(setup: Setup, samples: list[Sample]) -> None:
    """Old log-probs of samples that are not trained (excluded, truncated, uniform groups), from
    the weights that sampled them, so every record carries them."""
    todo = [s for s in samples if not s.old_logp and s.response_ids]
    if not (dist.maximum(float(len(todo))) if is_sharded(setup.policy) else todo):
        return
    fwd = Forward.of(setup, todo)
    logp = fwd.logprobs(setup.policy, setup.contract.hyperparameters.sampling.temperature)  # (B, T)
    for s, row in zip(todo, logp.tolist(), strict=True):
        s.old_logp = row[: len(s.response_ids)]


def reference_logprobs(setup: Setup, fwd: Forward) -> torch.Tensor | None:
    """`(B, T)` the frozen reference's log-probs of the trained samples (None without one)."""
    if setup.reference is None or not (fwd.parts or fwd.empty_rounds):
        return None
    temperature = setup.contract.hyperparameters.sampling.temperature
    if setup.reference_is_base:
        with lora.switched_off(setup.peft_model):
            return fwd.logprobs(setup.policy, temperature)
    return fwd.logprobs(setup.reference, temperature)


def rewards_with_kl(
    setup: Setup, flat: list[Sample], fwd: Forward, ref: torch.Tensor | None, owner: list[int]
) -> tuple[torch.Tensor, torch.Tensor | None]:
    """Rewards `(N,)` of the step's units (NaN: not trained; train/credit.py), minus β·KL of the
    rows each trains when the contract places the KL penalty in the reward (`kl.placement:
    reward`), which must exist before advantages; then also the policy's log-probs it took
    `(B, T)`, the old ones. `owner`: each trained row's unit."""
    o = setup.contract.objective
    rewards = torch.tensor([s.reward if s.kept else math.nan for s in flat], dtype=torch.float64)  # (N,)
    if ref is None or o.kl.placement != "reward" or o.kl.coef <= 0:
        return rewards, None
    old = fwd.logprobs(setup.policy, setup.contract.hyperparameters.sampling.temperature)
    kl = obj.sequence_kl(old, ref, fwd.batch.response_mask, o.kl.estimator).double().cpu()  # (B,)
    rewards.index_add_(0, torch.tensor(owner, dtype=torch.long), -o.kl.coef * kl)
    return rewards, old


def step_advantages(
    setup: Setup, flat: list[Sample], rewards: torch.Tensor, owner: list[int], row_tokens: torch.Tensor
) -> torch.Tensor:
    """Advantages over the whole (all-rank) batch of units, written into each unit (and the
    sessions it trains) and returned for this rank's trained rows `(B,)` (`owner`: each row's unit;
    `row_tokens` `(B,)`: each row's trained tokens, which `whiten.over: batch_tokens` weighs by)."""
    contract, subgroup = setup.contract, hints.subgroup(setup.contract)
    size = credit.unit_width(contract)
    tokens = torch.zeros(len(flat), dtype=torch.float64)  # (N,): each unit's trained tokens
    if len(owner):
        tokens.index_add_(0, torch.tensor(owner, dtype=torch.long), row_tokens.detach().double().cpu())
    if credit.several(flat):  # episodes of several sessions: groups of any width
        adv = credit.ragged_advantages(contract, flat, rewards, subgroup, tokens).float()
    elif not dist.active():
        shown = torch.tensor([s.hint is not None for s in flat], dtype=torch.bool)
        adv = obj.hinted_advantages(rewards, shown, size, contract.objective, subgroup, tokens).float()
    else:
        mine = [
            (s.group, s.index, r, s.hint is not None, n)
            for s, r, n in zip(flat, rewards.tolist(), tokens.tolist(), strict=True)
        ]
        ordered = sorted(item for part in dist.gather(mine) for item in part)
        position = {(g, i): k for k, (g, i, *_) in enumerate(ordered)}
        every_reward = torch.tensor([r for _, _, r, _, _ in ordered], dtype=torch.float64)
        shown = torch.tensor([h for _, _, _, h, _ in ordered], dtype=torch.bool)
        every_tokens = torch.tensor([n for *_, n in ordered], dtype=torch.float64)
        every = obj.hinted_advantages(every_reward, shown, size, contract.objective, subgroup, every_tokens)
        adv = torch.stack([every[position[(s.group, s.index)]] for s in flat]).float() if flat else torch.zeros(0)
    for s, a in zip(flat, adv.tolist(), strict=True):
        s.advantage = a
    return adv[torch.tensor(owner, dtype=torch.long)].to(setup.device)


def normalisers(contract: Contract, tokens: float, sequences: float) -> dict[str, float]:
    """What the aggregation divides by: this optimizer batch's (mini-batch's) trained tokens and
    sequences, except that Dr. GRPO's `constant_norm` divides by a constant of the run
    (prompts_per_step × group_size sequences a step, over its mini-batches), however many samples
    truncation or invalid verdicts excluded."""
    hp = contract.hyperparameters
    if contract.objective.aggregation == "constant_norm":
        sequences = float(hp.prompts_per_step * hp.group_size / hp.mini_batches)
    return {"total_tokens": tokens, "total_sequences": float(sequences)}


def mini_batches(setup: Setup, samples: list[Sample], fwd: Forward) -> list[Forward]:
    """The step's batch as `mini_batches` Forwards over the same rows: the j-th of the step's
    trained groups (in group order, over every process) in mini-batch j mod mini_batches — the
    same split whatever the number of processes, as even as the groups allow when dynamic
    sampling kept some — each cut into micro-batches; a sharded policy's processes run as many
    rounds as the busiest."""
    count = setup.contract.hyperparameters.mini_batches
    if count == 1:
        return [fwd]
    numbers = sorted({s.group for s in samples})
    if dist.active():
        numbers = sorted({n for part in dist.gather(numbers) for n in part})
    place = {group: k % count for k, group in enumerate(numbers)}
    size = setup.contract.hyperparameters.micro_batch_sequences or len(samples) or 1
    out = []
    for j in range(count):
        rows = torch.tensor([k for k, s in enumerate(samples) if place[s.group] == j], dtype=torch.long)
        parts = list(rows.split(size)) if len(rows) else []
        rounds = int(dist.maximum(float(len(parts)))) if fwd.lockstep is not None else 0
        out.append(dataclasses.replace(fwd, parts=parts, rounds=rounds))
    return out


def optimizer_passes(
    setup: Setup,
    state: TrainState,
    samples: list[Sample],
    adv: torch.Tensor,
    fwd: Forward,
    old: torch.Tensor | None,
    ref: torch.Tensor | None,
) -> dict[str, float]:
    """`updates_per_batch` optimizer passes over the micro-batches, each pass one optimizer step
    per mini-batch (`mini_batches`).

    Without precomputed old log-probs and with one mini-batch, the first pass's own log-probs
    (detached) are the old ones: they come from the policy that sampled, before any optimizer
    step, through the same forward — so the first ratio is exactly 1 and no extra forward is
    paid. With several, mini-batch j steps after j others: the old log-probs are computed first."""
    hp = setup.contract.hyperparameters
    minis = mini_batches(setup, samples, fwd)
    if len(minis) > 1 and old is None:
        old = fwd.logprobs(setup.policy, hp.sampling.temperature)
    engine = engine_logprobs(setup, samples, fwd)
    nonfinite, lag, overflows, grad_norm = 0.0, 0, 0.0, 0.0
    every = setup.contract.monitoring.layer_stats_every
    watch, layers = LayerWatch(setup.policy) if every and state.step % every == 0 else None, {}
    olds: list[list[torch.Tensor | None]] = [[None if old is None else old[p] for p in m.parts] for m in minis]
    engines = [[None if engine is None else engine[p] for p in m.parts] for m in minis]
    for i in range(hp.updates_per_batch):
        stats, loss_sum = obj.LossStats.empty(), 0.0  # the last pass's, over its mini-batches
        for j, mini in enumerate(minis):
            rows = torch.cat(mini.parts) if mini.parts else torch.zeros(0, dtype=torch.long)
            sequences = dist.total(len(rows))
            if not sequences:  # fewer trained groups than mini-batches (dynamic sampling kept few): no step
                continue
            lag = max([lag, *(state.optimizer_steps - s.revision for s in samples)])  # measured, not assumed
            first = watch is not None and i == j == 0
            totals = normalisers(setup.contract, dist.total(float(fwd.batch.response_mask[rows].sum())), sequences)
            setup.optimizer.zero_grad(set_to_none=True)
            with lora.dropout_on(setup.peft_model), watch if first else contextlib.nullcontext():
                keeps = entropy_keep(setup, mini)  # the entropy mask, from the weights this step starts from
                st, part_loss, bad = _backward(setup, state, mini, (olds[j], engines[j], keeps), ref, adv, totals)
            stats, loss_sum = stats.add(st), loss_sum + part_loss / len(minis)
            if not is_sharded(setup.policy):  # FSDP2 sums them itself, each process keeping its shard
                dist.sum_gradients(setup.policy, hp.dtypes.reduce)  # every rank now holds the whole batch's gradient
            if first:
                layers = watch.metrics()  # type: ignore[union-attr]  # the first step's gradients, before clipping
            grad_norm, more, skipped = _apply(setup, state, nonfinite + dist.total(bad))
            nonfinite, overflows = more, overflows + skipped
    setup.optimizer.zero_grad(set_to_none=True)  # read by nothing until the next backward: sampling gets their memory
    kept = old if len(minis) > 1 else (torch.cat(olds[0]) if samples else None)  # type: ignore[arg-type]
    for sample, lp in zip(samples, kept.tolist() if kept is not None else [], strict=True):
        sample.old_logp = lp[: len(sample.response_ids)]
        sample.lag = lag
    metrics = update_metrics(setup, global_stats(stats), dist.total(loss_sum), grad_norm, nonfinite)
    metrics["policy_lag"] = dist.maximum(float(lag))
    metrics.update(layers)
    if setup.scaler is not None:
        metrics.update(overflow_count=overflows, loss_scale=float(setup.scaler.get_scale()))
    return metrics


def _apply(setup: Setup, state: TrainState, nonfinite: float) -> tuple[float, float, float]:
    """Clip and take the optimizer step unless a gradient is not finite (nor ever again after
    one): (gradient norm, non-finite count so far, 1 when fp16's scaler skipped the step)."""
    if setup.scaler is not None:
        setup.scaler.unscale_(setup.optimizer)
    grad_norm, bad_grads = _clip(setup.policy, setup.contract.hyperparameters.optimizer.grad_clip or math.inf)
    skipped = 0.0
    if setup.scaler is not None and bad_grads and nonfinite == 0:
        skipped, bad_grads = 1.0, 0.0  # fp16 gradients overflowed at this scale: the scaler skips the step, halves it
    nonfinite += bad_grads
    if nonfinite == 0:  # never let a NaN into the weights (nor step again after one)
        _step(setup, state)
    elif setup.scaler is not None:
        setup.scaler.update()  # the scaler's bookkeeping of this pass ends (the scale is lowered)
    return grad_norm, nonfinite, skipped


def _step(setup: Setup, state: TrainState) -> None:
    """The optimizer step (through the loss scaler with fp16, which skips it on an overflow)."""
    if setup.scaler is None:
        setup.optimizer.step()
    else:
        scale = setup.scaler.get_scale()
        setup.scaler.step(setup.optimizer)
        setup.scaler.update()
        if setup.scaler.get_scale() < scale:  # skipped: the weights did not change
            return
    setup.scheduler.step()
    state.optimizer_steps += 1


def _backward(
    setup: Setup,
    state: TrainState,
    fwd: Forward,
    denominators: tuple[list[torch.Tensor | None], list[torch.Tensor | None], list[torch.Tensor] | None],
    ref: torch.Tensor | None,
    adv: torch.Tensor,
    totals: dict[str, float],
) -> tuple[obj.LossStats, float, float]:
    """One pass of forward + backward over every micro-batch; gradients accumulate. The old
    log-probs of each micro-batch (filled by the first pass where None), the engine's, and which
    tokens the entropy mask trains."""
    c = setup.contract
    olds, engines, keeps = denominators
    stats, loss_sum, bad = obj.LossStats.empty(), 0.0, 0.0
    backwards = len(fwd.parts) + fwd.empty_rounds
    for i, part in enumerate(fwd.parts):
        if fwd.parallel is not None:
            before_backward(setup.policy, fwd.parallel, last=i == backwards - 1)
        logp, entropy, response_mask = fwd.forward(
            setup.policy, part, c.hyperparameters.sampling.temperature, with_entropy=True
        )
        if olds[i] is None:
            olds[i] = logp.detach()
        loss, st = obj.policy_loss(
            logp,
            olds[i],  # type: ignore[arg-type]
            None if ref is None else ref[part],
            adv[part],
            response_mask,
            c.objective,
            max_response_tokens=c.length.max_response_tokens,
            entropy=entropy,
            engine_logp=engines[i],
            token_keep=None if keeps is None else keeps[i],
            **totals,
        )
        loss = setup.fault.poison(loss, state.step)
        bad += float(not torch.isfinite(loss)) + float((~torch.isfinite(logp)).sum())
        (loss if setup.scaler is None else setup.scaler.scale(loss)).backward()
        loss_sum += float(loss.detach())
        stats = stats.add(st)
    for i in range(len(fwd.parts), backwards):
        if fwd.parallel is not None:
            before_backward(setup.policy, fwd.parallel, last=i == backwards - 1)
        with autocast(fwd.compute, setup.device.type), unseen():
            empty = fwd.lockstep.forward(setup.policy)  # type: ignore[union-attr]
        (empty if setup.scaler is None else setup.scaler.scale(empty)).backward()
    return stats, loss_sum, bad


def _clip(policy: torch.nn.Module, max_norm: float) -> tuple[float, float]:
    """The gradient norm before clipping, and how many gradient entries are not finite (only
    counted when the norm is not: a finite norm has none), then the gradients clipped —
    exactly `clip_grad_norm_`."""
    params = [p for p in policy.parameters() if p.grad is not None]
    if is_sharded(policy):  # gradients are shards (DTensors): the norm is of the whole gradient
        total = torch.nn.utils.clip_grad_norm_(params, max_norm)
        norm = float(total.full_tensor() if hasattr(total, "full_tensor") else total)
        local = sum(int((~torch.isfinite(p.grad.to_local())).sum()) for p in params) if not math.isfinite(norm) else 0
        return norm, dist.total(float(local))
    total = torch.nn.utils.get_total_norm([p.grad for p in params])
    norm = float(total)
    bad = 0.0 if math.isfinite(norm) else float(sum(int((~torch.isfinite(p.grad)).sum()) for p in params))
    torch.nn.utils.clip_grads_with_norm_(params, max_norm, total)
    return norm, bad
