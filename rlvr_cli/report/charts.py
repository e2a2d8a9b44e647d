"""Line charts as inline SVG with real axes: nice ticks and gridlines on both axes, an honest
y range (the metric's own range where it has one — a reward from 0 to its best, a fraction
from 0 to 1 — never the data's min and max), a rolling mean over noisy series, every
threshold drawn and labelled where it is drawn, fired rules marked and named, and the legend
under the plot, never over the data. No scripts; the SVG scales with the page."""

from __future__ import annotations

import html
import math
from dataclasses import dataclass, field

COLORS = ["#1f6feb", "#d1242f", "#1a7f37", "#9a6700", "#8250df", "#bf3989", "#0a7b83", "#57606a"]
W, H = 560, 250
LEFT, RIGHT, TOP, BOTTOM = 52, 16, 14, 40


@dataclass
class Chart:
    title: str
    series: dict[str, list[tuple[float, float]]]
    y_range: tuple[float, float] | None = None  # the metric's own range; None: from the data, padded
    thresholds: list[tuple[float, str]] = field(default_factory=list)
    marks: list[tuple[float, str]] = field(default_factory=list)
    note: str = ""
    smooth: bool = True


def nice_ticks(lo: float, hi: float, count: int = 5) -> list[float]:
    """Round tick values (1, 2, 2.5 or 5 × 10^k apart) covering [lo, hi]."""
    if hi <= lo:
        hi = lo + 1.0
    raw = (hi - lo) / max(count - 1, 1)
    power = 10 ** math.floor(math.log10(raw))
    step = next(m * power for m in (1, 2, 2.5, 5, 10) if m * power >= raw)
    first = math.floor(lo / step + 1e-9) * step
    ticks = []
    value = first
    while value <= hi + step * 1e-6:
        if value >= lo - step * 1e-6:
            ticks.append(round(value, 10))
        value += step
    return ticks


def rolling(points: list[tuple[float, float]], window: int) -> list[tuple[float, float]]:
    out, total = [], 0.0
    for i, (step, value) in enumerate(points):
        total += value
        if i >= window:
            total -= points[i - window][1]
        out.append((step, total / min(i + 1, window)))
    return out


def _fmt(value: float) -> str:
    return f"{value:.4g}" if abs(value) < 1e4 else f"{value:.3g}"


def _range(chart: Chart) -> tuple[float, float]:
    values = [v for pts in chart.series.values() for _, v in pts] + [t for t, _ in chart.thresholds]
    if chart.y_range is not None:
        lo, hi = chart.y_range
        return min([lo, *values]), max([hi, *values])  # the data never leaves the frame
    lo, hi = (min(values), max(values)) if values else (0.0, 1.0)
    if lo >= 0:
        lo = 0.0  # a non-negative quantity starts at zero: no magnified wiggles
    pad = (hi - lo) * 0.08 or 1.0
    return lo, hi + pad


class _Frame:
    """Maps steps and values to the SVG's coordinates."""

    def __init__(self, s0: float, s1: float, lo: float, hi: float) -> None:
        self.s0, self.s1, self.lo, self.hi = s0, s1, lo, hi

    def x(self, s: float) -> float:
        return LEFT + (s - self.s0) / (self.s1 - self.s0) * (W - LEFT - RIGHT)

    def y(self, v: float) -> float:
        return TOP + (self.hi - v) / (self.hi - self.lo) * (H - TOP - BOTTOM)


def _axes(f: _Frame, yt: list[float], xt: list[float]) -> list[str]:
    out = []
    for v in yt:
        y = f.y(v)
        out.append(f'<line class="gridline" x1="{LEFT}" x2="{W - RIGHT}" y1="{y:.1f}" y2="{y:.1f}" stroke="#eaeef2"/>')
        out.append(
            f'<text class="tick y" x="{LEFT - 6}" y="{y + 3.5:.1f}" text-anchor="end" font-size="10">{_fmt(v)}</text>'
        )
    for s in (s for s in xt if f.s0 <= s <= f.s1):
        x = f.x(s)
        out.append(f'<line class="gridline" x1="{x:.1f}" x2="{x:.1f}" y1="{TOP}" y2="{H - BOTTOM}" stroke="#f3f4f6"/>')
        out.append(
            f'<text class="tick x" x="{x:.1f}" y="{H - BOTTOM + 14}" text-anchor="middle" font-size="10">'
            f"{_fmt(s)}</text>"
        )
    out.append(
        f'<text class="axis-label" x="{(W + LEFT) / 2:.0f}" y="{H - 6}" text-anchor="middle" font-size="10">step</text>'
    )
    return out


def _overlays(f: _Frame, chart: Chart) -> list[str]:
    out = []
    for value, label in chart.thresholds:
        y = f.y(value)
        out.append(
            f'<line class="threshold" x1="{LEFT}" x2="{W - RIGHT}" y1="{y:.1f}" y2="{y:.1f}" '
            f'stroke="#cf222e" stroke-dasharray="5 4"/>'
        )
        out.append(
            f'<text class="threshold-label" x="{W - RIGHT - 4}" y="{y - 4:.1f}" text-anchor="end" '
            f'font-size="10" fill="#cf222e">{html.escape(label)}</text>'
        )
    for step, label in chart.marks:
        x = f.x(step)
        out.append(
            f'<line class="fired" x1="{x:.1f}" x2="{x:.1f}" y1="{TOP}" y2="{H - BOTTOM}" stroke="#8250df" '
            f'stroke-width="2"/>'
        )
        out.append(
            f'<text class="fired-label" x="{x - 4:.1f}" y="{TOP + 12}" text-anchor="end" font-size="10" '
            f'fill="#8250df">{html.escape(label)}</text>'
        )
    return out


def _lines(f: _Frame, chart: Chart) -> tuple[list[str], list[str]]:
    out, legend = [], []
    for i, (name, pts) in enumerate(chart.series.items()):
        color = COLORS[i % len(COLORS)]
        window = max(3, len(pts) // 15)
        noisy = chart.smooth and len(pts) > 20
        if len(pts) > 1:
            line = " ".join(f"{f.x(s):.1f},{f.y(v):.1f}" for s, v in pts)
            faint = ' stroke-opacity="0.3"' if noisy else ""
            out.append(
                f'<polyline class="series" fill="none" stroke="{color}" stroke-width="1.2"{faint} points="{line}"/>'
            )
        if noisy:
            mean = " ".join(f"{f.x(s):.1f},{f.y(v):.1f}" for s, v in rolling(pts, window))
            out.append(f'<polyline class="rolling" fill="none" stroke="{color}" stroke-width="2.2" points="{mean}"/>')
        if len(pts) <= 40:
            out += [f'<circle cx="{f.x(s):.1f}" cy="{f.y(v):.1f}" r="2.2" fill="{color}"/>' for s, v in pts]
        suffix = f" (last {_fmt(pts[-1][1])}{f', rolling mean of {window}' if noisy else ''})" if pts else ""
        legend.append(f"<span style='color:{color}'>━ {html.escape(name)}{html.escape(suffix)}</span>")
    return out, legend


def render(chart: Chart) -> str:
    title = html.escape(chart.title)
    if not any(chart.series.values()):
        return f"<figure class='chart-box'><figcaption>{title}</figcaption><p>no data</p></figure>"
    steps = [s for pts in chart.series.values() for s, _ in pts] + [m for m, _ in chart.marks]
    lo, hi = _range(chart)
    s0, s1 = min(steps), max(steps)
    s1 = s1 if s1 > s0 else s0 + 1
    yt, xt = nice_ticks(lo, hi), nice_ticks(s0, s1, 6)
    frame = _Frame(s0, s1, min(lo, yt[0]), max(hi, yt[-1]))
    lines, legend = _lines(frame, chart)
    svg = [
        f'<svg class="chart" viewBox="0 0 {W} {H}" preserveAspectRatio="xMinYMin meet" role="img" '
        f'aria-label="{title}">',
        f'<rect x="{LEFT}" y="{TOP}" width="{W - LEFT - RIGHT}" height="{H - TOP - BOTTOM}" fill="#fff" '
        'stroke="#d0d7de"/>',
        *_axes(frame, yt, xt),
        *_overlays(frame, chart),
        *lines,
        "</svg>",
    ]
    note = f"<p class='note'>{html.escape(chart.note)}</p>" if chart.note else ""
    return (
        f"<figure class='chart-box'><figcaption>{title}</figcaption>{''.join(svg)}"
        f"<div class='legend'>{' '.join(legend)}</div>{note}</figure>"
    )
