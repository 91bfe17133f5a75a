"""The marks of the time-sequence graphs, declared once as data.

Each `Mark` row says what one trace of a TSG is: its legend entry, how it is drawn (kind,
symbol, colour), whether decimation must keep every point of it, and what it means. The report
builder draws the TSGs from these rows and the legend in `docs/report.md` is generated from them
(`python -m tracekit.report.marks`), so the page and its documentation cannot disagree.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from tracekit.report.model import TSG_PALETTE, Kind, Trace

P = TSG_PALETTE

# The two plots that draw marks: the TSG of one capture (sender's or receiver's view), and the
# merged departures-and-arrivals graph of both captures (Antony et al. fig. 7).
TSG = "time-sequence graph"
MERGED = "departures and arrivals"

# What the docs call each colour; every mark's colour must have a name here (a test checks).
COLOUR_NAMES = {
    P.segment: "dark blue",
    P.ack: "green",
    P.window: "olive",
    P.retransmit: "red",
    P.out_of_order: "teal",
    P.sack: "purple",
    P.probe: "orange",
    P.zero_window: "black",
    P.dup_ack: "violet",
    P.receiver: "light blue",
}

# How plotly draws a marker symbol, as the docs show it.
SYMBOL_GLYPHS = {
    "diamond": "◆",
    "circle-open": "○",
    "x-thin": "× (thin)",
    "square": "■",
    "x": "✖",
    "triangle-up": "▲",
    "triangle-down": "▼",
}

# How report.js draws each kind of trace.
KIND_SHAPES = {
    Kind.SEGMENTS: "vertical bar with end ticks",
    Kind.STEP: "step line",
    Kind.LINE: "line",
}


@dataclass(frozen=True)
class Mark:
    """One trace of a time-sequence graph: legend entry, drawing and meaning.

    `keep`: decimation never drops one of its points (they are rare and each one matters).
    `placed`: where on the graph a point goes, in words. `fit`: a view's y range takes its points
    in (the window edge may run far above the data, so a view fits the data, not the edge).
    `fate`, for the merged graph's loss
    marks: the transmissions' fate (tracekit.schema.FATES) it marks, and `at` the time column
    (the sender's or the receiver's) it is placed at.
    """

    name: str
    plot: str
    kind: Kind
    color: str
    placed: str
    meaning: str
    symbol: str | None = None
    keep: bool = False
    fit: bool = True
    fate: str | None = None
    at: str | None = None

    def __post_init__(self) -> None:
        if (self.symbol is None) != (self.kind is not Kind.MARKERS):
            raise ValueError(f"mark {self.name!r}: markers, and only markers, need a symbol")
        if (self.fate is None) != (self.at is None):
            raise ValueError(f"mark {self.name!r}: a fate mark needs its time column")

    @property
    def shape(self) -> str:
        """How the mark looks, in words."""
        return SYMBOL_GLYPHS[self.symbol] if self.symbol is not None else KIND_SHAPES[self.kind]

    def trace(
        self,
        x: np.ndarray,
        y: np.ndarray,
        y_end: np.ndarray | None = None,
        frame: np.ndarray | None = None,
        rows: np.ndarray | None = None,
    ) -> Trace:
        """This mark's trace of the given points (bars need `y_end`, their tops; `frame`, each
        point's frame number in its capture, when the points are packets; `rows`, a mask of
        the columns' rows that are its points: `Trace.rows`)."""
        if self.kind is Kind.MARKERS:
            x, y = np.asarray(x, np.float64), np.asarray(y, np.float64)
        keep = np.ones(len(x), dtype=bool) if self.keep else None
        if self.symbol is None:
            return Trace(
                self.name,
                self.kind,
                x,
                y,
                y_end,
                color=self.color,
                keep=keep,
                fit=self.fit,
                frame=frame,
                rows=rows,
            )
        return Trace(
            self.name,
            self.kind,
            x,
            y,
            y_end,
            color=self.color,
            symbol=self.symbol,
            keep=keep,
            fit=self.fit,
            frame=frame,
            rows=rows,
        )


DATA = Mark(
    "data",
    TSG,
    Kind.SEGMENTS,
    P.segment,
    "from the segment's first byte to one past its last, at the time the capture saw it",
    "a data segment whose bytes are sent for the first time (tcptrace draws these white)",
)
RETRANSMITTED = Mark(
    "retransmitted",
    TSG,
    Kind.SEGMENTS,
    P.retransmit,
    "over the bytes it resends",
    "a segment that resends bytes sent before, wholly or in part",
    keep=True,
)
OUT_OF_ORDER = Mark(
    "out of order",
    TSG,
    Kind.SEGMENTS,
    P.out_of_order,
    "over its bytes",
    "the first copy of bytes the sequence had jumped over: reordered on the way, or, at a "
    "receiver, the resend of a segment lost before its capture point",
    keep=True,
)
WINDOW_PROBE = Mark(
    "window probe",
    TSG,
    Kind.MARKERS,
    P.probe,
    "at the probe's sequence number",
    "a segment sent into a zero window (the persist timer, RFC 9293 3.8.6.1)",
    symbol="diamond",
    keep=True,
)
KEEPALIVE = Mark(
    "keepalive",
    TSG,
    Kind.MARKERS,
    P.probe,
    "one byte below the ACK line",
    "an empty segment one byte below the ACK line while the window is open (drawn only when "
    "there is one)",
    symbol="circle-open",
    keep=True,
)
ACK_LINE = Mark(
    "ACK line",
    TSG,
    Kind.STEP,
    P.ack,
    "stepping at each ACK of the other side",
    "the cumulative ACK: every byte below it has arrived",
)
WINDOW_EDGE = Mark(
    "window edge",
    TSG,
    Kind.STEP,
    P.window,
    "above the ACK line, stepping with it",
    "ACK plus the advertised receive window: the most the receiver allows in flight",
    fit=False,
)
SACK = Mark(
    "SACK",
    TSG,
    Kind.SEGMENTS,
    P.sack,
    "over the bytes the block covers, above the ACK line, at the time of the ACK that carried it",
    "a SACK block (RFC 2018): data the receiver holds above a hole",
)
DSACK = Mark(
    "D-SACK",
    TSG,
    Kind.SEGMENTS,
    P.retransmit,
    "over the bytes it reports, at the time of its ACK",
    "a D-SACK block (RFC 2883): bytes the receiver got twice, so a resend was not needed",
    keep=True,
)
DUPLICATE_ACK = Mark(
    "duplicate ACK",
    TSG,
    Kind.MARKERS,
    P.dup_ack,
    "on the ACK line",
    "an ACK that repeats the one before, window included, while data is outstanding "
    "(RFC 5681 2); the third in a row triggers fast retransmit",
    symbol="x-thin",
    keep=True,
)
ZERO_WINDOW = Mark(
    "zero window",
    TSG,
    Kind.MARKERS,
    P.zero_window,
    "on the ACK line, where the window edge has come down to it",
    "an ACK that advertises a zero receive window: the sender must stop",
    symbol="square",
    keep=True,
)

DEPARTURE = Mark(
    "departure (sender)",
    MERGED,
    Kind.SEGMENTS,
    P.segment,
    "over its bytes, at the time the sender's capture saw it leave",
    "a data transmission as the sender's capture saw it",
)
ARRIVAL = Mark(
    "arrival (receiver)",
    MERGED,
    Kind.SEGMENTS,
    P.receiver,
    "over its bytes, at the time the receiver's capture saw it, on the sender's clock",
    "the same transmission arriving at the receiver's capture point",
)
NETWORK_DROP = Mark(
    "network drop",
    MERGED,
    Kind.MARKERS,
    P.loss,
    "at its departure, at its first byte",
    "in the sender's capture, never in the receiver's: lost between the two capture points",
    symbol="x",
    keep=True,
    fate="network_drop",
    at="sender_t_s",
)
RECEIVER_DROP = Mark(
    "receiver drop",
    MERGED,
    Kind.MARKERS,
    P.probe,
    "at its arrival, at its first byte",
    "arrived, was never acknowledged and was resent: the receiving host discarded it",
    symbol="diamond",
    keep=True,
    fate="receiver_drop",
    at="receiver_t_s",
)
SENDER_CAPTURE_GAP = Mark(
    "sender capture gap",
    MERGED,
    Kind.MARKERS,
    P.loss,
    "at its arrival, at its first byte",
    "arrived at the receiver but is missing from the sender's capture",
    symbol="triangle-down",
    keep=True,
    fate="sender_capture_gap",
    at="receiver_t_s",
)
RECEIVER_CAPTURE_GAP = Mark(
    "receiver capture gap",
    MERGED,
    Kind.MARKERS,
    P.loss,
    "at its departure, at its first byte",
    "acknowledged, yet missing from the receiver's capture",
    symbol="triangle-up",
    keep=True,
    fate="receiver_capture_gap",
    at="sender_t_s",
)

# In the order the legend of the docs lists them.
MARKS: tuple[Mark, ...] = (
    DATA,
    RETRANSMITTED,
    OUT_OF_ORDER,
    ACK_LINE,
    WINDOW_EDGE,
    SACK,
    DSACK,
    DUPLICATE_ACK,
    WINDOW_PROBE,
    KEEPALIVE,
    ZERO_WINDOW,
    DEPARTURE,
    ARRIVAL,
    NETWORK_DROP,
    RECEIVER_DROP,
    SENDER_CAPTURE_GAP,
    RECEIVER_CAPTURE_GAP,
)

# The merged graph's marks of transmissions that did not simply arrive, as it draws them.
FATE_MARKS: tuple[Mark, ...] = tuple(m for m in MARKS if m.fate is not None)


# The plots that draw marks, as the legend in the docs introduces them.
PLOT_HEADINGS = {
    TSG: "The time-sequence graph of each capture (the sender's; with `--receiver`, the "
    "receiver's beside it):",
    MERGED: "The merged graph of departures and arrivals (with `--receiver`):",
}


# What the legend says of a kept mark (see "Big captures" in docs/report.md).
KEPT = "; a mark: kept, and counted when a view has too many"


def legend_markdown() -> str:
    """The legend of docs/report.md: one Markdown table per plot that draws marks."""
    parts = []
    for plot, heading in PLOT_HEADINGS.items():
        parts += [
            heading,
            "",
            "| legend entry | drawn as | colour | meaning |",
            "| --- | --- | --- | --- |",
        ]
        parts += [
            f"| {m.name} | {m.shape}, {m.placed} | {COLOUR_NAMES[m.color]} (`{m.color}`) "
            f"| {m.meaning}{KEPT if m.keep else ''} |"
            for m in MARKS
            if m.plot == plot
        ]
        parts.append("")
    return "\n".join(parts)


if __name__ == "__main__":
    print(legend_markdown(), end="")
