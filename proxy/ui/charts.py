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


def _axis(top: float, unit: str, height: int = HEIGHT) -> str:
    """The value axis: its line, the top and zero ticks, and what it counts (`unit`)."""
    base = height - PAD / 2
    return (
        f'<line class="axis" x1="{PAD}" y1="{base}" x2="{WIDTH - 4}" y2="{base}"/>'
        f'<line class="axis" x1="{PAD}" y1="{PAD / 2}" x2="{PAD}" y2="{base}"/>'
        f'<text class="tick" x="2" y="{PAD / 2 + 4}">{esc(_short(top))}</text>'
        f'<text class="tick" x="2" y="{base}">0</text>'
        f'<text class="axis-title" x="{PAD + 4}" y="{PAD / 2 - 4}">{esc(unit)}</text>'
    )


def _category(x: float, slot: float, label: str) -> str:
    """A label under its slot on the category axis, cut to the room it has (its title is whole)."""
    room = max(int(slot / 6.5), 1)
    shown = label if len(label) <= room else label[: max(room - 1, 1)] + "…"
    return (
        f'<text class="label" x="{x + slot / 2:.2f}" y="{HEIGHT - 2}" text-anchor="middle">'
        f"<title>{esc(label)}</title>{esc(shown)}</text>"
    )


def _short(value: float) -> str:
    if value >= 1_000_000:
        return f"{value / 1_000_000:.1f}M"
    if value >= 1000:
        return f"{value / 1000:.1f}k"
    return f"{value:g}" if value >= 1 else f"{value:.4g}"


def grouped_bars(
    labels: Sequence[str], series: Sequence[tuple[str, Sequence[float | None]]], title: str, unit: str
) -> str:
    """Bars per label (named under its group), one per series (class `s0`, `s1`, ...), on an axis
    of `unit`; an unknown value (None) is no bar but a `?` (class `unknown`): never a zero."""
    values = [v for _, vs in series for v in vs if v is not None]
    top = max(values, default=0) or 1
    n = max(len(labels), 1)
    slot = (WIDTH - PAD - 4) / n
    width = max(slot / (len(series) + 0.5), 0.5)
    usable = HEIGHT - PAD
    marks = []
    for i, label in enumerate(labels):
        marks.append(_category(PAD + i * slot, slot, label))
        for k, (name, vs) in enumerate(series):
            value = vs[i]
            x = PAD + i * slot + k * width
            if value is None:
                marks.append(
                    f'<text class="unknown" x="{x + width / 2:.2f}" y="{HEIGHT - PAD / 2 - 4}" text-anchor="middle">'
                    f"<title>{esc(label)}: {esc(name)} unknown</title>?</text>"
                )
                continue
            h = usable * value / top
            y = HEIGHT - PAD / 2 - h
            marks.append(
                f'<rect class="s{k}" x="{x:.2f}" y="{y:.2f}" width="{width:.2f}" height="{h:.2f}">'
                f"<title>{esc(label)}: {esc(name)} {esc(_short(value))}</title></rect>"
            )
    unknown = any(v is None for _, vs in series for v in vs[: len(labels)])
    return _frame(_axis(top, unit) + "".join(marks), title) + _legend([name for name, _ in series], unknown)


def line(labels: Sequence[str], values: Sequence[float | None], title: str, name: str, unit: str) -> str:
    """A running total of `values` (e.g. cost per call), a dot and title per point; an unknown
    value (None) adds nothing and its dot is hollow (class `unknown`), titled so."""
    running, totals = 0.0, []
    for value in values:
        running += value or 0.0
        totals.append(running)
    top = max(totals, default=0) or 1
    n = max(len(totals) - 1, 1)
    usable = HEIGHT - PAD
    points = [(PAD + (WIDTH - PAD - 8) * i / n, HEIGHT - PAD / 2 - usable * v / top) for i, v in enumerate(totals)]
    path = " ".join(f"{x:.2f},{y:.2f}" for x, y in points)
    dots = "".join(
        f'<circle class="{"unknown" if v is None else "s0"}" cx="{x:.2f}" cy="{y:.2f}" r="2.5"><title>{esc(label)}: '
        f"{'unknown, not counted' if v is None else esc(_short(v))}; total {esc(_short(total))}</title></circle>"
        for (x, y), label, v, total in zip(points, labels, values, totals, strict=True)
    )
    unknown = any(v is None for v in values)
    return _frame(_axis(top, unit) + f'<polyline class="line" points="{path}"/>' + dots, title) + _legend(
        [name], unknown
    )


def _legend(names: Sequence[str], unknown: bool = False) -> str:
    items = "".join(f'<li><span class="swatch s{k}"></span>{esc(name)}</li>' for k, name in enumerate(names))
    if unknown:
        items += '<li><span class="swatch unknown"></span>unknown (no price or no usage): not drawn as 0</li>'
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
