"""`rlvr report RUN_DIR [RUN_DIR ...]`: one self-contained HTML file (inline SVG and CSS, no
scripts, no network).

One run: what was run (contract, hash, the objective in words, shapes), when and how it
ended; at a glance, whether the policy got better at the task itself (the correctness
component on the hint-free holdout, apart from any bonus) and whether the release passed
(`gate/verdict.json`); curves with real axes (report/charts.py) with every monitoring
threshold and fired rule; the rollout audit as tables; a sample browser (best, worst and a
random rollout at the first, middle and last step). Several runs: their curves overlaid and
their contracts compared key by key — the table an ablation needs.
"""

from __future__ import annotations

import datetime
import json
import random
from pathlib import Path
from typing import Any

from rlvr_cli.contract.diagnostics import ContractError
from rlvr_cli.files import atomic_write_text
from rlvr_cli.report import from_records as records
from rlvr_cli.report.budget import compute_fact
from rlvr_cli.report.charts import Chart, render
from rlvr_cli.report.html import _duration, _esc, _facts, _num, _page, _table, points
from rlvr_cli.store.run import RunFolder


def _contract(run: RunFolder) -> Any:
    from rlvr_cli.contract.load import load

    try:
        return load(Path(run.read_plan()["contract"]))
    except (OSError, KeyError, ContractError):
        return None


# ── one run ───────────────────────────────────────────────────────────────────────────


def _header(run_dir: Path, run: RunFolder, plan: dict[str, Any], metrics: list[dict[str, Any]]) -> str:
    status = run.read_status()
    started = datetime.datetime.fromtimestamp(run.plan.stat().st_mtime, datetime.UTC).strftime("%Y-%m-%d %H:%M UTC")
    seconds = sum(r.get("step_seconds") or 0.0 for r in metrics)
    state = f"{_esc(status.state)} at step {status.step}: {_esc(status.reason or '')}"
    facts = [
        [
            "contract",
            f"<code>{_esc(plan.get('contract'))}</code> (sha256 {_esc(str(plan.get('contract_sha256'))[:12])}…)",
        ],
        ["started", started],
        ["last update", _esc(status.updated)],
        ["training time", f"{_duration(seconds)} over {len(metrics)} steps"],
        ["state", state],
        [
            "device, precision, seed",
            f"{_esc(plan.get('device'))}, {_esc(plan.get('precision'))}, {_esc(plan.get('seed'))}",
        ],
    ]
    compute = compute_fact(plan, metrics)
    if compute:
        facts.append(["compute", compute])
    if plan.get("trains"):  # every weight, or an adapter over the frozen policy, and what the reference is
        facts.append(["what trains", _esc(plan["trains"])])
    if status.rule:
        r = status.rule
        facts.append(["fired rule", f"{_esc(r.name)}: {_esc(r.metric)} {_esc(r.when)} (owner {_esc(r.owner)})"])
    shapes = plan.get("shapes") or {}
    objective = "".join(f"<li>{_esc(line)}</li>" for line in plan.get("objective") or [])
    return (
        "<h2>The run</h2>"
        + _facts(facts)
        + f"<h2>What was run</h2><ul>{objective}</ul>"
        + _table(list(shapes), [[_esc(v) for v in shapes.values()]])
    )


def _title(run_dir: Path, plan: dict[str, Any]) -> str:
    """The name, and the contract's description shown as what it is: the author's words, which
    the measurements below confirm or not."""
    described = plan.get("description")
    said = f"<p class='claim'>The contract says: <q>{_esc(described)}</q> (its words, not a measurement)</p>"
    return f"<h1>{_esc(plan.get('name', run_dir.name))}</h1>" + (said if described else "")


def _release(run_dir: Path) -> list[str]:
    """The verdict first: released or not, and each gate's candidate against the baseline the
    gate evaluated (the starting policy unless --baseline named another)."""
    path = run_dir / "gate" / "verdict.json"
    if not path.is_file():
        return ["Release gates: not evaluated yet (`rlvr gate CONTRACT --candidate RUN_DIR`)."]
    data = json.loads(path.read_text(encoding="utf-8"))
    release = str(data.get("release"))
    css = "pass" if release == "pass" else "fail"
    lines = [f"<b>Release: <span class='{css}'>{_esc(release.upper())}</span></b>"]
    for gate in data.get("gates", []):
        judged = gate.get("overall") or {}
        cand, delta = (judged.get("candidate") or [None])[0], (judged.get("delta") or [None])[0]
        if cand is None or delta is None:
            continue
        state = "passes" if judged.get("passed") else "fails: " + "; ".join(judged.get("failed") or [])
        lines.append(
            f"{_esc(gate.get('name'))}: {_esc(gate.get('split'))} {_esc(gate.get('metric'))} {cand:.2f} for this run "
            f"vs {cand - delta:.2f} for the baseline <code>{_esc(data.get('baseline'))}</code> — {_esc(state)}"
        )
    return lines


def _glance(run_dir: Path, metrics: list[dict[str, Any]]) -> str:
    """Did the release pass, and did the policy get better at the task (not only the bonus)?"""
    lines = _release(run_dir)
    components = sorted({k for r in metrics for k in r if k.startswith("holdout/")})
    main = "holdout/correct" if "holdout/correct" in components else (components[0] if components else None)
    pts = points(metrics, main) if main else []
    if not pts and main:
        lines.append(f"Held-out {_esc(main.split('/', 1)[1])}: no valid evaluation (every verdict invalid).")
    if pts:
        first, last = pts[0][1], pts[-1][1]
        verb = "improved" if last > first + 1e-9 else "did not improve"
        when = "before training" if pts[0][0] == 0 else f"after step {pts[0][0]:g} (the first evaluation)"
        lines.append(
            f"Held-out {_esc(main.split('/', 1)[1])} while training (hint-free, greedy): {first:.2f} {when} → "
            f"{last:.2f} after step {pts[-1][0]:g} — the policy {verb} at the task itself during the run."
        )
    return "<div class='glance'>" + "<br>".join(lines) + "</div>"


def _gates(run_dir: Path) -> str:
    path = run_dir / "gate" / "verdict.json"
    if not path.is_file():
        return ""
    data = json.loads(path.read_text(encoding="utf-8"))
    rows = [
        _gate_row(gate, segment, judged)
        for gate in data.get("gates", [])
        for segment, judged in [("all", gate.get("overall") or {}), *(gate.get("segments") or {}).items()]
    ]
    release = data.get("release")
    head = f"<p>Release: <span class='{'pass' if release == 'pass' else 'fail'}'>{_esc(release)}</span>"
    head += f" against baseline <code>{_esc(data.get('baseline'))}</code></p>"
    header = ["gate", "segment", "metric", "critical", "candidate [interval]", "Δ vs baseline [interval]", "", "checks"]
    return "<h2>Gates</h2>" + head + _table(header, rows)


def _gate_row(gate: dict[str, Any], segment: str, judged: dict[str, Any]) -> list[str]:
    """One gate in one segment: estimate and interval (the verdict stores estimate, lower, upper)."""
    mean, lo, hi = (judged.get("candidate") or [None] * 3)[:3]
    d_mean, d_lo, d_hi = (judged.get("delta") or [None] * 3)[:3]
    ok = "<span class='pass'>pass</span>" if judged.get("passed") else "<span class='fail'>fail</span>"
    return [
        _esc(gate.get("name")),
        _esc(segment),
        f"{_esc(gate.get('metric'))} on {_esc(gate.get('split'))}",
        "yes" if gate.get("critical") else "no",
        f"{_num(mean)} [{_num(lo)}, {_num(hi)}]",
        f"{_num(d_mean)} [{_num(d_lo)}, {_num(d_hi)}]",
        ok,
        _esc("; ".join(judged.get("checks") or [])),
    ]


def _charts(
    metrics: list[dict[str, Any]], rows: list[dict[str, Any]], contract: Any, status: Any, plan: dict[str, Any]
) -> str:
    rules = list(contract.monitoring.rules) if contract is not None else []
    best = contract.objective.reward.best if contract is not None else None
    max_len = (plan.get("shapes") or {}).get("max_response_tokens")
    components = sorted({k for r in metrics for k in r if k.startswith("holdout/")})
    specs = [
        (
            "Reward: train mean and holdout",
            ["reward_mean", "holdout_reward"],
            (0.0, best) if best else None,
            "Includes every component and bonus; the correctness of the task is charted on its own next.",
        ),
        ("Holdout by component (greedy, hint-free)", components, (0.0, 1.0), ""),
        (
            "Groups with no signal (all equal rewards)",
            ["zero_std_fraction", "all_correct_fraction", "all_wrong_fraction"],
            (0.0, 1.0),
            "",
        ),
        ("KL to the reference", ["kl"], None, ""),
        ("Entropy", ["entropy"], None, ""),
        ("Clip fraction", ["clip_fraction"], (0.0, 0.05), ""),
        ("Response length (tokens)", ["response_length_mean"], (0.0, float(max_len)) if max_len else None, ""),
        ("Truncation and verifier errors", ["truncation_rate", "verifier_error_rate"], (0.0, 1.0), ""),
    ]
    fired = status.rule
    out = []
    from_records = {
        "Train reward by component": (records.components_by_step(rows), (0.0, 1.0)),
        "Response length distribution (tokens)": (records.length_percentiles(rows), (0.0, float(max_len or 1))),
        "Verdict statuses (share of samples)": (records.statuses_by_step(rows), (0.0, 1.0)),
    }
    derived = [render(Chart(t, {k: v for k, v in ser.items() if v}, yr)) for t, (ser, yr) in from_records.items()]
    for i, (title, keys, y_range, note) in enumerate(specs):
        if i == 2:  # after the reward and the holdout components: the training side of the same story
            out += derived
        series = {k: points(metrics, k) for k in keys if points(metrics, k)}
        thresholds = [
            (r.condition.threshold, f"{r.name}: {r.metric} {r.when} → {r.action}")
            for r in rules
            if r.metric in keys and r.condition.threshold is not None
        ]
        marks = [(float(fired.step), f"{fired.name} fired")] if fired and fired.metric in keys else []
        out.append(render(Chart(title, series, y_range, thresholds, marks, note)))
    return "<h2>Curves</h2><div class='grid'>" + "".join(out) + "</div>"


def _audit_tables(report: dict[str, Any]) -> str:
    parts = [
        _table(
            ["samples", "kept", "steps", "wrong answers", "format errors", "verifier errors", "truncation rate"],
            [
                [
                    report["samples"],
                    report["kept"],
                    report["steps"],
                    report["wrong_answers"],
                    report["format_errors"],
                    report["verifier_errors"],
                    _num(report["truncation_rate"]),
                ]
            ],
        )
    ]
    for key, label in (("reward_by_domain", "domain"), ("reward_by_difficulty", "difficulty")):
        rows = [[_esc(k), _num(v["reward_mean"]), v["samples"]] for k, v in report[key].items()]
        parts.append(_table([label, "mean reward", "samples"], rows))
    verdicts = [[_esc(k), v] for k, v in report["verdicts"].items()]
    parts.append(_table(["verdict", "samples"], verdicts))
    drift = report["length_drift"]
    parts.append(
        f"<p>Response length: {_num(drift.get('first_steps_mean_length'))} tokens in the first steps, "
        f"{_num(drift.get('last_steps_mean_length'))} in the last.</p>"
    )
    tvh = [[r["step"], _num(r["train_reward"]), _num(r["holdout_reward"])] for r in report["train_vs_holdout"]]
    if tvh:
        parts.append(_table(["step", "train reward", "holdout reward"], tvh))
    odd = report["suspicious_successes"][:10]
    if odd:
        rows = [
            [
                r.get("step"),
                _esc(r.get("prompt_id")),
                f"<code>{_esc(r.get('response'))}</code>",
                _esc(", ".join(r.get("why", []))),
            ]
            for r in odd
        ]
        parts.append(
            "<p>Suspicious successes, for a human to read:</p>" + _table(["step", "task", "response", "why"], rows)
        )
    state = "<span class='pass'>verified</span>" if report["manifest_ok"] else "<span class='fail'>MISMATCH</span>"
    return f"<h2>Rollout audit</h2><p>Record manifest: {state}.</p>" + "".join(parts)


def _data_check(run_dir: Path, rows: list[dict[str, Any]]) -> str:
    """The data check the run started from, and whether every record names it."""
    import hashlib

    path = run_dir / "data-check.json"
    if not path.is_file():
        return "<h2>Data</h2><p>No data-check.json in this run folder (a run from before the data check).</p>"
    raw = path.read_bytes()
    report = json.loads(raw)
    digest = hashlib.sha256(raw).hexdigest()
    named = {r.get("data_check") for r in rows}
    provenance = (
        "every record names this report"
        if named == {digest}
        else f"<b>records name another report</b> ({len(named - {digest})} other value(s))"
    )
    files = [
        [name, f.get("path"), f.get("rows"), (f.get("sha256") or "")[:12]]
        for name, f in report.get("files", {}).items()
    ]
    settings = report.get("settings", {})
    near = settings.get("near_duplicates") or "not declared (dedup.method exact)"
    state = (
        f"{report.get('errors', 0)} error(s), {report.get('warnings', 0)} warning(s), {report.get('waived', 0)} waived"
    )
    facts = _facts([["findings", state], ["normalisation", ", ".join(settings.get("normalize", []))],
                    ["near duplicates", _esc(near)], ["provenance", provenance]])  # fmt: skip
    return "<h2>Data</h2>" + facts + _table(["split", "file", "rows", "sha256"], files)


def _sample_row(label: str, r: dict[str, Any], prompts: dict[str, str], tokenizer: Any) -> str:
    trained, length = sum(r["loss_mask"] or []), len(r["response_ids"] or [])
    transcript = ""
    if r.get("transcript"):
        transcript = f"<details><summary>transcript</summary><pre>{_esc(r['transcript'][:4000])}</pre></details>"
    cells = [
        label,
        _esc(r["prompt_id"]),
        f"<code>{_esc(prompts.get(r['prompt_id'], ''))}</code>",
        f"{records.highlighted(r, tokenizer)}<br><small>{trained} of {length} tokens trained (marked), "
        f"{_esc(r['finish_reason'])}</small>{transcript}",
        _num(r["reward"]),
        _esc(r["status"]),
        f"<code>{_esc(r['components'])}</code>",
    ]
    return "<tr>" + "".join(f"<td>{c}</td>" for c in cells) + "</tr>"


def _samples(rows: list[dict[str, Any]], prompts: dict[str, str], tokenizer: Any) -> str:
    """Best, worst and a random rollout at the first, middle and last recorded step."""
    steps = sorted({r["step"] for r in rows})
    if not steps:
        return ""
    chosen = sorted({steps[0], steps[len(steps) // 2], steps[-1]})
    out = []
    for step in chosen:
        here = [r for r in rows if r["step"] == step and r["reward"] is not None]
        if not here:
            continue
        ranked = sorted(here, key=lambda r: r["reward"])
        picks = [("best", ranked[-1]), ("worst", ranked[0]), ("random", random.Random(step).choice(here))]
        items = [_sample_row(label, r, prompts, tokenizer) for label, r in picks]
        header = ["", "task", "prompt", "response", "reward", "verdict", "components"]
        head = "<tr>" + "".join(f"<th>{h}</th>" for h in header) + "</tr>"
        out.append(
            f"<details{' open' if step == chosen[-1] else ''}><summary>step {step}</summary>"
            f"<div class='wide'><table>{head}{''.join(items)}</table></div></details>"
        )
    return "<h2>Samples</h2>" + "".join(out)


def _tokenizer(run: RunFolder, contract: Any) -> Any:
    """The run's tokenizer, to show samples token by token; None when it does not load."""
    if contract is None:
        return None
    try:
        from rlvr_cli.chat.render import load_tokenizer

        ref = contract.artifacts.tokenizer
        folder = Path(run.read_plan()["contract"]).resolve().parent
        return load_tokenizer(folder / ref.path if ref.path else None, ref.id, ref.revision)
    except Exception:  # no train extra or the model folder moved: the text is shown instead
        return None


def build(run_dir: Path) -> tuple[str, list[str]]:
    """The page, and the record store's problems: with any, the page says the records cannot
    be trusted (and shows none of them) instead of auditing them."""
    from rlvr_cli.audit.rollout_audit import audit, load_run, record_problems, run_contract

    run = RunFolder(run_dir)
    problems = record_problems(run_dir)
    rows, metrics = ([], run.read_metrics()) if problems else load_run(run_dir)
    plan = run.read_plan()
    contract = _contract(run)
    start = run.read_holdout_start()  # the step-0 point of the holdout curves
    curve = [{**start, "step": -1}, *metrics] if start else metrics
    body = (
        _title(run_dir, plan)
        + _glance(run_dir, curve)
        + _header(run_dir, run, plan, metrics)
        + _gates(run_dir)
        + _charts(curve, rows, contract, run.read_status(), plan)
    )
    if problems:
        body += _tampered(problems)
    else:
        body += (
            _data_check(run_dir, rows)
            + _audit_tables(audit(run_dir))
            + _samples(rows, run_contract(run_dir)[1], _tokenizer(run, contract))
        )
    return _page(f"rlvr report: {plan.get('name', run_dir.name)}", body), problems


def _tampered(problems: list[str]) -> str:
    items = "".join(f"<li>{_esc(p)}</li>" for p in problems)
    return (
        "<h2>Rollout audit</h2><p>Record manifest: <span class='fail'>MISMATCH</span>. The records are not what "
        f"the run wrote, so none is shown or audited:</p><ul>{items}</ul>"
    )


def write_report(run_dir: Path, out: Path | None = None) -> tuple[Path, list[str]]:
    """Write the page (default RUN_DIR/report.html); returns it and the record store's problems."""
    target = out or run_dir / "report.html"
    page, problems = build(run_dir)
    atomic_write_text(target, page)
    return target, problems
