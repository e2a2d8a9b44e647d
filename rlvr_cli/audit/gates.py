"""`rlvr gate` and `rlvr audit rewards`: release gates with paired uncertainty, and
whether two policies differ at all on the same tasks.

Gates compare the candidate with the baseline item by item (the same tasks, greedy
answers) and bootstrap over items: `min`/`max` bound the candidate's metric, `min_delta` /
`max_drop` bound its difference from the baseline — each judged on the confidence
interval, not the point estimate. `segments` repeat a gate per value of a task field; a
critical gate failing in any segment fails the release whatever the averages say.
"""

from __future__ import annotations

import json
from collections import defaultdict
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from rlvr_cli.audit.evaluate import bootstrap, evaluate, item_means, item_values, save_evaluation, sign_flip_p
from rlvr_cli.contract.models import Contract, Gate
from rlvr_cli.contract.release_keys import LATENCY_METRICS
from rlvr_cli.errors import RlvrError, UsageProblem
from rlvr_cli.files import atomic_write_text


@dataclass(frozen=True)
class Judgement:
    """One gate on one set of items: the interval of the candidate and of its difference."""

    items: int
    candidate: tuple[float, float, float]  # mean, low, high
    delta: tuple[float, float, float]
    confidence: float
    passed: bool
    checks: tuple[str, ...]
    failed: tuple[str, ...] = ()  # the checks that did not hold

    @property
    def width(self) -> float:
        """How wide the candidate's interval is: what the items can tell apart."""
        return self.candidate[2] - self.candidate[1]

    def as_json(self) -> dict[str, Any]:
        return {
            "items": self.items,
            "width": self.width,
            "candidate": list(self.candidate),
            "delta": list(self.delta),
            "confidence": self.confidence,
            "passed": self.passed,
            "checks": list(self.checks),
            "failed": list(self.failed),
        }


@dataclass(frozen=True)
class GateOutcome:
    name: str
    metric: str
    split: str
    critical: bool
    overall: Judgement
    segments: dict[str, Judgement]

    @property
    def failed_segments(self) -> list[str]:
        return [k for k, v in self.segments.items() if not v.passed]

    def as_json(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "metric": self.metric,
            "split": self.split,
            "critical": self.critical,
            "overall": self.overall.as_json(),
            "segments": {k: v.as_json() for k, v in self.segments.items()},
            "failed_segments": self.failed_segments,
        }


@dataclass(frozen=True)
class GateResult:
    """The release verdict: every gate, and the evaluations it was judged on."""

    candidate: str
    baseline: str
    gates: list[GateOutcome]
    evaluations: dict[str, Any] = field(repr=False)  # {"candidate": {split: ...}, "baseline": ...}

    @property
    def release(self) -> str:
        passed = all(g.overall.passed for g in self.gates) and not any(
            g.critical and g.failed_segments for g in self.gates
        )
        return "pass" if passed else "fail"

    def as_json(self) -> dict[str, Any]:
        return {
            "release": self.release,
            "candidate": self.candidate,
            "baseline": self.baseline,
            "gates": [g.as_json() for g in self.gates],
        }


def judge_gate(gate: Gate, cand: dict[str, float], base: dict[str, float], items: list[str]) -> Judgement:
    confidence = gate.confidence or 0.95
    c = bootstrap([cand[i] for i in items], confidence)
    d = bootstrap([cand[i] - base[i] for i in items], confidence)
    checks = []
    if gate.min is not None:
        checks.append(_check(c[1] >= gate.min, f"lower bound {c[1]:.3f}", "≥", f"min {gate.min}"))
    if gate.max is not None:
        checks.append(_check(c[2] <= gate.max, f"upper bound {c[2]:.3f}", "≤", f"max {gate.max}"))
    if gate.min_delta is not None:
        checks.append(
            _check(d[1] >= gate.min_delta, f"delta lower bound {d[1]:+.3f}", "≥", f"min_delta {gate.min_delta}")
        )
    if gate.max_drop is not None:
        checks.append(
            _check(d[1] >= -gate.max_drop, f"delta lower bound {d[1]:+.3f}", "≥", f"-max_drop {gate.max_drop}")
        )
    if gate.min_items is not None:  # too few items: the interval cannot support a release
        checks.append(_check(len(items) >= gate.min_items, f"{len(items)} items", "≥", f"min_items {gate.min_items}"))
    failed = tuple(m for ok, m in checks if not ok)
    return Judgement(len(items), c, d, confidence, not failed, tuple(m for _, m in checks), failed)


def _check(ok: bool, value: str, wanted: str, bound: str) -> tuple[bool, str]:
    """A condition that reads true as written: `lower bound 0.512 ≥ min 0.3` when it holds,
    `lower bound 0.000 < min 0.3 (needs ≥)` when it does not."""
    if ok:
        return True, f"{value} {wanted} {bound}"
    return False, f"{value} {_NEGATION[wanted]} {bound} (needs {wanted})"


_NEGATION = {"≥": "<", "≤": ">"}


def run_gates(contract: Contract, folder: Path, candidate: Path, baseline: Path | None) -> GateResult:
    """The contract's gates on its own splits, then each suite's gates on another contract's."""
    cand_eval, base_eval, base_name, base_policy = _evaluations(contract, folder, candidate, baseline, None)
    gates = contract.acceptance.gates
    outcomes = [_judge(contract, gate, cand_eval[gate.split], base_eval[gate.split]) for gate in gates]
    evaluations = {"candidate": cand_eval, "baseline": base_eval}
    for suite in contract.acceptance.suites or []:
        other_path = folder / suite.contract
        other = _suite_contract(suite.name, other_path, suite.gates)
        if candidate.is_file() or base_policy is None:
            raise UsageProblem(
                f"suite {suite.name!r} evaluates policies on {suite.contract}: give the candidate's run folder and a "
                "baseline policy, not saved evaluations"
            )
        suite_cand, suite_base, _, _ = _evaluations(
            other, other_path.resolve().parent, candidate, base_policy, suite.gates
        )
        for gate in suite.gates:
            judged = _judge(other, gate, suite_cand[gate.split], suite_base[gate.split])
            outcomes.append(replace(judged, name=f"{suite.name}/{gate.name}"))
        evaluations[f"suite:{suite.name}"] = {"candidate": suite_cand, "baseline": suite_base}
    return GateResult(str(candidate), base_name, outcomes, evaluations)


def _suite_contract(name: str, path: Path, gates: list[Gate]) -> Contract:
    """The suite's contract, valid, with every gate on a split it has and a metric it can measure."""
    from rlvr_cli.contract.diagnostics import ContractError
    from rlvr_cli.contract.load import load
    from rlvr_cli.contract.rules import GATE_METRICS

    if not path.is_file():
        raise UsageProblem(f"suite {name!r}: {path} is not a contract file")
    try:
        other = load(path)
    except ContractError as error:
        raise RlvrError(f"suite {name!r}: {path} is not a valid contract:\n{error}") from None
    metrics = [*GATE_METRICS, *(c.name for c in other.objective.reward.components)]
    for gate in gates:
        if gate.split not in ("holdout", "sealed_eval"):
            raise RlvrError(f"suite {name!r}, gate {gate.name!r}: split {gate.split!r} is not holdout or sealed_eval")
        if gate.metric not in metrics:
            raise RlvrError(
                f"suite {name!r}, gate {gate.name!r}: {path.name} has no metric {gate.metric!r} ({metrics})"
            )
    return other


def _evaluations(
    contract: Contract, folder: Path, candidate: Path, baseline: Path | None, gates: list[Gate] | None
) -> tuple[dict, dict, str, Path | None]:
    """(candidate's, baseline's evaluation by split, the baseline's name, its policy folder or None
    for a saved evaluation), timed where a gate measures latency."""
    gates = contract.acceptance.gates if gates is None else gates
    splits = sorted({g.split for g in gates})
    if candidate.is_file():  # a saved evaluation (e.g. of a policy served elsewhere)
        cand_eval = saved_evaluation(candidate, splits, "candidate")
    else:
        cand_eval = {s: evaluate(contract, folder, candidate, s) for s in splits}
    base_eval, base_name, base_policy = _baseline(contract, folder, baseline, splits)
    timed = sorted({g.split for g in gates if g.metric in LATENCY_METRICS})
    for split in timed:
        from rlvr_cli.audit.latency import measure

        for policy, evaluation in ((candidate, cand_eval), (base_policy, base_eval)):
            if policy is not None and not policy.is_file():
                for item, times in measure(contract, folder, policy, split).items():
                    evaluation[split].get(item, {}).update(times)
    return cand_eval, base_eval, base_name, base_policy


def _judge(contract: Contract, gate: Gate, cand_eval: dict[str, Any], base_eval: dict[str, Any]) -> GateOutcome:
    cand = item_values(contract, cand_eval, gate.metric)
    base = item_values(contract, base_eval, gate.metric)
    items = sorted(set(cand) & set(base))
    if not items:
        raise RlvrError(f"gate {gate.name!r}: candidate and baseline share no item of split {gate.split}")
    segments = {}
    for field_name in gate.segments or []:
        by_value: dict[str, list[str]] = defaultdict(list)
        for item in items:
            by_value[str(cand_eval[item]["task"].get(field_name))].append(item)
        for value, members in sorted(by_value.items()):
            segments[f"{field_name}={value}"] = judge_gate(gate, cand, base, members)
    overall = judge_gate(gate, cand, base, items)
    return GateOutcome(gate.name, gate.metric, gate.split, gate.critical, overall, segments)


def _baseline(
    contract: Contract, folder: Path, baseline: Path | None, splits: list[str]
) -> tuple[dict, str, Path | None]:
    """A saved evaluation (JSON), a policy or run folder, or the contract's starting policy; and
    the policy folder evaluated (None for a saved evaluation)."""
    path = baseline or (folder / contract.acceptance.baseline if contract.acceptance.baseline else None)
    if path is not None and path.is_file():
        return saved_evaluation(path, splits, "baseline"), str(path), None
    if path is None:
        policy = contract.artifacts.policy
        if policy.path is None:
            raise UsageProblem("give --baseline: the starting policy is a hub id, not a local folder")
        path = folder / policy.path
    return {s: evaluate(contract, folder, path, s) for s in splits}, str(path), path


def saved_evaluation(path: Path, splits: list[str], role: str) -> dict[str, Any]:
    """An evaluation JSON written by `rlvr gate` (evaluation.json): {split: {item: {...}}}."""
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError) as exc:
        raise UsageProblem(f"{role} evaluation {path} cannot be read: {exc}") from None
    missing = [s for s in splits if not isinstance(data, dict) or s not in data]
    if missing:
        raise UsageProblem(f"{role} evaluation {path} lacks split(s) {missing}")
    return data


def write_verdict(result: GateResult, out: Path) -> None:
    out.mkdir(parents=True, exist_ok=True)
    atomic_write_text(out / "verdict.json", json.dumps(result.as_json(), indent=1))
    save_evaluation(out / "evaluation.json", result.evaluations["candidate"])


def gate_table(result: GateResult) -> str:
    """One line per gate (and per segment): the candidate's interval, the difference's, the result
    and, when a gate fails, the check it failed."""
    w = max([len("gate"), *(len(g.name) + 2 for g in result.gates)]) + 2
    m = max([len("metric"), *(len(g.metric) for g in result.gates)]) + 2
    lines = [f"{'gate':<{w}}{'split':<12}{'metric':<{m}}{'candidate [CI]':<26}{'delta [CI]':<28}result"]
    for g in result.gates:
        c, d = g.overall.candidate, g.overall.delta
        state = "pass" if g.overall.passed else f"FAIL ({'; '.join(g.overall.failed)})"
        lines.append(
            f"{g.name + (' *' if g.critical else ''):<{w}}{g.split:<12}{g.metric:<{m}}"
            f"{c[0]:.3f} [{c[1]:.3f}, {c[2]:.3f}]{'':<4}{d[0]:+.3f} [{d[1]:+.3f}, {d[2]:+.3f}]{'':<3}{state}"
        )
        for name, seg in g.segments.items():
            sc, sd = seg.candidate, seg.delta
            lines.append(
                f"  {name:<{w + 10 + m}}{sc[0]:.3f}{'':<20}{sd[0]:+.3f} [{sd[1]:+.3f}, {sd[2]:+.3f}]{'':<3}"
                f"{'pass' if seg.passed else 'FAIL'}"
            )
    lines.append(f"* critical.  release: {result.release.upper()} (baseline: {result.baseline})")
    return "\n".join(lines)


def compare_policies(contract: Contract, folder: Path, a: Path, b: Path, samples: int, split: str) -> dict[str, Any]:
    """Reward distributions of two policies on the same tasks, with a paired test."""
    ev_a = evaluate(contract, folder, a, split, samples=samples, greedy=False, seed=1)
    ev_b = evaluate(contract, folder, b, split, samples=samples, greedy=False, seed=1)
    return compare_evaluations(contract, (str(a), ev_a), (str(b), ev_b), samples, split)


def compare_evaluations(
    contract: Contract, a_named: tuple[str, dict], b_named: tuple[str, dict], samples: int, split: str
) -> dict[str, Any]:
    """Two policies' evaluations of the same tasks, compared paired (b − a)."""
    (a, ev_a), (b, ev_b) = a_named, b_named
    ma, mb = item_means(ev_a), item_means(ev_b)  # items with a valid verdict under both policies
    items = sorted(set(ma) & set(mb))
    if not items:
        raise RlvrError(f"no {split} task got a valid verdict under both policies; see the verifier's errors")
    diffs = [mb[i] - ma[i] for i in items]
    mean, low, high = bootstrap(diffs, 0.95)
    best = contract.objective.reward.best
    valid = {i: [r for r in ev_a[i]["rewards"] + ev_b[i]["rewards"] if r is not None] for i in items}
    both_correct = sum(all(r >= best - 1e-9 for r in valid[i]) for i in items)
    both_wrong = sum(all(r < best - 1e-9 for r in valid[i]) for i in items)  # not a success, bonus or not
    no_difference = low <= 0 <= high
    return {
        "split": split,
        "items": len(items),
        "samples_per_item": samples,
        "policy_a": {"path": a, "reward_mean": sum(ma[i] for i in items) / len(items)},
        "policy_b": {"path": b, "reward_mean": sum(mb[i] for i in items) / len(items)},
        "difference_b_minus_a": {"mean": mean, "ci95": [low, high], "p_value": sign_flip_p(diffs)},
        "no_difference": no_difference,
        "both_all_correct_share": both_correct / len(items),
        "both_all_wrong_share": both_wrong / len(items),
        "flag": (
            "no difference between the policies: the tasks may be too hard or too easy, or the verifier "
            "may not measure what it should"
        )
        if no_difference
        else None,
    }
