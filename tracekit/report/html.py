"""Render a report view model as one self-contained HTML file that opens offline.

The page inlines plotly.js once, its own stylesheet and script, and the data: every point of
each trace, sorted by time, as compressed little-endian typed arrays (times as whole microseconds
from the trace's first point, whole numbers as deltas, each packet's frame number for its
hover), base64 in a JSON element. The page thins each view to a point budget itself
(report.js), so a zoom into any window draws every point in it up to that budget. A
Content-Security-Policy forbids every fetch, so nothing can reach the network even by mistake.
"""

from __future__ import annotations

import base64
import hashlib
import html
import json
import os
import zlib
from collections import deque
from collections.abc import Callable, Iterator
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass, replace
from importlib import resources
from pathlib import Path
from typing import Any, cast

import numpy as np

from tracekit.core.atomic import replacing
from tracekit.core.kernels import jit
from tracekit.report.decimate import choose_among, decimate, keep_chosen, never_back
from tracekit.report.model import (
    Cause,
    Cell,
    ConnectionView,
    Deferred,
    Encoded,
    FindingView,
    Kind,
    Plot,
    Population,
    Report,
    Table,
    Trace,
    Verdict,
)

# plotly.js's basic partial bundle (scatter, bar, pie: SVG only), vendored from the npm registry's
# plotly.js-basic-dist-min 3.7.0 (MIT, see plotly-basic.LICENSE). Starting plotly.js is the
# first thing a reader waits for, and its time grows with what the bundle holds: in headless
# Chromium here the full bundle that the plotly Python package ships (4.8 MB) took 1.7 s, the
# gl2d bundle (scatter and WebGL's scattergl, 1.6 MB) 0.75 s, this one (1.1 MB) 0.25 s. WebGL
# would not pay that back on a machine without a GPU: in SwiftShader a WebGL plot took longer
# to draw than the same plot in SVG.
#
# Three patches, all in scatter's plot, none changing what is drawn. report.js draws every bar
# of a segments trace, and every marker, as a piece of one filled path ("toself"), so a trace
# holds thousands of gap-separated pieces, and plotly did work for each that nothing used:
# - (search `.js-line").data(`) it made an SVG line element for every piece, styled it, and
#   deleted it at the end when the trace draws no line: in headless Chromium here that was
#   half of a TSG's drawing time. The patch makes them only for a trace that draws its line;
#   the fill it builds from the same pieces is unchanged.
# - (search `V=d._nexttrace?`) it built every piece's path a second time, reversed, which only
#   a next trace filled "tonext" to this one reads. The patch builds it only for such a trace.
# - (search `ye=d._nexttrace||`) it built a hit-test polygon for every piece of a "toself"
#   fill, which only hovering the fill (hoveron "fills") or a next "tonext" fill reads; the
#   page's traces hover their points. The patch builds them only when one of those reads them.
# The last two took about a tenth of the drawing time of the five-stream capture's 22 plots.
PLOTLY_JS = "plotly-basic.min.js"

# V8's explicit compile hint (its first line): compile every function of plotly.js with the
# script, on the thread that compiles it off the main thread, instead of lazily, on the main
# thread, the first time each is called. plotly's first plot calls over a thousand of them:
# in headless Chromium here that moved 0.2 s of compiling off the path to the first plot.
COMPILE_HINT = "//# allFunctionsCalledOnLoad\n"

# Times are drawn to the microsecond: finer than any gap a plot can show, and an offset from the
# trace's first point then fits an unsigned 32-bit integer for over an hour of capture.
TIME_QUANTUM_S = 1e-6

# The page starts plotly.js from a blob: URL it makes of the inlined text (report.js); plotly.js
# injects <style> elements and exports images as data: and blob: URLs. Everything else is
# refused, network and eval included.
CSP = (
    "default-src 'none'; script-src 'unsafe-inline' blob:; style-src 'unsafe-inline'; "
    "img-src data: blob:; font-src data:"
)


# What a point costs to draw, relative to a point of a line, measured in headless Chromium here
# (plotly 3.7, SVG) with each marker and each segment an SVG element of its own: 4,000 markers
# drew in 255 ms, 4,000 segments in 300 ms, a line of 40,000 points (plotly simplifies it to the
# pixel grid, one element) in under 90 ms. report.js draws every bar of a trace, with its end
# ticks, and every marker of a trace as outlines in one filled path (4 to 26 points each), which
# costs less: these prices err on the side of drawing in time.
DRAW_COST = {Kind.LINE: 1, Kind.STEP: 1, Kind.MARKERS: 9, Kind.SEGMENTS: 10}


@dataclass(frozen=True)
class Budget:
    """How much a report may carry and each view may draw: its size and its drawing time.

    `view_cost` is what one plot draws per view, in line points (DRAW_COST gives the other
    kinds' price), shared among its traces; a trace of marks that must not vanish (`Trace.keep`)
    draws up to `marks_points` of its points in view before the rest is shared, and says so in
    the plot's note when it has more. `max_bytes` caps the compressed data: a report whose traces
    exceed it carries its biggest traces thinned (each time slice's extremes and every kept
    point), and says which in its footer. A trace longer than `level_views` views' worth of
    points also carries an opening level: those points M4-thinned (every kept point kept), which
    is all a view of the whole trace draws from, so a plot opens without decoding or thinning
    its millions of points; a zoom into part of it reads them all. Measurements are in
    docs/report.md.
    """

    # 2,000 segments or 2,200 markers, drawn in about 0.3 s here: more than three per pixel
    # column of a plot as wide as a laptop's screen, so M4's extremes outline every run as all
    # its points would, and a 10 ms window of a 1 Gbit/s transfer (about 860 segments) is whole.
    view_cost: int = 20_000
    # One per pixel column and more: half the view's budget in a trace's markers, at most.
    marks_points: int = 1_000
    floor_points: int = 500  # no trace is thinned below this in a view: its shape would be lost
    open_connections: int = 3  # sections drawn at load; the rest draw when opened
    max_bytes: int = 20_000_000
    # A view thins the level again: twice what a view can draw of the trace leaves it M4's
    # choice among twice the slices, so the opening draws the extremes a thinning of every point
    # would, to within half a slice.
    level_views: int = 2

    def __post_init__(self) -> None:
        if self.view_cost < 100 or self.marks_points < 1 or self.floor_points < 4:
            raise ValueError("view_cost >= 100, marks_points >= 1 and floor_points >= 4")
        if self.level_views < 1:
            raise ValueError("level_views >= 1")

    def level_points(self, kind: Kind, marks: bool) -> int:
        """The points of a trace's opening level: `level_views` times what one view draws."""
        drawn = self.marks_points if marks else self.view_cost // DRAW_COST[kind]
        return max(self.level_views * drawn, self.floor_points)


# Over the size limit, a trace is halved until it holds no more than this many points.
FEWEST_THINNED = 4_000


def render(
    report: Report, budget: Budget = Budget(), after_plot: Callable[[], None] | None = None
) -> str:
    """The report as one HTML document. `after_plot` is called once each plot is encoded and
    its arrays let go (a command returns the freed memory to the system there:
    `cli/memory.py`)."""
    charts: list[tuple[int, int, str, Plot | Deferred | Encoded]] = []
    for ci, view in enumerate(report.connections):
        for pi, plot in enumerate(view.plots):
            pair = view.receiver_plots[pi] if pi < len(view.receiver_plots) else None
            charts.append((ci, pi, "sender", plot))
            if pair is not None:
                charts.append((ci, pi, "receiver", pair))
    if report.overview_plot is not None:
        # Every drawn connection's throughput, stacked; it belongs to no one connection.
        charts.append((-1, 0, "overview", report.overview_plot))
    carried = _carry([chart for *_, chart in charts], budget, after_plot)
    plots_json: list[dict[str, Any]] = []
    figures: dict[tuple[int, int], list[str]] = {}
    for (ci, pi, side, _), (chart, traces, *columns_traces) in zip(charts, carried, strict=True):
        plot_id = f"plot-{ci}-{pi}-{side}" if ci >= 0 else "plot-overview"
        plots_json.append(_plot_json(plot_id, ci, chart, *columns_traces))
        figures.setdefault((ci, pi), []).append(
            f'<figure class="chart"><figcaption>{_text(chart.title)}</figcaption>'
            f'<div class="plot" id="{plot_id}" style="height:{int(chart.height_px)}px"'
            f' data-traces="{traces}"></div>'
            f'<p class="view-note" id="{plot_id}-note" aria-live="polite"></p></figure>'
        )
    traces_json = [t for p in plots_json for t in p["traces"]]
    shown = sum(t["n"] for t in traces_json)
    raw = sum(t["n_raw"] for t in traces_json)
    size = sum(len(c["b64"]) for p in plots_json for c in p["columns"])
    # What an opening view needs stays in the data element before the scripts; every point of a
    # trace that has a level follows them, one element per column, read only for a zoom: the
    # first plots draw while the browser is still parsing those.
    later = []
    for pi, p in enumerate(plots_json):
        for ci, c in enumerate(p["columns"]):
            if not c.pop("opening"):
                c["el"] = f"tk-col-{pi}-{ci}"
                later.append(
                    f'<script type="application/octet-stream" id="{c["el"]}">'
                    f"{_script_text(c.pop('b64'))}</script>"
                )
    sections = []
    for ci, view in enumerate(report.connections):
        rows = [
            f'<div class="plot-row n{len(cells)}">{"".join(cells)}</div>'
            for cells in (figures[(ci, pi)] for pi in range(len(view.plots)))
        ]
        sections.append(_section(ci, view, "".join(rows), ci < budget.open_connections))
    payload = {
        "plots": plots_json,
        "budget": {
            "view_cost": budget.view_cost,
            "marks_points": budget.marks_points,
            "floor_points": budget.floor_points,
            "draw_cost": {k.value: v for k, v in DRAW_COST.items()},
        },
    }
    note = (
        f"The page carries {shown:,} of {raw:,} points ({size / 1e6:.1f} MB compressed). Each "
        f"view of a plot draws every point in view up to {budget.view_cost:,} line points' worth "
        f"(a marker costs {DRAW_COST[Kind.MARKERS]}, a bar {DRAW_COST[Kind.SEGMENTS]}); past "
        "that, each time slice's first, last, lowest and highest point, and the note under the "
        "plot says how many are shown of how many."
    )
    if shown < raw:
        thinned = sorted({html.unescape(t["name"]) for t in traces_json if t["n"] < t["n_raw"]})
        note += (
            f" Over the {budget.max_bytes / 1e6:g} MB data limit, these traces are carried "
            f"thinned (each time slice's extremes and every kept mark): {', '.join(thinned)}."
        )
    return _PAGE.format(
        csp=CSP,
        title=_text(report.title),
        css=_asset("report.css"),
        header=_header(report),
        front=_front(report, "".join(figures.get((-1, 0), []))),
        overview=_connections_table(report),
        findings=_findings_table(report.findings) if report.findings.rows else "",
        sections="\n".join(sections) or '<p class="empty">No connections to show.</p>',
        notes="".join(f"<p>{_text(n)}</p>" for n in (*report.notes, note)),
        data=_script_json(payload),
        plotly=COMPILE_HINT + _script_code(_asset(PLOTLY_JS)),
        start=_START_PLOTLY,
        app=_script_code(_asset("report.js")),
        later="\n".join(later),
    )


def write(
    report: Report,
    path: str | os.PathLike[str],
    budget: Budget = Budget(),
    after_plot: Callable[[], None] | None = None,
) -> Path:
    """Render and write atomically: a reader never sees a half-written report. `after_plot` as
    `render` takes it."""
    target = Path(path)
    document = render(report, budget, after_plot)
    with replacing(target) as tmp:
        tmp.write_text(document, encoding="utf-8")
    return target


def _carry(
    plots: list[Plot | Deferred | Encoded],
    budget: Budget,
    after_plot: Callable[[], None] | None = None,
) -> list[tuple[Plot, int, list[dict[str, Any]], list[dict[str, Any]]]]:
    """Each plot without its traces, how many traces it has, and its encoded columns and
    traces: every point, or, over `max_bytes`, the biggest traces thinned by halves (M4 keeps
    each slice's extremes and every kept point) until the data fits.

    The plots are drawn (`Deferred.drawn`) and encoded one at a time, and a plot's arrays are
    let go once it is encoded (then `after_plot` is called): only the encodings, a few
    megabytes, add up."""
    with _Deflater() as deflater:
        return _carried(plots, budget, deflater, after_plot or _nothing)


def _nothing() -> None:
    """No step between plots."""


def _carried(
    plots: list[Plot | Deferred | Encoded],
    budget: Budget,
    deflater: _Deflater,
    after_plot: Callable[[], None],
) -> list[tuple[Plot, int, list[dict[str, Any]], list[dict[str, Any]]]]:
    """`_carry`, its columns deflated by `deflater`."""
    counts: list[list[int]] = []
    # Per trace, whether it can be thinned (not every point marked to keep) and how many
    # values a point carries (a bar's top too): what the halving below chooses by.
    thinnable: list[list[tuple[bool, int]]] = []
    shells: list[tuple[Plot, int]] = []
    per_trace: list[list[_Encoded]] = []
    encoded = []
    # Each halved trace's encodings at every count it may be halved to, from one drawing of its
    # plot: a plot is drawn again once per trace thinned, not once per halving (a trace of
    # millions of points is halved several times, and drawing its plot is most of the cost).
    # A plot encoded beforehand brings them along.
    thinner: dict[tuple[int, int], dict[int, _Encoded]] = {}
    for pi, source in enumerate(plots):
        if isinstance(source, Encoded):
            counts.append(list(source.counts))
            thinnable.append(list(source.thinnable))
            shells.append((source.shell, len(source.counts)))
            levels = [cast(dict[int, _Encoded], dict(level)) for level in source.levels]
            per_trace.append([level.pop(n) for level, n in zip(levels, counts[-1], strict=True)])
            thinner.update({(pi, ti): level for ti, level in enumerate(levels) if level})
            encoded.append(_combined(per_trace[-1]))
            continue
        plot = source.drawn()
        counts.append([len(t) for t in plot.traces])
        thinnable.append([_thinning(t) for t in plot.traces])
        shells.append((replace(plot, traces=()), len(plot.traces)))
        # A trace's encoding depends on itself and its target only: after a halving, the one
        # trace it touched is encoded again, not every trace of its plot.
        per_trace.append(_encode_traces(list(plot.traces), counts[-1], budget, deflater))
        encoded.append(_combined(per_trace[-1]))
        del plot
        after_plot()
    while True:
        sizes = [(len(c["b64"]), pi) for pi, (columns, _) in enumerate(encoded) for c in columns]
        if sum(size for size, _ in sizes) <= budget.max_bytes:
            break
        # Halve the biggest trace that can still be thinned (not below a few thousand points).
        candidates = [
            (counts[pi][ti] * values, pi, ti)
            for pi, kinds in enumerate(thinnable)
            for ti, (thins, values) in enumerate(kinds)
            if counts[pi][ti] > FEWEST_THINNED and thins
        ]
        if not candidates:
            break
        _, pi, ti = max(candidates)
        counts[pi][ti] //= 2
        if (pi, ti) not in thinner:
            source = plots[pi]
            assert not isinstance(source, Encoded)  # it brought every count it may be halved to
            trace = source.drawn().traces[ti]
            thinner[(pi, ti)] = _thinned(trace, counts[pi][ti], budget, deflater)
            del trace
        per_trace[pi][ti] = thinner[(pi, ti)].pop(counts[pi][ti])
        encoded[pi] = _combined(per_trace[pi])
        after_plot()
    if any(isinstance(c["b64"], _Withheld) for columns, _ in encoded for c in columns):
        raise AssertionError("a withheld encoding was carried")  # `_withheld` says why not
    return [(*shell, *enc) for shell, enc in zip(shells, encoded, strict=True)]


def _thinning(trace: Trace) -> tuple[bool, int]:
    """Whether the page may thin the trace (not every point marked to keep), and how many
    values a point carries (a bar's top too)."""
    return not trace.all_kept(), 3 if trace.y_end is not None else 2


def _thinned(
    trace: Trace, first: int, budget: Budget, deflater: _Deflater, withhold: bool = False
) -> dict[int, _Encoded]:
    """The trace's encodings at each count it may be halved to, from `first` (its count halved
    once) down to the first at or below FEWEST_THINNED (`withhold` as `_encode_traces`)."""
    halvings = [first]
    while halvings[-1] > FEWEST_THINNED:
        halvings.append(halvings[-1] // 2)
    # Each halving is M4's choice among the last one's points, not among every point: the
    # trace is read whole once, and each later halving costs its own points, so a trace of n
    # points is thinned in time linear in n, not n log n. The positions are compacted in
    # place, each count's encoding done (its columns deflated) before the next overwrites them.
    x = np.asarray(trace.x, dtype=np.float64)
    at: np.ndarray | None = None
    encodings = {}
    for target in halvings:
        if at is None:
            at = decimate(x, trace.y, max(target, 4), trace.keep, trace.y_end, trace.rows)
        else:
            chosen = choose_among(x, trace.y, max(target, 4), at, trace.keep, trace.y_end)
            at = keep_chosen(at, chosen)
        encodings[target] = _encode_traces([trace], [target], budget, deflater, withhold, [at])[0]
    return encodings


def encode(
    plot: Plot | Deferred,
    budget: Budget = Budget(),
    after_part: Callable[[], None] | None = None,
) -> Encoded:
    """The plot encoded as `render` carries it, at every point count the page may thin each of
    its traces to (`Encoded`): the tables it is drawn from can be let go before the page is
    made. The page is the same as of the plot itself, given the same budget. `after_part` is
    called once every trace is encoded whole, then once each trace's thinnings are (a command
    returns the freed memory to the system there, as `render`'s `after_plot`)."""
    step = after_part or _nothing
    drawn = plot.drawn()
    counts = tuple(len(t) for t in drawn.traces)
    thinnable = tuple(_thinning(t) for t in drawn.traces)
    levels: list[dict[int, _Encoded]] = []
    with _Deflater() as deflater:
        whole = _encode_traces(list(drawn.traces), list(counts), budget, deflater, True)
        step()
        for trace, n, (thins, _), enc in zip(drawn.traces, counts, thinnable, whole, strict=True):
            more = (
                _thinned(trace, n // 2, budget, deflater, True)
                if n > FEWEST_THINNED and thins
                else {}
            )
            levels.append({n: enc, **more})
            if more:
                step()
    return Encoded(replace(drawn, traces=()), counts, thinnable, tuple(levels))


# A trace's encoding: its entry, which names its columns by their index in its list of columns.
_Encoded = tuple[dict[str, Any], list[dict[str, Any]]]


def _encode_traces(
    traces: list[Trace],
    targets: list[int],
    budget: Budget,
    deflater: _Deflater,
    withhold: bool = False,
    thinned: list[np.ndarray] | None = None,
) -> list[_Encoded]:
    """Each trace's entry and its columns, each column marked `opening` when an opening view
    reads it (a level's, or a trace's without one); `_combined` makes them a plot's. With
    `withhold`, the text of an encoding the page can never carry is withheld (`_withheld`).
    `thinned` gives each trace's points at its target, as decimate chose them, where known."""
    named: list[dict[str, Any]] = []

    def column(enc: dict[str, Any], opening: bool) -> int:
        named.append({**enc, "opening": opening})
        deflater.deflate(named[-1])
        return len(named) - 1

    out = []
    for k, (trace, target) in enumerate(zip(traces, targets, strict=True)):
        n = len(trace)
        x = np.asarray(trace.x, dtype=np.float64)
        rows = trace.rows
        # Millions of points are read through their positions a piece at a time: no gathered
        # copy of a column. Positions in row order (a mask's, a thinning's in time order) that
        # mark a good part of the rows are read as a mask over each piece's span of rows, which
        # is faster than gathering them; sparser ones are gathered, which reads only them.
        idx: np.ndarray | None
        span_mask: np.ndarray | None = None
        if target < n:
            idx = (
                decimate(x, trace.y, max(target, 4), trace.keep, trace.y_end, rows)
                if thinned is None
                else thinned[k]
            )
            if len(idx) > PIECE and len(idx) * _DENSE_ENOUGH >= n:
                span_mask = _mask_if_rising(idx, len(x))
        elif n > 1 and not never_back(x, rows):
            # Sorted by time, the page finds a view's points by binary search.
            idx = _stable_order(x, rows)
        else:
            idx = None
        pick = _carrier(n, rows, idx, span_mask)

        x_carried, y = pick(x), pick(trace.y)
        y_end = None if trace.y_end is None else pick(trace.y_end)
        keep = None if trace.keep is None else pick(trace.keep)
        frame = None if trace.frame is None else pick(trace.frame)
        marks = n > 0 and trace.all_kept()
        level_n = budget.level_points(trace.kind, marks)
        has_level = len(y) > level_n
        entry: dict[str, Any] = {
            "name": _text(trace.name),
            "kind": trace.kind.value,
            "color": trace.color,
            "symbol": trace.symbol,
            "width": trace.width,
            "dash": trace.dash,
            "visible": trace.visible,
            "fit": trace.fit,
            "stack": trace.stack,
            # Every point marked to keep: a trace of marks, counted in every view.
            "marks": marks,
            "n": len(y),
            "n_raw": n,
            **_encode_arrays(
                column, not has_level, x_carried, y, y_end, None if marks else keep, frame
            ),
            "level": None,
        }
        if has_level:
            # A trace of marks is thinned in a view like any other (its legend counts them),
            # so its level need not hold them all. The carried points are in time order (ties
            # in row order): thinned as the rows they came from, the same points are chosen
            # in the same order, with no copy of the carried columns.
            level_keep = None if marks or trace.keep is None else trace.keep
            if target < n:
                # Among the thinned points, which are in x order: M4 reads those alone.
                assert idx is not None
                among = choose_among(x, trace.y, level_n, idx, level_keep, trace.y_end)
                chosen = idx if among is None else idx[among]
            else:
                carried = rows
                if idx is not None:
                    carried = np.zeros(len(x), dtype=np.bool_)
                    carried[idx] = True
                chosen = decimate(x, trace.y, level_n, level_keep, trace.y_end, carried)
                del carried

            def at(a: np.ndarray | None, chosen: np.ndarray = chosen) -> np.ndarray | None:
                return None if a is None else np.asarray(a)[chosen]

            entry["level"] = {
                "n": len(chosen),
                **_encode_arrays(
                    column,
                    True,
                    x[chosen],
                    np.asarray(trace.y)[chosen],
                    at(trace.y_end),
                    None if marks else at(trace.keep),
                    at(trace.frame),
                ),
            }
        if withhold and target > FEWEST_THINNED and not trace.all_kept():
            deflater.finish()
            _withheld(named, budget.max_bytes)
        out.append((entry, named))
        named = []
    deflater.finish()
    return out


class _Withheld(str):
    """In a column's text's place, where the page can never carry it: as long as the text (the
    sizes `_carried` adds up), its value a digest of it (what `_combined` tells equal columns
    by)."""

    length: int

    def __new__(cls, text: str) -> _Withheld:
        digest = super().__new__(cls, "withheld:" + hashlib.sha256(text.encode()).hexdigest())
        digest.length = len(text)
        return digest

    def __len__(self) -> int:
        return self.length


def _withheld(named: list[dict[str, Any]], max_bytes: int) -> None:
    """Withhold the texts of one trace's encoding at one count (its columns, deflated) where
    they alone, each distinct column once, exceed `max_bytes`. Of a trace that may be thinned
    and holds more than FEWEST_THINNED points, such an encoding is never carried: while it is
    the trace's, the data exceed the limit and the trace may still be halved, so `_carried`
    halves on; it reads only the texts' lengths and equality until then. An encoding made
    ahead of the page (`encode`) at millions of points is tens of megabytes a count."""
    distinct = {str(c["b64"]): len(c["b64"]) for c in named}
    if sum(distinct.values()) > max_bytes:
        for c in named:
            c["b64"] = _Withheld(c["b64"])


def _combined(traces: list[_Encoded]) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """A plot's columns (an array that several traces share, such as the ACK line's and the
    window edge's times, is carried once) and its traces, which name their columns by index.
    The traces' encodings keep their own indices; a column equal to an earlier one is left
    holding that one's text, so that the text is held once."""
    # Columns of the same encoding (the same deflated text) are one, at the first one's place,
    # read by every view the others were.
    columns: list[dict[str, Any]] = []
    seen: dict[str, int] = {}
    out = []
    for entry, named in traces:
        place = []
        for col in named:
            bare = {k: v for k, v in col.items() if k != "opening"}
            key = json.dumps(bare, sort_keys=True)
            if key not in seen:
                seen[key] = len(columns)
                columns.append({**bare, "opening": col["opening"]})
            else:
                col["b64"] = columns[seen[key]]["b64"]
            columns[seen[key]]["opening"] |= col["opening"]
            place.append(seen[key])
        entry = {**entry, "level": None if entry["level"] is None else {**entry["level"]}}
        for refs in (entry, entry["level"]):
            for name in _COLUMN_REFS if refs is not None else ():
                if refs[name] is not None:
                    refs[name] = place[refs[name]]
        out.append(entry)
    return columns, out


# The keys by which a trace and its level name their columns (`_encode_arrays`).
_COLUMN_REFS = ("x", "y", "y_end", "keep", "frame")


class _Picked:
    """A column's values at positions `at`, in that order, read a piece at a time (`values[a:b]`
    is a new array of those positions' values): what a trace carries of millions of points is
    encoded without a gathered copy of each of its columns. With `mask` (the positions marked,
    as long as the column; `at` then rises), a piece is the marked rows of its span of rows."""

    def __init__(self, values: np.ndarray, at: np.ndarray, mask: np.ndarray | None = None) -> None:
        self.values, self.at, self.mask, self.dtype = values, at, mask, values.dtype

    def __len__(self) -> int:
        return len(self.at)

    def __getitem__(self, key: slice) -> np.ndarray:
        at = self.at[key]
        if self.mask is None or len(at) == 0:
            return np.asarray(self.values[at])
        lo, hi = int(at[0]), int(at[-1]) + 1
        return np.asarray(self.values[lo:hi][self.mask[lo:hi]])


def _carrier(
    n: int, rows: np.ndarray | None, idx: np.ndarray | None, span_mask: np.ndarray | None
) -> Callable[[np.ndarray], Carried]:
    """How a trace's column of n points is carried: its points at positions `idx` (None: every
    point, the rows `rows` marks or all of them), millions a piece at a time, else copied out."""
    if idx is None and rows is not None and n > PIECE:
        # Every marked row, in row order: read through the mask alone, with no positions.
        starts = _piece_starts(rows)
        return lambda a: _Marked(np.asarray(a), rows, n, starts)
    if idx is None:
        return np.asarray if rows is None else lambda a: np.asarray(a)[rows]
    if len(idx) > PIECE:
        return lambda a: _Picked(np.asarray(a), idx, span_mask)
    return lambda a: np.asarray(a)[idx]


class _Marked:
    """A column's values at the `n` rows `mask` marks, in row order, read a piece at a time
    (`values[a:b]`, as `_Picked`) with no positions of them: `starts` holds the row of every
    PIECE-th marked row (`_piece_starts`), and a piece is the marked rows of its span of rows."""

    def __init__(self, values: np.ndarray, mask: np.ndarray, n: int, starts: np.ndarray) -> None:
        self.values, self.mask, self.n, self.starts = values, mask, n, starts
        self.dtype = values.dtype

    def __len__(self) -> int:
        return self.n

    def _row(self, k: int) -> int:
        """The row of the k-th marked row (0 <= k < n)."""
        piece, within = divmod(k, PIECE)
        lo = int(self.starts[piece])
        if within == 0:
            return lo
        hi = int(self.starts[piece + 1]) if piece + 1 < len(self.starts) else len(self.mask)
        return lo + int(np.flatnonzero(self.mask[lo:hi])[within])

    def __getitem__(self, key: slice) -> np.ndarray:
        a, b, step = key.indices(self.n)
        if step != 1:
            raise ValueError("a marked column is read in runs")
        if b <= a:
            return self.values[0:0].copy()
        lo, hi = self._row(a), self._row(b - 1) + 1
        return np.asarray(self.values[lo:hi][self.mask[lo:hi]])


def _piece_starts(mask: np.ndarray) -> np.ndarray:
    """The row of every PIECE-th row the mask marks (the 0th, the PIECE-th, ...), read a
    stretch of rows at a time: no positions of every marked row."""
    starts: list[np.ndarray] = []
    seen = 0  # marked rows before the stretch
    for lo in range(0, len(mask), PIECE):
        at = np.flatnonzero(mask[lo : lo + PIECE])
        # The marked rows in this stretch whose rank is a multiple of PIECE.
        first = -seen % PIECE
        starts.append(at[first::PIECE] + lo)
        seen += len(at)
    return np.concatenate(starts) if starts else np.zeros(0, dtype=np.int64)


# Positions that mark at least a quarter of a trace's rows are read through a mask of its rows
# (`_mask_if_rising`); sparser ones are gathered. Filtering a span reads every row of it, and
# gathering only the positions but each at a few times the cost of a row read in turn.
_DENSE_ENOUGH = 4


def _mask_if_rising(at: np.ndarray, n: int) -> np.ndarray | None:
    """A mask of n rows marking positions `at`, where they rise (else None)."""
    if not bool(np.all(at[1:] > at[:-1])):
        return None
    mask = np.zeros(n, dtype=np.bool_)
    mask[at] = True
    return mask


# A column as the encoders read it: an array, or its values at some positions.
Carried = np.ndarray | _Picked | _Marked


def _whole(values: Carried) -> np.ndarray:
    """Every value of a carried column, as one array."""
    return values if isinstance(values, np.ndarray) else values[0 : len(values)]


def _stable_order(x: np.ndarray, rows: np.ndarray | None) -> np.ndarray:
    """Positions of x's points (the rows `rows` marks, or all) by time, ties in row order, as a
    stable sort of the points alone orders them."""
    if rows is None:
        return np.argsort(x, kind="stable")
    at = np.flatnonzero(rows)
    return at[np.argsort(x[at], kind="stable")]


def _encode_arrays(
    column: Any,
    opening: bool,
    x: Carried,
    y: Carried,
    y_end: Carried | None,
    keep: Carried | None,
    frame: Carried | None,
) -> dict[str, int | None]:
    """Points sorted by time as column indices: x, y, a bar's top, the kept points' indices,
    each packet's frame number (None where the trace has none)."""
    refs: dict[str, int | None] = {
        "x": column(_encode_time(x), opening),
        "y": column(_encode_values(y), opening),
        "y_end": None,
        "keep": None,
        "frame": None,
    }
    if y_end is not None:
        # Bars carry their heights: a run of full-sized segments compresses to nothing.
        refs["y_end"] = column(_encode_values(y_end, y), opening)
    if keep is not None:
        kept = np.flatnonzero(_whole(keep))
        if len(kept):
            refs["keep"] = column(_encode_values(kept), opening)
    if frame is not None:
        # Packets in capture order: frame numbers step by small amounts, as deltas nearly
        # nothing once deflated.
        refs["frame"] = column(_encode_values(frame), opening)
    return refs


# Columns are encoded in pieces of this many values: a trace of ten million points then makes
# no temporary as long as itself (an int64 or float64 copy of a column is 80 MB), only pieces of
# 8 MB; deflate and base64 read the same pieces in turn.
PIECE = 1 << 20

# What a column's values are made of, piece by piece: `values(start, stop)` is a new array of
# those values, the same numbers the whole column's computation gives (elementwise).
Values = Callable[[int, int], np.ndarray]


def _spans(n: int) -> range:
    return range(0, n, PIECE)


def _every(n: int, test: Callable[[int, int], bool]) -> bool:
    """Whether `test` holds for every piece of n values."""
    return all(test(start, min(start + PIECE, n)) for start in _spans(n))


def _largest(n: int, value: Callable[[int, int], float]) -> float:
    """The largest `value` over the pieces of n values (n > 0)."""
    return max(value(start, min(start + PIECE, n)) for start in _spans(n))


def _encode_time(x: Carried) -> dict[str, Any]:
    """Sorted seconds as whole microseconds from the first, delta-coded, or as f8 when that
    cannot hold them (not finite, or gaps over an hour)."""
    n = len(x)
    if n and _every(n, lambda a, b: bool(np.all(np.isfinite(x[a:b])))):
        base = float(x[0:1][0])

        def ticks(a: int, b: int) -> np.ndarray:
            steps = x[a:b] - base
            steps /= TIME_QUANTUM_S
            return np.rint(steps, out=steps).astype(np.int64)

        enc = _delta(ticks, n, base, TIME_QUANTUM_S)
        if enc is not None:
            return enc
    return _typed(lambda a, b: np.asarray(x[a:b], dtype="<f8"), n, "f8")


def _encode_values(y: Carried, minus: Carried | None = None) -> dict[str, Any]:
    """Values exactly: whole numbers (and fixed-point ones: kB to the byte, ms to the ns) as
    deltas, other numbers as f4 (7 significant digits: enough for a rate) or f8.

    With `minus` (whole numbers too), whole y is carried as y - minus (a bar's height) and
    restored in the page.
    """
    if not isinstance(y, _Picked | _Marked):
        y = np.asarray(y)
    n = len(y)
    whole_minus = minus is not None and minus.dtype.kind in "iu"
    # Whole numbers below 2**50 are exact as they are: the float test below would pass them at
    # 0 digits with these same values.
    if (
        n
        and y.dtype.kind in "iu"
        and _largest(n, lambda a, b: max(int(y[a:b].max()), -int(y[a:b].min()))) < 2**50
        and (minus is None or whole_minus)
    ):

        def ints(a: int, b: int) -> np.ndarray:
            out = y[a:b].astype(np.int64)
            if minus is not None:
                out -= np.asarray(minus[a:b]).astype(np.int64, copy=False)
            return out

        enc = _delta(ints, n, 0.0, 1.0, plus_other=minus is not None)
        if enc is not None:
            return enc
    if (
        n
        and _every(n, lambda a, b: bool(np.all(np.isfinite(y[a:b]))))
        and _largest(n, lambda a, b: float(np.abs(y[a:b]).max())) < 2**50
    ):
        for digits in (0, 3, 6):

            def scaled(a: int, b: int, digits: int = digits) -> np.ndarray:
                q = y[a:b].astype(np.float64, copy=False) * 10**digits
                return np.rint(q, out=q)

            def exact(a: int, b: int, digits: int = digits) -> bool:
                y64 = y[a:b].astype(np.float64, copy=False)
                q = scaled(a, b)
                if digits == 0:
                    return np.array_equal(q, y64)
                return bool(_close_scaled(q, 10**digits, np.ascontiguousarray(y64)))

            if not _every(n, exact) or _largest(n, lambda a, b: _magnitude(scaled(a, b))) >= 2**52:
                continue
            # Integers are whole and finite as they are; only floats need the test.
            other = (
                minus is not None
                and digits == 0
                and (
                    whole_minus
                    or _every(
                        n,
                        lambda a, b: bool(
                            np.all(np.isfinite(m := np.asarray(minus[a:b])))
                            and np.array_equal(m, np.rint(m))
                        ),
                    )
                )
            )

            def fixed(a: int, b: int, digits: int = digits, other: bool = other) -> np.ndarray:
                out = scaled(a, b).astype(np.int64)
                if other:
                    assert minus is not None
                    out -= np.asarray(minus[a:b]).astype(np.int64, copy=False)
                return out

            enc = _delta(fixed, n, 0.0, 10.0**-digits, plus_other=other)
            if enc is not None:
                return enc
            break

    def finite(a: int, b: int) -> np.ndarray:
        piece = y[a:b]
        return piece[np.isfinite(piece)]

    counted = sum(int(np.count_nonzero(np.isfinite(y[a : a + PIECE]))) for a in _spans(n))
    magnitude = (
        max(float(np.abs(f).max()) if len(f := finite(a, b)) else 0.0 for a, b in _bounds(n))
        if counted
        else 0.0
    )
    # Whole numbers whose steps overflow u4 (sequence numbers past 4 GB) stay exact in f8.
    whole = counted > 0 and _every(n, lambda a, b: np.array_equal(f := finite(a, b), np.rint(f)))
    kind = "f4" if magnitude < 1e30 and not whole else "f8"
    return _typed(lambda a, b: y[a:b].astype("<" + kind), n, kind)


def _magnitude(q: np.ndarray) -> float:
    """The largest |q| of finite q, from its extremes: no |q| temporary."""
    return max(float(q.max()), -float(q.min()))


def _bounds(n: int) -> list[tuple[int, int]]:
    return [(a, min(a + PIECE, n)) for a in _spans(n)]


def _delta(
    ints: Values, n: int, base: float, scale: float, plus_other: bool = False
) -> dict[str, Any] | None:
    """Whole numbers (`ints`, int64, by pieces) as zigzag deltas in u4 (None when a step is too
    big for that)."""

    def zigzag(a: int, b: int) -> np.ndarray:
        if a == 0:
            return _zigzag_u4(ints(a, b))[0]
        # The piece with the value before it, counted from that value: the steps are the same
        # (int64 wraps alike either way), and the first, 0, always fits.
        values = ints(a - 1, b)
        values -= values[0]
        return _zigzag_u4(values)[0][1:]

    def fits(a: int, b: int) -> bool:
        if a == 0:
            return bool(_zigzag_u4(ints(a, b))[1])
        values = ints(a - 1, b)
        values -= values[0]
        return bool(_zigzag_u4(values)[1])

    if not _every(n, fits):
        return None
    enc = _typed(zigzag, n, "u4", base=base, scale=scale)
    enc["delta"] = True
    if plus_other:
        enc["plus_other"] = True
    return enc


@jit
def _close_scaled(q: np.ndarray, scale: int, y: np.ndarray) -> bool:  # pragma: no cover
    """np.allclose(q / scale, y, rtol=1e-12, atol=0) for finite values, without its four
    temporaries as long as the column: |q / scale - y| <= 0 + 1e-12 |y| at every point."""
    close = True
    for i in range(q.size):
        if not abs(q[i] / scale - y[i]) <= 0.0 + 1e-12 * abs(y[i]):
            close = False
            break
    return close


@jit
def _zigzag_u4(ints: np.ndarray) -> tuple[np.ndarray, bool]:  # pragma: no cover
    """Each step from the one before (the first from 0), zigzag-coded so that small steps
    either way become small unsigned numbers, in u4; False when a step does not fit. One pass:
    a million-point trace makes no int64 temporaries."""
    out = np.empty(ints.size, dtype=np.uint32)
    before = np.int64(0)
    for i in range(ints.size):
        d = ints[i] - before
        before = ints[i]
        zigzag = (d << 1) ^ (d >> 63)
        if zigzag < 0 or zigzag >= 2**32:
            return np.empty(0, dtype=np.uint32), False
        out[i] = zigzag
    return out, True


class _Raw:
    """A column to be deflated (`_Deflater`) at this zlib level: n values of `dtype` ("u4", "f4",
    "f8"), made by pieces."""

    def __init__(self, values: Values, n: int, dtype: str, level: int) -> None:
        self.values, self.n, self.dtype, self.level = values, n, dtype, level

    def shuffled(self) -> Iterator[bytes]:
        """The column's little-endian bytes shuffled piece by piece: of each piece of `PIECE`
        values, every value's first byte, then every second byte, and so on. Each piece's
        values are made once (a gather through a thinning's positions, zigzag deltas), where
        shuffling the whole column made them once per byte plane; deflate's 32 KiB window never
        reaches across a megabyte's plane, so the pieces compress as the whole did."""
        size = np.dtype(self.dtype).itemsize
        for a, b in _bounds(self.n):
            piece = np.ascontiguousarray(self.values(a, b), dtype="<" + self.dtype)
            planes = piece.view(np.uint8)
            for plane in range(size):
                yield planes[plane::size].tobytes()


def _deflated(raw: _Raw) -> str:
    """The column's shuffled bytes deflated as one zlib stream, in base64, both by pieces."""
    z = zlib.compressobj(raw.level)
    packed = b"".join([*(z.compress(piece) for piece in raw.shuffled()), z.flush()])
    # Base64 turns each 3 bytes into 4 characters: pieces of a multiple of 3 bytes join into
    # the whole's text.
    step = 3 * PIECE
    view = memoryview(packed)
    return "".join(
        base64.b64encode(view[i : i + step]).decode("ascii")
        for i in range(0, max(len(packed), 1), step)
    )


class _Deflater:
    """Deflates columns on worker threads while the next ones are encoded (zlib lets go of the
    GIL while it works): deflating is most of the time of writing a big report's data. At most
    `ahead` columns wait, so that only a few columns' raw bytes are held at once."""

    def __init__(self, ahead: int = 2) -> None:
        self.ahead = ahead
        self.pool = ThreadPoolExecutor(max_workers=2, thread_name_prefix="tracekit-deflate")
        self.pending: deque[tuple[dict[str, Any], Future[str]]] = deque()

    def __enter__(self) -> _Deflater:
        return self

    def __exit__(self, *exc: object) -> None:
        self.pool.shutdown(wait=True, cancel_futures=True)

    def deflate(self, column: dict[str, Any]) -> None:
        """Put the deflated text of column["b64"] (a `_Raw`) in its place, now or by `finish`."""
        self.pending.append((column, self.pool.submit(_deflated, column["b64"])))
        while len(self.pending) > self.ahead:
            self._next()

    def finish(self) -> None:
        """Every column handed in so far deflated."""
        while self.pending:
            self._next()

    def _next(self) -> None:
        column, text = self.pending.popleft()
        column["b64"] = text.result()


def _typed(
    values: Values, n: int, dtype: str, base: float = 0.0, scale: float = 1.0
) -> dict[str, Any]:
    """n values of `dtype` ("u4", "f4", "f8"), made by pieces, to be carried little-endian, their
    bytes shuffled a piece of "piece" values at a time (the high bytes of small numbers are runs
    of zeros; `_Raw.shuffled`), deflated and in base64 (`_Deflater`)."""
    return {
        "dtype": dtype,
        "n": n,
        "piece": PIECE,
        "b64": _Raw(values, n, dtype, 6 if n < 500_000 else 1),
        "base": base,
        "scale": scale,
        "delta": False,
    }


def _plot_json(
    plot_id: str,
    connection: int,
    plot: Plot,
    columns: list[dict[str, Any]],
    traces: list[dict[str, Any]],
) -> dict[str, Any]:
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
        "columns": columns,
        "traces": traces,
        "x_range": list(plot.x_range) if plot.x_range else None,
        "y_range": list(plot.y_range) if plot.y_range else None,
    }


def _header(report: Report) -> str:
    inputs = "".join(f"<li><code>{_text(i)}</code></li>" for i in report.inputs)
    return (
        f"<h1>{_text(report.title)}</h1>"
        f'<div class="meta"><span>tracekit {_text(report.version)}</span>'
        f'<ul class="inputs">{inputs}</ul>'
        '<button type="button" id="print-all" title="Draw every plot as an image, then print">'
        "Print all plots</button></div>"
    )


def _section(index: int, view: ConnectionView, plots: str, open_: bool) -> str:
    facts = "".join(
        f"<div><dt>{_text(k)}</dt><dd>{_wireshark(v) if k == 'Wireshark filter' else _text(v)}"
        "</dd></div>"
        for k, v in view.facts
    )
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
        rng = table.ranges[r] if table.ranges is not None else None
        if rng is not None and link is not None:
            # The row zooms its connection's plots to this time range when clicked.
            body.append(
                f'<tr class="zoom" data-conn="{int(link)}"'
                f' data-range="{float(rng[0])!r},{float(rng[1])!r}">{"".join(cells)}</tr>'
            )
        else:
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


def _front(report: Report, overview_figure: str) -> str:
    """What the page says first: each drawn connection's verdict, the overview plot, the
    population of a capture of many connections, then the findings by severity (info folded)."""
    parts = []
    if report.verdicts:
        judged = [v for v in report.verdicts if v.judged]
        unjudged = [v for v in report.verdicts if not v.judged]
        line = ""
        if unjudged:
            # Many short connections would otherwise fill the first screen with the same card.
            names = ", ".join(_conn_link(v.link, v.title.split(":")[0]) for v in unjudged)
            line = (
                f'<p class="unjudged">{"" if not judged else "And "}{len(unjudged):,} '
                f"connection{'' if len(unjudged) == 1 else 's'} with too little data to tell "
                f"what held {'it' if len(unjudged) == 1 else 'them'} back, and no warning: "
                f"{names}.</p>"
            )
        parts.append(
            '<section class="verdicts"><h2>What held each connection back</h2>'
            + _causes(report.causes)
            + "".join(_verdict(v) for v in judged)
            + line
            + "</section>"
        )
    if overview_figure:
        # A section the page's script treats as a connection's: it draws when on screen.
        parts.append(
            '<section><h2>All drawn connections</h2><details class="connection overview"'
            f' id="overview" open><summary>Throughput, stacked</summary>{overview_figure}'
            "</details></section>"
        )
    if report.population is not None:
        parts.append(_population(report.population))
    parts.append(f"<section><h2>Findings</h2>{_finding_list(report.finding_views)}</section>")
    return "\n".join(parts)


def _causes(causes: tuple[Cause, ...]) -> str:
    """Every connection of the capture by what held it back: one row per cause, its troubled
    connections first, each a link to its plots or, undrawn, to its worst finding."""
    if not causes:
        return ""
    total = sum(c.connections for c in causes)
    rows = []
    for c in causes:
        names = []
        for member in c.listed:
            text = f"#{member.conn}"
            if member.severity != "info":
                text += f" ({member.severity})"
            if member.link is not None:
                names.append(_conn_link(member.link, text))
            elif member.finding is not None:
                names.append(
                    f'<a href="#finding-{int(member.finding)}"'
                    f' data-open="finding-{int(member.finding)}">{_text(text)}</a>'
                )
            else:
                names.append(_text(text))
        more = c.connections - len(c.listed)
        if more:
            names.append(f"and {more:,} more")
        rows.append(
            f'<tr><th scope="row">{_text(c.cause)}</th><td class="num">{c.connections:,}</td>'
            f'<td class="num">{c.troubled:,}</td><td>{", ".join(names)}</td></tr>'
        )
    return (
        f'<div class="causes"><p>All {total:,} connections by what held them back (the verdict'
        " of the direction that moved the most data per second), the causes with troubled"
        " connections first; below, a card for each drawn connection that can be judged.</p>"
        '<table class="causes"><thead><tr><th scope="col">held back by</th>'
        '<th scope="col">connections</th><th scope="col">with a warning or an error</th>'
        '<th scope="col">which (the troubled first, then the busiest)</th></tr></thead>'
        f"<tbody>{''.join(rows)}</tbody></table></div>"
    )


def _severity_badge(severity: str) -> str:
    return f'<span class="sev sev-{_text(severity)}">{_text(severity)}</span>'


def _conn_link(link: int | None, text: str, zoom: tuple[float, float] | None = None) -> str:
    if link is None:
        return _text(text)
    # With a time range, following the link zooms the connection's plots there (report.js).
    rng = ""
    if zoom is not None and np.isfinite(zoom).all():
        rng = f' data-conn="{int(link)}" data-range="{float(zoom[0])!r},{float(zoom[1])!r}"'
    return f'<a href="#conn-{int(link)}" data-open="conn-{int(link)}"{rng}>{_text(text)}</a>'


def _verdict(v: Verdict) -> str:
    held = "".join(f'<p class="held">{_text(line)}</p>' for line in v.held_back)
    worst = ""
    if v.worst is not None:
        w = v.worst
        # Its direction and time range zoom the connection's plots there, as in the findings
        # list: with many connections the verdicts fill the first screen.
        where = f"{w.direction or 'both'}, {w.start_s:.3f}-{w.end_s:.3f} s"
        worst = (
            f'<p class="worst">Worst finding: {_severity_badge(w.severity)} '
            f"<b>{_text(w.kind)}</b> ({_conn_link(w.link, where, (w.start_s, w.end_s))}): "
            f"{_text(w.summary)}</p>"
        )
    change = f'<p class="change"><b>Change:</b> {_text(v.change)}</p>' if v.change else ""
    return (
        f'<div class="verdict sev-{_text(v.severity)}">'
        f'<p class="who">{_conn_link(v.link, v.title)}</p>{held}{worst}{change}</div>'
    )


def _finding(f: FindingView, index: int) -> str:
    """One finding, the `index`th of the list: its line, which expands to its explanation,
    evidence and advice."""
    evidence = "".join(
        f'<tr><th scope="row">{_text(name)}</th><td>{_text(value)}</td></tr>'
        for name, value in f.evidence
    )
    where = f"connection {f.connection}" + (f" {f.direction}" if f.direction else "")
    return (
        f'<details class="finding sev-{_text(f.severity)}" id="finding-{int(index)}"><summary>'
        f"{_severity_badge(f.severity)} <b>{_text(f.kind)}</b> "
        f"({_conn_link(f.link, where, (f.start_s, f.end_s))}, {f.start_s:.3f}-{f.end_s:.3f} s):"
        f" {_text(f.summary)}"
        f'</summary><div class="finding-body"><p class="explanation">{_text(f.explanation)}</p>'
        + (f'<table class="evidence"><tbody>{evidence}</tbody></table>' if evidence else "")
        + f'<p class="advice"><b>What to change:</b> {_text(f.advice)}</p>'
        + (
            f'<p class="wireshark"><b>Wireshark:</b> {_wireshark(f.wireshark_filter)}</p>'
            if f.wireshark_filter
            else ""
        )
        + "</div></details>"
    )


def _wireshark(display_filter: str) -> str:
    """A display filter, escaped, with a button that copies it (report.js)."""
    return (
        f'<code class="wireshark-filter">{_text(display_filter)}</code> '
        '<button type="button" class="copy" title="Copy the filter">copy</button>'
    )


def _finding_list(findings: tuple[FindingView, ...]) -> str:
    """Errors and warnings, each expandable; info findings folded in one closed group."""
    if not findings:
        return '<p class="empty">No findings.</p>'
    shown = [(i, f) for i, f in enumerate(findings) if f.severity != "info"]
    info = [(i, f) for i, f in enumerate(findings) if f.severity == "info"]
    out = "".join(_finding(f, i) for i, f in shown)
    if not shown:
        out += '<p class="empty">No warnings or errors.</p>'
    if info:
        out += (
            f'<details class="info-findings"><summary>{len(info)} info finding'
            f"{'' if len(info) == 1 else 's'} (worth knowing, not a problem by itself)"
            f"</summary>{''.join(_finding(f, i) for i, f in info)}</details>"
        )
    return f'<div class="finding-list">{out}</div>'


def _population(p: Population) -> str:
    return (
        '<section class="population"><h2>Population</h2>'
        f'<p class="population-summary">{_text(p.summary)}</p>'
        f'<div class="population-tables"><div><h3>Distributions</h3>'
        f"{_table(p.distributions, 'distributions')}</div>"
        f"<div><h3>Findings per kind</h3>{_table(p.kinds, 'kinds')}</div></div>"
        + (
            f"<h3>Troubled connections, the worst first</h3>{_table(p.troubled, 'troubled')}"
            if p.troubled.rows
            else '<p class="empty">No connection has a warning or an error.</p>'
        )
        + "</section>"
    )


def _connections_table(report: Report) -> str:
    """The connections table; folded when a population summary stands above it."""
    table = _table(report.overview, "overview")
    if report.population is None:
        return table
    return (
        f'<details class="connections-table"><summary>{len(report.overview.rows):,} connections'
        f" listed: sort by a column, follow a number to its plots</summary>{table}</details>"
    )


def _findings_table(findings: Table) -> str:
    """Every finding as a sortable table (a row zooms its connection's plots), folded."""
    return (
        f'<details class="findings-table"><summary>All {len(findings.rows):,} findings as a '
        f"table: sort by a column, click a row to zoom its plots</summary>"
        f"{_table(findings, 'findings')}</details>"
    )


# plotly.js comes first in the body, as text, and this starts it from a blob: URL at once: the
# browser compiles it off the main thread (COMPILE_HINT) while the parser reads the rest of the
# page; report.js, after the data, waits on `window.tracekitPlotly`.
_START_PLOTLY = """window.tracekitPlotly = new Promise(function (resolve, reject) {
  var script = document.createElement("script");
  script.onload = function () { resolve(performance.now()); };
  script.onerror = function () { reject(new Error("plotly.js did not start")); };
  script.src = URL.createObjectURL(new Blob(
    [document.getElementById("tk-plotly").textContent], { type: "text/javascript" }));
  document.head.appendChild(script);
});"""

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
<script type="text/plain" id="tk-plotly">{plotly}</script>
<script>{start}</script>
<header>{header}</header>
<main>
{front}
<section><h2>Connections</h2>{overview}{findings}</section>
<section><h2>Per connection</h2>{sections}</section>
</main>
<footer>{notes}</footer>
<script type="application/json" id="tk-data">{data}</script>
<script>{app}</script>
{later}
</body>
</html>
"""
