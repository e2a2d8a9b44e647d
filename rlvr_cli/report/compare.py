"""`rlvr report RUN_A RUN_B ...`: several runs on one page — their contracts compared key by
key (only the keys that differ, the table an ablation needs) and their curves overlaid."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from rlvr_cli.errors import RlvrError
from rlvr_cli.report import budget
from rlvr_cli.report.charts import Chart, render
from rlvr_cli.report.html import _esc, _page, _table
from rlvr_cli.store.run import RunFolder

OVERLAID = [
    ("Train reward (mean)", "reward_mean", None),
    ("Holdout reward (greedy, hint-free)", "holdout_reward", None),
    ("KL to the reference", "kl", None),
    ("Entropy", "entropy", None),
    ("Groups with no signal", "zero_std_fraction", (0.0, 1.0)),
    ("Response length (tokens)", "response_length_mean", None),
]


def flatten(value: Any, prefix: str = "") -> dict[str, str]:
    """Dotted keys of a YAML document; lists of scalars as JSON, lists of mappings by index."""
    if isinstance(value, dict):
        out: dict[str, str] = {}
        for key, item in value.items():
            out.update(flatten(item, f"{prefix}.{key}" if prefix else str(key)))
        return out
    if isinstance(value, list) and any(isinstance(v, dict) for v in value):
        out = {}
        for i, item in enumerate(value):
            out.update(flatten(item, f"{prefix}[{i}]"))
        return out
    return {prefix: json.dumps(value, ensure_ascii=False)}


def _contract_keys(run: RunFolder) -> dict[str, str]:
    import yaml

    path = Path(run.read_plan()["contract"])
    try:
        return flatten(yaml.safe_load(path.read_text(encoding="utf-8")) or {})
    except (OSError, yaml.YAMLError) as exc:
        raise RlvrError(f"{run.root}: the contract it ran ({path}) cannot be read: {exc}") from None


def differences(runs: list[RunFolder]) -> list[tuple[str, list[str]]]:
    keyed = [_contract_keys(r) for r in runs]
    keys = sorted(set().union(*keyed))
    return [(k, [d.get(k, "—") for d in keyed]) for k in keys if len({d.get(k, "—") for d in keyed}) > 1]


def build_compare(run_dirs: list[Path], by: str = "step") -> str:
    """The page; `by` is the x axis of its curves and the budget its verdict is read at."""
    runs = [RunFolder.existing(d) for d in run_dirs]
    names = []
    for run in runs:
        if not run.metrics.is_file():
            raise RlvrError(f"{run.root} is not an rlvr run folder (no metrics.jsonl)")
        name = run.read_plan().get("name") or run.root.name
        names.append(name if name not in names else f"{name} ({run.root})")
    metrics = [r.read_metrics() for r in runs]
    starts = [r.read_holdout_start() for r in runs]
    budget.check_axis(names, metrics, by)
    rows = []
    for run, name, m in zip(runs, names, metrics, strict=True):
        status, plan = run.read_status(), run.read_plan()
        last = m[-1] if m else {}
        rows.append(
            [
                _esc(name),
                f"<code>{_esc(plan.get('contract'))}</code>",
                _esc(str(plan.get("contract_sha256"))[:12]),
                f"{_esc(status.state)} at step {status.step}",
                _esc(f"{last.get('holdout_reward', float('nan')):.3f}" if "holdout_reward" in last else "—"),
            ]
        )
    diff = differences(runs)
    diff_table = (
        _table(
            ["contract key", *names],
            [[f"<code>{_esc(k)}</code>", *(f"<code>{_esc(v)}</code>" for v in vs)] for k, vs in diff],
        )
        if diff
        else "<p>The contracts are identical.</p>"
    )
    charts = _curves(names, metrics, starts, by)
    body = (
        f"<h1>Comparing {len(runs)} runs</h1>"
        + _table(["run", "contract", "sha256", "state", "last holdout reward"], rows)
        + budget.section(names, metrics, starts, by)
        + f"<h2>What differs ({len(diff)} contract key{'s' if len(diff) != 1 else ''})</h2>{diff_table}"
        + "<h2>Curves</h2><div class='grid'>"
        + "".join(charts)
        + "</div>"
    )
    return _page("rlvr comparison: " + " vs ".join(names), body)


def _curves(names: list[str], metrics: list[list[dict]], starts: list[dict | None], by: str) -> list[str]:
    """The overlaid charts, x the budget `by`; holdout curves start before training."""
    charts = []
    components = sorted({k for m in metrics for r in m for k in r if k.startswith("holdout/")})
    for title, key, y_range in [
        *OVERLAID[:2],
        *((f"Holdout {c.split('/', 1)[1]}", c, (0.0, 1.0)) for c in components),
        *OVERLAID[2:],
    ]:
        series = {n: budget.curve(m, key, by, st) for n, m, st in zip(names, metrics, starts, strict=True)}
        note = f"x: {budget.LABELS[by]}"
        charts.append(render(Chart(title, {n: p for n, p in series.items() if p}, y_range, note=note)))
    return charts
