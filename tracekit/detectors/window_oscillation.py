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
by a large share of the largest window, so that the steady trickle of a window-limited sender
(every ACK frees a segment or two) is not mistaken for it.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any, NamedTuple

import numpy as np

from tracekit import units
from tracekit.core.kernels import jit
from tracekit.detectors._measure import (
    findings_per_direction,
    min_rtt_s,
    path_rate_bps,
    segment_size_bytes,
)
from tracekit.detectors.base import AnalysisContext, Detector, Evidence
from tracekit.findings import DIRECTIONS, Finding, Severity
from tracekit.physics import bdp_bytes, window_scale_shift


class _Transitions(NamedTuple):
    """Where the usable window closed and reopened, by event (ACKs and data, capture order)."""

    open_at: np.ndarray  # event index of each first event after a closing
    open_t: np.ndarray
    open_usable: np.ndarray  # the usable window it opened to (0 before the first ACK)
    shut_at: np.ndarray  # event index of each closing
    shut_t: np.ndarray


def transitions(direction: Any, mss: int, known: bool) -> _Transitions:
    """The closings and reopenings of a direction's usable window.

    The usable window after each ACK and data segment is the last advertised right edge minus
    the highest byte sent (negative when a zero window or a shrinking edge left data beyond
    it); it is closed below one segment. Unscaled raw windows are not byte counts (RFC 7323
    2.3): then only a window of zero is certain, so only zero windows close it, until the next
    ACK opens it.
    """
    acks = direction.acks
    data = direction.data
    first = float(data["seq_rel"].min()) if len(data) else 0.0
    return _Transitions(
        *_window_transitions(
            acks["frame"].to_numpy().astype(np.int64),
            acks["t_s"].to_numpy(),
            acks["edge_rel"].to_numpy().astype(np.float64),
            acks["win_bytes"].to_numpy().astype(np.float64),
            data["frame"].to_numpy().astype(np.int64),
            data["t_s"].to_numpy(),
            data["end_rel"].to_numpy().astype(np.float64),
            first,
            float(mss),
            known,
        )
    )


@jit
def _window_transitions(
    ack_frame: np.ndarray,
    ack_t: np.ndarray,
    edge: np.ndarray,
    win: np.ndarray,
    data_frame: np.ndarray,
    data_t: np.ndarray,
    data_end: np.ndarray,
    first: float,
    mss: float,
    known: bool,
) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray, np.ndarray]:  # pragma: no cover
    # ACKs and data segments merged in capture order (frame numbers) in one pass.
    n_ack, n_data = ack_frame.size, data_frame.size
    size = n_ack + n_data
    open_at = np.empty(size, dtype=np.int64)
    open_t = np.empty(size)
    open_usable = np.empty(size)
    shut_at = np.empty(size, dtype=np.int64)
    shut_t = np.empty(size)
    n_open = n_shut = 0
    right = last_win = np.nan
    high = first
    was_closed = False
    i = j = 0
    for k in range(size):
        if j >= n_data or (i < n_ack and ack_frame[i] < data_frame[j]):
            right, last_win = edge[i], win[i]
            t = ack_t[i]
            i += 1
        else:
            high = max(high, data_end[j])
            t = data_t[j]
            j += 1
        usable = right - high
        valid = usable == usable
        closed = (valid and usable < mss) if known else last_win == 0
        if closed and (k == 0 or not was_closed):
            shut_at[n_shut] = k
            shut_t[n_shut] = t
            n_shut += 1
        elif not closed and k > 0 and was_closed:
            open_at[n_open] = k
            open_t[n_open] = t
            open_usable[n_open] = usable if valid else 0.0
            n_open += 1
        was_closed = closed
    return (
        open_at[:n_open].copy(),
        open_t[:n_open].copy(),
        open_usable[:n_open].copy(),
        shut_at[:n_shut].copy(),
        shut_t[:n_shut].copy(),
    )


class WindowOscillation(Detector):
    kind = "window_oscillation"
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

    @dataclass(frozen=True)
    class Config:
        # "Again and again": three closings that reopen make a pattern, not an accident. At
        # least one: a finding of no cycle has no swing to measure.
        min_cycles_count: int = field(default=3, metadata={"min": 1})
        # A reopening must free a quarter of the largest window to count as a swing "between
        # both extremes" (Haas 4.2); a window-limited sender's ACKs free one or two segments.
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
        tr = transitions(d, mss, known)
        # A reopening counts when it frees a good share of the largest window (any, unscaled).
        big = tr.open_usable >= cfg.min_reopen_fraction * largest
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
            f"largest window, {cycles} times, about every {units.duration(period)}. The sender "
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
