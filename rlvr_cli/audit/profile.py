"""Reward profiling before training: several policies (local checkpoints or endpoints, listed
weakest first) sample k answers to the same tasks; per model and per segment pass@1, pass@k and
the reward distribution; the tasks no model solves (too hard, or a broken verifier), those every
model solves (too easy), those a weaker model solves and a stronger one does not (suspicious);
whether consecutive models' rewards differ (paired interval); and a difficulty profile per task."""

from __future__ import annotations

from collections import Counter, defaultdict
from typing import Any

from rlvr_cli.audit.evaluate import bootstrap, item_means, sign_flip_p

SEGMENT_FIELDS = ("domain", "difficulty")
#: a weaker model's pass@1 this far above a stronger one's on one task is suspicious
INVERSION = 0.5


def _successes(item: dict[str, Any], best: float) -> list[bool]:
    return [r is not None and r >= best - 1e-9 for r in item["rewards"]]


def profile(names: list[str], evaluations: list[dict[str, Any]], best: float, split: str, k: int) -> dict[str, Any]:
    items = sorted(set.intersection(*(set(e) for e in evaluations)))
    pass1 = {n: {i: _mean(_successes(e[i], best)) for i in items} for n, e in zip(names, evaluations, strict=True)}
    models = {}
    for name, ev in zip(names, evaluations, strict=True):
        rewards = [r for i in items for r in ev[i]["rewards"]]
        valid = [r for r in rewards if r is not None]
        models[name] = {
            "pass@1": _mean(list(pass1[name].values())),
            f"pass@{k}": _mean([any(_successes(ev[i], best)) for i in items]),
            "reward_mean": _mean(valid),
            "error_rate": (len(rewards) - len(valid)) / max(len(rewards), 1),
            "rewards": {f"{r:g}": c for r, c in sorted(Counter(round(r, 6) for r in valid).items())},
        }
    tasks = evaluations[0]
    unsolved = [i for i in items if all(pass1[n][i] == 0 for n in names)]
    solved = [i for i in items if all(pass1[n][i] == 1 for n in names)]
    inversions = [
        {"task": i, "weaker": weak, "stronger": strong, "pass@1": [pass1[weak][i], pass1[strong][i]]}
        for i in items
        for a, weak in enumerate(names)
        for strong in names[a + 1 :]
        if pass1[weak][i] - pass1[strong][i] >= INVERSION
    ]
    return {
        "split": split,
        "items": len(items),
        "samples_per_item": k,
        "models": models,
        "segments": _segments(items, tasks, pass1, names),
        "pairs": [_pair(names[a], evaluations[a], names[a + 1], evaluations[a + 1]) for a in range(len(names) - 1)],
        "unsolved": unsolved,
        "solved_by_all": solved,
        "inversions": inversions,
        "profile": [_row(i, pass1, names, unsolved, solved) for i in items],
    }


def _mean(values: list) -> float:
    return sum(values) / len(values) if values else 0.0


def _segments(items: list[str], tasks: dict, pass1: dict, names: list[str]) -> dict[str, dict[str, float]]:
    groups: dict[str, list[str]] = defaultdict(list)
    for i in items:
        for field in SEGMENT_FIELDS:
            if field in tasks[i]["task"]:
                groups[f"{field}={tasks[i]['task'][field]}"].append(i)
    return {seg: {n: _mean([pass1[n][i] for i in members]) for n in names} for seg, members in sorted(groups.items())}


def _pair(a: str, ev_a: dict, b: str, ev_b: dict) -> dict[str, Any]:
    """b − a over the tasks both got a valid verdict on, paired; `differ`: 0 outside the interval."""
    ma, mb = item_means(ev_a), item_means(ev_b)
    shared = sorted(set(ma) & set(mb))
    diffs = [mb[i] - ma[i] for i in shared]
    mean, low, high = bootstrap(diffs, 0.95) if diffs else (0.0, 0.0, 0.0)
    return {
        "a": a,
        "b": b,
        "items": len(shared),
        "mean": mean,
        "ci95": [low, high],
        "p_value": sign_flip_p(diffs) if diffs else 1.0,
        "differ": not low <= 0 <= high,
    }


def _row(item: str, pass1: dict, names: list[str], unsolved: list, solved: list) -> dict[str, Any]:
    mean = _mean([pass1[n][item] for n in names])
    if item in unsolved:
        label = "unsolved"
    elif item in solved:
        label = "solved_by_all"
    else:
        label = "hard" if mean < 1 / 3 else "medium" if mean < 2 / 3 else "easy"
    return {"id": item, "profile": label, "pass@1_mean": mean, "pass@1": {n: pass1[n][item] for n in names}}


def text(result: dict[str, Any]) -> str:
    k = result["samples_per_item"]
    lines = [f"{result['items']} {result['split']} tasks × {k} samples"]
    lines.append(f"{'model':<40} pass@1  pass@{k}  reward  errors")
    for name, m in result["models"].items():
        scores = f"{m['pass@1']:.3f}   {m[f'pass@{k}']:.3f}   {m['reward_mean']:.3f}"
        lines.append(f"{name[-40:]:<40} {scores}   {m['error_rate']:.0%}")
    for p in result["pairs"]:
        verdict = "differ" if p["differ"] else "NO DIFFERENCE"
        low, high = p["ci95"]
        lines.append(f"{p['b'][-30:]} − {p['a'][-30:]}: {p['mean']:+.3f} [{low:+.3f}, {high:+.3f}] {verdict}")
    unsolved, solved = result["unsolved"], result["solved_by_all"]
    inverted = [x["task"] for x in result["inversions"]]
    lines.append(f"unsolved by every model ({len(unsolved)}: too hard, or a broken verifier): {_ids(unsolved)}")
    lines.append(f"solved by every model ({len(solved)}: too easy): {_ids(solved)}")
    lines.append(f"a weaker model beats a stronger one ({len(inverted)}: suspicious): {_ids(inverted)}")
    for segment, by_model in result["segments"].items():
        lines.append(f"  {segment}: " + ", ".join(f"{n[-20:]} {v:.2f}" for n, v in by_model.items()))
    return "\n".join(lines)


def _ids(ids: list[str], most: int = 8) -> str:
    return ", ".join(ids[:most]) + (f", … (+{len(ids) - most})" if len(ids) > most else "") if ids else "none"
