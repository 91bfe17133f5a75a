"""window_limited: the flight pinned at a window smaller than the bandwidth-delay product.

A window-based sender keeps at most one window in flight per round trip, so its rate is at most
window / RTT (tracekit.physics.window_limited_rate_bps). When the window that caps the flight is
the receiver's advertised window (receiver-limited) or a constant cap below it (the sender's
socket buffer), and that window is below the path's bandwidth-delay product, the path idles
for part of every round trip: the window, not the path, sets the rate. Cooper et al. size the
window a path needs as rate x RTT (135 Mbit/s x 539 ms = 9,095,625 bytes, window scale shift 8).

The path's rate comes from the ACKs (`ack_dispersion_rate_bps`): where the sender emitted
segments back to back, the bottleneck spread them out, and the receiver's ACKs come back at the
bottleneck's rate. The helpers here are shared with window_oscillation and rate_limit_cause.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import numpy as np
import numpy.typing as npt
import pandas as pd
from numpy.lib.stride_tricks import sliding_window_view

from tracekit import physics
from tracekit.detectors.base import AnalysisContext, Detector
from tracekit.findings import Finding, Severity

DIRECTION_NAMES = ("a2b", "b2a")


def data_directions(ctx: AnalysisContext) -> Iterator[tuple[int, int, Any]]:
    """(conn, dir, Direction) for every TCP direction that carried data, in connection order."""
    series = ctx.series
    if series is None or series.segments.empty:
        return
    data = series.segments[series.segments["len"] > 0]
    keys = data[["conn", "dir"]].drop_duplicates().sort_values(["conn", "dir"])
    for conn, direction in keys.itertuples(index=False):
        yield int(conn), int(direction), series.of(int(conn), int(direction))


def segment_size_bytes(segments: pd.DataFrame) -> int:
    """The sender's usual full segment: the most common payload length among data segments.

    Bulk transfers send mostly full segments, so the mode is the MSS the sender used (1448 on
    an Ethernet path with timestamps) even when a few segments are short or TSO-sized.
    """
    size = segments["len"].to_numpy().astype(np.int64)
    size = size[size > 0]
    if size.size == 0:
        return 0
    values, counts = np.unique(size, return_counts=True)
    best = values[counts == counts.max()]
    return int(best.max())


def ack_dispersion_rate_bps(
    direction: Any,
    span_acks: int = 4,
    compression_ratio: float = 0.5,
    regularity_factor: float = 2.0,
) -> npt.NDArray[np.float64]:
    """Bottleneck rate samples of one direction from the spacing of its ACKs.

    Sender-based packet pair (Allman and Paxson, "On estimating end-to-end network path
    properties", SIGCOMM 1999, 4): when the segments covered by `span_acks` consecutive ACKs
    left the sender in less than `compression_ratio` of the time their ACKs took to come back,
    the path, not the sender, spaced them, and the ACKs arrive at the bottleneck's rate. A
    sample is the bytes those ACKs advanced the ACK line by over their spread. Spans with a
    stall inside (an inter-ACK gap over `regularity_factor` times the span's mean: a delayed
    ACK timer, the end of a flight) and ACKs that carry SACK blocks, are duplicates or fill a
    hole are left out: their spacing says nothing about the path's rate.
    """
    acks = direction.acks
    new = direction.segments[direction.segments["kind"] == "new"]
    if len(acks) <= span_acks or new.empty:
        return np.zeros(0)
    t = acks["t_s"].to_numpy()
    line = acks["ack_rel"].to_numpy()
    end = new["end_rel"].to_numpy()
    sent_t = new["t_s"].to_numpy()
    # The segment each ACK acknowledges up to its last byte: its first copy's departure.
    j = np.searchsorted(end, line)
    jj = np.minimum(j, end.size - 1)
    with_sack = np.isin(t, direction.sacks["t_s"].to_numpy())
    prev_dup = np.r_[False, acks["dupack"].to_numpy()[:-1]]
    usable = (
        (j < end.size)
        & (end[jj] == line)
        & acks["advance"].to_numpy()
        & ~acks["dupack"].to_numpy()
        & ~with_sack
        & ~prev_dup
    )
    sent = np.where(usable, sent_t[jj], np.nan)
    k = span_acks
    run = sliding_window_view(usable, k + 1).all(axis=1)
    gaps = np.diff(t)
    worst_gap = sliding_window_view(gaps, k).max(axis=1)
    dt_ack = t[k:] - t[:-k]
    with np.errstate(invalid="ignore"):
        dt_sent = sent[k:] - sent[:-k]
        good = (
            run
            & (dt_ack > 0)
            & (dt_sent < compression_ratio * dt_ack)
            & (worst_gap <= regularity_factor * dt_ack / k)
        )
    advanced = (line[k:] - line[:-k]).astype(np.float64)
    good &= advanced > 0
    return advanced[good] * 8 / dt_ack[good]


def path_rate_bps(direction: Any, min_samples_count: int = 3) -> float | None:
    """Median of the ACK dispersion samples; None with fewer than min_samples_count."""
    samples = ack_dispersion_rate_bps(direction)
    if samples.size < min_samples_count:
        return None
    return float(np.median(samples))


def achieved_rate_bps(direction: Any) -> float:
    """Goodput: the ACK line's advance over the time from the first data segment to the last ACK."""
    data = direction.segments[direction.segments["len"] > 0]
    acks = direction.acks
    if data.empty or acks.empty:
        return 0.0
    line = acks["ack_rel"].to_numpy()
    start = float(data["t_s"].iloc[0])
    done = float(acks["t_s"].iloc[int(np.argmax(line))])
    first = int(data["seq_rel"].min())
    if done <= start:
        return 0.0
    return float(max(int(line.max()) - first, 0) * 8 / (done - start))


def flight_levels(
    direction: Any,
) -> tuple[npt.NDArray[np.float64], npt.NDArray[np.float64], npt.NDArray[np.bool_]]:
    """Per data segment: the highest flight of its burst, the window then, and where known.

    A burst is the run of segments one ACK released; with delayed ACKs the first segment of a
    pair leaves a segment of room that the second then fills, so a segment is judged by the
    most its burst put in flight. The window is the last one advertised before the segment
    (-1 before any: `known` is False there).
    """
    data = direction.segments[direction.segments["len"] > 0]
    flight = direction.flight
    fl = flight["flight_bytes"].to_numpy().astype(np.float64)
    rwnd = flight["rwnd_bytes"].to_numpy().astype(np.float64)
    if len(data) != len(flight) or fl.size == 0:
        return fl, rwnd, rwnd >= 0
    burst = np.searchsorted(direction.acks["frame"].to_numpy(), data["frame"].to_numpy())
    first = np.flatnonzero(np.r_[True, burst[1:] != burst[:-1]])
    size = np.diff(np.r_[first, fl.size])
    top = np.repeat(np.maximum.reduceat(fl, first), size)
    known = rwnd >= 0
    return top[known], rwnd[known], known


def min_rtt_s(direction: Any) -> float | None:
    """The smallest RTT sample (Karn or timestamp): the path's round trip without queueing."""
    rtt = direction.rtt["rtt_s"].to_numpy()
    rtt = rtt[rtt > 0]
    return float(rtt.min()) if rtt.size else None


class WindowLimited(Detector):
    kind = "window_limited"
    title = "The window, not the path, limited the rate"
    severity = Severity.WARNING

    @dataclass(frozen=True)
    class Config:
        # The path's rate when the user knows it (e.g. the rate given to `tracekit plan`);
        # 0 means measure it from the ACK dispersion of the capture.
        path_rate_bps: float = 0.0
        # "Pinned": at least half of the data segments left with less than one segment of the
        # window to spare, so the window, not the sender's congestion window, held them back.
        min_pinned_fraction: float = 0.5
        # Below this the window is not clearly under the BDP: the dispersion estimate of the
        # path's rate is good to a few percent, and a window at 80% of the BDP already leaves
        # a fifth of the path idle.
        max_window_bdp_ratio: float = 0.8
        # Fewer segments than a few round trips of a small window say nothing steady.
        min_data_segments: int = 50
        # The sender-side cap: flight within one segment of the same level for this share of
        # sends, at least two segments below the advertised window.
        min_cap_segments: int = 2

    config: Config

    def detect(self, ctx: AnalysisContext) -> Iterator[Finding]:
        for conn, direction, d in data_directions(ctx):
            finding = self._direction(ctx, conn, direction, d)
            if finding is not None:
                yield finding

    def _direction(self, ctx: AnalysisContext, conn: int, direction: int, d: Any) -> Finding | None:
        cfg = self.config
        if not ctx.series.window_known.get((conn, direction), False):
            # RFC 7323 2.3: without the SYNs the shift is unknown and the window field is not
            # a byte count; claiming a window limit from it would be a guess.
            return None
        data = d.segments[d.segments["len"] > 0]
        flight = d.flight
        if len(data) < cfg.min_data_segments or flight.empty:
            return None
        # After a loss the congestion window, not a buffer, caps the flight: a sender-side cap
        # is only claimed for a direction without retransmissions.
        lossless = not d.segments["kind"].isin(["retransmission", "partial_retransmission"]).any()
        mss = segment_size_bytes(d.segments)
        rtt = min_rtt_s(d)
        if mss == 0 or rtt is None:
            return None
        fl, rwnd, known = flight_levels(d)
        if fl.size < cfg.min_data_segments:
            return None
        # Receiver-limited: the flight of each burst reached the advertised window.
        at_rwnd = (rwnd - fl) < mss
        # Sender-limited: a constant cap clearly below the advertised window.
        cap = float(np.percentile(fl, 95))
        at_cap = (fl >= cap - mss) & (rwnd - fl >= cfg.min_cap_segments * mss)
        if at_rwnd.mean() >= cfg.min_pinned_fraction:
            limited_by, pinned, window = "receiver", at_rwnd, float(np.median(rwnd[at_rwnd]))
        elif lossless and at_cap.mean() >= cfg.min_pinned_fraction:
            limited_by, pinned, window = "sender", at_cap, float(np.median(fl[at_cap]))
        else:
            return None
        rate_path: float | None = float(cfg.path_rate_bps)
        source = "config"
        if cfg.path_rate_bps <= 0:
            rate_path, source = path_rate_bps(d), "ack_dispersion"
        if rate_path is None:
            return None
        bdp = float(physics.bdp_bytes(rate_path, rtt))
        if window >= cfg.max_window_bdp_ratio * bdp:
            return None
        achieved = achieved_rate_bps(d)
        allows = float(physics.window_limited_rate_bps(window, rtt))
        shift = int(physics.window_scale_shift(min(bdp, physics.MAX_WINDOW_BYTES)))
        row = ctx.connections.iloc[conn]
        receiver_side = "b" if direction == 0 else "a"
        announced = int(row[f"ws_{receiver_side}"])
        times = d.flight["t_s"].to_numpy()[known]
        name = DIRECTION_NAMES[direction]
        how = (
            "as configured"
            if source == "config"
            else "measured from the spacing of the ACKs of back-to-back segments"
        )
        who = (
            "the receiver's advertised window"
            if limited_by == "receiver"
            else "a constant cap below the advertised window (the sender's socket buffer)"
        )
        summary = (
            f"{name} window-limited by the {limited_by}: {window:,.0f}-byte window, "
            f"{achieved / 1e6:.2f} Mbit/s at RTT {rtt * 1e3:.1f} ms; the path "
            f"({rate_path / 1e6:.2f} Mbit/s) needs {bdp:,.0f} bytes (window scale shift {shift})"
        )
        explanation = (
            f"For {pinned.mean():.0%} of its data segments the sender had {who} full: about "
            f"{window:,.0f} bytes in flight, and no room for another segment. One window per "
            f"round trip of {rtt * 1e3:.1f} ms allows at most {allows / 1e6:.2f} Mbit/s; the "
            f"transfer achieved {achieved / 1e6:.2f} Mbit/s. The path delivers "
            f"{rate_path / 1e6:.2f} Mbit/s ({how}), "
            f"so keeping it busy takes rate x RTT = {bdp:,.0f} bytes in flight: the window is "
            f"{window / bdp:.0%} of that and the path idles for the rest of every round trip "
            "(Cooper et al.: the window must cover the bandwidth-delay product)."
        )
        if limited_by == "receiver":
            advice = (
                f"Let the receiver offer at least {bdp:,.0f} bytes: raise its SO_RCVBUF, or "
                f"net.ipv4.tcp_rmem's maximum for autotuning (Linux advertises only part of "
                f"the buffer, so about twice that), and keep window scaling on "
                f"(net.ipv4.tcp_window_scaling=1) with shift {shift} or more"
                + (f"; it announced {announced}" if announced >= 0 else "; it announced none")
                + ". `tracekit plan` computes these numbers for other rates and RTTs."
            )
        else:
            advice = (
                f"Let the sender keep {bdp:,.0f} bytes in flight: raise its SO_SNDBUF, or "
                f"net.ipv4.tcp_wmem's maximum for autotuning (about twice the flight), and have "
                f"the application write in chunks that keep the buffer full. The receiver needs "
                f"a window of that size too: window scale shift {shift}."
            )
        return self.finding(
            conn=conn,
            direction=name,
            start_s=float(times[0]),
            end_s=float(times[-1]),
            evidence={
                "limited_by": limited_by,
                "window_bytes": window,
                "pinned_fraction": float(pinned.mean()),
                "rtt_s": rtt,
                "achieved_rate_bps": achieved,
                "window_rate_bps": allows,
                "path_rate_bps": rate_path,
                "path_rate_source": source,
                "window_needed_bytes": bdp,
                "window_scale_shift_needed": shift,
                "window_scale_shift_announced": announced,
                "mss_bytes": mss,
            },
            summary=summary,
            explanation=explanation,
            advice=advice,
        )
