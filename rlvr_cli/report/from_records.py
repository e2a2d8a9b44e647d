"""Per-step series the metrics file does not hold, read from the rollout records: the training
reward broken into its components, the response-length distribution, and the verdict
statuses over time — and the trained tokens of a sample, highlighted."""

from __future__ import annotations

import html
import json
from collections import Counter, defaultdict
from typing import Any

Series = dict[str, list[tuple[float, float]]]


def components_by_step(rows: list[dict[str, Any]]) -> Series:
    sums: dict[str, dict[int, list[float]]] = defaultdict(lambda: defaultdict(list))
    for row in rows:
        if row.get("components"):
            for name, value in json.loads(row["components"]).items():
                if isinstance(value, (int, float)):
                    sums[name][row["step"]].append(float(value))
    return {
        f"train/{name}": [(float(step) + 1, sum(v) / len(v)) for step, v in sorted(by_step.items())]
        for name, by_step in sorted(sums.items())
    }


def length_percentiles(rows: list[dict[str, Any]]) -> Series:
    lengths: dict[int, list[int]] = defaultdict(list)
    for row in rows:
        lengths[row["step"]].append(len(row["response_ids"] or []))
    out: Series = {"p10": [], "median": [], "p90": []}
    for step, values in sorted(lengths.items()):
        values.sort()
        for name, q in (("p10", 0.1), ("median", 0.5), ("p90", 0.9)):
            out[name].append((float(step) + 1, float(values[min(len(values) - 1, int(q * len(values)))])))
    return out


def statuses_by_step(rows: list[dict[str, Any]]) -> Series:
    counts: dict[int, Counter] = defaultdict(Counter)
    for row in rows:
        counts[row["step"]][row.get("status") or "none"] += 1
    names = sorted({name for c in counts.values() for name in c})
    return {
        name: [(float(step) + 1, c[name] / sum(c.values())) for step, c in sorted(counts.items())] for name in names
    }


def highlighted(row: dict[str, Any], tokenizer: Any) -> str:
    """The response token by token, the trained ones marked; the plain text without a tokenizer."""
    ids, mask = row.get("response_ids") or [], row.get("loss_mask") or []
    if tokenizer is None or not ids:
        return f"<code>{html.escape(row.get('response_text') or '')}</code>"
    pieces = []
    for token_id, trained in zip(ids, [*mask, *[0] * len(ids)], strict=False):
        text = html.escape(tokenizer.decode([token_id], skip_special_tokens=False)).replace("\n", "⏎")
        pieces.append(f"<mark>{text}</mark>" if trained else f"<span class='untrained'>{text}</span>")
    return "<code>" + "".join(pieces) + "</code>"
