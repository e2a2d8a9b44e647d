"""The semantic rules of the contract (docs/rules.md), one small function per code, over the typed contract.

Each rule yields `Finding`s (code, severity, path, message); `load.py` attaches positions.
Rules read nothing from disk: paths are compared as written, relative to the contract.
"""

from __future__ import annotations

import os
import re
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import TYPE_CHECKING

from rlvr_cli.contract import kl_section, off_policy, serving
from rlvr_cli.contract.diagnostics import Finding, error, warning
from rlvr_cli.contract.metric_needs import unavailable_metric
from rlvr_cli.contract.models import CHECKPOINT_PARTS, Contract, ModelRef, ReferenceRef
from rlvr_cli.contract.release_keys import COST_METRICS, LATENCY_METRICS
from rlvr_cli.contract.tool_keys import TOOL_KEYS
from rlvr_cli.contract.verifier_kinds import verifier_kind_findings
from rlvr_cli.metrics import METRICS, WATCHED

if TYPE_CHECKING:
    pass

Rule = Callable[[Contract, Path], Iterator[Finding]]
RULES: list[Rule] = []
HEX40 = re.compile(r"^[0-9a-f]{40}$")


def rule(fn: Rule) -> Rule:
    RULES.append(fn)
    return fn


def run_all(contract: Contract, folder: Path) -> list[Finding]:
    return [finding for check in RULES for finding in check(contract, folder)]


def same_path(a: str, b: str) -> bool:
    return os.path.normpath(a) == os.path.normpath(b)


def _has_reference(c: Contract) -> bool:
    return c.artifacts.reference is not None and not c.artifacts.reference.is_none


def _kl_on(c: Contract) -> bool:
    return c.objective.kl.coef > 0


# ── RLV003: keys required by another key's value ──────────────────────────────────────


def _required(path: tuple, key: str, when: str) -> Finding:
    return error("RLV003", path, f"missing required key '{key}' (required when {when})")


@rule
def conditional_keys(c: Contract, _: Path) -> Iterator[Finding]:
    env, adv, kl = c.environment, c.objective.advantage, c.objective.kl
    yield from verifier_kind_findings(env)
    if env.kind == "tool_use":
        for key in ("server", "max_steps"):
            if getattr(env, key) is None:
                yield _required(("environment",), key, "kind is tool_use")
    else:  # a key that would change nothing is refused
        for key in TOOL_KEYS:
            if getattr(env, key) is not None:
                yield error("RLV003", ("environment", key), "is about tool results: only for kind tool_use")
    if adv.scale != "none" and adv.epsilon is None:
        yield _required(("objective", "advantage"), "epsilon", f"scale is {adv.scale}")
    for path, key, message in kl_section.findings(kl):
        yield _required(path, key, message) if key else error("RLV003", path, message)
    for path, message in off_policy.findings(c.objective, c.hyperparameters):
        yield error("RLV003", path, message)
    for code, path, message in serving.findings(c.hyperparameters):
        yield error(code, path, message)
    hints = c.data.hints
    if hints is not None and hints.used:
        for key in ("source", "field", "placement", "share", "until_step", "advantage"):
            if getattr(hints, key) is None:
                yield _required(("data", "hints"), key, "hints.used is true")


# ── RLV1xx: artifacts ─────────────────────────────────────────────────────────────────


@rule
def rlv101_kl_needs_reference(c: Contract, _: Path) -> Iterator[Finding]:
    if _kl_on(c) and not _has_reference(c):
        what = "is missing" if c.artifacts.reference is None else "is 'none'"
        yield error(
            "RLV101",
            ("objective", "kl", "coef"),
            f"kl.coef is {c.objective.kl.coef} but artifacts.reference {what}; the KL term needs a frozen reference",
        )


@rule
def rlv102_reference_is_policy(c: Contract, _: Path) -> Iterator[Finding]:
    ref, policy = c.artifacts.reference, c.artifacts.policy
    if ref is None or ref.same_as_policy:
        return
    same_files = ref.path is not None and policy.path is not None and same_path(ref.path, policy.path)
    same_hub = ref.id is not None and (ref.id, ref.revision) == (policy.id, policy.revision)
    if same_files or same_hub:
        yield warning(
            "RLV102",
            ("artifacts", "reference"),
            "reference points at the same files as the policy; write "
            "'same_as_policy: true' if a frozen copy of the starting policy is intended",
        )


@rule
def rlv103_unpinned_hub_id(c: Contract, _: Path) -> Iterator[Finding]:
    refs: list[tuple[str, ModelRef | ReferenceRef | None]] = [
        ("policy", c.artifacts.policy),
        ("tokenizer", c.artifacts.tokenizer),
        ("reference", c.artifacts.reference),
    ]
    for name, ref in refs:
        if ref is not None and ref.id is not None and not HEX40.match(ref.revision or ""):
            yield warning(
                "RLV103",
                ("artifacts", name, "revision" if ref.revision else "id"),
                f"hub id '{ref.id}' is not pinned to a 40-hex commit revision; "
                "a moving branch makes the run irreproducible",
            )


# ── RLV2xx: objective ─────────────────────────────────────────────────────────────────


@rule
def rlv201_scale_needs_std(c: Contract, _: Path) -> Iterator[Finding]:
    adv = c.objective.advantage
    if adv.scale != "none" and adv.std is None:
        yield error(
            "RLV201",
            ("objective", "advantage"),
            f"advantage.scale is {adv.scale} but advantage.std is missing; say 'population' or 'sample'",
        )


@rule
def rlv207_leave_one_out_std_needs_its_baseline(c: Contract, _: Path) -> Iterator[Finding]:
    adv = c.objective.advantage
    if adv.scale == "leave_one_out_std" and adv.baseline != "leave_one_out":
        yield error(
            "RLV207",
            ("objective", "advantage", "scale"),
            f"leave_one_out_std is the std of the rewards the leave_one_out baseline averages, but baseline is "
            f"{adv.baseline}; use baseline: leave_one_out, or scale: group_std",
        )


@rule
def rlv202_clip_range(c: Contract, _: Path) -> Iterator[Finding]:
    clip = c.objective.clip
    if clip.kind in ("sapo", "vespo") or clip.low is None or clip.high is None:  # no range, or RLV003's
        return
    cispo = clip.kind == "cispo"  # a weight's range: down to no lower bound (low 1), any upper one
    for key, within in (("low", "(0, 1]" if cispo else "(0, 1)"), ("high", "(0, ∞)" if cispo else "(0, 1)")):
        value = getattr(clip, key)
        top_ok = (value <= 1 if key == "low" else True) if cispo else value < 1
        if not (value > 0 and top_ok):
            yield error("RLV202", ("objective", "clip", key), f"clip.{key} is {value}; it must be in {within}")
    if clip.high < clip.low and not cispo:
        yield error(
            "RLV202",
            ("objective", "clip", "high"),
            f"clip.high ({clip.high}) is below clip.low ({clip.low}); clip-higher means high > low",
        )


# ── RLV010: values rlvr validates but does not run yet ────────────────────────────────

NOT_RUN = (
    (
        ("artifacts", "verifier", "container"),
        lambda c: c.artifacts.verifier.container is not None,
        "verifiers do not run in a container; the verifier runs as a local worker process (drop container)",
    ),
)


@rule
def rlv010_not_run(c: Contract, _: Path) -> Iterator[Finding]:
    """A key the contract states must change the run; values rlvr cannot run yet are refused
    here, before the first step, never ignored."""
    for where, applies, why in NOT_RUN:
        if applies(c):
            yield error("RLV010", where, why)


@rule
def rlv203_unit_vs_kind(c: Contract, _: Path) -> Iterator[Finding]:
    unit = c.objective.reward.unit
    if unit in ("session", "trajectory") and c.environment.kind == "single_turn":
        yield error(
            "RLV203",
            ("objective", "reward", "unit"),
            f"reward.unit '{unit}' needs a multi-step environment, but environment.kind is single_turn",
        )
    if unit == "response" and c.environment.kind == "tool_use":
        yield error(
            "RLV203",
            ("objective", "reward", "unit"),
            "a tool_use episode earns one reward from the server's verify: use reward.unit session or trajectory",
        )


@rule
def rlv204_reference_unused(c: Contract, _: Path) -> Iterator[Finding]:
    if c.objective.kl.coef == 0 and _has_reference(c) and not kl_watched(c):
        yield warning(
            "RLV204",
            ("artifacts", "reference"),
            "kl.coef is 0 and no rule watches kl, so the reference is loaded for nothing; "
            "write 'none: <reason>', drop it, or watch kl with a monitoring rule",
        )


def kl_watched(c: Contract) -> bool:
    """A monitoring rule watches `kl`: the reference is loaded to measure the drift."""
    return any(r.metric == "kl" for r in c.monitoring.rules)


# ── RLV3xx: batch shapes ──────────────────────────────────────────────────────────────


@rule
def rlv301_group_size(c: Contract, _: Path) -> Iterator[Finding]:
    size = c.hyperparameters.group_size
    if size < 2:
        yield error(
            "RLV301",
            ("hyperparameters", "group_size"),
            f"group_size is {size}; a group-relative advantage needs at least 2 samples (8 to 16 is usual)",
            suggestion="8",
        )


@rule
def rlv302_micro_batches(c: Contract, _: Path) -> Iterator[Finding]:
    hp = c.hyperparameters
    if hp.prompts_per_step % hp.mini_batches:
        yield error(
            "RLV302",
            ("hyperparameters", "mini_batches"),
            f"prompts_per_step = {hp.prompts_per_step} groups do not split into mini_batches = {hp.mini_batches}",
            suggestion=str(max(d for d in range(1, hp.mini_batches + 1) if hp.prompts_per_step % d == 0)),
        )
        return
    total = hp.prompts_per_step * hp.group_size // hp.mini_batches
    if hp.micro_batch_sequences and total % hp.micro_batch_sequences:
        of = "prompts_per_step × group_size" + (" / mini_batches" if hp.mini_batches > 1 else "")
        yield error(
            "RLV302",
            ("hyperparameters", "micro_batch_sequences"),
            f"{of} = {total} sequences is not divisible by micro_batch_sequences = {hp.micro_batch_sequences}",
            suggestion=str(max(d for d in range(1, hp.micro_batch_sequences + 1) if total % d == 0)),
        )


@rule
def rlv303_policy_lag(c: Contract, _: Path) -> Iterator[Finding]:
    hp = c.hyperparameters
    lag = hp.steps_per_batch - 1  # the k-th optimizer step of a batch updates with rollouts k steps old
    steps = f"updates_per_batch = {hp.updates_per_batch}" + (
        f" × mini_batches = {hp.mini_batches}" if hp.mini_batches > 1 else ""
    )
    if lag > hp.max_policy_lag:
        yield error(
            "RLV303",
            ("hyperparameters", "updates_per_batch" if hp.mini_batches == 1 else "mini_batches"),
            f"{steps} trains on rollouts up to {lag} optimizer steps old, more than max_policy_lag = "
            f"{hp.max_policy_lag}",
        )
    elif hp.sample_ahead and lag + 1 > hp.max_policy_lag:
        yield error(
            "RLV303",
            ("hyperparameters", "sample_ahead"),
            f"sample_ahead trains on rollouts up to {lag + 1} optimizer steps old ({steps} optimizer steps a "
            f"batch, plus one), more than max_policy_lag = {hp.max_policy_lag}",
        )


# ── RLV6xx: monitoring ────────────────────────────────────────────────────────────────


@rule
def rlv601_rule_owner_window(c: Contract, _: Path) -> Iterator[Finding]:
    for i, r in enumerate(c.monitoring.rules):
        missing = [k for k in ("owner", "window") if getattr(r, k) is None]
        if missing:
            yield error("RLV601", ("monitoring", "rules", i), f"rule '{r.name}' has no {' and no '.join(missing)}")


@rule
def rlv602_nonfinite_abort(c: Contract, _: Path) -> Iterator[Finding]:
    if not any(r.metric == "nonfinite_count" and r.action == "abort" for r in c.monitoring.rules):
        yield error(
            "RLV602", ("monitoring", "rules"), "no rule aborts on nonfinite_count; a NaN would train on silently"
        )


@rule
def rlv603_unwatched(c: Contract, _: Path) -> Iterator[Finding]:
    watched = {r.metric for r in c.monitoring.rules}
    wanted = list(WATCHED) + (["kl"] if _kl_on(c) else [])
    for metric in wanted:
        if metric not in watched:
            yield warning("RLV603", ("monitoring", "rules"), f"no rule watches '{metric}'")


@rule
def rlv604_metric_exists(c: Contract, _: Path) -> Iterator[Finding]:
    import difflib

    for i, r in enumerate(c.monitoring.rules):
        why = unavailable_metric(c, r.metric)
        if why:
            close = difflib.get_close_matches(r.metric, [m.name for m in METRICS], n=1)
            yield error(
                "RLV604",
                ("monitoring", "rules", i, "metric"),
                f"metric '{r.metric}' {why}",
                suggestion=close[0] if close and close[0] != r.metric else None,
            )


# ── RLV7xx, RLV8xx: checkpoint and acceptance ─────────────────────────────────────────


@rule
def rlv701_checkpoint_parts(c: Contract, _: Path) -> Iterator[Finding]:
    missing = [p for p in CHECKPOINT_PARTS if p not in c.checkpoint.include]
    if missing:
        yield error(
            "RLV701",
            ("checkpoint", "include"),
            f"checkpoint.include misses {', '.join(missing)}; resume would not be exact",
        )


@rule
def rlv801_gate_threshold(c: Contract, _: Path) -> Iterator[Finding]:
    splits = ("train", "holdout", "sealed_eval")
    for i, gate in enumerate(c.acceptance.gates):
        if all(getattr(gate, k) is None for k in ("min", "max", "min_delta", "max_drop")):
            yield error(
                "RLV801",
                ("acceptance", "gates", i),
                f"gate '{gate.name}' names no threshold (min, max, min_delta or max_drop)",
            )
        if gate.split not in splits:
            yield error(
                "RLV801",
                ("acceptance", "gates", i, "split"),
                f"gate '{gate.name}' names split '{gate.split}', which data.splits lacks",
                suggestion=next((s for s in splits if s.startswith(gate.split[:3])), None),
            )


GATE_METRICS = ("reward_mean", "success_rate", "error_rate", "response_length", *COST_METRICS, *LATENCY_METRICS)


@rule
def rlv803_gate_metric(c: Contract, _: Path) -> Iterator[Finding]:
    import difflib

    known = [*GATE_METRICS, *(comp.name for comp in c.objective.reward.components)]
    for i, gate in enumerate(c.acceptance.gates):
        if gate.metric not in known:
            close = difflib.get_close_matches(gate.metric, known, n=1)
            yield error(
                "RLV803",
                ("acceptance", "gates", i, "metric"),
                f"gate '{gate.name}' measures '{gate.metric}', which rlvr cannot evaluate ({', '.join(known)})",
                suggestion=close[0] if close else None,
            )


@rule
def rlv802_critical_gate(c: Contract, _: Path) -> Iterator[Finding]:
    if not any(g.critical for g in c.acceptance.gates):
        yield warning(
            "RLV802",
            ("acceptance", "gates"),
            "no gate is critical; a regression hidden by the average would still ship",
        )
