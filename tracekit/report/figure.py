"""A report `Plot` as a plotly figure, for notebooks: drawn as report.js draws it in the page.

The notebook API (`tracekit.api`) and the HTML report take their plots from one builder
(`tracekit.report.build`); this is the one place a `Plot` becomes plotly graph objects in
Python, trace by trace as `plotlyTrace` in report.js does, so the two cannot drift apart. Every
point is drawn: a notebook has no page budget to thin to.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import numpy as np

from tracekit.report.model import Kind, Plot, Shade, Trace

if TYPE_CHECKING:
    import plotly.graph_objects as go


def _trace(trace: Trace) -> dict[str, Any]:
    """One trace's plotly attributes (report.js: plotlyTrace)."""
    trace = trace.whole()
    x = np.asarray(trace.x, np.float64)
    y = np.asarray(trace.y, np.float64)
    out: dict[str, Any] = {
        "name": trace.name,
        "visible": True if trace.visible else "legendonly",
        "hoverlabel": {"namelength": -1},
    }
    line: dict[str, Any] = {"color": trace.color, "width": trace.width, "dash": trace.dash}
    if trace.stack:
        out.update(stackgroup=trace.stack, fillcolor=trace.color)
    if trace.kind is Kind.SEGMENTS:
        assert trace.y_end is not None  # Trace checks it for a segments trace
        # A bar from y to y_end: two points and a gap (NaN) each, a tick at each end.
        n = len(x)
        bx, by = np.full(3 * n, np.nan), np.full(3 * n, np.nan)
        bx[0::3], bx[1::3] = x, x
        by[0::3], by[1::3] = y, np.asarray(trace.y_end, np.float64)
        out.update(
            x=bx,
            y=by,
            mode="lines+markers",
            line=line,
            marker={
                "symbol": "line-ew",
                "size": 6,
                "color": trace.color,
                "line": {"color": trace.color, "width": max(1.0, trace.width - 0.5)},
            },
            connectgaps=False,
        )
    elif trace.kind is Kind.STEP:
        out.update(x=x, y=y, mode="lines", line={**line, "shape": "hv"})
    elif trace.kind is Kind.LINE:
        out.update(x=x, y=y, mode="lines", line=line)
    else:
        out.update(
            x=x,
            y=y,
            mode="markers",
            marker={
                "color": trace.color,
                "symbol": trace.symbol,
                "size": 7,
                "line": {"color": trace.color, "width": 1.2},
            },
        )
    return out


# report.js: PLACE_SHARE and BAND_PX.
_PLACE_SHARE = 0.5
_BAND_PX = 5


def _covers_most(shade: Shade, view: tuple[float, float]) -> bool:
    """Whether a finding covers half the view or more (more of the view inside it than out)."""
    lo, hi = view
    return min(shade.end_s, hi) - max(shade.start_s, lo) >= _PLACE_SHARE * (hi - lo)


def to_figure(plot: Plot) -> go.Figure:
    """The plotly figure of one report plot: its traces in order, its findings' time ranges
    shaded, its axes labelled and opened on the plot's initial ranges."""
    import plotly.graph_objects as go

    # WebGL for big traces: SVG of a hundred thousand bars stalls a notebook, which draws every
    # point (the report's page thins each view to its budget instead).
    big = sum(len(t) for t in plot.traces) >= 20_000
    scatter = go.Scattergl if big else go.Scatter
    fig = go.Figure([scatter(**_trace(t)) for t in plot.traces])
    row = 0
    for shade in plot.shades:
        if plot.x_range is not None and _covers_most(shade, plot.x_range):
            # A band along the time axis, as report.js draws a finding that covers half the
            # view or more: a fill there would mark no place, only tint the data.
            fig.add_shape(
                type="rect",
                xref="x",
                yref="paper",
                x0=shade.start_s,
                x1=shade.end_s,
                ysizemode="pixel",
                yanchor=0,
                y0=row * (_BAND_PX + 1),
                y1=row * (_BAND_PX + 1) + _BAND_PX,
                fillcolor=shade.color,
                line_width=0,
                layer="below",
                name=shade.label,
            )
            row += 1
            continue
        fig.add_vrect(
            x0=shade.start_s,
            x1=shade.end_s,
            fillcolor=shade.color,
            line_width=0,
            layer="below",
            annotation_text=None,
            name=shade.label,
        )
    fig.update_layout(
        title=plot.title,
        xaxis_title=plot.x_label,
        yaxis_title=plot.y_label,
        height=plot.height_px,
        template="plotly_white",
    )
    if plot.x_range is not None:
        fig.update_xaxes(range=list(plot.x_range))
    if plot.y_range is not None:
        fig.update_yaxes(range=list(plot.y_range))
    return fig
