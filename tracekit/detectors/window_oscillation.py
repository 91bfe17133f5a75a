"""window_oscillation: start/stop mode, the receive window closing and reopening again and again.

Haas ("Large MTU networks", 4.2): with a receive buffer that one burst fills, "the TCP transfer
resorts to start/stop-mode: the flow control window oscillates completely between both extremes",
and the rate settles at a few full segments per period, whatever the path could carry. On the
wire the advertised window closes to zero, or to less than a segment beyond what is in flight,
the sender stops; the receiving application reads, a window update reopens it, and the sender
bursts until it closes again.

The sender's view decides: after each packet of the direction's timeline the usable window is
the right edge the receiver last advertised (ACK + window, RFC 9293 3.8.6.2.1: SND.UNA + SND.WND)
minus the highest byte sent. Closed is less than one full segment usable; a cycle is a reopening
by a large share of the largest window, or of the window offered then and by more than two
segments, so that the steady trickle of a window-limited sender (every ACK frees a segment or
two) is not mistaken for it. A window that closed in loss recovery (data above a hole fills the
buffer, and the ACK that passes the holes hands it to the reader at once) makes no cycle: no
reader stopped the sender. With the receiver's capture too, a reopening by more than two
segments counts however small a share it is when it came with an ACK the receiver held back
until its application read (`_held_acks`): its reader, not the ACK clock, reopened the window.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from tracekit import units
from tracekit.core.kernels import jit
from tracekit.detectors._measure import (
    ack_answers,
    findings_per_direction,
    min_rtt_s,
    path_rate_bps,
    segment_size_bytes,
    window_transitions,
)
from tracekit.detectors.base import AnalysisContext, Detector, Evidence
from tracekit.findings import DIRECTIONS, Finding, Severity
from tracekit.merge import fate_is
from tracekit.physics import bdp_bytes, window_scale_shift
from tracekit.schema import TH_FIN, TH_RST, TH_SYN

# The share of the ACKs owed at once (two fresh full segments) a receiver must hold back for its
# reader to be the one reopening the window: a reader that reads on its own clock holds most of
# them (each burst waits for the next read); a receiver whose window sits at its clamp holds one
# now and then, a few percent.
MIN_HELD_SHARE = 0.25


def _held_acks(
    ctx: AnalysisContext, conn: int, direction: int, d: Any, mss: int
) -> np.ndarray | None:
    """Per ACK of the direction, with both captures: whether the receiver held it back after
    the data it acknowledges had arrived. None without the receiver's capture or a path rate.

    A receiver answers at least every second full-sized segment at once (RFC 1122 4.2.3.2,
    RFC 5681 4.2); Linux holds the ACK only while its window cannot advance, a buffer full
    of unread data (__tcp_ack_snd_check), and sends it when the application reads. Each
    ACK's time from the arrival of the last segment it newly acknowledges to its departure
    (both in the receiver's capture) is the receiver's wait; the least of them is its
    quickest answer. An ACK that left more than two segment times at the path's rate after
    that was held: an ACK clock would have answered before the next two segments came in.
    """
    path = path_rate_bps(d)
    if ctx.merge is None or path is None:
        return None
    tx = ctx.merge.transmissions_of(conn, direction)
    # The copies the receiver kept (not those its host dropped, nor duplicates), by right edge.
    arrived = tx["receiver_t_s"].to_numpy(dtype=np.float64)
    kept = fate_is(tx, "delivered", "reordered") & np.isfinite(arrived)
    if not kept.any():
        return None
    end = tx["end_rel"].to_numpy()[kept]
    arrived = arrived[kept]
    order = np.argsort(end, kind="stable")
    end, arrived = end[order], arrived[order]
    # The receiver's pure ACKs that reached the sender's capture are, in order, the
    # direction's ACKs there: their departures from the receiver, without the way back.
    back = ctx.merge.reverse_acks_of(conn, direction)
    departed = back["t_s"].to_numpy(dtype=np.float64)
    reached = np.flatnonzero(back["arrived"].to_numpy(dtype=bool))
    left = departed[reached]
    # The receiver's ACK before each, whether or not it reached the sender.
    before = np.r_[-np.inf, departed][reached]
    # Each ACK's packet, by its row (a frame number can name several: an A-MSDU).
    row = d.acks["row"].to_numpy()
    flags = ctx.packets.column("tcp_flags").to_numpy()[row]
    pure = (ctx.packets.column("payload_bytes").to_numpy()[row] == 0) & (
        (flags & (TH_SYN | TH_FIN | TH_RST)) == 0
    )
    if left.size != int(pure.sum()):
        return None  # not one for one: the capture's edges cut them differently
    # Each ACK's newly acknowledged segments, and the last of them to arrive (a segment that
    # filled a hole arrives after those it releases).
    line = np.maximum.accumulate(d.acks["ack_rel"].to_numpy())
    lo = np.asarray(np.searchsorted(end, np.r_[line[:1], line[:-1]], side="right"))
    hi = np.asarray(np.searchsorted(end, line, side="right"))
    mine = np.flatnonzero(pure & (hi > lo))
    nth = np.cumsum(pure)[mine] - 1  # its place among the receiver's ACKs that arrived
    owed, latest = _owed_at_once(lo[mine], hi[mine], before[nth], arrived)
    since = np.full(line.size, np.nan)
    since[mine[owed]] = (left[nth] - latest)[owed]
    if not np.isfinite(since).any():
        return None
    excess = since - np.nanmin(since)
    with np.errstate(invalid="ignore"):
        held = excess > 2 * mss * 8 / path
    # A habit, not the odd delayed ACK (a window at its clamp holds one now and then): a
    # reader that paces the window holds a good share of the ACKs owed at once.
    if held.sum() < MIN_HELD_SHARE * np.isfinite(since).sum():
        return np.zeros(line.size, dtype=bool)
    return np.asarray(held)


def _in_recovery(d: Any) -> np.ndarray:
    """Per ACK of the direction: whether the ACK line then stood below the recovery point of
    the last loss the ACKs told, the highest byte sent before its first duplicate ACK (RFC
    6582's "recover"; RFC 6675 5's RecoveryPoint). Until the line passes it the receiver
    holds data above a hole (RFC 9293 3.10.7.4)."""
    dup = d.acks["dupack"].to_numpy().astype(bool)
    if not dup.any() or d.data.empty:
        return np.zeros(dup.size, dtype=bool)
    # What was sent and acknowledged at each ACK, as the limits read them.
    answers = ack_answers(d)
    # The first duplicate of each run, carried forward to the ACKs after it.
    first = dup & ~np.r_[False, dup[:-1]]
    last_first = np.maximum.accumulate(np.where(first, np.arange(dup.size), -1))
    recover = answers.sent[np.maximum(last_first, 0)]
    return np.asarray((last_first >= 0) & (answers.line < recover))


@jit
def _owed_at_once(
    lo: np.ndarray, hi: np.ndarray, before: np.ndarray, arrived: np.ndarray
) -> tuple[np.ndarray, np.ndarray]:  # pragma: no cover
    """Per ACK, whose newly acknowledged segments are `arrived[lo:hi]` and whose predecessor
    left at `before`: whether it was owed at once, and the last arrival among its segments.

    Only an ACK of two full segments or more is owed at once (a lone segment's may wait for
    the delayed-ACK timer): two that arrived after the receiver's ACK before it. One pass over
    each ACK's segments: the same as expanding them into a row each, without those rows."""
    owed = np.zeros(lo.size, dtype=np.bool_)
    latest = np.full(lo.size, -np.inf)
    for m in range(lo.size):
        fresh = 0
        for s in range(lo[m], hi[m]):
            if arrived[s] > before[m]:
                fresh += 1
            latest[m] = max(latest[m], arrived[s])
        owed[m] = fresh >= 2
    return owed, latest


class WindowOscillation(Detector):
    kind = "window_oscillation"
    per_connection = True
    title = "The receive window oscillated: start/stop mode"
    severity = Severity.WARNING
    evidence = (
        Evidence("cycles_count", "", "closings followed by a large reopening"),
        Evidence("period_s", "s", "median time between those reopenings"),
        Evidence("stopped_s", "s", "time the usable window stayed closed"),
        Evidence("stopped_fraction", "", "its share of the oscillating time"),
        Evidence("segments_per_s", "segments/s", "data segments per second over that time"),
        Evidence("rate_bps", "bit/s", "bits per second over that time"),
        Evidence("burst_segments", "segments", "median segments sent per cycle"),
        Evidence("zero_window_count", "", "ACKs advertising a window of zero"),
        Evidence("largest_window_bytes", "bytes", "the largest window the receiver offered"),
        Evidence("receive_buffer_min_bytes", "bytes", "the least receive buffer that implies"),
        Evidence("mss_bytes", "bytes", "the segment size"),
        Evidence("window_scale_known", "", "whether windows are byte counts"),
        Evidence("window_needed_bytes", "bytes", "rate x RTT of the path, when measured"),
        Evidence("window_scale_shift_needed", "", "its RFC 7323 shift"),
    )

    measures = frozenset({"path_rate"})

    @dataclass(frozen=True)
    class Config:
        # "Again and again": three closings that reopen make a pattern, not an accident. At
        # least one: a finding of no cycle has no swing to measure.
        min_cycles_count: int = field(default=3, metadata={"min": 1})
        # A reopening must free a quarter of the largest window, or of the window then
        # offered, to count as a swing "between both extremes" (Haas 4.2); a window-limited
        # sender's ACKs free one or two segments of a window of many.
        min_reopen_fraction: float = 0.25

    config: Config

    def detect(self, ctx: AnalysisContext) -> Iterator[Finding]:
        return findings_per_direction(ctx, self._direction)

    def _direction(self, ctx: AnalysisContext, conn: int, direction: int, d: Any) -> Finding | None:
        cfg = self.config
        # Each reopening is an ACK after a closing at an earlier event (ACK or data segment):
        # fewer events than that cannot make min_cycles_count, told before any table is sliced
        # (captures of thousands of short connections).
        acks = ctx.series.rows("acks", conn, direction)
        events = acks + ctx.series.data_segments(conn, direction)
        if acks < cfg.min_cycles_count or events < 2 * cfg.min_cycles_count:
            return None
        mss = segment_size_bytes(d.segments)
        if mss == 0 or d.acks.empty:
            return None
        win = d.acks["win_bytes"].to_numpy()
        known = bool(ctx.series.window_known.get((conn, direction), False))
        largest = int(win.max())
        tr = window_transitions(d, mss, known)
        # A reopening counts when it frees a good share of the largest window (any, unscaled),
        # or of the window the receiver offered then: a receiver whose unread data squeezed
        # its buffer swings between the extremes of what is left (an opening window of 64 kB,
        # 16 kB later). That one must also free more than the two segments an ACK of the ACK
        # clock frees (RFC 1122 4.2.3.2: an ACK for at least every second full-sized
        # segment), which in a window of eight segments or fewer is a quarter of it.
        opener = tr.open_ack
        window_then = win[opener]
        big = (tr.open_usable >= cfg.min_reopen_fraction * largest) | (
            (tr.open_usable >= cfg.min_reopen_fraction * window_then) & (tr.open_usable > 2 * mss)
        )
        # A reader reopens the window by freeing its buffer: the window offered grows. One
        # offered as large as by the ACK before moved its right edge by the ACK line alone: a
        # flight that filled a window the reader kept empty, released by a late or stretched
        # ACK, or by the ACK of a resent segment that filled a hole (RFC 6675: the data above
        # it waited in the receiver, the window open). No unread data stopped the sender.
        before = np.maximum(opener - 1, 0)
        big &= (win[opener] > win[before]) | (opener == 0)
        # A window that closed while the ACK line stood at a hole (the ACK then a duplicate,
        # RFC 5681 2), or stayed closed until it did, was filled by loss recovery, not by a
        # reader: the receiver holds the data above the hole and cannot hand it to its
        # application (RFC 9293 3.10.7.4), so the sender's new data ran into an edge the ACK
        # line could not move. The ACK of the resent segment releases that data at once and
        # offers what is left of the window; the reads of it that follow grow the window
        # within moments, whatever the path's RTT. A reader's start/stop closes a window it
        # keeps full with data in order.
        shut = np.searchsorted(tr.shut_at, tr.open_at, side="left") - 1
        at_hole = np.zeros(opener.size, dtype=bool)
        after_shut = shut >= 0
        # Duplicates among the ACKs from the closing's to the reopening's, counted by a
        # running sum.
        dups = np.r_[0, np.cumsum(d.acks["dupack"].to_numpy())]
        closing = np.maximum(tr.shut_ack[shut[after_shut]], 0)
        at_hole[after_shut] = dups[opener[after_shut]] > dups[closing]
        # So too a window that closed during the recovery of a loss, or at the ACK that ended
        # it: the receiver held the data above the holes until the resends filled them, and
        # the ACK that fills the last one hands all of it to the application's queue at once,
        # squeezing the window by what it released. A fast reader empties that queue within
        # moments and the window reopens, on a LAN as on a satellite path: the reader did not
        # stop the sender, the loss did.
        recovering = _in_recovery(d)
        at_hole[after_shut] |= recovering[closing] | recovering[np.maximum(closing - 1, 0)]
        big &= ~at_hole
        # With the receiver's capture too: a reopening by more than the ACK clock's two
        # segments that came with an ACK the receiver held back is its reader's, however small.
        beyond_clock = ~big & ~at_hole & (tr.open_usable > 2 * mss)
        if big.sum() + beyond_clock.sum() >= cfg.min_cycles_count:
            held = _held_acks(ctx, conn, direction, d, mss)
            if held is not None:
                big |= held[opener] & beyond_clock
        if not known:
            big = np.ones(tr.open_at.size, dtype=bool)
        if big.sum() < cfg.min_cycles_count:
            return None
        # Stopped time: from each closing to the reopening after it.
        k = np.searchsorted(tr.open_at, tr.shut_at, side="left")
        paired = k < tr.open_at.size
        stopped = float((tr.open_t[k[paired]] - tr.shut_t[paired]).sum())
        big_t = tr.open_t[big]
        # Events are in capture order, their stamps not always (a clock that steps back).
        start = float(min(tr.shut_t.min(), big_t.min()))
        end = float(max(tr.shut_t.max(), big_t.max()))
        span = max(end - start, 1e-9)
        period = float(np.median(np.diff(big_t)))
        data = d.data
        dt = data["t_s"].to_numpy()
        in_span = (dt >= start) & (dt <= end)
        seg_rate = float(in_span.sum() / span)
        bytes_rate = float(data["len"].to_numpy()[in_span].sum() * 8 / span)
        zero_windows = int((win == 0).sum())
        # Segments per burst: data sent between one big reopening and the next.
        per_burst = np.diff(np.searchsorted(dt, big_t))
        burst = float(np.median(per_burst)) if per_burst.size else 0.0
        name = DIRECTIONS[direction]
        rtt = min_rtt_s(d)
        path = path_rate_bps(d)
        needed = None
        if rtt is not None and path is not None:
            needed = float(bdp_bytes(path, rtt))
        cycles = int(big.sum())
        summary = (
            f"{name} start/stop: the receive window closed and reopened {cycles} times, every "
            f"{units.duration(period)}, stopped {stopped / span:.0%} of the time; "
            f"{seg_rate:.1f} segments/s with a {largest:,}-byte largest window"
        )
        scale_note = (
            ""
            if known
            else " The window scale is unknown (handshake not captured), so only zero windows "
            "were counted as closed."
        )
        explanation = (
            f"The receiver's window closed to less than one {mss}-byte segment beyond the data "
            f"in flight ({zero_windows} advertisements of exactly zero), the sender stopped, "
            f"and a window update reopened it by at least {cfg.min_reopen_fraction:.0%} of the "
            f"largest window or of the window offered then (or, with the receiver's capture, "
            "by more than two segments with an ACK the receiver held until its application "
            f"read), {cycles} times, about every "
            f"{units.duration(period)}. The sender "
            f"alternated between stopped ({stopped / span:.0%} of the time) and bursts of about "
            f"{burst:.0f} segments, {seg_rate:.1f} segments/s or {units.rate(bytes_rate)} "
            "in all: the rate is set by how fast the receiving application empties a receive "
            f"buffer of about {largest:,} bytes (the largest window it offered), not by the "
            "path. This is Haas's start/stop mode (Large MTU networks, 4.2): the window "
            "oscillates between both extremes." + scale_note
        )
        advice = (
            "Let the receiving application read faster or more often (a reader that sleeps "
            "between reads, or does slow work in its read loop, closes the window), and give "
            "the receiver a buffer several bursts deep: raise SO_RCVBUF, or net.ipv4.tcp_rmem's "
            "maximum for autotuning, and keep window scaling on."
        )
        evidence: dict[str, Any] = {
            "cycles_count": cycles,
            "period_s": period,
            "stopped_s": stopped,
            "stopped_fraction": stopped / span,
            "segments_per_s": seg_rate,
            "rate_bps": bytes_rate,
            "burst_segments": burst,
            "zero_window_count": zero_windows,
            "largest_window_bytes": largest,
            "receive_buffer_min_bytes": largest,
            "mss_bytes": mss,
            "window_scale_known": known,
        }
        if needed is not None:
            shift = int(window_scale_shift(needed))
            evidence["window_needed_bytes"] = needed
            evidence["window_scale_shift_needed"] = shift
            advice += (
                f" To keep this path busy the window must reach rate x RTT = {needed:,.0f} "
                f"bytes (window scale shift {shift}): a buffer of about twice that."
            )
        return self.finding(
            conn=conn,
            direction=name,
            start_s=start,
            end_s=end,
            evidence=evidence,
            summary=summary,
            explanation=explanation,
            advice=advice,
        )
