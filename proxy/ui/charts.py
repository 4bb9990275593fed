"""Inline SVG charts (no script, no library): bars, a cumulative line, the checkpoint timeline.

Pure functions from numbers to markup; colours come from CSS classes so the CSP needs no inline
style. Every mark has a <title>, so hovering (or a screen reader) gives the exact value.
"""

from __future__ import annotations

from collections.abc import Sequence

from .html import esc

WIDTH = 960
HEIGHT = 180
PAD = 36


def _frame(body: str, label: str, height: int = HEIGHT) -> str:
    return (
        f'<svg class="chart" viewBox="0 0 {WIDTH} {height}" role="img" aria-label="{esc(label)}" '
        f"><title>{esc(label)}</title>{body}</svg>"
    )


def _axis(top: float, height: int = HEIGHT) -> str:
    base = height - PAD / 2
    return (
        f'<line class="axis" x1="{PAD}" y1="{base}" x2="{WIDTH - 4}" y2="{base}"/>'
        f'<text class="tick" x="2" y="{PAD / 2 + 4}">{esc(_short(top))}</text>'
        f'<text class="tick" x="2" y="{base}">0</text>'
    )


def _short(value: float) -> str:
    if value >= 1_000_000:
        return f"{value / 1_000_000:.1f}M"
    if value >= 1000:
        return f"{value / 1000:.1f}k"
    return f"{value:g}" if value >= 1 else f"{value:.4g}"


def grouped_bars(labels: Sequence[str], series: Sequence[tuple[str, Sequence[float | None]]], title: str) -> str:
    """Bars per label, one per series (class `s0`, `s1`, ...); None draws nothing."""
    values = [v for _, vs in series for v in vs if v is not None]
    top = max(values, default=0) or 1
    n = max(len(labels), 1)
    slot = (WIDTH - PAD - 4) / n
    width = max(slot / (len(series) + 0.5), 0.5)
    usable = HEIGHT - PAD
    marks = []
    for i, label in enumerate(labels):
        for k, (name, vs) in enumerate(series):
            value = vs[i]
            if value is None:
                continue
            h = usable * value / top
            x = PAD + i * slot + k * width
            y = HEIGHT - PAD / 2 - h
            marks.append(
                f'<rect class="s{k}" x="{x:.2f}" y="{y:.2f}" width="{width:.2f}" height="{h:.2f}">'
                f"<title>{esc(label)}: {esc(name)} {esc(_short(value))}</title></rect>"
            )
    return _frame(_axis(top) + "".join(marks), title) + _legend([name for name, _ in series])


def line(labels: Sequence[str], values: Sequence[float], title: str, name: str) -> str:
    """A polyline of `values` (e.g. cumulative cost), with a dot and title per point."""
    top = max(values, default=0) or 1
    n = max(len(values) - 1, 1)
    usable = HEIGHT - PAD
    points = [(PAD + (WIDTH - PAD - 8) * i / n, HEIGHT - PAD / 2 - usable * v / top) for i, v in enumerate(values)]
    path = " ".join(f"{x:.2f},{y:.2f}" for x, y in points)
    dots = "".join(
        f'<circle class="s0" cx="{x:.2f}" cy="{y:.2f}" r="2.5"><title>{esc(label)}: {esc(_short(v))}</title></circle>'
        for (x, y), label, v in zip(points, labels, values, strict=True)
    )
    return _frame(_axis(top) + f'<polyline class="line" points="{path}"/>' + dots, title) + _legend([name])


def _legend(names: Sequence[str]) -> str:
    items = "".join(f'<li><span class="swatch s{k}"></span>{esc(name)}</li>' for k, name in enumerate(names))
    return f'<ul class="legend">{items}</ul>'


def timeline(
    head: int,
    spans: Sequence[tuple[int, int, str, str]],
    marks: Sequence[tuple[int, str]],
    title: str,
) -> str:
    """Events 1..`head` on the x axis; each span (from, through, status, label) a bar on its own
    row (class = status: active, superseded, failed); each mark (seq, label) a tick: a call."""
    head = max(head, 1)
    rows = max(len(spans), 1)
    height = 28 + 16 * rows
    scale = (WIDTH - PAD - 8) / head

    def x(seq: float) -> float:
        return PAD + (seq - 1) * scale

    bars = "".join(
        f'<rect class="cp {esc(status)}" x="{x(start):.2f}" y="{18 + 16 * i}" '
        f'width="{max((end - start + 1) * scale, 2):.2f}" height="12"><title>{esc(label)}</title></rect>'
        for i, (start, end, status, label) in enumerate(spans)
    )
    ticks = "".join(
        f'<line class="call" x1="{x(seq):.2f}" y1="4" x2="{x(seq):.2f}" y2="{height - 4}">'
        f"<title>{esc(label)}</title></line>"
        for seq, label in marks
    )
    axis = f'<text class="tick" x="{PAD}" y="12">e1</text><text class="tick" x="{WIDTH - 40}" y="12">e{head}</text>'
    return _frame(axis + ticks + bars, title, height)
