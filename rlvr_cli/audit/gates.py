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
from pathlib import Path
from typing import Any

from rlvr_cli.audit.evaluate import bootstrap, evaluate, item_means, save_evaluation, sign_flip_p
from rlvr_cli.contract.models import Contract, Gate
from rlvr_cli.errors import RlvrError, UsageProblem

METRICS = ("reward_mean", "success_rate")


def _metric_values(contract: Contract, evaluation: dict[str, dict[str, Any]], metric: str) -> dict[str, float]:
    means = item_means(evaluation)
    if metric == "reward_mean":
        return means
    best = sum(max(c.weight, 0.0) for c in contract.objective.reward.components)
    return {k: float(v >= best - 1e-9) for k, v in means.items()}


def judge_gate(gate: Gate, cand: dict[str, float], base: dict[str, float], items: list[str]) -> dict[str, Any]:
    confidence = gate.confidence or 0.95
    c_mean, c_low, c_high = bootstrap([cand[i] for i in items], confidence)
    d_mean, d_low, d_high = bootstrap([cand[i] - base[i] for i in items], confidence)
    checks = []
    if gate.min is not None:
        checks.append((c_low >= gate.min, f"lower bound {c_low:.3f} ≥ min {gate.min}"))
    if gate.max is not None:
        checks.append((c_high <= gate.max, f"upper bound {c_high:.3f} ≤ max {gate.max}"))
    if gate.min_delta is not None:
        checks.append((d_low >= gate.min_delta, f"delta lower bound {d_low:+.3f} ≥ min_delta {gate.min_delta}"))
    if gate.max_drop is not None:
        checks.append((d_low >= -gate.max_drop, f"delta lower bound {d_low:+.3f} ≥ -max_drop {gate.max_drop}"))
    return {
        "items": len(items),
        "candidate": [c_mean, c_low, c_high],
        "delta": [d_mean, d_low, d_high],
        "confidence": confidence,
        "passed": all(ok for ok, _ in checks),
        "checks": [c for _, c in checks],
    }


def run_gates(contract: Contract, folder: Path, candidate: Path, baseline: Path | None) -> dict[str, Any]:
    gates = contract.acceptance.gates
    for gate in gates:
        if gate.metric not in METRICS:
            raise RlvrError(
                f"gate {gate.name!r}: metric {gate.metric!r} is not one rlvr gate evaluates ({', '.join(METRICS)})"
            )
    splits = sorted({g.split for g in gates})
    cand_eval = {s: evaluate(contract, folder, candidate, s) for s in splits}
    base_eval, base_name = _baseline(contract, folder, baseline, splits)
    results = []
    for gate in gates:
        cand = _metric_values(contract, cand_eval[gate.split], gate.metric)
        base = _metric_values(contract, base_eval[gate.split], gate.metric)
        items = sorted(set(cand) & set(base))
        if not items:
            raise RlvrError(f"gate {gate.name!r}: candidate and baseline share no item of split {gate.split}")
        overall = judge_gate(gate, cand, base, items)
        segments = {}
        for field in gate.segments or []:
            by_value: dict[str, list[str]] = defaultdict(list)
            for item in items:
                by_value[str(cand_eval[gate.split][item]["task"].get(field))].append(item)
            for value, members in sorted(by_value.items()):
                segments[f"{field}={value}"] = judge_gate(gate, cand, base, members)
        failed_segments = [k for k, v in segments.items() if not v["passed"]]
        results.append(
            {
                "name": gate.name,
                "metric": gate.metric,
                "split": gate.split,
                "critical": gate.critical,
                "overall": overall,
                "segments": segments,
                "failed_segments": failed_segments,
            }
        )
    release = all(r["overall"]["passed"] for r in results) and not any(
        r["critical"] and r["failed_segments"] for r in results
    )
    return {
        "release": "pass" if release else "fail",
        "candidate": str(candidate),
        "baseline": base_name,
        "gates": results,
        "_evaluations": {"candidate": cand_eval, "baseline": base_eval},
    }


def _baseline(contract: Contract, folder: Path, baseline: Path | None, splits: list[str]) -> tuple[dict, str]:
    """A saved evaluation (JSON), a policy or run folder, or the contract's starting policy."""
    path = baseline or (folder / contract.acceptance.baseline if contract.acceptance.baseline else None)
    if path is not None and path.is_file():
        data = json.loads(path.read_text(encoding="utf-8"))
        missing = [s for s in splits if s not in data]
        if missing:
            raise UsageProblem(f"baseline evaluation {path} lacks split(s) {missing}")
        return data, str(path)
    if path is None:
        policy = contract.artifacts.policy
        if policy.path is None:
            raise UsageProblem("give --baseline: the starting policy is a hub id, not a local folder")
        path = folder / policy.path
    return {s: evaluate(contract, folder, path, s) for s in splits}, str(path)


def write_verdict(result: dict[str, Any], out: Path) -> None:
    evaluations = result.pop("_evaluations")
    out.mkdir(parents=True, exist_ok=True)
    (out / "verdict.json").write_text(json.dumps(result, indent=1), encoding="utf-8")
    save_evaluation(out / "evaluation.json", evaluations["candidate"])


def gate_table(result: dict[str, Any]) -> str:
    lines = [f"{'gate':<20}{'split':<12}{'metric':<14}{'candidate [CI]':<26}{'delta [CI]':<28}{'result':<8}"]
    for r in result["gates"]:
        o = r["overall"]
        c, d = o["candidate"], o["delta"]
        state = "pass" if o["passed"] else "FAIL"
        lines.append(
            f"{r['name'] + (' *' if r['critical'] else ''):<20}{r['split']:<12}{r['metric']:<14}"
            f"{c[0]:.3f} [{c[1]:.3f}, {c[2]:.3f}]{'':<4}{d[0]:+.3f} [{d[1]:+.3f}, {d[2]:+.3f}]{'':<3}{state}"
        )
        for name, seg in r["segments"].items():
            sc, sd = seg["candidate"], seg["delta"]
            lines.append(
                f"  {name:<42}{sc[0]:.3f}{'':<20}{sd[0]:+.3f} [{sd[1]:+.3f}, {sd[2]:+.3f}]{'':<3}"
                f"{'pass' if seg['passed'] else 'FAIL'}"
            )
    lines.append(f"* critical.  release: {result['release'].upper()} (baseline: {result['baseline']})")
    return "\n".join(lines)


def compare_policies(contract: Contract, folder: Path, a: Path, b: Path, samples: int, split: str) -> dict[str, Any]:
    """Reward distributions of two policies on the same tasks, with a paired test."""
    ev_a = evaluate(contract, folder, a, split, samples=samples, greedy=False, seed=1)
    ev_b = evaluate(contract, folder, b, split, samples=samples, greedy=False, seed=1)
    items = sorted(set(ev_a) & set(ev_b))
    ma, mb = item_means(ev_a), item_means(ev_b)
    diffs = [mb[i] - ma[i] for i in items]
    mean, low, high = bootstrap(diffs, 0.95)
    best = sum(max(c.weight, 0.0) for c in contract.objective.reward.components)
    both_correct = sum(all(r >= best - 1e-9 for r in ev_a[i]["rewards"] + ev_b[i]["rewards"]) for i in items)
    both_wrong = sum(all(r <= 0 for r in ev_a[i]["rewards"] + ev_b[i]["rewards"]) for i in items)
    no_difference = low <= 0 <= high
    return {
        "split": split,
        "items": len(items),
        "samples_per_item": samples,
        "policy_a": {"path": str(a), "reward_mean": sum(ma[i] for i in items) / len(items)},
        "policy_b": {"path": str(b), "reward_mean": sum(mb[i] for i in items) / len(items)},
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
