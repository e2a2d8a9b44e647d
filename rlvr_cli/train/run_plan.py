"""The resolved plan of a run: every objective choice in words, batch shapes, and where
records, metrics and checkpoints go. Printed before the first rollout, saved as plan.json."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from rlvr_cli.contract import hub
from rlvr_cli.contract.models import Contract
from rlvr_cli.files import sha256_file
from rlvr_cli.train.objective_words import clip_words, off_policy_words

_BASELINE = {"group_mean": "group mean", "leave_one_out": "mean of the group's other rewards (leave-one-out)"}
_SCALE = {
    "group_std": "divided by the std of its group's rewards",
    "batch_std": "divided by the std of every reward in the optimizer batch",
    "leave_one_out_std": "divided by the std of the other rewards of its group (not where that std is 0)",
    "none": "not divided by any std",
}
_AGGREGATION = {
    "token_mean": "token_mean: sum of masked token losses / trained tokens of the whole optimizer batch (long answers weigh more)",
    "seq_mean_token_mean": "seq_mean_token_mean: mean over answers of each answer's mean token loss (every answer weighs the same)",
    "seq_mean_token_sum": "seq_mean_token_sum: mean over answers of each answer's summed token loss",
    "constant_norm": "constant_norm: sum of masked token losses / (answers × max_response_tokens)",
}


def contract_hash(path: Path) -> str:
    return sha256_file(path)


def _kl_watched(c: Contract) -> bool:
    ref = c.artifacts.reference
    return ref is not None and not ref.is_none and any(r.metric == "kl" for r in c.monitoring.rules)


#: `objective.kl.weight` in the plan's words
_KL_WEIGHT = {
    "ratio": ", each token's KL × the ratio π_θ/π_old (its gradient kept)",
    "score_function": ", each token's KL × exp(log π_θ − sg(log π_θ)) (value 1, adds KL·∇log π_θ)",
}
#: `length.dynamic_sampling.uniform_on` in the plan's words
_UNIFORM_ON = {
    "reward": "rewards",
    "verifier_reward": "verifier rewards (before length shaping; truncated answers verified too)",
}


def _whiten_words(w: Any) -> str:
    """`objective.advantage.whiten` in the plan's words (empty: not whitened)."""
    if w is None:
        return ""
    each = "each answer once per trained token" if w.over == "batch_tokens" else "each answer once"
    divide = {
        "add_to_std": f"÷ their {w.std} std + {w.epsilon}",
        "add_to_variance": f"÷ √(their {w.std} variance + {w.epsilon})",
        "variance_floor": f"÷ √max(their {w.std} variance, {w.epsilon})",
    }[w.epsilon_use]
    return f"; then whitened over the batch, {each} (minus the advantages' mean, {divide})"


def _unit_words(c: Contract) -> str:
    """What one unit holds: an episode's sessions and which of them train, a set's members."""
    reward, sessions = c.objective.reward, c.environment.max_sessions or 1
    if reward.unit == "set":
        return f" (one reward for each set of {reward.set_size} responses judged together; a set is one unit)"
    if sessions > 1:
        trains = {"all_sessions": "every session trains", "last_session": "only the last session trains"}
        how = trains.get(reward.credit or "", "each session its own reward")
        return f" (an episode holds up to {sessions} sessions; {how})"
    return ""


def objective_words(c: Contract) -> list[str]:
    o, length = c.objective, c.length
    adv = o.advantage
    std = f" ({adv.std} std, + epsilon {adv.epsilon})" if adv.scale != "none" else ""
    clip = clip_words(o.clip)
    kl = (
        ("no KL term" + (" (KL to the reference measured with k3 for the monitoring rules)" if _kl_watched(c) else ""))
        if o.kl.coef == 0
        else (
            f"KL to the frozen reference, β = {o.kl.coef}, estimator {o.kl.estimator}, "
            + ("added to the loss" if o.kl.placement == "loss" else "subtracted from each response's reward")
            + _KL_WEIGHT.get(o.kl.weight or "none", "")
            + (", with k2's gradient (straight-through)" if o.kl.gradient == "k2" else "")
        )
    )
    weights = " + ".join(f"{w.weight}·{w.name}" for w in o.reward.components)
    truncated = {
        "exclude": "dropped from the loss (recorded)",
        "keep": "verified and trained like any answer",
        "penalize": f"given reward {length.truncation_penalty}",
    }[length.on_truncated]
    overlong = length.overlong_penalty
    if overlong is not None:
        start = length.max_response_tokens - overlong.buffer_tokens
        weights += (
            f" − {overlong.factor}·(tokens − {start})/{overlong.buffer_tokens} beyond {start} tokens (DAPO's overlong "
            "punishment)"
        )
    return [
        f"reward per {o.reward.unit} = {weights}{_unit_words(c)}",
        f"invalid verdicts (verifier_error, timeout, sandbox_error): {'excluded and recorded' if o.reward.on_invalid == 'exclude' else 'stop the run'}",
        f"advantage = reward - {_BASELINE[adv.baseline]}, {_SCALE[adv.scale]}{std}; all-equal groups get 0"
        + _whiten_words(adv.whiten),
        clip,
        *off_policy_words(o),
        *(
            [
                f"policy loss on the top {o.entropy_mask.top} of each optimizer step's trained tokens by entropy "
                "(a forward without gradient at each optimizer step finds the threshold)"
            ]
            if o.entropy_mask
            else []
        ),
        kl,
        f"entropy bonus {o.entropy_coef}" if o.entropy_coef else "no entropy bonus",
        f"aggregation {_AGGREGATION[o.aggregation]}",
        f"responses that hit {length.max_response_tokens} tokens are {truncated}",
    ]


def artifacts(c: Contract) -> dict[str, Any]:
    """Where each model comes from: a local path, or a hub id with the commit the cache resolved."""
    out: dict[str, Any] = {}
    refs = {"policy": c.artifacts.policy, "tokenizer": c.artifacts.tokenizer, "reference": c.artifacts.reference}
    for role, ref in refs.items():
        if ref is None:
            continue
        if getattr(ref, "id", None):
            out[role] = {"id": ref.id, "revision": ref.revision, "commit": hub.commit(ref.id, ref.revision)}
        elif getattr(ref, "path", None):
            out[role] = {"path": ref.path}
        else:
            out[role] = {"same_as_policy": True} if getattr(ref, "same_as_policy", None) else {"none": ref.none_}
    out["tokenizer"]["chat_template"] = c.artifacts.tokenizer.chat_template  # native, or the file that renders
    return out


def _rule_text(r: Any) -> str:
    return f"{r.name}: {r.metric} {r.when} for {r.window} evaluation(s) → {r.action} (owner {r.owner})"


def _gate_text(g: Any) -> str:
    bounds = ", ".join(
        f"{k} {getattr(g, k)}" for k in ("min", "max", "min_delta", "max_drop") if getattr(g, k) is not None
    )
    extra = f", segments {g.segments}" if g.segments else ""
    extra += f", min_items {g.min_items}" if g.min_items else ""
    return f"{g.name}{' (critical)' if g.critical else ''}: {g.metric} on {g.split}, {bounds}, confidence {g.confidence or 0.95}{extra}"


SKIPPED_UPDATES_STOP = 3  # updates skipped in a row (non-finite values) before the run stops on its own


def sections(c: Contract) -> dict[str, Any]:
    """Everything else the run does as the contract says, section by section: what a reader of
    plan.json needs to know the run without the contract beside it (a test keeps it complete)."""
    hp, env, d = c.hyperparameters, c.environment, c.data
    return {
        "description": c.description,
        "schedule": hp.schedule.model_dump() if hp.schedule else {"name": "constant", "warmup_steps": 0},
        "max_policy_lag": hp.max_policy_lag,
        "sample_ahead": hp.sample_ahead,
        "sample_ahead_steps": hp.ahead_steps,  # steps in flight (train/overlap.py)
        "length": c.length.model_dump(include={"prompt_truncation", "stop_tokens", "padding_side", "packing"}),
        "environment": env.model_dump(exclude_none=True),
        "verifier": c.artifacts.verifier.model_dump(exclude_none=True),
        "lock": c.artifacts.lock,
        "data": d.model_dump(mode="json", exclude_none=True),
        "monitoring": {
            "holdout_every": c.monitoring.holdout_every,
            "rules": [_rule_text(r) for r in c.monitoring.rules],
            "built_in": [
                f"abort after {SKIPPED_UPDATES_STOP} updates in a row skipped for non-finite values, whatever the rules",
                "abort when the policy's logits are not finite (nothing can be sampled)",
            ],
        },
        "checkpoint": c.checkpoint.model_dump(),
        "records": c.records.model_dump(),
        "acceptance": {
            "budget": c.acceptance.budget.model_dump(exclude_none=True) if c.acceptance.budget else None,
            "baseline": c.acceptance.baseline,
            "gates": [_gate_text(g) for g in c.acceptance.gates],
            "latency": c.acceptance.latency.model_dump() if c.acceptance.latency else None,
            "suites": [
                {"name": s.name, "contract": s.contract, "gates": [_gate_text(g) for g in s.gates]}
                for s in c.acceptance.suites or []
            ],
        },
        "waivers": [w.model_dump(exclude_none=True) for w in c.waivers or []],
    }


def build_plan(
    c: Contract,
    contract_path: Path,
    run_dir: Path,
    max_steps: int,
    device: str,
    trainer: dict[str, Any] | None = None,
) -> dict[str, Any]:
    """The resolved plan; `trainer`: what the trainer itself resolved (its processes, the
    rollout engine, the update's forward), part of the plan from the start."""
    hp = c.hyperparameters
    sequences = hp.prompts_per_step * hp.group_size
    ds = c.length.dynamic_sampling
    return {
        "contract": str(contract_path),
        "contract_sha256": contract_hash(contract_path),
        "name": c.name,
        "objective": objective_words(c),
        "shapes": {
            "prompts_per_step": hp.prompts_per_step,
            "group_size": hp.group_size,
            "sequences_per_step": sequences,
            "micro_batch_sequences": hp.micro_batch_sequences or sequences,
            "updates_per_batch": hp.updates_per_batch,
            "mini_batches": hp.mini_batches,
            "max_prompt_tokens": c.length.max_prompt_tokens,
            "max_response_tokens": c.length.max_response_tokens,
        },
        "dynamic_sampling": None
        if not ds or not ds.drop_uniform_groups
        else {"max_rounds": ds.max_rounds, "log_by": ds.log_by, "uniform_on": ds.uniform_on},
        "steps": {"contract_max_steps": hp.max_steps, "this_run_max_steps": max_steps},
        "sampling": hp.sampling.model_dump(),
        "optimizer": hp.optimizer.model_dump(),
        "precision": hp.dtypes.name,
        "parallel": hp.strategy.model_dump(),
        "adapter": hp.adapter.model_dump() if hp.adapter else None,  # None: every weight trains
        "device": device,
        "seed": hp.seed,
        "artifacts": artifacts(c),
        **sections(c),
        "layer_stats": f"every {c.monitoring.layer_stats_every} steps" if c.monitoring.layer_stats_every else "none",
        "holdout": holdout_words(c),
        "paths": {
            "run_dir": str(run_dir),
            "metrics": str(run_dir / "metrics.jsonl"),
            "records": str(run_dir / "records"),
            "checkpoints": str(run_dir / "checkpoints"),
            "final": str(run_dir / "final"),
            "status": str(run_dir / "status.json"),
            "trackers": {t.kind: tracker_place(t, run_dir) for t in c.monitoring.tracker_specs()},
        },
        **(trainer or {}),
    }


def plan_text(plan: dict[str, Any]) -> str:
    s = plan["shapes"]
    lines = [f"plan for {plan['name']} ({plan['contract']})", "objective:"]
    lines += [f"  - {w}" for w in plan["objective"]]
    lines.append(
        f"shapes: {s['prompts_per_step']} prompts × {s['group_size']} samples = {s['sequences_per_step']} "
        f"sequences per step, micro-batches of {s['micro_batch_sequences']}, {s['updates_per_batch']} "
        f"optimizer pass(es) per batch{_minis(s)}, prompts ≤ {s['max_prompt_tokens']} tokens, responses ≤ "
        f"{s['max_response_tokens']} tokens"
    )
    if plan["dynamic_sampling"]:
        lines.append(
            f"dynamic sampling: drop groups whose {_UNIFORM_ON[plan['dynamic_sampling']['uniform_on']]} are all "
            f"equal, up to {plan['dynamic_sampling']['max_rounds']} rounds, acceptance logged by "
            f"{', '.join(plan['dynamic_sampling']['log_by'])}"
        )
    st = plan["steps"]
    lines.append(
        f"steps: {st['this_run_max_steps']} (contract: {st['contract_max_steps']}), seed {plan['seed']}, "
        f"{plan['precision']} on {plan['device']}; holdout: {plan['holdout']}"
    )
    if "compute_note" in plan:
        lines.append(f"note: {plan['compute_note']}")
    if "rollout_engine" in plan:  # what samples and what computes the update's log-probs
        lines.append(f"sampling: {plan['rollout_engine']}; update forward: {plan.get('update_forward')}")
    if "tool_format" in plan:
        lines.append(f"tool calls read as: {plan['tool_format']}")
    if "trains" in plan:
        lines.append(f"trains: {plan['trains']}")
    p = plan["paths"]
    lines.append(
        f"writes: metrics {p['metrics']}, records {p['records']}, checkpoints {p['checkpoints']}, "
        f"final policy {p['final']}"
    )
    if p.get("trackers"):
        lines.append("trackers: " + ", ".join(f"{kind} {where}" for kind, where in p["trackers"].items()))
    return "\n".join(lines)


def tracker_place(tracker: Any, run_dir: Path) -> str:
    """Where a tracker writes: its server, or its local folder (and for W&B whether it uploads)."""
    where = tracker.uri or str(run_dir / (tracker.dir or f"trackers/{tracker.kind}"))
    if tracker.kind == "wandb":
        where += f" ({tracker.mode or 'offline'})"
    return where + (f", project {tracker.project}" if tracker.project else "")


def trainer_words(setup: Any) -> dict[str, str]:
    """What the trainer resolved for the plan: what trains; for tool use, the tool-call format
    (the contract's environment.tool_format or the chat template's)."""
    words = {"trains": trains_description(setup)}
    fmt = setup.renderer.tool_format
    if setup.contract.environment.kind == "tool_use" and fmt is not None:
        said = (
            "environment.tool_format" if setup.contract.environment.tool_format else "detected from the chat template"
        )
        words["tool_format"] = f"{fmt.name} ({fmt.families}; {said})"
    return words


def trains_description(setup: Any) -> str:
    """What the optimizer updates, and what the KL term's reference is."""
    trained = sum(p.numel() for p in setup.policy.parameters() if p.requires_grad)
    total = sum(p.numel() for p in setup.policy.parameters())
    spec = setup.contract.hyperparameters.adapter
    what = f"{spec.describe()} adapter over the frozen policy" if spec else "every weight of the policy"
    words = f"{what}: {trained:,} of {total:,} parameters"
    if setup.reference_is_base:
        words += "; reference: the policy with its adapter switched off (no second copy)"
    elif setup.reference is not None:
        words += "; reference: a frozen copy of its own"
    return words


def holdout_words(c: Contract) -> str:
    m = c.monitoring
    if not m.holdout_every:
        return "none"
    words = f"greedy decoding of every holdout task every {m.holdout_every} steps"
    if m.reference_answers:
        words += f", and the reference responses in '{m.reference_answers}' scored (holdout_nll)"
    return words


def _minis(shapes: dict[str, Any]) -> str:
    """A pass's optimizer steps, where it takes several (plans written before the key: one)."""
    count = shapes.get("mini_batches", 1)
    return f" of {count} mini-batches (an optimizer step each)" if count > 1 else ""
