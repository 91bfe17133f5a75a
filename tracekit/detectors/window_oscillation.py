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
from dataclasses import dataclass
from typing import Any

import numpy as np
import pandas as pd
from numba import njit

from tracekit.detectors._measure import (
    findings_per_direction,
    min_rtt_s,
    path_rate_bps,
    segment_size_bytes,
)
from tracekit.detectors.base import AnalysisContext, Detector
from tracekit.findings import DIRECTIONS, Finding, Severity
from tracekit.physics import bdp_bytes, window_scale_shift


def usable_window(direction: Any) -> pd.DataFrame:
    """After each ACK and data segment of a direction, in capture order, the usable window.

    Columns t_s, is_ack, usable_bytes (the last advertised right edge minus the highest byte
    sent; negative when a zero window or a shrinking edge left data beyond it) and
    last_win_bytes (the last advertised window); both NaN before the first ACK.
    """
    acks = direction.acks
    data = direction.data
    first = float(data["seq_rel"].min()) if len(data) else 0.0
    t, is_ack, usable, last_win = _usable(
        acks["frame"].to_numpy().astype(np.int64),
        acks["t_s"].to_numpy(),
        acks["edge_rel"].to_numpy().astype(np.float64),
        acks["win_bytes"].to_numpy().astype(np.float64),
        data["frame"].to_numpy().astype(np.int64),
        data["t_s"].to_numpy(),
        data["end_rel"].to_numpy().astype(np.float64),
        first,
    )
    return pd.DataFrame(
        {"t_s": t, "is_ack": is_ack, "usable_bytes": usable, "last_win_bytes": last_win},
        copy=False,
    )


@njit(cache=True)
def _usable(
    ack_frame: np.ndarray,
    ack_t: np.ndarray,
    edge: np.ndarray,
    win: np.ndarray,
    data_frame: np.ndarray,
    data_t: np.ndarray,
    data_end: np.ndarray,
    first: float,
) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:  # pragma: no cover - compiled
    # ACKs and data segments merged in capture order (frame numbers) in one pass.
    n_ack, n_data = ack_frame.size, data_frame.size
    size = n_ack + n_data
    t = np.empty(size)
    is_ack = np.empty(size, dtype=np.bool_)
    usable = np.empty(size)
    last_win = np.empty(size)
    right = lw = np.nan
    high = first
    i = j = 0
    for k in range(size):
        if j >= n_data or (i < n_ack and ack_frame[i] < data_frame[j]):
            right, lw = edge[i], win[i]
            t[k] = ack_t[i]
            is_ack[k] = True
            i += 1
        else:
            high = max(high, data_end[j])
            t[k] = data_t[j]
            is_ack[k] = False
            j += 1
        usable[k] = right - high
        last_win[k] = lw
    return t, is_ack, usable, last_win


class WindowOscillation(Detector):
    kind = "window_oscillation"
    title = "The receive window oscillated: start/stop mode"
    severity = Severity.WARNING

    @dataclass(frozen=True)
    class Config:
        # "Again and again": three closings that reopen make a pattern, not an accident.
        min_cycles_count: int = 3
        # A reopening must free a quarter of the largest window to count as a swing "between
        # both extremes" (Haas 4.2); a window-limited sender's ACKs free one or two segments.
        min_reopen_fraction: float = 0.25

    config: Config

    def detect(self, ctx: AnalysisContext) -> Iterator[Finding]:
        return findings_per_direction(ctx, self._direction)

    def _direction(self, ctx: AnalysisContext, conn: int, direction: int, d: Any) -> Finding | None:
        cfg = self.config
        mss = segment_size_bytes(d.segments)
        if mss == 0 or d.acks.empty:
            return None
        win = d.acks["win_bytes"].to_numpy()
        known = bool(ctx.series.window_known.get((conn, direction), False))
        largest = int(win.max())
        u = usable_window(d)
        usable = u["usable_bytes"].to_numpy()
        t = u["t_s"].to_numpy()
        valid = ~np.isnan(usable)
        # Unscaled raw windows are not byte counts (RFC 7323 2.3): then only a window of zero is
        # certain, so only zero windows close it, until the next ACK opens it.
        closed = valid & (usable < mss) if known else u["last_win_bytes"].to_numpy() == 0
        opens = np.flatnonzero(~closed[1:] & closed[:-1]) + 1  # first event after a closing
        shuts = np.flatnonzero(closed[1:] & ~closed[:-1]) + 1
        if closed.size and closed[0]:
            shuts = np.r_[0, shuts]
        reopen = np.where(valid[opens], usable[opens], 0.0)
        big = opens[reopen >= cfg.min_reopen_fraction * largest] if known else opens
        if big.size < cfg.min_cycles_count:
            return None
        # Stopped time: from each closing to the reopening after it.
        k = np.searchsorted(opens, shuts, side="left")
        paired = k < opens.size
        stopped = float((t[opens[k[paired]]] - t[shuts[paired]]).sum())
        start, end = float(t[shuts[0]]), float(t[big[-1]])
        span = max(end - start, 1e-9)
        big_t = t[big]
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
        cycles = int(big.size)
        summary = (
            f"{name} start/stop: the receive window closed and reopened {cycles} times, every "
            f"{period * 1e3:.0f} ms, stopped {stopped / span:.0%} of the time; "
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
            f"largest window, {cycles} times, about every {period * 1e3:.0f} ms. The sender "
            f"alternated between stopped ({stopped / span:.0%} of the time) and bursts of about "
            f"{burst:.0f} segments, {seg_rate:.1f} segments/s or {bytes_rate / 1e6:.2f} Mbit/s "
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
