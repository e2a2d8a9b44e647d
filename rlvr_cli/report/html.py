"""The HTML pieces every report page is made of: the style sheet, escaping, numbers, tables,
the page itself, and a metric as chart points."""

from __future__ import annotations

import html
import math
from typing import Any

STYLE = (
    "body{font-family:system-ui,sans-serif;margin:1.5em auto;max-width:1300px;padding:0 1em;color:#1f2328}"
    "h1{font-size:1.5em;margin:.2em 0}h2{font-size:1.15em;margin:1.4em 0 .5em;border-bottom:1px solid #d0d7de}"
    ".grid{display:grid;grid-template-columns:repeat(auto-fill,minmax(380px,1fr));gap:1em}"
    ".chart-box{margin:0;min-width:0}.chart-box svg{width:100%;height:auto;display:block}"
    "figcaption{font-weight:600;font-size:.95em;margin-bottom:.2em}.legend{font-size:.8em;line-height:1.5}"
    ".note{font-size:.8em;color:#57606a;margin:.2em 0}table{border-collapse:collapse;font-size:.85em;margin:.4em 0}"
    "td,th{border:1px solid #d0d7de;padding:.25em .6em;text-align:left;vertical-align:top}th{background:#f6f8fa}"
    ".pass{color:#1a7f37;font-weight:600}.fail{color:#cf222e;font-weight:600}.glance{font-size:1.1em;"
    "background:#f6f8fa;padding:.6em 1em;border-left:4px solid #1f6feb}code,pre{white-space:pre-wrap;"
    "word-break:break-word}details{margin:.3em 0}.wide{overflow-x:auto;max-width:100%}"
    "mark{background:#dafbe1}.untrained{color:#8c959f}"
)


def _esc(value: Any) -> str:
    return html.escape(str(value))


def _num(value: Any, digits: int = 3) -> str:
    if isinstance(value, float):
        return f"{value:.{digits}f}" if math.isfinite(value) else str(value)
    return _esc(value)


def _table(header: list[str], rows: list[list[Any]]) -> str:
    head = "".join(f"<th>{_esc(h)}</th>" for h in header)
    body = "".join("<tr>" + "".join(f"<td>{c}</td>" for c in row) + "</tr>" for row in rows)
    return f"<div class='wide'><table><tr>{head}</tr>{body}</table></div>"


def points(metrics: list[dict[str, Any]], key: str) -> list[tuple[float, float]]:
    """(step, value): steps counted from 1, as the progress, `status`, checkpoints and the fired
    rule count them (metrics.jsonl numbers its rows from 0)."""
    return [
        (float(r["step"]) + 1, float(r[key]))
        for r in metrics
        if isinstance(r.get(key), (int, float)) and math.isfinite(r[key])
    ]


def _page(title: str, body: str) -> str:
    return (
        f"<!doctype html><html><head><meta charset='utf-8'><meta name='viewport' content='width=device-width'>"
        f"<title>{_esc(title)}</title><style>{STYLE}</style></head><body>{body}</body></html>"
    )


def _duration(seconds: float) -> str:
    return (
        f"{seconds:.0f} s"
        if seconds < 120
        else f"{seconds / 60:.1f} min"
        if seconds < 7200
        else f"{seconds / 3600:.1f} h"
    )


def _facts(rows: list[list[str]]) -> str:
    return (
        "<div class='wide'><table>" + "".join(f"<tr><th>{k}</th><td>{v}</td></tr>" for k, v in rows) + "</table></div>"
    )
