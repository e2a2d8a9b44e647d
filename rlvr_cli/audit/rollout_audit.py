"""`rlvr audit rollouts RUN_DIR`: verify the record manifest, then read the evidence.

A rising training reward is not a better model. This report puts next to it: reward by
domain and difficulty, zero-variance groups (all correct vs all wrong) over time,
truncation, verifier errors vs wrong answers, dynamic-sampling acceptance and the budget
spent on discarded generations, response-length drift, train reward vs hint-free holdout,
and "suspicious successes" for a human to read.
"""

from __future__ import annotations

import json
import statistics
from collections import Counter, defaultdict
from pathlib import Path
from typing import Any

from rlvr_cli.audit import session_trees
from rlvr_cli.errors import RlvrError
from rlvr_cli.store.record_checks import pin_problems, verify_manifest
from rlvr_cli.store.records import read_records
from rlvr_cli.store.run import RunFolder

EXPLOIT_PATTERNS = ("<|im_start|>", "<|endoftext|>", "as an ai", "i cannot", "answer:", "```", "assert", "print(")


def load_run(run_dir: Path) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """Every record row and every metrics row of a run folder."""
    run = RunFolder.existing(run_dir)
    if not run.records.is_dir() or not run.metrics.is_file():
        raise RlvrError(f"{run_dir} is not an rlvr run folder (no records/ or metrics.jsonl)")
    return read_records(run.records).to_pylist(), run.read_metrics()


def _mean(values: list[float]) -> float | None:
    return sum(values) / len(values) if values else None


def by_segment(rows: list[dict[str, Any]], key: str) -> dict[str, dict[str, float]]:
    groups: dict[str, list[float]] = defaultdict(list)
    for row in rows:
        if row["reward"] is not None:
            groups[str(row.get(key))].append(row["reward"])
    return {k: {"reward_mean": _mean(v), "samples": len(v)} for k, v in sorted(groups.items())}


def suspicious(rows: list[dict[str, Any]], prompts: dict[str, str], best: float) -> list[dict[str, Any]]:
    """Successes (the best reward) worth a human look: length outliers (more than 3σ from the
    mean success length and at least half the mean, or 4 tokens, away from it: a success one
    token longer than uniform ones is not news), prompt echoes, exploit patterns."""
    rewarded = [r for r in rows if r["reward"] is not None and r["reward"] >= best - 1e-9 and r["kept"]]
    lengths = [len(r["response_ids"] or []) for r in rewarded]
    mean = statistics.fmean(lengths) if lengths else 0.0
    spread = statistics.pstdev(lengths) if len(lengths) > 1 else 0.0
    found = []
    for row, length in zip(rewarded, lengths, strict=True):
        text = (row["response_text"] or "").lower()
        reasons = []
        if spread and abs(length - mean) > max(3 * spread, 0.5 * mean, 4):
            reasons.append(f"length {length} vs mean {mean:.1f}")
        prompt = prompts.get(row["prompt_id"], "").lower().strip()
        if prompt and len(prompt) > 3 and prompt in text:
            reasons.append("repeats the prompt")
        reasons += [f"pattern {p!r}" for p in EXPLOIT_PATTERNS if p in text]
        if reasons:
            found.append(
                {
                    "step": row["step"],
                    "prompt_id": row["prompt_id"],
                    "reward": row["reward"],
                    "response": row["response_text"][:200],
                    "why": reasons,
                }
            )
    return found


def _drift(rows: list[dict[str, Any]]) -> dict[str, float | None]:
    steps = sorted({r["step"] for r in rows})
    if not steps:
        return {"first": None, "last": None}
    cut = max(1, len(steps) // 10)
    early, late = set(steps[:cut]), set(steps[-cut:])
    length = lambda pick: _mean([len(r["response_ids"] or []) for r in rows if r["step"] in pick])  # noqa: E731
    return {"first_steps_mean_length": length(early), "last_steps_mean_length": length(late)}


def run_contract(run_dir: Path) -> tuple[Any, dict[str, str]]:
    """The contract named in plan.json and the train prompts by task id; (None, {}) when that
    contract or its data is no longer where the run found it (a broken plan.json is an error,
    not an empty answer)."""
    from rlvr_cli.contract.load import load
    from rlvr_cli.contract.tasks import read_split

    contract_path = Path(RunFolder(run_dir).read_plan()["contract"])
    try:
        contract = load(contract_path)
        tasks = read_split(contract_path.resolve().parent / contract.data.splits.train.path, "train")
    except (OSError, RlvrError):
        return None, {}
    prompts = {str(t["id"]): t["prompt"] if isinstance(t["prompt"], str) else json.dumps(t["prompt"]) for t in tasks}
    return contract, prompts


def record_problems(run_dir: Path) -> list[str]:
    """The record store's problems: shards missing, extra or changed (the manifest's sha256), and
    shards that are not what a checkpoint pinned (changed together with their manifest entry)."""
    run = RunFolder.existing(run_dir)
    problems = verify_manifest(run.records)
    for _, path in run.complete_checkpoints():
        try:
            meta = json.loads((path / "trainer.json").read_text(encoding="utf-8"))
        except (OSError, ValueError) as exc:
            problems.append(f"checkpoint {path.name}: trainer.json cannot be read ({exc})")
            continue
        if isinstance(meta, dict) and meta.get("records_sha256") and isinstance(meta.get("records_cursor"), int):
            where = f"checkpoint {path.name}"
            problems += pin_problems(run.records, meta["records_cursor"], meta["records_sha256"], where)
    return problems


def audit(run_dir: Path) -> dict[str, Any]:
    problems = record_problems(run_dir)
    if problems:
        return {"manifest_ok": False, "problems": problems}
    rows, metrics = load_run(run_dir)
    contract, prompts = run_contract(run_dir)
    # a success earns the best reward the contract's components allow; a format bonus alone is not one
    best = contract.objective.reward.best if contract else max((r["reward"] or 0.0 for r in rows), default=0.0)
    statuses = Counter(r["status"] or "not_verified" for r in rows)
    valid = [r for r in rows if r["status"] in ("ok", "format_error") and r["reward"] is not None]
    wrong = sum(1 for r in valid if r["reward"] < best - 1e-9)
    reasons = Counter(r["discard_reason"] for r in rows if not r["kept"])
    holdout = [
        (m["step"], m.get("reward_mean"), m["holdout_reward"]) for m in metrics if m.get("holdout_reward") is not None
    ]
    return {
        "manifest_ok": True,
        "samples": len(rows),
        "kept": sum(r["kept"] for r in rows),
        "steps": len(metrics),
        "reward_by_domain": by_segment(rows, "domain"),
        "reward_by_difficulty": by_segment(rows, "difficulty"),
        "zero_std_over_time": [
            {"step": m["step"], "all_correct": m.get("all_correct_fraction"), "all_wrong": m.get("all_wrong_fraction")}
            for m in metrics
        ],
        "truncation_rate": _mean([r["finish_reason"] == "length" for r in rows]),
        "verdicts": dict(statuses),
        "wrong_answers": wrong,
        "verifier_errors": sum(statuses[s] for s in ("verifier_error", "timeout", "sandbox_error")),
        "discarded": dict(reasons),
        "budget_spent": {"generations": len(rows), "discarded": sum(reasons.values())},
        "length_drift": _drift(rows),
        "hints": _hints(rows),
        "tool_use": _tool_use(rows, list(contract.environment.forbidden_tools or []) if contract else []),
        "session_trees": session_trees.trees(rows),
        "data_check": _data_check(run_dir, rows),
        "train_vs_holdout": [{"step": s, "train_reward": t, "holdout_reward": h} for s, t, h in holdout],
        "holdout_evaluations": len(holdout),
        "holdout_every": contract.monitoring.holdout_every if contract else None,
        "format_errors": statuses.get("format_error", 0),
        "suspicious_successes": suspicious(rows, prompts, best),
    }


def _hints(rows: list[dict[str, Any]]) -> dict[str, Any]:
    """Hint dependence from the records: hinted vs unhinted reward over the groups that
    sampled both (the same tasks)."""
    groups: dict[tuple[int, int], list[dict[str, Any]]] = {}
    for r in rows:
        groups.setdefault((r["step"], r["group"]), []).append(r)
    hinted, plain = [], []
    for group in groups.values():
        a = [r["reward"] for r in group if r.get("hint") is not None and r["reward"] is not None]
        b = [r["reward"] for r in group if r.get("hint") is None and r["reward"] is not None]
        if a and b:
            hinted, plain = hinted + a, plain + b
    return {
        "used": any(r.get("hint") is not None for r in rows),
        "hinted_samples": sum(r.get("hint") is not None for r in rows),
        "reward_hinted": _mean(hinted),
        "reward_unhinted": _mean(plain),
    }


def _tool_use(rows: list[dict[str, Any]], forbidden: list[str]) -> dict[str, Any] | None:
    """Tool-use signals from the episodes' transcripts: calls, tool errors, forbidden-tool
    attempts, how episodes ended, and reward by the number of model turns. None: no episodes."""
    episodes = [(r, json.loads(r["transcript"])) for r in rows if r.get("transcript")]
    if not episodes:
        return None
    calls = [c for _, t in episodes for turn in t.get("turns", []) for c in turn.get("tool_calls", [])]
    by_turns: dict[int, list[float]] = defaultdict(list)
    for row, t in episodes:
        if row["reward"] is not None:
            by_turns[len(t.get("turns", []))].append(row["reward"])
    return {
        "episodes": len(episodes),
        "calls_per_episode": _mean([float(t.get("calls", 0)) for _, t in episodes]),  # parsed
        "executed_calls_per_episode": _mean([float(_executed(t)) for _, t in episodes]),  # sent to the server
        "episodes_with_a_call": _mean([float(t.get("calls", 0) > 0) for _, t in episodes]),
        "tool_error_rate": _mean([str(c.get("output")).startswith("error:") for c in calls if c.get("executed", True)]),
        "forbidden_attempts": sum(c.get("name") in forbidden for c in calls),
        "ended": dict(Counter(t.get("ended", "?") for _, t in episodes)),
        "reward_by_turns": {n: {"reward_mean": _mean(v), "episodes": len(v)} for n, v in sorted(by_turns.items())},
    }


def _executed(transcript: dict[str, Any]) -> int:
    """Calls the server ran (records written before the count was kept: those with a result)."""
    if "executed_calls" in transcript:
        return int(transcript["executed_calls"])
    return sum(
        1 for turn in transcript.get("turns", []) for c in turn.get("tool_calls", []) if c.get("output") is not None
    )


def _data_check(run_dir: Path, rows: list[dict[str, Any]]) -> dict[str, Any]:
    """Whether the records name the data check in the run folder (its sha256)."""
    import hashlib

    path = run_dir / "data-check.json"
    named = sorted({r["data_check"] for r in rows if r.get("data_check")})
    if not path.is_file():
        return {"present": False, "ok": not named, "named": named}
    digest = hashlib.sha256(path.read_bytes()).hexdigest()
    return {"present": True, "ok": named == [digest] or not rows, "named": named, "sha256": digest}


def _num(value: float | None) -> str:
    """A rate or reward for the text report; `n/a` when no valid sample defined it."""
    return "n/a" if value is None or value != value else f"{value:.3f}"


def _tool_use_lines(tu: dict[str, Any] | None) -> list[str]:
    if not tu:
        return []
    turns = ", ".join(
        f"{n} turn(s) {_num(v['reward_mean'])} (n={v['episodes']})" for n, v in tu["reward_by_turns"].items()
    )
    return [
        f"tool use: {tu['episodes']} episodes, {_num(tu['calls_per_episode'])} calls per episode parsed, "
        f"{_num(tu['executed_calls_per_episode'])} executed, "
        f"{_num(tu['episodes_with_a_call'])} of them with a call, tool error rate {_num(tu['tool_error_rate'])}, "
        f"forbidden-tool attempts {tu['forbidden_attempts']}; ended {tu['ended']}; "
        f"reward by turns: {turns or 'n/a'}"
    ]


def report_text(report: dict[str, Any]) -> str:
    if not report["manifest_ok"]:
        return "record manifest FAILED:\n" + "\n".join(f"  {p}" for p in report["problems"])
    lines = [
        f"records: {report['samples']} samples over {report['steps']} steps, {report['kept']} kept; "
        "manifest and every shard checksum verified"
    ]
    for key in ("reward_by_domain", "reward_by_difficulty"):
        parts = ", ".join(f"{k} {_num(v['reward_mean'])} (n={v['samples']})" for k, v in report[key].items())
        lines.append(f"{key.replace('_', ' ')}: {parts or 'n/a'}")
    z = report["zero_std_over_time"]
    if z:
        lines.append(
            f"zero-std groups, first → last step: all_correct {z[0]['all_correct']} → {z[-1]['all_correct']}, "
            f"all_wrong {z[0]['all_wrong']} → {z[-1]['all_wrong']}"
        )
    lines.append(
        f"truncation rate {_num(report['truncation_rate'])}; verdicts {report['verdicts']}; wrong answers "
        f"{report['wrong_answers']} (below the best reward; {report['format_errors']} of them format errors), "
        f"verifier errors {report['verifier_errors']}"
    )
    lines.append(f"discarded: {report['discarded'] or 'none'}; budget spent {report['budget_spent']}")
    d = report["length_drift"]
    lines.append(
        f"response length (tokens): first steps {_num(d.get('first_steps_mean_length'))}, "
        f"last steps {_num(d.get('last_steps_mean_length'))}"
    )
    h = report["hints"]
    hint_line = f"hints used: {h['used']}"
    if h["used"]:
        hint_line += (
            f" ({h['hinted_samples']} hinted samples; reward hinted {_num(h['reward_hinted'])} vs unhinted "
            f"{_num(h['reward_unhinted'])} in the same groups)"
        )
    lines.append(hint_line)
    lines += _tool_use_lines(report.get("tool_use"))
    lines += session_trees.lines(report.get("session_trees"))
    dc = report["data_check"]
    lines.append(
        "data check: " + ("records name data-check.json" if dc["ok"] and dc["present"] else "none in this run folder")
        if dc["ok"]
        else "data check: FAILED — the records name another data check than data-check.json (edited after the run?)"
    )
    lines.append(_holdout_line(report))
    sus = report["suspicious_successes"]
    lines.append(f"suspicious successes for review: {len(sus)}")
    lines += [f"  step {s['step']} {s['prompt_id']}: {s['why']} {s['response']!r}" for s in sus[:20]]
    return "\n".join(lines)


def _holdout_line(report: dict[str, Any]) -> str:
    if report["holdout_evaluations"]:
        pairs = (
            f"step {e['step']}: {_num(e['train_reward'])}/{_num(e['holdout_reward'])}"
            for e in report["train_vs_holdout"]
        )
        return "train vs holdout: " + ", ".join(pairs)
    if report.get("holdout_every"):
        return (
            f"train vs holdout: no holdout evaluation during the run (monitoring.holdout_every is "
            f"{report['holdout_every']}; the run has {report['steps']} step(s))"
        )
    return "train vs holdout: no holdout evaluation in this run (set monitoring.holdout_every)"
