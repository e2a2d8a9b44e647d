"""`rlvr report RUN_DIR`: one self-contained HTML file (inline SVG, no scripts, no network)
with the run's curves, the monitoring thresholds drawn on them, fired rules marked, and the
rollout audit."""

from __future__ import annotations

import html
import math
from pathlib import Path
from typing import Any

from rlvr_cli.contract.diagnostics import ContractError
from rlvr_cli.store.run import RunFolder

PLOTS = [
    ("Reward", ["reward_mean", "holdout_reward"]),
    ("KL to the reference", ["kl"]),
    ("Entropy", ["entropy"]),
    ("Clip fraction", ["clip_fraction"]),
    ("Response length", ["response_length_mean"]),
    ("Zero-std groups", ["zero_std_fraction", "all_correct_fraction", "all_wrong_fraction"]),
    ("Truncation rate", ["truncation_rate"]),
]
COLORS = ["#1f6feb", "#d1242f", "#1a7f37", "#9a6700"]
W, H, PAD = 640, 200, 40


def _points(metrics: list[dict[str, Any]], key: str) -> list[tuple[float, float]]:
    out = []
    for row in metrics:
        value = row.get(key)
        if isinstance(value, (int, float)) and math.isfinite(value):
            out.append((float(row["step"]), float(value)))
    return out


def chart(
    title: str,
    series: dict[str, list[tuple[float, float]]],
    thresholds: list[tuple[float, str]],
    marks: list[tuple[float, str]],
) -> str:
    """An SVG line chart; thresholds as dashed horizontal lines, marks as vertical ones."""
    values = [v for pts in series.values() for _, v in pts] + [t for t, _ in thresholds]
    steps = [s for pts in series.values() for s, _ in pts] + [m for m, _ in marks]
    if not values or not steps:
        return f"<section><h2>{html.escape(title)}</h2><p>no data</p></section>"
    lo, hi = min(values), max(values)
    lo, hi = (lo - 0.5, hi + 0.5) if hi == lo else (lo, hi)
    s0, s1 = min(steps), max(steps) if max(steps) > min(steps) else min(steps) + 1
    x = lambda s: PAD + (s - s0) / (s1 - s0) * (W - 2 * PAD)  # noqa: E731
    y = lambda v: H - PAD + (lo - v) / (hi - lo) * (H - 2 * PAD)  # noqa: E731
    parts = [
        f'<svg class="chart" viewBox="0 0 {W} {H}" width="{W}" height="{H}" role="img" '
        f'aria-label="{html.escape(title)}">',
        f'<rect x="{PAD}" y="{PAD // 2}" width="{W - 2 * PAD}" height="{H - 1.5 * PAD}" fill="#fafafa" stroke="#ddd"/>',
        f'<text x="4" y="{y(hi) + 4:.1f}" font-size="10">{hi:.3g}</text>',
        f'<text x="4" y="{y(lo) + 4:.1f}" font-size="10">{lo:.3g}</text>',
        f'<text x="{PAD}" y="{H - 8}" font-size="10">step {s0:g}</text>',
        f'<text x="{W - PAD - 50}" y="{H - 8}" font-size="10">step {s1:g}</text>',
    ]
    for value, label in thresholds:
        parts.append(
            f'<line class="threshold" x1="{PAD}" x2="{W - PAD}" y1="{y(value):.1f}" y2="{y(value):.1f}" '
            f'stroke="#cf222e" stroke-dasharray="5 4"><title>{html.escape(label)}</title></line>'
        )
    for step, label in marks:
        parts.append(
            f'<line class="fired" x1="{x(step):.1f}" x2="{x(step):.1f}" y1="{PAD // 2}" y2="{H - PAD}" '
            f'stroke="#8250df" stroke-width="2"><title>{html.escape(label)}</title></line>'
        )
    for i, (name, pts) in enumerate(series.items()):
        color = COLORS[i % len(COLORS)]
        path = " ".join(f"{x(s):.1f},{y(v):.1f}" for s, v in pts)
        if len(pts) > 1:
            parts.append(f'<polyline class="series" fill="none" stroke="{color}" stroke-width="1.5" points="{path}"/>')
        parts += [f'<circle cx="{x(s):.1f}" cy="{y(v):.1f}" r="2" fill="{color}"/>' for s, v in pts if len(pts) <= 60]
        parts.append(
            f'<text x="{W - PAD - 150}" y="{PAD // 2 + 14 + 12 * i}" font-size="11" fill="{color}">'
            f"{html.escape(name)}</text>"
        )
    parts.append("</svg>")
    return f"<section><h2>{html.escape(title)}</h2>{''.join(parts)}</section>"


def _rules(run: RunFolder) -> list[Any]:
    """The monitoring rules of the run's contract; none when the contract is no longer there
    (a broken plan.json is an error, not an empty answer)."""
    from rlvr_cli.contract.load import load

    try:
        return list(load(Path(run.read_plan()["contract"])).monitoring.rules)
    except (OSError, ContractError):
        return []


def build(run_dir: Path) -> str:
    from rlvr_cli.audit.rollouts import audit, load_run, report_text

    _, metrics = load_run(run_dir)
    run = RunFolder(run_dir)
    status = run.read_status()
    rules = _rules(run)
    fired = status.rule
    sections = []
    components = sorted({k for row in metrics for k in row if k.startswith("holdout/")})
    for title, keys in [*PLOTS[:1], ("Holdout, component by component (greedy)", components), *PLOTS[1:]]:
        series = {k: _points(metrics, k) for k in keys if _points(metrics, k)}
        thresholds = [
            (r.condition.threshold, f"{r.name}: {r.metric} {r.when} ({r.action}, owner {r.owner})")
            for r in rules
            if r.metric in keys and r.condition.threshold is not None
        ]
        marks = [(float(fired.step), f"rule {fired.name} fired")] if fired and fired.metric in keys else []
        sections.append(chart(title, series, thresholds, marks))
    audit_text = report_text(audit(run_dir))
    head = f"<p><b>state</b> {html.escape(status.state)} at step {status.step} — {html.escape(status.reason or '')}</p>"
    if fired:
        head += (
            f"<p class='fired-rule'><b>fired rule</b> {html.escape(fired.name)}: {html.escape(fired.metric)} "
            f"{html.escape(fired.when)}, values {html.escape(str(fired.values))}, owner "
            f"{html.escape(str(fired.owner))}</p>"
        )
    return (
        "<!doctype html><html><head><meta charset='utf-8'><title>rlvr report: "
        f"{html.escape(run_dir.name)}</title><style>body{{font-family:system-ui,sans-serif;margin:2em;max-width:70em}}"
        "section{display:inline-block;margin:0 1em 1em 0}h2{font-size:1em;margin:.2em 0}"
        "pre{background:#f6f8fa;padding:1em;white-space:pre-wrap}</style></head><body>"
        f"<h1>rlvr run {html.escape(run_dir.name)}</h1>{head}{''.join(sections)}"
        f"<h2>Rollout audit</h2><pre>{html.escape(audit_text)}</pre></body></html>"
    )


def write_report(run_dir: Path, out: Path | None = None) -> Path:
    target = out or run_dir / "report.html"
    target.write_text(build(run_dir), encoding="utf-8")
    return target
