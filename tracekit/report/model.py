"""The report's view model: plain arrays and values that the HTML renderer draws as they are.

The glue from series and findings to this model lives elsewhere; the renderer knows nothing of
packets. Every value is frozen and checked once, here, so `html.render` can trust it.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field, replace
from enum import StrEnum
from typing import Any

import numpy as np


class ReportError(Exception):
    """A view model that cannot be drawn (mismatched lengths, a link to no connection, ...).

    The model is built from the pipeline's tables, never from a user's input directly, so this is
    a bug in tracekit: not a TracekitError (bad input, exit 2) but an internal error (exit 3).
    """


class Kind(StrEnum):
    """How a trace's points are drawn."""

    SEGMENTS = "segments"  # a vertical bar from y to y_end at each x: data segments, SACK blocks
    LINE = "line"  # points joined in order: throughput, RTT, flight
    STEP = "step"  # held until the next point: the ACK line and the window edge
    MARKERS = "markers"  # a symbol at each point: retransmissions, probes, duplicate ACKs


@dataclass(frozen=True)
class Palette:
    """The colours of a time-sequence graph, after tcptrace's, which its users read at a glance.

    tcptrace draws on a dark background; these keep its hues, darkened to read on a light one.
    """

    segment: str = "#1f3b73"  # tcptrace: white data segments (here dark blue: light background)
    ack: str = "#1a9641"  # green ACK line
    window: str = "#b8a000"  # yellow receive-window edge (olive, to read on white)
    retransmit: str = "#d7191c"  # red retransmitted segments
    sack: str = "#8e44ad"  # purple SACK blocks
    out_of_order: str = "#1b9e77"  # first copies of bytes the sequence jumped over
    probe: str = "#e66101"  # window probes (tcptrace marks them as segments beyond the window)
    zero_window: str = "#000000"  # zero-window advertisements
    dup_ack: str = "#5e3c99"  # duplicate ACK ticks
    loss: str = "#d7191c"  # a segment seen by the sender but never by the receiver
    receiver: str = "#2c7bb6"  # the receiver's copy when both views share one axis
    finding: str = "rgba(215, 25, 28, 0.10)"  # shading of a finding's time range


TSG_PALETTE = Palette()


@dataclass(frozen=True, eq=False)
class Trace:
    """One named series of points on a plot.

    `x` is time in seconds (float64); `y` is in the plot's y unit. A SEGMENTS trace also needs
    `y_end`, the top of each bar. `keep`, when given, marks points that decimation must never
    drop (retransmissions, losses, probes). `fit`: a view's y range takes this trace's points in
    (False for a line that may run far above the rest, as a TSG's window edge does). `frame`,
    for a trace whose points are packets, holds each point's frame number in its capture
    (1-based, as Wireshark numbers frames; 0: the point has none): hovers show it, so a mark
    leads to its packet in Wireshark. None for lines and rates, whose points are not packets.

    `rows`, when given, is a mask over the columns: the trace's points are the rows it marks,
    and every column (x, y, y_end, keep, frame) is as long as the mask. A trace of most of a
    table's rows (a TSG's first copies) then holds views of the table's columns, not copies of
    millions of values; the page thins and encodes the marked rows a piece at a time.
    `points` and `whole` give a column's values at the points alone.
    """

    name: str
    kind: Kind
    x: np.ndarray
    y: np.ndarray
    y_end: np.ndarray | None = None
    color: str = TSG_PALETTE.segment
    symbol: str = "circle"
    keep: np.ndarray | None = None
    width: float = 1.5
    dash: str = "solid"
    visible: bool = True  # False: listed in the legend, hidden until clicked
    stack: str | None = None  # traces of one stack group are drawn stacked, each filled
    fit: bool = True
    frame: np.ndarray | None = None
    rows: np.ndarray | None = None
    _points: int = field(default=0, init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        # Plain arrays, whatever came in (a pandas Series would carry its index along).
        for name in ("x", "y", "y_end", "keep", "frame", "rows"):
            value = getattr(self, name)
            if value is not None and not isinstance(value, np.ndarray):
                object.__setattr__(self, name, np.asarray(value))
        n = len(self.x)
        if self.rows is not None and (
            np.ndim(self.rows) != 1 or len(self.rows) != n or self.rows.dtype != np.bool_
        ):
            raise ReportError(f"trace {self.name!r}: rows must be a boolean mask as long as x")
        points = n if self.rows is None else int(np.count_nonzero(self.rows))
        object.__setattr__(self, "_points", points)
        if np.ndim(self.x) != 1 or np.ndim(self.y) != 1 or len(self.y) != n:
            raise ReportError(f"trace {self.name!r}: x and y must be 1-D and of one length")
        if self.kind is Kind.SEGMENTS and self.y_end is None:
            raise ReportError(f"trace {self.name!r}: a segments trace needs y_end")
        if self.y_end is not None and (np.ndim(self.y_end) != 1 or len(self.y_end) != n):
            raise ReportError(f"trace {self.name!r}: y_end must be 1-D and as long as x")
        if self.keep is not None and (
            np.ndim(self.keep) != 1 or len(self.keep) != n or self.keep.dtype != np.bool_
        ):
            raise ReportError(f"trace {self.name!r}: keep must be a boolean mask as long as x")
        if self.frame is not None and (
            np.ndim(self.frame) != 1
            or len(self.frame) != n
            or self.frame.dtype.kind not in "iu"
            or (n > 0 and int(self.frame.min()) < 0)
        ):
            raise ReportError(
                f"trace {self.name!r}: frame must be whole numbers (0 or more) as long as x"
            )

    def __len__(self) -> int:
        """How many points: the rows marked, or every row without `rows`."""
        return self._points

    def points(self, column: np.ndarray) -> np.ndarray:
        """One of the trace's columns at its points alone (the column itself without `rows`)."""
        return column if self.rows is None else column[self.rows]

    def whole(self) -> Trace:
        """This trace with plain columns of its points alone (itself without `rows`): for a
        reader that draws every point, as a notebook's figure does."""
        if self.rows is None:
            return self
        return replace(
            self,
            x=self.points(self.x),
            y=self.points(self.y),
            y_end=None if self.y_end is None else self.points(self.y_end),
            keep=None if self.keep is None else self.points(self.keep),
            frame=None if self.frame is None else self.points(self.frame),
            rows=None,
        )

    def all_kept(self) -> bool:
        """Whether `keep` marks every point (no point may be thinned away)."""
        if self.keep is None:
            return False
        if self.rows is None:
            return bool(self.keep.all())
        return not bool(np.any(self.rows & ~self.keep))


@dataclass(frozen=True)
class Shade:
    """A shaded time range on a plot, with its label: where a finding applies."""

    start_s: float
    end_s: float
    label: str
    color: str = TSG_PALETTE.finding

    def __post_init__(self) -> None:
        if not (np.isfinite(self.start_s) and np.isfinite(self.end_s)):
            raise ReportError(f"shade {self.label!r}: start and end must be finite")
        if self.end_s < self.start_s:
            raise ReportError(f"shade {self.label!r}: ends before it starts")


@dataclass(frozen=True)
class Plot:
    """One chart: a title, axis labels that carry their units, traces, and shaded ranges."""

    title: str
    x_label: str
    y_label: str
    traces: tuple[Trace, ...]
    shades: tuple[Shade, ...] = ()
    height_px: int = 320
    # Initial axis ranges (low, high); None: fit the data. Double-click returns to them.
    x_range: tuple[float, float] | None = None
    y_range: tuple[float, float] | None = None

    def __post_init__(self) -> None:
        for name, rng in (("x_range", self.x_range), ("y_range", self.y_range)):
            if rng is not None and not (np.isfinite(rng).all() and rng[0] < rng[1]):
                raise ReportError(f"plot {self.title!r}: {name} must be finite and increasing")

    def drawn(self) -> Plot:
        """This plot (a `Deferred` one is built here)."""
        return self


@dataclass(frozen=True)
class Deferred:
    """A plot built only when it is drawn, and built again each time: the renderer encodes the
    plots one at a time, so that on a big capture not every plot's arrays are held at once."""

    make: Callable[[], Plot]

    def drawn(self) -> Plot:
        """The plot, built now."""
        return self.make()


@dataclass(frozen=True)
class Encoded:
    """A plot already encoded for the page (`tracekit.report.html.encode`): its shell (the plot
    without its traces) and, per trace, how many points it has, whether the page may thin it
    and how many values a point carries, and its encodings at every point count the page may
    carry it at (every point, and each halving a thinning could stop at). The page is then
    made from these as from the plot itself, and what the plot was drawn from can be let go
    first. `with_shell` sets what is known only later (a finding's shading, the opening view).
    """

    shell: Plot
    counts: tuple[int, ...]
    thinnable: tuple[tuple[bool, int], ...]
    levels: tuple[Mapping[int, object], ...]

    def with_shell(self, **changes: Any) -> Encoded:
        """This plot with its shell's fields changed (`dataclasses.replace` of the shell)."""
        return replace(self, shell=replace(self.shell, **changes))


Cell = str | int | float | None


@dataclass(frozen=True)
class Table:
    """A table of plain values, sortable in the page by clicking a header.

    `links`, when given, holds per row the index of the connection view its first cell links to
    (or None); numbers sort as numbers, None sorts first. `ranges`, when given, holds per row a
    time range (start_s, end_s) or None: clicking the row zooms its connection's plots there.
    """

    columns: tuple[str, ...]
    rows: tuple[tuple[Cell, ...], ...]
    links: tuple[int | None, ...] | None = None
    ranges: tuple[tuple[float, float] | None, ...] | None = None

    def __post_init__(self) -> None:
        for i, row in enumerate(self.rows):
            if len(row) != len(self.columns):
                raise ReportError(f"table row {i} has {len(row)} cells, not {len(self.columns)}")
        if self.links is not None and len(self.links) != len(self.rows):
            raise ReportError("table links must give one entry per row")
        if self.ranges is not None:
            if self.links is None or len(self.ranges) != len(self.rows):
                raise ReportError("table ranges need links and must give one entry per row")
            for rng in self.ranges:
                if rng is not None and not (np.isfinite(rng).all() and rng[0] <= rng[1]):
                    raise ReportError(f"table range {rng} must be finite and not run backwards")


@dataclass(frozen=True)
class ConnectionView:
    """One connection: its key facts and its plots, whose time axes zoom and pan together.

    `receiver_plots[i]`, when present, is drawn beside `plots[i]`: the receiver's view of the
    same thing, on the same (already aligned) time axis.
    """

    title: str
    facts: tuple[tuple[str, str], ...]
    plots: tuple[Plot | Deferred | Encoded, ...]
    receiver_plots: tuple[Plot | Deferred | Encoded | None, ...] = ()

    def __post_init__(self) -> None:
        if len(self.receiver_plots) > len(self.plots):
            raise ReportError(f"{self.title!r}: more receiver plots than sender plots")


@dataclass(frozen=True)
class FindingView:
    """One finding as the page shows it: a line that expands to its explanation, its evidence
    (name and value with its unit) and its advice. `link` is the index of the connection view
    it belongs to (None: not drawn)."""

    severity: str
    kind: str
    connection: int
    direction: str
    start_s: float
    end_s: float
    summary: str
    explanation: str
    evidence: tuple[tuple[str, str], ...]
    advice: str
    link: int | None = None
    # A Wireshark display filter that selects the finding's packets ("" when not known).
    wireshark_filter: str = ""


@dataclass(frozen=True)
class Verdict:
    """What held one connection back (one line per direction), its worst finding and the change
    to make: the first thing the page says of each drawn connection."""

    title: str
    held_back: tuple[str, ...]
    worst: FindingView | None
    change: str | None
    severity: str = "info"
    link: int | None = None
    # False when nothing tells what held it back and no finding is a warning or an error:
    # the page then names it in one line with the others alike, not in a card of its own.
    judged: bool = True


@dataclass(frozen=True)
class Population:
    """Many connections at a glance: a one-line count, distributions of their measures, findings
    per kind, and the troubled connections first."""

    summary: str
    distributions: Table
    kinds: Table
    troubled: Table


@dataclass(frozen=True)
class CauseConnection:
    """One connection a cause names: its plots (`link`, when drawn), else its worst finding in
    the findings list (`finding`, its place there), when it has one."""

    conn: int
    severity: str
    link: int | None = None
    finding: int | None = None


@dataclass(frozen=True)
class Cause:
    """What held some of the capture's connections back: how many, how many of them have a
    warning or an error, and the first of them, the troubled first."""

    cause: str
    connections: int
    troubled: int
    listed: tuple[CauseConnection, ...]


@dataclass(frozen=True)
class Report:
    """The whole page: verdicts, findings, overview, one view per connection, and its sources.

    `findings` is the sortable table of every finding; `overview_plot`, when given, draws every
    drawn connection's throughput stacked; `population` summarises a capture of many connections.
    """

    title: str
    overview: Table
    findings: Table
    connections: tuple[ConnectionView, ...]
    inputs: tuple[str, ...]
    version: str
    notes: tuple[str, ...] = field(default=())
    verdicts: tuple[Verdict, ...] = field(default=())
    # The findings again, each expandable to its explanation, evidence and advice, listed by
    # severity (info folded); the table stays for sorting and zooming.
    finding_views: tuple[FindingView, ...] = field(default=())
    overview_plot: Plot | None = None
    population: Population | None = None
    # What held every connection of the capture back, per cause, when not every connection is
    # drawn (each drawn one has its verdict): the first screen says it of all of them.
    causes: tuple[Cause, ...] = field(default=())

    def __post_init__(self) -> None:
        links = [("overview", link) for link in self.overview.links or ()]
        links += [("findings", link) for link in self.findings.links or ()]
        links += [("findings", f.link) for f in self.finding_views]
        links += [("verdicts", v.link) for v in self.verdicts]
        if self.population is not None:
            links += [("troubled", link) for link in self.population.troubled.links or ()]
        links += [("causes", c.link) for cause in self.causes for c in cause.listed]
        for cause in self.causes:
            for c in cause.listed:
                if c.finding is not None and not 0 <= c.finding < len(self.finding_views):
                    raise ReportError(f"causes name finding {c.finding}, which is not listed")
        for name, link in links:
            if link is not None and not 0 <= link < len(self.connections):
                raise ReportError(f"{name} links to connection {link}, which is not shown")
