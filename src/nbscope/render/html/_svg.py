"""The HTML report's charts written as SVG directly: horizontal bars and x–y points with axes and a legend.

Why not matplotlib: importing it and saving one figure cost ~1.5 s of a report's ~2 s, and the report is
a read-only command that must start in about the time ``nbscope --version`` takes. The charts need only
rectangles, lines, circles and text on linear, logarithmic and time axes, which is what this draws.

Every text goes through :func:`_text` (:func:`nbscope.render._clean.for_html`: sequences dropped, then escaped), so text from
a notebook or a record is kept as escaped ``<text>``: never markup, never a script.
"""

from __future__ import annotations

import datetime as dt
import math
from collections.abc import Sequence
from dataclasses import dataclass, field

from nbscope.render._clean import for_html

WIDTH = 960
FONT_PX = 11
SMALL_PX = 10
CHAR_PX = 0.58  # average glyph width of a sans-serif font, in ems: enough to size margins for labels
ROW_PX = 18
GRID = "#d0d7de"
INK = "#1f2328"
MUTED = "#59636e"


_text = for_html  # the one HTML escaper (``render._clean``): SVG character data without sequences


def _n(value: float) -> str:
    return f"{value:.1f}".rstrip("0").rstrip(".")


def text_width(text: str, size: float = FONT_PX) -> float:
    return len(text) * size * CHAR_PX


# ---- axes -----------------------------------------------------------------------------------------------


def _nice_step(span: float, most: int = 7) -> float:
    raw = span / max(1, most)
    power = 10 ** math.floor(math.log10(raw)) if raw > 0 else 1.0
    for factor in (1, 2, 2.5, 5, 10):
        if factor * power >= raw:
            return factor * power
    return 10 * power


def _tick_label(value: float) -> str:
    if value == 0:
        return "0"
    magnitude = abs(value)
    if magnitude >= 1e5 or magnitude < 1e-3:
        mantissa, exponent = f"{value:.0e}".split("e")
        return f"{mantissa}e{int(exponent)}"
    return f"{value:.6g}"


@dataclass
class Axis:
    """A linear, logarithmic or time axis from ``low`` to ``high`` (time: POSIX seconds)."""

    low: float
    high: float
    scale: str = "linear"  # "linear", "log" or "time"

    def __post_init__(self) -> None:
        if self.scale == "log":
            self.low = max(self.low, 1e-12)
            self.high = max(self.high, self.low * 10)
            # whole decades, so that the ticks sit at the ends
            self.low = 10 ** math.floor(math.log10(self.low))
            self.high = 10 ** math.ceil(math.log10(self.high))
        elif self.high <= self.low and self.scale == "time":  # one point in time: an hour around it
            self.low, self.high = self.low - 1800.0, self.high + 1800.0
        elif self.high <= self.low:
            self.high = self.low + 1.0

    def fraction(self, value: float) -> float:
        """Where ``value`` lies from the low end (0) to the high end (1), clamped to the axis."""
        if self.scale == "log":
            value = max(value, self.low)
            where = (math.log10(value) - math.log10(self.low)) / (math.log10(self.high) - math.log10(self.low))
        else:
            where = (value - self.low) / (self.high - self.low)
        return min(1.0, max(0.0, where))

    def ticks(self) -> list[tuple[float, str]]:
        if self.scale == "log":
            first, last = round(math.log10(self.low)), round(math.log10(self.high))
            every = max(1, math.ceil((last - first) / 8))
            return [(10.0**k, _tick_label(10.0**k)) for k in range(first, last + 1, every)]
        if self.scale == "time":
            return _time_ticks(self.low, self.high)
        step = _nice_step(self.high - self.low)
        start = math.ceil(self.low / step - 1e-9) * step
        count = int((self.high - start) / step + 1e-9) + 1
        return [(start + i * step, _tick_label(round(start + i * step, 12))) for i in range(count)]


# The steps between a time axis' ticks, in seconds: up to 12 hours, then days up to a year.
_CLOCK_STEPS = (1, 2, 5, 10, 15, 30, 60, 120, 300, 600, 900, 1800, 3600, 7200, 10800, 21600, 43200)
_TIME_STEPS = (*_CLOCK_STEPS, *(days * 86400 for days in (1, 2, 7, 14, 30, 91, 182, 365)))


def _time_ticks(low: float, high: float) -> list[tuple[float, str]]:
    span = high - low
    step = next((s for s in _TIME_STEPS if span / s <= 7), _TIME_STEPS[-1])
    form = "%Y-%m-%d" if step >= 86400 else "%m-%d %H:%M" if step >= 60 else "%H:%M:%S"
    start = math.ceil(low / step) * step
    ticks: list[tuple[float, str]] = []
    at = start
    while at <= high + 1e-6:
        ticks.append((at, dt.datetime.fromtimestamp(at, dt.UTC).strftime(form)))
        at += step
    return ticks


# ---- the frame: title, plot area, axes, legend ------------------------------------------------------------


@dataclass
class _Frame:
    title: str
    height: float  # of the plot area
    left: float
    legend: Sequence[tuple[str, str]] = ()
    bottom_label: str = ""
    left_label: str = ""
    right: float = 24.0
    parts: list[str] = field(default_factory=list)
    top = 30.0  # where the plot area starts, below the title (not a field)

    @property
    def plot_width(self) -> float:
        return WIDTH - self.left - self.right

    def _legend_rows(self) -> list[list[tuple[str, str, float]]]:
        rows: list[list[tuple[str, str, float]]] = [[]]
        used = 0.0
        for label, color in self.legend:
            width = 22 + text_width(label, SMALL_PX) + 18
            if rows[-1] and used + width > WIDTH - 40:
                rows.append([])
                used = 0.0
            rows[-1].append((label, color, width))
            used += width
        return rows if self.legend else []

    def document(self, x_axis: Axis, *, y_axis: Axis | None = None) -> str:
        legend = self._legend_rows()
        axis_bottom = self.top + self.height
        total = axis_bottom + 44 + 18 * len(legend) + 6
        out = [
            f'<svg class="plot" role="img" xmlns="http://www.w3.org/2000/svg" viewBox="0 0 {WIDTH} {_n(total)}" '
            f'width="{WIDTH}" height="{_n(total)}" font-family="system-ui,-apple-system,Segoe UI,Roboto,sans-serif" '
            f'font-size="{FONT_PX}" fill="{INK}">',
            f"<title>{_text(self.title)}</title>",
            f'<rect width="{WIDTH}" height="{_n(total)}" fill="#fff"/>',
            f'<text x="{WIDTH / 2}" y="18" text-anchor="middle" font-size="13">{_text(self.title)}</text>',
        ]
        for value, label in x_axis.ticks():
            x = self.left + x_axis.fraction(value) * self.plot_width
            out.append(f'<line x1="{_n(x)}" y1="{_n(self.top)}" x2="{_n(x)}" y2="{_n(axis_bottom)}" stroke="{GRID}"/>')
            out.append(
                f'<text x="{_n(x)}" y="{_n(axis_bottom + 14)}" text-anchor="middle" '
                f'font-size="{SMALL_PX}" fill="{MUTED}">{_text(label)}</text>'
            )
        if y_axis is not None:
            for value, label in y_axis.ticks():
                y = axis_bottom - y_axis.fraction(value) * self.height
                out.append(
                    f'<line x1="{_n(self.left)}" y1="{_n(y)}" x2="{_n(WIDTH - self.right)}" y2="{_n(y)}" '
                    f'stroke="{GRID}"/>'
                )
                out.append(
                    f'<text x="{_n(self.left - 5)}" y="{_n(y + 3.5)}" text-anchor="end" '
                    f'font-size="{SMALL_PX}" fill="{MUTED}">{_text(label)}</text>'
                )
        out.append(
            f'<rect x="{_n(self.left)}" y="{_n(self.top)}" width="{_n(self.plot_width)}" '
            f'height="{_n(self.height)}" fill="none" stroke="{MUTED}"/>'
        )
        out.extend(self.parts)
        if self.bottom_label:
            out.append(
                f'<text x="{_n(self.left + self.plot_width / 2)}" y="{_n(axis_bottom + 32)}" '
                f'text-anchor="middle">{_text(self.bottom_label)}</text>'
            )
        if self.left_label:
            middle = self.top + self.height / 2
            out.append(
                f'<text transform="translate(14 {_n(middle)}) rotate(-90)" text-anchor="middle">'
                f"{_text(self.left_label)}</text>"
            )
        y = axis_bottom + 52
        for row in legend:
            x = (WIDTH - sum(width for *_, width in row)) / 2
            for label, color, width in row:
                out.append(f'<rect x="{_n(x)}" y="{_n(y - 9)}" width="14" height="10" fill="{color}"/>')
                out.append(f'<text x="{_n(x + 20)}" y="{_n(y)}" font-size="{SMALL_PX}">{_text(label)}</text>')
                x += width
            y += 18
        out.append("</svg>")
        return "".join(out)


# ---- horizontal bars ------------------------------------------------------------------------------------


@dataclass
class BarChart:
    """Rows of horizontal bars, one label per row, top to bottom in the order given."""

    labels: Sequence[str]
    title: str
    xlabel: str
    scale: str = "linear"
    bars_per_row: int = 1
    _bars: list[tuple[int, int, float, float, str, bool]] = field(default_factory=list)
    _whiskers: list[tuple[int, int, float, float | None]] = field(default_factory=list)
    _notes: list[tuple[int, float, str]] = field(default_factory=list)

    def bar(self, row: int, start: float, width: float, color: str, *, slot: int = 0, outline: bool = False) -> None:
        """A bar from ``start`` to ``start + width`` in ``slot`` of the row (slots split the row's height)."""
        if width > 0:
            self._bars.append((row, slot, start, start + width, color, outline))

    def whisker(self, row: int, low: float, high: float | None, *, slot: int = 0) -> None:
        """A line from ``low`` to ``high`` with a cap, or an arrow to the axis' end when ``high`` is None."""
        self._whiskers.append((row, slot, low, high))

    def note(self, row: int, at: float, text: str) -> None:
        self._notes.append((row, at, text))

    def svg(self, legend: Sequence[tuple[str, str]] = ()) -> str:
        ends = [b[3] for b in self._bars]
        ends += [high if high is not None else low for *_, low, high in self._whiskers]
        starts = [b[2] for b in self._bars] + [w[2] for w in self._whiskers]
        if self.scale == "log":
            positive = [v for v in (*starts, *ends) if v > 0]
            axis = Axis(min(positive, default=1e-3), max(positive, default=1.0), "log")
        else:
            high = max(ends, default=1.0)
            axis = Axis(0.0, high * (1.12 if self._notes else 1.04) or 1.0)
        label_px = max((text_width(label, SMALL_PX) for label in self.labels), default=0.0)
        left = min(WIDTH * 0.45, max(60.0, label_px + 14))
        row_px = ROW_PX * max(1.0, 0.75 * self.bars_per_row)
        frame = _Frame(self.title, max(40.0, row_px * len(self.labels) + 8), left, legend, self.xlabel)
        slot_px = (row_px - 4) / self.bars_per_row

        def x_of(value: float) -> float:
            return left + axis.fraction(value) * frame.plot_width

        def y_of(row: int, slot: int) -> float:
            return frame.top + 4 + row * row_px + 2 + slot * slot_px

        for row, label in enumerate(self.labels):
            middle = frame.top + 4 + row * row_px + row_px / 2
            frame.parts.append(
                f'<text x="{_n(left - 5)}" y="{_n(middle + 3.5)}" text-anchor="end" '
                f'font-size="{SMALL_PX}">{_text(label)}</text>'
            )
        for row, slot, start, end, color, outline in self._bars:
            x0, x1 = x_of(start), x_of(end)
            edge = ' stroke="#c00000" stroke-width="1.2"' if outline else ""
            frame.parts.append(
                f'<rect x="{_n(x0)}" y="{_n(y_of(row, slot))}" width="{_n(max(0.5, x1 - x0))}" '
                f'height="{_n(slot_px * 0.85)}" fill="{color}"{edge}/>'
            )
        for row, slot, low, top in self._whiskers:
            y = y_of(row, slot) + slot_px * 0.425
            x0 = x_of(low)
            x1 = x_of(top) if top is not None else left + frame.plot_width
            frame.parts.append(f'<line x1="{_n(x0)}" y1="{_n(y)}" x2="{_n(x1)}" y2="{_n(y)}" stroke="{INK}"/>')
            if top is not None:
                frame.parts.append(
                    f'<line x1="{_n(x1)}" y1="{_n(y - 3)}" x2="{_n(x1)}" y2="{_n(y + 3)}" stroke="{INK}"/>'
                )
            else:
                frame.parts.append(f'<path d="M{_n(x1)} {_n(y)} l-6 -3.5 v7 z" fill="{INK}"/>')
        for row, at, text in self._notes:
            middle = frame.top + 4 + row * row_px + row_px / 2
            frame.parts.append(
                f'<text x="{_n(x_of(at) + 3)}" y="{_n(middle + 3)}" font-size="{SMALL_PX - 1}">{_text(text)}</text>'
            )
        return frame.document(axis)


# ---- points and lines -----------------------------------------------------------------------------------


@dataclass
class PointChart:
    """Series of (x, y) points, drawn as markers and/or lines, on linear, log or time axes."""

    title: str
    xlabel: str
    ylabel: str
    xscale: str = "linear"
    yscale: str = "linear"
    y_from_zero: bool = False
    height: float = 300.0
    _series: list[tuple[list[tuple[float, float]], str, bool, bool, float, bool]] = field(default_factory=list)
    _marks: list[tuple[float, str, str, float | None]] = field(default_factory=list)

    def series(
        self,
        points: Sequence[tuple[float, float]],
        color: str,
        *,
        markers: bool = True,
        line: bool = False,
        size: float = 3.0,
        hollow: bool = False,
    ) -> None:
        self._series.append(([(float(x), float(y)) for x, y in points], color, markers, line, size, hollow))

    def vline(self, x: float, color: str, text: str = "", at_y: float | None = None) -> None:
        """A dashed vertical line at ``x``, with ``text`` beside it at height ``at_y``."""
        self._marks.append((float(x), color, text, at_y))

    def svg(self, legend: Sequence[tuple[str, str]] = ()) -> str:
        xs = [x for points, *_ in self._series for x, _ in points] + [m[0] for m in self._marks]
        ys = [y for points, *_ in self._series for _, y in points]
        if self.xscale == "log":
            xs = [x for x in xs if x > 0]
        if self.yscale == "log":
            ys = [y for y in ys if y > 0]
        x_axis = Axis(min(xs, default=0.0), max(xs, default=1.0), self.xscale)
        if self.xscale != "log":
            pad = (x_axis.high - x_axis.low) * 0.03
            x_axis = Axis(x_axis.low - pad, x_axis.high + pad, self.xscale)
        low = 0.0 if self.y_from_zero else min(ys, default=0.0)
        high = max(ys, default=1.0)
        y_axis = Axis(low, high * (1.15 if self.y_from_zero else 1.0) if high > 0 else 1.0, self.yscale)
        if self.yscale != "log" and not self.y_from_zero:
            pad = (y_axis.high - y_axis.low) * 0.05
            y_axis = Axis(y_axis.low - pad, y_axis.high + pad)
        tick_px = max((text_width(label, SMALL_PX) for _, label in y_axis.ticks()), default=20.0)
        left = 34 + tick_px
        frame = _Frame(self.title, self.height, left, legend, self.xlabel, self.ylabel)

        def where(x: float, y: float) -> tuple[float, float]:
            return (
                left + x_axis.fraction(x) * frame.plot_width,
                frame.top + self.height - y_axis.fraction(y) * self.height,
            )

        for points, color, markers, line, size, hollow in self._series:
            placed = [where(x, y) for x, y in points]
            if line and len(placed) > 1:
                path = " ".join(f"{_n(x)},{_n(y)}" for x, y in placed)
                frame.parts.append(f'<polyline points="{path}" fill="none" stroke="{color}" stroke-width="1.2"/>')
            if markers:
                fill = f'fill="none" stroke="{color}" stroke-width="1.4"' if hollow else f'fill="{color}"'
                frame.parts.extend(f'<circle cx="{_n(x)}" cy="{_n(y)}" r="{size}" {fill}/>' for x, y in placed)
        for x, color, text, at_y in self._marks:
            px, _ = where(x, y_axis.low)
            frame.parts.append(
                f'<line x1="{_n(px)}" y1="{_n(frame.top)}" x2="{_n(px)}" '
                f'y2="{_n(frame.top + self.height)}" stroke="{color}" stroke-dasharray="5 3"/>'
            )
            if text:
                _, py = where(x, at_y if at_y is not None else y_axis.high)
                frame.parts.append(
                    f'<text x="{_n(px + 4)}" y="{_n(max(frame.top + 10, py - 6))}" '
                    f'font-size="{SMALL_PX}" fill="{color}">{_text(text)}</text>'
                )
        return frame.document(x_axis, y_axis=y_axis)
