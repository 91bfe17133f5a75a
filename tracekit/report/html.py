"""Render a report view model as one self-contained HTML file that opens offline.

The page inlines plotly.js once, its own stylesheet and script, and the data: each trace's
arrays base64-encoded as little-endian typed arrays (times as microsecond offsets from the trace's
first point), decimated to a point budget that keeps every marked point. A Content-Security-
Policy forbids every fetch, so nothing can reach the network even by mistake.
"""

from __future__ import annotations

import base64
import html
import json
import os
from dataclasses import dataclass
from importlib import resources
from pathlib import Path
from typing import Any

import numpy as np

from tracekit.atomic import replacing
from tracekit.report.decimate import allocate, decimate
from tracekit.report.model import Cell, ConnectionView, Kind, Plot, Report, Table, Trace

# plotly.js's gl2d partial bundle (scatter and scattergl), vendored from the npm registry's
# plotly.js-gl2d-dist-min 3.7.0 (MIT, see plotly-gl2d.LICENSE). The full bundle that the plotly
# Python package ships is 4.8 MB and took 1.7 s to start in headless Chromium here, most of the
# 3 s load budget; this one is 1.6 MB and starts in 0.6 s.
PLOTLY_JS = "plotly-gl2d.min.js"

# Times are drawn to the microsecond: finer than any gap a plot can show, and an offset from the
# trace's first point then fits an unsigned 32-bit integer for over an hour of capture.
TIME_QUANTUM_S = 1e-6

# plotly.js draws with 'unsafe-eval' (its WebGL layer compiles shaders via new Function) and
# injects <style> elements; everything else is refused, network included.
CSP = (
    "default-src 'none'; script-src 'unsafe-inline' 'unsafe-eval'; style-src 'unsafe-inline'; "
    "img-src data: blob:; font-src data:; worker-src blob:"
)


# What a point costs to draw, relative to a point of a line, measured in headless Chromium here
# (plotly 3.7, SwiftShader WebGL): plotly simplifies SVG lines to the pixel grid, a marker is a
# sprite, but a segment is a separate two-point line plus its two end ticks.
DRAW_COST = {Kind.LINE: 1, Kind.STEP: 1, Kind.MARKERS: 3, Kind.SEGMENTS: 10}


@dataclass(frozen=True)
class Budget:
    """How much a report may draw, which bounds its size and its load time.

    `total_cost` is in line points (DRAW_COST gives the other kinds' price); points marked
    `keep` come on top. The default keeps a 5 M-packet capture's report at 2.3 MB (limit 25 MB)
    and its load in headless Chromium under 3 s (measurements in docs/report.md).
    """

    total_cost: int = 150_000
    floor_points: int = 500  # no trace is thinned below this: its shape would be lost
    webgl_from_points: int = 5_000  # bars and markers draw with WebGL above this
    open_connections: int = 3  # sections drawn at load; the rest draw when opened


def render(report: Report, budget: Budget = Budget()) -> str:
    """The report as one HTML document."""
    charts: list[tuple[int, int, str, Plot]] = []
    for ci, view in enumerate(report.connections):
        for pi, plot in enumerate(view.plots):
            pair = view.receiver_plots[pi] if pi < len(view.receiver_plots) else None
            charts.append((ci, pi, "sender", plot))
            if pair is not None:
                charts.append((ci, pi, "receiver", pair))
    traces = [t for *_, chart in charts for t in chart.traces]
    targets = iter(
        allocate(
            [len(t) for t in traces],
            budget.total_cost,
            budget.floor_points,
            [DRAW_COST[t.kind] for t in traces],
        )
    )
    shown = raw = 0
    plots_json: list[dict[str, Any]] = []
    figures: dict[tuple[int, int], list[str]] = {}
    for ci, pi, side, chart in charts:
        plot_id = f"plot-{ci}-{pi}-{side}"
        encoded = [_encode_trace(t, next(targets), budget) for t in chart.traces]
        shown += sum(e["n"] for e in encoded)
        raw += sum(e["n_raw"] for e in encoded)
        plots_json.append(_plot_json(plot_id, ci, chart, encoded))
        figures.setdefault((ci, pi), []).append(
            f'<figure class="chart"><figcaption>{_text(chart.title)}</figcaption>'
            f'<div class="plot" id="{plot_id}" style="height:{int(chart.height_px)}px"'
            f' data-traces="{len(chart.traces)}"></div></figure>'
        )
    sections = []
    for ci, view in enumerate(report.connections):
        rows = [
            f'<div class="plot-row n{len(cells)}">{"".join(cells)}</div>'
            for cells in (figures[(ci, pi)] for pi in range(len(view.plots)))
        ]
        sections.append(_section(ci, view, "".join(rows), ci < budget.open_connections))
    payload = {"plots": plots_json}
    note = (
        f"Plots carry {shown:,} of {raw:,} points: each trace is thinned to its budget keeping, "
        "per time slice, the first, last, lowest and highest point; retransmissions, losses, "
        "probes and zero windows are always kept."
    )
    return _PAGE.format(
        csp=CSP,
        title=_text(report.title),
        css=_asset("report.css"),
        header=_header(report),
        overview=_table(report.overview, "overview"),
        findings=(
            _table(report.findings, "findings")
            if report.findings.rows
            else '<p class="empty">No findings.</p>'
        ),
        sections="\n".join(sections) or '<p class="empty">No connections to show.</p>',
        notes="".join(f"<p>{_text(n)}</p>" for n in (*report.notes, note)),
        data=_script_json(payload),
        plotly=_script_code(_asset(PLOTLY_JS)),
        app=_script_code(_asset("report.js")),
    )


def write(report: Report, path: str | os.PathLike[str], budget: Budget = Budget()) -> Path:
    """Render and write atomically: a reader never sees a half-written report."""
    target = Path(path)
    document = render(report, budget)
    with replacing(target) as tmp:
        tmp.write_text(document, encoding="utf-8")
    return target


def _encode_trace(trace: Trace, target: int, budget: Budget) -> dict[str, Any]:
    idx = decimate(trace.x, trace.y, max(target, 4), trace.keep, trace.y_end)
    x = np.asarray(trace.x, dtype=np.float64)[idx]
    out: dict[str, Any] = {
        "name": _text(trace.name),
        "kind": trace.kind.value,
        "color": trace.color,
        "symbol": trace.symbol,
        "width": trace.width,
        "dash": trace.dash,
        "visible": trace.visible,
        "n": len(idx),
        "n_raw": len(trace),
        # plotly simplifies SVG lines to the pixel grid itself, so lines and steps draw faster
        # as SVG than as WebGL (measured: 800 000 points, 0.5 s against 1.2 s); bars and
        # markers, one SVG element each, need WebGL once they are many.
        "gl": trace.kind in (Kind.SEGMENTS, Kind.MARKERS) and len(idx) >= budget.webgl_from_points,
        "x": _encode_time(x),
        "y": _encode_values(np.asarray(trace.y)[idx]),
    }
    if trace.y_end is not None:
        out["y_end"] = _encode_values(np.asarray(trace.y_end)[idx])
    return out


def _encode_time(x: np.ndarray) -> dict[str, Any]:
    """Seconds as a base plus whole microseconds in u4, or as f8 when that cannot hold them."""
    finite = x[np.isfinite(x)]
    if len(finite) == len(x) and len(x) > 0:
        base = float(finite.min())
        ticks = np.rint((x - base) / TIME_QUANTUM_S)
        if ticks.max() < 2**32:
            return _typed(ticks.astype("<u4"), base=base, scale=TIME_QUANTUM_S)
    return _typed(x.astype("<f8"))


def _encode_values(y: np.ndarray) -> dict[str, Any]:
    """Whole numbers as u4/i4 when they fit (sequence numbers stay exact), else f4 or f8."""
    y = np.asarray(y)
    if len(y) and np.all(np.isfinite(y)) and np.array_equal(y, np.rint(y)):
        low, high = float(y.min()), float(y.max())
        if low >= 0 and high < 2**32:
            return _typed(y.astype("<u4"))
        if low >= -(2**31) and high < 2**31:
            return _typed(y.astype("<i4"))
        # Sequence numbers past 4 GB: float64 holds whole numbers exactly up to 2**53.
        return _typed(y.astype("<f8"))
    # Float32 keeps 7 significant digits: enough for rates, RTTs and bytes in flight.
    magnitude = float(np.nanmax(np.abs(y))) if len(y) and np.isfinite(y).any() else 0.0
    return _typed(y.astype("<f4") if magnitude < 1e30 else y.astype("<f8"))


def _typed(a: np.ndarray, base: float = 0.0, scale: float = 1.0) -> dict[str, Any]:
    dtype = {"u4": "u4", "i4": "i4", "f4": "f4", "f8": "f8"}[a.dtype.str[1:]]
    return {
        "dtype": dtype,
        "b64": base64.b64encode(a.tobytes()).decode("ascii"),
        "base": base,
        "scale": scale,
    }


def _plot_json(plot_id: str, connection: int, plot: Plot, traces: list[dict[str, Any]]) -> dict:
    return {
        "id": plot_id,
        "connection": connection,
        "title": _text(plot.title),
        "x_label": _text(plot.x_label),
        "y_label": _text(plot.y_label),
        "shades": [
            {"x0": s.start_s, "x1": s.end_s, "label": _text(s.label), "color": s.color}
            for s in plot.shades
        ],
        "traces": traces,
        "x_range": list(plot.x_range) if plot.x_range else None,
        "y_range": list(plot.y_range) if plot.y_range else None,
    }


def _header(report: Report) -> str:
    inputs = "".join(f"<li><code>{_text(i)}</code></li>" for i in report.inputs)
    return (
        f"<h1>{_text(report.title)}</h1>"
        f'<div class="meta"><span>tracekit {_text(report.version)}</span>'
        f'<ul class="inputs">{inputs}</ul></div>'
    )


def _section(index: int, view: ConnectionView, plots: str, open_: bool) -> str:
    facts = "".join(f"<div><dt>{_text(k)}</dt><dd>{_text(v)}</dd></div>" for k, v in view.facts)
    return (
        f'<details class="connection" id="conn-{index}"{" open" if open_ else ""}>'
        f'<summary><span class="num">#{index + 1}</span> {_text(view.title)}</summary>'
        f'<dl class="facts">{facts}</dl>'
        f'<p class="hint">Drag to zoom (the pan tool beside each plot pans), double-click to '
        f"zoom out: the plots of this connection move together. Click a legend entry to hide "
        f"it.</p>"
        f"{plots}</details>"
    )


def _table(table: Table, name: str) -> str:
    head = "".join(
        f'<th scope="col" tabindex="0" aria-sort="none">{_text(c)}</th>' for c in table.columns
    )
    body = []
    for r, row in enumerate(table.rows):
        link = table.links[r] if table.links is not None else None
        cells = []
        for c, value in enumerate(row):
            shown = _cell_text(value)
            if c == 0 and link is not None:
                shown = f'<a href="#conn-{int(link)}" data-open="conn-{int(link)}">{shown}</a>'
            # Numbers sort by value, not by their formatted text ("1,000" < "200").
            if isinstance(value, int | float) and not isinstance(value, bool):
                cells.append(f'<td class="num" data-n="{float(value)!r}">{shown}</td>')
            else:
                cells.append(f"<td>{shown}</td>")
        body.append(f"<tr>{''.join(cells)}</tr>")
    return (
        f'<table class="sortable {name}"><thead><tr>{head}</tr></thead>'
        f"<tbody>{''.join(body)}</tbody></table>"
    )


def _cell_text(value: Cell) -> str:
    if value is None:
        return ""
    if isinstance(value, float):
        return _text(f"{value:,.6g}" if abs(value) < 1e6 else f"{value:,.0f}")
    if isinstance(value, int) and not isinstance(value, bool):
        return f"{value:,}"
    return _text(str(value))


def _text(value: str) -> str:
    """Escape for HTML text and attributes; plotly's titles and legends read it as HTML too."""
    return html.escape(str(value), quote=True)


def _script_json(payload: Any) -> str:
    """JSON that cannot end its <script> element or open an HTML comment inside it."""
    text = json.dumps(payload, separators=(",", ":"), allow_nan=False)
    return _script_text(text)


def _script_text(text: str) -> str:
    # In a <script> the parser only looks for "</script" and "<!--"; escaping every "<" (and
    # the line separators JSON allows but older JavaScript did not) rules both out.
    return text.replace("<", "\\u003c").replace("\u2028", "\\u2028").replace("\u2029", "\\u2029")


def _script_code(code: str) -> str:
    """JavaScript source for an inline <script>: "<" cannot be escaped in code, only in strings."""
    # "<\/" means "</" in every JavaScript string and regular expression; plotly.js has neither
    # "</script" nor "<!--" today, and this keeps a future version from ending the element.
    return code.replace("</script", "<\\/script").replace("<!--", "<\\!--")


def _asset(name: str) -> str:
    return resources.files("tracekit.report").joinpath(name).read_text(encoding="utf-8")


_PAGE = """<!DOCTYPE html>
<html lang="en">
<head>
<meta charset="utf-8">
<meta http-equiv="Content-Security-Policy" content="{csp}">
<meta name="viewport" content="width=device-width, initial-scale=1">
<meta name="generator" content="tracekit">
<title>{title}</title>
<style>{css}</style>
</head>
<body>
<header>{header}</header>
<main>
<section><h2>Connections</h2>{overview}</section>
<section><h2>Findings</h2>{findings}</section>
<section><h2>Per connection</h2>{sections}</section>
</main>
<footer>{notes}</footer>
<script type="application/json" id="tk-data">{data}</script>
<script>{plotly}</script>
<script>{app}</script>
</body>
</html>
"""
