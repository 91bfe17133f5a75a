"""Analysis -> report view model: the glue from series and findings to what the page draws."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING

import numpy as np
import pandas as pd

from tracekit import __version__, units
from tracekit.analysis import Analysis
from tracekit.connections import data_direction, ranked
from tracekit.core.groups import Rows, as_slice, row_count
from tracekit.findings import DIRECTIONS, Finding, Severity
from tracekit.merge import Merge
from tracekit.merge.udpstream import UdpStream
from tracekit.report import front
from tracekit.report import marks as M
from tracekit.report.model import (
    TSG_PALETTE,
    ConnectionView,
    Deferred,
    Encoded,
    Kind,
    Plot,
    Report,
    Shade,
    Table,
    Trace,
)
from tracekit.schema import PROTO_TCP
from tracekit.series import Direction, Series, kind_mask, rate, trains

if TYPE_CHECKING:
    from tracekit.report.early import EarlyPlots

P = TSG_PALETTE
_RESENT = ("retransmission", "partial_retransmission")


@dataclass(frozen=True)
class ReportConfig:
    """What the report shows; validated once."""

    # Throughput averaging window; None: one RTT (the median sample), the scale at which a
    # window-limited or slow-start transfer changes its rate.
    rate_window_s: float | None = None
    # The paper's long-run averages use 2 s (Antony et al., fig. 13).
    long_rate_window_s: float = 2.0
    # A train ends at an idle gap longer than this share of the RTT: slow-start rounds are
    # separated by most of an RTT, segments inside a burst by microseconds.
    train_gap_rtt_fraction: float = 0.25
    # Connections drawn in full, the busiest first.
    max_connections: int = 20
    # Connections listed in the overview: those with findings, then the busiest. A load test's
    # capture holds tens of thousands, which would make a page too slow to open (30,000 rows:
    # 15 MB and 18 s in Chromium); `tracekit flows` lists every one.
    max_listed_connections: int = 1000
    # Findings listed and shaded: those at or above this severity (the verdicts always read
    # every finding); the others are counted in a note.
    min_severity: Severity = Severity.INFO

    def __post_init__(self) -> None:
        if self.rate_window_s is not None and not self.rate_window_s > 0:
            raise ValueError("rate_window_s must be positive")
        if not self.long_rate_window_s > 0 or self.max_connections < 1:
            raise ValueError("long_rate_window_s must be positive and max_connections >= 1")
        if self.max_listed_connections < self.max_connections:
            raise ValueError("max_listed_connections must be at least max_connections")


def _mask(df: pd.DataFrame, kinds: tuple[str, ...]) -> np.ndarray:
    return kind_mask(df, *kinds)


def _frames(df: pd.DataFrame, name: str = "frame") -> np.ndarray | None:
    """The frame numbers of `df`'s packets for hovers (0 where a packet has none), or None
    when the table carries none."""
    if name not in df.columns:
        return None
    return _nonnegative(df[name].to_numpy())


def _nonnegative(frames: np.ndarray) -> np.ndarray:
    """Frame numbers with any negative one (no frame, in a signed column) as 0: the tables'
    own are unsigned, 0 where there is none, and pass as they are."""
    return frames if frames.dtype.kind == "u" else np.maximum(frames, 0)


Clock = Callable[[np.ndarray], np.ndarray]

# Times are put on the report's axis this many at a time: a clock's temporaries (shift, offset,
# skew: a few arrays as long as its input) stay small beside a trace of millions of points.
_CLOCK_PIECE = 1 << 16


def _on_axis(t: np.ndarray, clock: Clock | None, owned: bool = False) -> np.ndarray:
    """Times `t` through `clock` onto the report's axis (t itself without one): in place where
    `owned` (t is a copy no one else holds), else into a new array, a piece at a time."""
    if clock is None:
        return t
    out = t if owned and t.dtype == np.float64 else np.array(t, dtype=np.float64)
    for lo in range(0, out.size, _CLOCK_PIECE):
        out[lo : lo + _CLOCK_PIECE] = clock(out[lo : lo + _CLOCK_PIECE])
    return out


def _segments_trace(
    mark: M.Mark,
    seg: pd.DataFrame,
    rows: np.ndarray | None = None,
    frame: str = "frame",
    clock: Clock | None = None,
    times: np.ndarray | None = None,
) -> Trace:
    """`mark`'s bars from seq_rel to end_rel at t_s (through `clock` onto the report's axis),
    of `rows` (a mask) of seg or of all of it, each with its packet's frame number from column
    `frame` when seg has it. `times`, when given, are all of seg's times already on the axis
    (one array that a plot's traces of one table share).

    Columns are taken as they are (integers stay integers), and a mask that keeps many rows
    takes no copy: the trace holds the table's columns and the mask (`Trace.rows`), as the data
    trace of a big capture is most of its segments. A mask of few rows is copied, which costs
    less than the mask. Only the times drawn go through the clock.
    """
    every = rows is None or bool(rows.all())
    frames = _frames(seg, frame)
    if every or rows is None or np.count_nonzero(rows) * _COPIED_ROW_BYTES > len(rows):
        axis = times if times is not None else _on_axis(seg["t_s"].to_numpy(), clock)
        return mark.trace(
            axis,
            seg["seq_rel"].to_numpy(),
            seg["end_rel"].to_numpy(),
            frames,
            rows=None if every else rows,
        )
    t = seg["t_s"].to_numpy()[rows] if times is None else times[rows]
    return mark.trace(
        t if times is not None else _on_axis(t, clock, owned=True),
        seg["seq_rel"].to_numpy()[rows],
        seg["end_rel"].to_numpy()[rows],
        None if frames is None else frames[rows],
    )


# What a copied row of a segments trace costs: its time, first and last byte, and frame number.
# A mask costs a byte a row of the table.
_COPIED_ROW_BYTES = 8 + 8 + 8 + 4


def _markers(name: str, x: np.ndarray, y: np.ndarray, color: str, symbol: str) -> Trace:
    return Trace(
        name=name,
        kind=Kind.MARKERS,
        x=np.asarray(x, np.float64),
        y=np.asarray(y, np.float64),
        color=color,
        symbol=symbol,
        keep=np.ones(len(x), dtype=bool),
    )


def tsg_plot(
    d: Direction,
    shades: tuple[Shade, ...],
    title: str,
    clock: Clock | None = None,
) -> Plot:
    """The time-sequence graph of one direction, marked as tcptrace's users know it.

    `clock` maps the series' times onto the report's time axis (the sender's clock): only the
    times drawn, never a whole table's.
    """

    def times(df: pd.DataFrame) -> np.ndarray:
        return _on_axis(df["t_s"].to_numpy(np.float64), clock)

    seg, acks, sacks = d.segments, d.acks, d.sacks
    # The data segments are the rows that carry payload: masks over the segments table, not a
    # copy of its payload rows (`Direction.data`), which on a big capture is most of it. The
    # segments' times go onto the axis once, for the three traces.
    has_data = seg["len"].to_numpy() > 0
    seg_t = times(seg)
    traces = [
        _segments_trace(M.DATA, seg, _mask(seg, ("new",)) & has_data, times=seg_t),
        _segments_trace(M.RETRANSMITTED, seg, _mask(seg, _RESENT) & has_data, times=seg_t),
        _segments_trace(M.OUT_OF_ORDER, seg, _mask(seg, ("out_of_order",)) & has_data, times=seg_t),
    ]
    del seg_t
    probes = seg[_mask(seg, ("window_probe",))]
    keepalives = seg[_mask(seg, ("keepalive",))]
    traces.append(M.WINDOW_PROBE.trace(times(probes), probes["seq_rel"], frame=_frames(probes)))
    if len(keepalives):
        traces.append(
            M.KEEPALIVE.trace(times(keepalives), keepalives["seq_rel"], frame=_frames(keepalives))
        )
    t = _on_axis(acks["t_s"].to_numpy(np.float64), clock)
    # Each step is an ACK: its frame is carried once, shared by the line and the edge.
    ack_frames = _frames(acks)
    traces.append(M.ACK_LINE.trace(t, acks["ack_rel"].to_numpy(), frame=ack_frames))
    traces.append(M.WINDOW_EDGE.trace(t, acks["edge_rel"].to_numpy(), frame=ack_frames))
    if len(sacks):
        # A SACK block is drawn like a segment: a bar over the bytes it covers.
        blocks = sacks.rename(columns={"left_rel": "seq_rel", "right_rel": "end_rel"})
        traces.append(_segments_trace(M.SACK, blocks[~blocks["dsack"]], clock=clock))
        if blocks["dsack"].any():
            traces.append(_segments_trace(M.DSACK, blocks[blocks["dsack"]], clock=clock))
    dup = acks[acks["dupack"]]
    if len(dup):
        traces.append(M.DUPLICATE_ACK.trace(times(dup), dup["ack_rel"], frame=_frames(dup)))
    zero = acks[acks["win_bytes"] == 0]
    if len(zero):
        traces.append(M.ZERO_WINDOW.trace(times(zero), zero["ack_rel"], frame=_frames(zero)))
    return Plot(
        title,
        "time (s)",
        "sequence offset (bytes)",
        tuple(traces),
        shades,
        height_px=460,
        y_range=_sequence_range(seg, has_data, acks),
    )


def _sequence_range(
    seg: pd.DataFrame, has_data: np.ndarray, acks: pd.DataFrame
) -> tuple[float, float] | None:
    """The TSG's initial y span: the data segments and the ACK line, never the window edge.

    A receive window far above what is in flight (a 6 MB window on a 3 MB transfer) would
    flatten the transfer to a thin diagonal; the edge runs off the chart then, which says as
    much, and a window-limited transfer's data run into the edge, which keeps it in view.
    The page fits every zoomed view by the same rule.
    """
    if not has_data.any():
        return None
    seq, end = seg["seq_rel"].to_numpy(), seg["end_rel"].to_numpy()
    # The data rows' extremes, read in place (`where`, from the first data row's values): no
    # copy of the columns.
    first = int(np.argmax(has_data))
    low = float(np.min(seq, where=has_data, initial=seq[first]))
    end_max = float(np.max(end, where=has_data, initial=end[first]))
    high = max(end_max, float(acks["ack_rel"].max()) if len(acks) else 0.0)
    if len(acks):
        low = min(low, float(acks["ack_rel"].min()))
    pad = 0.04 * (high - low) or 1.0
    return (low - pad, high + pad)


def _median_rtt(d: Direction) -> float | None:
    return float(d.rtt["rtt_s"].median()) if len(d.rtt) else None


def rate_plot(d: Direction, cfg: ReportConfig, shades: tuple[Shade, ...]) -> Plot:
    """Throughput averaged over one RTT and over the long window, and each train's rate."""
    rtt = _median_rtt(d)
    window = cfg.rate_window_s or rtt or cfg.long_rate_window_s
    short = rate(d.segments, d.acks, window)
    long = rate(d.segments, d.acks, cfg.long_rate_window_s)
    label = f"{window * 1e3:.1f} ms" if window < 1 else f"{window:g} s"
    traces = [
        Trace(
            f"sent, {label} avg",
            Kind.LINE,
            short["t_s"].to_numpy(),
            short["sent_bps"].to_numpy() / 1e6,
        ),
        Trace(
            f"acked, {label} avg",
            Kind.LINE,
            short["t_s"].to_numpy(),
            short["acked_bps"].to_numpy() / 1e6,
            color=P.ack,
        ),
        Trace(
            f"sent, {cfg.long_rate_window_s:g} s avg",
            Kind.LINE,
            long["t_s"].to_numpy(),
            long["sent_bps"].to_numpy() / 1e6,
            color="#7f7f7f",
            dash="dash",
            visible=False,
        ),
    ]
    if rtt:
        # trains() reads the payload rows' times and lengths alone, not a copy of the table.
        tr = trains(d.segments, gap_s=rtt * cfg.train_gap_rtt_fraction, min_packets=8)
        tr = tr[np.isfinite(tr["rate_bps"])]
        traces.append(
            _markers(
                "train rate (instantaneous)",
                tr["start_s"].to_numpy(),
                tr["rate_bps"].to_numpy() / 1e6,
                P.retransmit,
                "triangle-up",
            )
        )
    return Plot("Throughput", "time (s)", "Mbit/s", tuple(traces), shades)


def rtt_plot(d: Direction, shades: tuple[Shade, ...]) -> Plot:
    """RTT samples: Karn-clean sequence samples and timestamp echoes."""
    traces = []
    for source, color, symbol in (("seq", P.segment, "circle"), ("ts", P.ack, "cross")):
        s = d.rtt[d.rtt["source"] == source]
        traces.append(
            Trace(
                f"RTT ({'sequence' if source == 'seq' else 'timestamp echo'})",
                Kind.MARKERS,
                s["t_s"].to_numpy(np.float64),
                s["rtt_s"].to_numpy(np.float64) * 1e3,
                color=color,
                symbol=symbol,
            )
        )
    return Plot("Round-trip time", "time (s)", "RTT (ms)", tuple(traces), shades)


def flight_plot(d: Direction, window_known: bool, shades: tuple[Shade, ...]) -> Plot:
    """Bytes in flight against the advertised receive window."""
    f = d.flight
    t = f["t_s"].to_numpy(np.float64)
    # kB, each column converted once and divided in place (a point per data segment).
    flight = f["flight_bytes"].to_numpy(np.float64, copy=True)
    flight /= 1e3
    rwnd = f["rwnd_bytes"].to_numpy(np.float64)
    window = np.where(rwnd < 0, np.nan, rwnd)
    del rwnd
    window /= 1e3
    name = "advertised window" if window_known else "advertised window (raw: scale unknown)"
    return Plot(
        "Flight size and receive window",
        "time (s)",
        "kB",
        (
            Trace("in flight", Kind.STEP, t, flight),
            Trace(name, Kind.STEP, t, window, color=P.window),
        ),
        shades,
    )


def direction_plots(
    d: Direction,
    title: str,
    shades: tuple[Shade, ...],
    cfg: ReportConfig,
    window_known: bool,
) -> tuple[Plot, ...]:
    """The plots of one direction of the sender's capture: its TSG (findings shaded there),
    throughput, RTT and flight. They take the direction's tables only, not an Analysis."""
    return tuple(
        _direction_plot(i, d, title, shades, cfg, window_known) for i in range(DIRECTION_PLOTS)
    )


DIRECTION_PLOTS = 4  # the TSG, throughput, RTT and flight


def _direction_plot(
    index: int,
    d: Direction,
    title: str,
    shades: tuple[Shade, ...],
    cfg: ReportConfig,
    window_known: bool,
) -> Plot:
    """Plot `index` of `direction_plots`, built alone."""
    if index == 0:
        return tsg_plot(d, shades, title)
    if index == 1:
        return rate_plot(d, cfg, ())
    if index == 2:
        return rtt_plot(d, ())
    return flight_plot(d, window_known, ())


def _receiver_plots(
    analysis: Analysis, conn: int, direction: int, shades: tuple[Shade, ...]
) -> tuple[Deferred, ...]:
    """The receiver's TSG of the same connection, its times on the sender's clock."""
    assert analysis.receiver is not None and analysis.merge is not None
    paired = receiver_direction(analysis.merge, conn, direction)
    if paired is None:
        return ()
    rc, rdir = paired
    receiver, merged = analysis.receiver.series, analysis.merge
    sender_t0_ns = analysis.sender.series.t0_ns
    return (Deferred(lambda: receiver_tsg(receiver, sender_t0_ns, merged, rc, rdir, shades)),)


def receiver_direction(merged: Merge, conn: int, direction: int) -> tuple[int, int] | None:
    """The receiver capture's connection and direction of the sender's `conn`, `direction`
    (None where the receiver's capture does not hold it)."""
    # The merge paired the connections (by endpoints through any --map, and incarnation).
    pairs = merged.connections.pairs
    hit = pairs[pairs["conn_s"] == conn]
    if hit.empty:
        return None
    # flip: the receiver's capture calls a what the sender's calls b.
    rdir = 1 - direction if bool(hit["flip"].iloc[0]) else direction
    return int(hit["conn_r"].iloc[0]), rdir


# The receiver's series tables its TSG draws (`tsg_plot`): all the page reads of them.
RECEIVER_TABLES = ("segments", "acks", "sacks")


def receiver_tsg(
    receiver: Series,
    sender_t0_ns: int,
    merged: Merge,
    rc: int,
    rdir: int,
    shades: tuple[Shade, ...],
) -> Plot:
    """The receiver's TSG of its connection `rc`, direction `rdir`, from the receiver's series,
    the sender's time origin and the merge's clock fit."""
    # Receiver times count from its own first packet; first onto the sender's origin as the
    # raw clocks say, then through the fitted offset and skew (tracekit.merge.clock).
    shift = (receiver.t0_ns - sender_t0_ns) / 1e9
    fit = merged.clock

    def clock(t: np.ndarray) -> np.ndarray:
        return fit.to_sender_s(t + shift) if fit is not None else t + shift

    title = "Time-sequence graph, receiver's view"
    if fit is not None:
        title += (
            f" (clock offset {fit.offset_s * 1e3:+.3f} ms, skew {fit.skew_ppm:+.1f} ppm removed)"
        )
    return tsg_plot(receiver.of(rc, rdir), shades, title, clock)


def _merge_plots(
    analysis: Analysis, conn: int, direction: int, shades: tuple[Shade, ...]
) -> tuple[Deferred, ...]:
    """Departures against arrivals (the paper's fig. 7) and the one-way delay."""
    m = analysis.merge
    if m is None:
        return ()
    # The direction's rows by position, from the merge's grouping, and only the columns each
    # trace draws: a filtered copy of the whole table would be most of it on a big capture.
    rows = m.transmission_groups().get((conn, direction))
    if rows is None or row_count(rows) == 0:
        return ()
    return (
        Deferred(lambda: _combined_plot(m, rows, shades)),
        Deferred(lambda: delay_plot(m, conn, direction)),
    )


def _combined_plot(m: Merge, rows: Rows, shades: tuple[Shade, ...]) -> Plot:
    """Departures against arrivals of one direction's transmission `rows`, fates marked."""
    tx = m.transmissions
    span = as_slice(rows)

    def column(name: str, where: np.ndarray | None = None) -> np.ndarray:
        values = tx[name].to_numpy()
        values = values[span] if span is not None else values[rows]
        return values if where is None or where.all() else values[where]

    if isinstance(tx["fate"].dtype, pd.CategoricalDtype):
        codes = tx["fate"].cat.codes.to_numpy()
        codes = codes[span] if span is not None else codes[rows]
        names = list(tx["fate"].cat.categories)

        def fated(name: str) -> np.ndarray:
            if name not in names:
                return np.zeros(codes.size, dtype=bool)
            return np.asarray(codes == names.index(name))

    else:
        values = column("fate")

        def fated(name: str) -> np.ndarray:
            return np.asarray(values == name)

    traces = []
    for mark, at, at_frame in (
        (M.DEPARTURE, "sender_t_s", "sender_frame"),
        (M.ARRIVAL, "receiver_t_s", "receiver_frame"),
    ):
        seen = ~np.isnan(column(at))
        traces.append(
            mark.trace(
                column(at, seen),
                column("seq_rel", seen),
                column("end_rel", seen),
                _nonnegative(column(at_frame, seen)),
            )
        )
    for mark in M.FATE_MARKS:
        hit = fated(str(mark.fate))
        if hit.any():
            # Drawn at its departure or its arrival: the frame of that capture.
            at_frame = "sender_frame" if mark.at == "sender_t_s" else "receiver_frame"
            traces.append(
                mark.trace(
                    column(str(mark.at), hit),
                    column("seq_rel", hit),
                    frame=_nonnegative(column(at_frame, hit)),
                )
            )
    return Plot(
        "Departures and arrivals, sender and receiver captures merged",
        "time (s, sender's clock)",
        "sequence offset (bytes)",
        tuple(traces),
        shades,
        height_px=420,
    )


def delay_plot(m: Merge, conn: int, direction: int) -> Plot:
    """The one-way delay of one direction, and the queueing delay above its minimum."""
    return delay_plot_of(m.delay, conn, direction)


def delays_ms(delay: pd.DataFrame) -> tuple[np.ndarray, np.ndarray]:
    """The delay table's one-way and queueing delays in ms, as the delay plot draws them, for
    `delay_plot_of`. Each column in seconds is taken out of the table (`pop`) as its ms are
    made: a table handed over (the merge holds it no more) is never held beside both columns
    in ms, only beside one."""
    owd = delay.pop("owd_s").to_numpy(np.float64) * 1e3
    queue = delay.pop("queue_s").to_numpy(np.float64) * 1e3
    return owd, queue


def delay_plot_of(
    delay: pd.DataFrame,
    conn: int,
    direction: int,
    ms: tuple[np.ndarray, np.ndarray] | None = None,
) -> Plot:
    """`delay_plot` of a delay table (schema.DELAY_COLUMNS); with `ms`, its delays in ms
    already (`delays_ms`), and the table need not hold them."""
    mine = (delay["conn"].to_numpy() == conn) & (delay["dir"].to_numpy() == direction)
    t = delay["t_s"].to_numpy(np.float64)
    owd, queue = ms or (delay[name].to_numpy(np.float64) for name in ("owd_s", "queue_s"))
    rows: np.ndarray | None = None
    if mine.all():
        pass
    elif np.count_nonzero(mine) * _COPIED_DELAY_BYTES > len(mine) * _MASKED_DELAY_BYTES:
        # Most of the table (a one-transfer capture's): its times and a mask of the rows
        # (`Trace.rows`), not copies of millions of values.
        rows = mine
    else:
        at = np.flatnonzero(mine)
        t, owd, queue = t[at], owd[at], queue[at]
    if ms is None:
        owd, queue = owd * 1e3, queue * 1e3
    return Plot(
        "One-way delay and queueing delay above its minimum",
        "time (s, sender's clock)",
        "ms",
        (
            Trace("one-way delay", Kind.LINE, t, owd, rows=rows),
            Trace("queueing delay", Kind.LINE, t, queue, color=P.retransmit, rows=rows),
        ),
    )


# What the delay plot holds per row: copied out, a row's time and its two delays in ms; given
# as the table's rows, every row of the table's two delays in ms and the mask's byte.
_COPIED_DELAY_BYTES = 3 * 8
_MASKED_DELAY_BYTES = 2 * 8 + 1


def _udp_view(stream: UdpStream) -> ConnectionView:
    """A numbered UDP stream: arrival time against datagram number, losses marked (fig. 2)."""
    arr = stream.arrivals
    got = arr[~arr["lost"]]
    lost = arr[arr["lost"]]
    plot = Plot(
        "Arrival time against datagram number (lost datagrams at 0)",
        "datagram number",
        "arrival since the first (ms)",
        (
            Trace(
                "received",
                Kind.MARKERS,
                got["index"].to_numpy(np.float64),
                got["arrival_s"].to_numpy(np.float64) * 1e3,
                color=P.segment,
                symbol="circle",
            ),
            _markers(
                "lost",
                lost["index"].to_numpy(np.float64),
                np.zeros(len(lost)),
                P.loss,
                "x",
            ),
        ),
    )
    source, destination = stream.endpoints
    # A stream only the receiver's capture holds is numbered by that capture's connections.
    where = " (receiver capture)" if stream.numbered_in == "receiver" else ""
    first = stream.first_loss_index
    facts = (
        ("sent / received", f"{stream.sent_count} / {stream.received_count}"),
        ("first loss at", "none" if first is None else f"datagram {first}"),
        ("loss after the first", f"{stream.loss_ratio_after_first:.1%}"),
        (
            "ingress / bottleneck rate",
            "-" if stream.rate_ratio is None else f"{stream.rate_ratio:.2f}",
        ),
        ("blocks lost", str(len(stream.blocks))),
    )
    return ConnectionView(
        title=f"UDP stream {stream.conn}{where}: {source} -> {destination}",
        facts=facts,
        plots=(plot,),
    )


def _shades(findings: list[Finding], conn: int) -> tuple[Shade, ...]:
    """The time ranges of a connection's warnings and errors, for its TSGs (info is listed only)."""
    return tuple(
        Shade(f.start_s, f.end_s, f"{f.kind}: {f.summary}")
        for f in findings
        if f.conn == conn and f.severity is not Severity.INFO
    )


def drawn_connections(conns: pd.DataFrame, cfg: ReportConfig) -> list[int]:
    """The connections the report draws, of `conns` (the connections table's frame): the
    busiest TCP ones by bytes, first the busiest, at most `max_connections`."""
    tcp = conns[conns["proto"] == PROTO_TCP]
    busiest = tcp.assign(total=tcp["bytes_a2b"] + tcp["bytes_b2a"]).sort_values(
        "total", ascending=False, kind="stable"
    )
    return list(busiest.index[: cfg.max_connections].tolist())


def main_direction(row: pd.Series) -> int:
    """The direction a connection's row says carried the most data: the one drawn."""
    return int(data_direction(row["bytes_a2b"], row["bytes_b2a"]))


def _fmt_rate(bps: float) -> str:
    return units.rate(bps)


def connection_plots(
    analysis: Analysis, conn: int, direction: int, config: ReportConfig | None = None
) -> tuple[tuple[Plot, ...], tuple[Plot | None, ...]]:
    """The plots of one direction of one connection, as the report draws them: the sender's
    TSG, throughput, RTT and flight, then (with a receiver capture) the merged departures and
    arrivals and the one-way delay; and beside them the receiver's TSG. Every plot opens on the
    connection's time span. The notebook API (`tracekit.api`) draws these same plots."""
    plots, receiver_plots = deferred_plots(analysis, conn, direction, config)
    return (
        tuple(_drawn(p) for p in plots),
        tuple(None if p is None else _drawn(p) for p in receiver_plots),
    )


def _drawn(plot: Deferred | Encoded) -> Plot:
    """A deferred plot, built (one encoded early has no arrays left to draw)."""
    assert not isinstance(plot, Encoded)
    return plot.drawn()


def deferred_plots(
    analysis: Analysis,
    conn: int,
    direction: int,
    config: ReportConfig | None = None,
    early: EarlyPlots | None = None,
) -> tuple[tuple[Deferred | Encoded, ...], tuple[Deferred | Encoded | None, ...]]:
    """`connection_plots`, each plot built only when it is drawn (`Deferred`), or taken as
    `early` encoded it (the receiver's TSG and the delay plot, whose tables are gone then)."""
    cfg = config or ReportConfig()
    snd = analysis.sender
    # One row, not the whole table: a capture may hold tens of thousands of connections.
    row = snd.connections.table.slice(conn, 1).to_pandas().iloc[0]
    shades = _shades(_listed(analysis.findings, cfg), conn)
    arrow = "->" if direction == 0 else "<-"
    title = f"Time-sequence graph, sender's view ({row['a']} {arrow} {row['b']})"
    window_known = snd.series.window_known.get((conn, direction), False)

    def sender(index: int) -> Deferred:
        return Deferred(
            lambda: _direction_plot(
                index, snd.series.of(conn, direction), title, shades, cfg, window_known
            )
        )

    plots: tuple[Deferred | Encoded, ...] = tuple(sender(i) for i in range(DIRECTION_PLOTS))
    receiver_plots: tuple[Deferred | Encoded | None, ...] = ()
    if analysis.receiver is not None:
        receiver_tsg = early.receiver.get((conn, direction)) if early is not None else None
        receiver_plots = (
            (receiver_tsg.with_shell(shades=shades),)
            if receiver_tsg is not None
            else _receiver_plots(analysis, conn, direction, shades)
        )
        merged: tuple[Deferred | Encoded, ...] = _merge_plots(analysis, conn, direction, shades)
        delay = early.delay.get((conn, direction)) if early is not None else None
        if merged and delay is not None:
            merged = (merged[0], delay)
        plots = (*plots, *merged)
    # Every plot of the connection opens on its time span (zoom and pan stay linked).
    start_s = float(row["start_ns"] - snd.series.t0_ns) / 1e9
    pad = 0.02 * float(row["duration_s"]) or 1e-3
    lo, hi = start_s - pad, start_s + float(row["duration_s"]) + pad
    # A --from/--to window narrower than the connection: the plots open on the window.
    sel = analysis.selection
    lo = lo if sel.from_s is None else max(lo, sel.from_s)
    hi = hi if sel.to_s is None else min(hi, sel.to_s)
    x_range = (lo, hi) if hi > lo else (start_s - pad, start_s + float(row["duration_s"]) + pad)

    def opening(plot: Deferred | Encoded) -> Deferred | Encoded:
        if isinstance(plot, Encoded):
            return plot.with_shell(x_range=x_range)
        return Deferred(lambda: replace(plot.drawn(), x_range=x_range))

    return (
        tuple(opening(p) for p in plots),
        tuple(p if p is None else opening(p) for p in receiver_plots),
    )


def _listed(findings: list[Finding], cfg: ReportConfig) -> list[Finding]:
    """The findings at or above the report's severity floor."""
    return [f for f in findings if f.severity.rank >= cfg.min_severity.rank]


def build_report(
    analysis: Analysis,
    inputs: tuple[str, ...],
    config: ReportConfig | None = None,
    *,
    deferred: bool = False,
    early: EarlyPlots | None = None,
) -> Report:
    """The report of one analysis: overview, findings, and the busiest connections in full.

    `deferred`: the connections' plots are built as the page encodes them, one at a time
    (`Deferred`), from the analysis, which they hold until then; those `early` encoded while
    the analysis ran are taken from it (`tracekit.report.early`)."""
    cfg = config or ReportConfig()
    snd = analysis.sender
    conns = snd.connections.frame()
    if not analysis.selection.everything:
        # Only the selected connections, still indexed by their numbers.
        selected = analysis.connection_table().column("conn").to_numpy()
        conns = conns[conns["conn"].isin(selected)]
    shown = drawn_connections(conns, cfg)
    view_of = {conn: i for i, conn in enumerate(shown)}

    views = []
    throughput: list[tuple[int, str, tuple[Plot, ...]]] = []
    for conn in shown:
        row = conns.loc[conn]
        direction = main_direction(row)
        d = snd.series.of(conn, direction)
        arrow = "->" if direction == 0 else "<-"
        plots: tuple[Plot | Deferred | Encoded, ...]
        receiver_plots: tuple[Plot | Deferred | Encoded | None, ...]
        if deferred:
            plots, receiver_plots = deferred_plots(analysis, conn, direction, cfg, early)
            stacked: tuple[Plot, ...] = ()
            if len(shown) > 1:
                # The overview stacks the throughput plots of two or more connections; the
                # connection's section draws the same plot, built once (a few points per RTT).
                stacked = (_drawn(plots[1]),)
                plots = (plots[0], *stacked, *plots[2:])
            throughput.append((conn, f"{row['a']} {arrow} {row['b']}", stacked))
        else:
            drawn, drawn_receiver = connection_plots(analysis, conn, direction, cfg)
            throughput.append((conn, f"{row['a']} {arrow} {row['b']}", drawn))
            plots, receiver_plots = drawn, drawn_receiver
        rtt = _median_rtt(d)
        # What held each direction back comes first: the verdict of rate_limit_cause.
        held = [f for f in analysis.findings if f.conn == conn and f.kind == "rate_limit_cause"]
        verdicts = tuple(("what held it back", f.summary) for f in held)
        rtt_text = units.duration(rtt) if rtt else "no samples"
        round_trip = next(
            (
                f.evidence.get("round_trip_s")
                for f in held
                if f.direction == DIRECTIONS[direction]
                and f.evidence.get("capture_end") == "receiver"
            ),
            None,
        )
        if rtt and isinstance(round_trip, float):
            # Taken at the receiver, a data segment's ACK leaves at once: the samples are the
            # receiving host's own answer; the handshake or the timestamps give the path's.
            rtt_text += f" (the receiving host's answer); path {units.duration(round_trip)}"
        facts = (
            *verdicts,
            ("a", str(row["a"])),
            ("b", str(row["b"])),
            ("duration", f"{row['duration_s']:.3f} s"),
            ("throughput a->b", _fmt_rate(row["throughput_a2b_bps"])),
            ("throughput b->a", _fmt_rate(row["throughput_b2a_bps"])),
            ("retransmitted", f"{row['retrans_a2b']} a->b, {row['retrans_b2a']} b->a"),
            ("MSS a/b", f"{row['mss_a'] or '-'} / {row['mss_b'] or '-'}"),
            (
                "window scale",
                f"{row['ws_a']} / {row['ws_b']}" if row["ws_state"] == "known" else row["ws_state"],
            ),
            (
                "SACK / timestamps",
                f"{'yes' if row['sack_ok'] else 'no'} / {'yes' if row['ts_ok'] else 'no'}",
            ),
            ("median RTT", rtt_text),
            ("Wireshark filter", analysis.wireshark_filter(conn)),
        )
        views.append(
            ConnectionView(
                title=f"Connection {conn}: {row['a']} {arrow} {row['b']}",
                facts=facts,
                plots=plots,
                receiver_plots=receiver_plots,
            )
        )

    views += [_udp_view(stream) for stream in analysis.udp]
    # The findings the page lists; the verdicts above read every one.
    kept = _listed(analysis.findings, cfg)
    counts = pd.Series([f.conn for f in kept], dtype="int64").value_counts()
    # Listed: the drawn ones and those with findings, then the busiest; in connection order.
    first = set(shown) | {int(c) for c in counts.index}
    listed = conns.set_index("conn", drop=False).loc[
        ranked(analysis.connection_table(), first, cfg.max_listed_connections)
    ]
    overview = Table(
        columns=(
            "#",
            "proto",
            "a",
            "b",
            "packets a->b",
            "packets b->a",
            "bytes a->b",
            "bytes b->a",
            "duration s",
            "Mbit/s a->b",
            "retransmitted a->b",
            "findings",
        ),
        rows=tuple(
            (
                int(r.conn),
                "tcp" if r.proto == PROTO_TCP else "udp",
                str(r.a),
                str(r.b),
                int(r.packets_a2b),
                int(r.packets_b2a),
                int(r.bytes_a2b),
                int(r.bytes_b2a),
                round(float(r.duration_s), 6),
                round(float(r.throughput_a2b_bps) / 1e6, 3),
                int(r.retrans_a2b),
                int(counts.get(r.conn, 0)),
            )
            for r in listed.itertuples()
        ),
        links=tuple(view_of.get(int(c)) for c in listed["conn"]),
    )
    findings = Table(
        columns=("severity", "kind", "connection", "direction", "from s", "to s", "summary"),
        rows=tuple(
            (
                f.severity.value,
                f.kind,
                f.conn,
                f.direction,
                round(f.start_s, 6),
                round(f.end_s, 6),
                f.summary,
            )
            for f in kept
        ),
        links=tuple(view_of.get(f.conn) for f in kept),
        ranges=tuple(
            (f.start_s, f.end_s) if np.isfinite([f.start_s, f.end_s]).all() else None for f in kept
        ),
    )
    notes: tuple[str, ...] = ()
    tcp_count = int((conns["proto"] == PROTO_TCP).sum())
    if tcp_count > len(shown):
        notes = (f"{tcp_count - len(shown)} smaller connections are not drawn.",)
    if len(conns) > len(listed):
        notes += (
            f"{len(conns) - len(listed)} more connections are not listed (those with findings "
            "and the busiest come first); tracekit flows lists every one.",
        )
    if len(kept) < len(analysis.findings):
        below = len(analysis.findings) - len(kept)
        notes += (
            f"{below} finding{'s' if below != 1 else ''} below {cfg.min_severity.value} "
            "are not listed (--min-severity info lists them).",
        )
    finding_views = tuple(
        replace(v, wireshark_filter=analysis.wireshark_filter(v.connection, v.start_s, v.end_s))
        for v in front.finding_views(kept, view_of)
    )
    return Report(
        title=f"tracekit report: {', '.join(inputs)}",
        overview=overview,
        findings=findings,
        connections=tuple(views),
        inputs=inputs,
        version=__version__,
        notes=notes,
        verdicts=front.verdict_views(analysis.findings, conns, shown, view_of),
        finding_views=finding_views,
        overview_plot=front.overview_plot(throughput, kept),
        population=front.population(conns, kept, view_of),
        causes=front.causes(conns, analysis.findings, view_of, finding_views),
    )
