"""rate_limit_cause: why each phase of a transfer ran as fast as it did, in T-RAT's classes.

Zhang, Breslau, Paxson and Shenker ("On the characteristics and origins of internet flow
rates", SIGCOMM 2002, 4) name what limits a TCP flow's rate: opportunity (still in slow start),
congestion, the receiver's window, the sender's buffer (transport), the application, or the
bandwidth of the bottleneck. tracekit labels each phase of each direction with one of:

- `slow_start`: the flight still grows by half or more per phase, before any loss.
- `congestion`: the sender retransmitted (it met loss and cut its window), or its congestion
  window, below both the advertised window and the path, held the flight (congestion avoidance).
- `receiver_window`: the flight was pinned at the advertised window, and that window is below
  the path's bandwidth-delay product.
- `sender_buffer`: the flight was pinned at a constant cap below the advertised window.
- `application`: ACKs freed room under every window and the sender let them pass with nothing
  to send: the application gave it no data.
- `bandwidth`: the ACKs came back at the path's rate: the bottleneck was busy.

A phase starts as a window of `phase_rtts` smallest RTTs; consecutive windows with the same
label merge into one phase. The path's rate comes from ACK dispersion (_measure.path_rate_bps).
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import numpy as np
import numpy.typing as npt
from numba import njit

from tracekit.detectors._measure import (
    data_directions,
    flight_levels,
    min_rtt_s,
    path_rate_bps,
    segment_size_bytes,
)
from tracekit.detectors.base import AnalysisContext, Detector
from tracekit.findings import DIRECTIONS, Finding, Severity
from tracekit.physics import bdp_bytes
from tracekit.series import kind_mask

LABELS = (
    "slow_start",
    "congestion",
    "receiver_window",
    "sender_buffer",
    "application",
    "bandwidth",
)
L_SLOW, L_CONG, L_RWND, L_SNDBUF, L_APP, L_BW = range(6)

WHY = {
    L_SLOW: "the sender was still in slow start, doubling its flight each round trip: the "
    "transfer had not yet had the opportunity to reach the path's rate",
    L_CONG: "the congestion window held the flight: the sender met loss (or was growing its "
    "window in congestion avoidance) below both the advertised window and the path's capacity",
    L_RWND: "the flight was pinned at the receiver's advertised window, which is below the "
    "path's bandwidth-delay product: the receiver's buffer set the rate",
    L_SNDBUF: "the flight was pinned at a constant cap below the advertised window: the "
    "sender's socket buffer set the rate",
    L_APP: "ACKs freed room for more data and the sender let them pass: the application "
    "gave it no data to send",
    L_BW: "the ACKs came back at the path's rate: the bottleneck link was busy, the transfer "
    "ran as fast as the path allows",
}
ADVICE = {
    L_SLOW: "Nothing to change for a short transfer; for a long one, slow start ends by itself. "
    "A larger initial window (ip route ... initcwnd) shortens it on paths that can take it.",
    L_CONG: "Find where packets are lost (see the retransmissions finding); pace the sender "
    "(fq qdisc) or give the bottleneck a buffer near one bandwidth-delay product.",
    L_RWND: "Raise the receiver's SO_RCVBUF or net.ipv4.tcp_rmem's maximum to about twice the "
    "bandwidth-delay product, with window scaling on (see the window_limited finding).",
    L_SNDBUF: "Raise the sender's SO_SNDBUF or net.ipv4.tcp_wmem's maximum to about twice the "
    "bandwidth-delay product.",
    L_APP: "Have the application write more, sooner: larger writes, no pauses between them, "
    "or read the source (disk, pipe) faster.",
    L_BW: "Nothing to change in TCP: a faster path (or less competing traffic) is the only way "
    "to go faster.",
}


@njit(cache=True)
def _window(t: float, t0: float, length: float, n: int) -> int:  # pragma: no cover - compiled
    """The window a time falls in: windows of `length` from t0, the first and last open."""
    return min(max(np.int64((t - t0) / length), 0), n - 1)


@njit(cache=True)
def _window_sums(
    t: np.ndarray, values: np.ndarray, t0: float, length: float, n: int
) -> tuple[np.ndarray, np.ndarray]:  # pragma: no cover - compiled
    """Per window: how many events, and the sum of their values (in event order)."""
    count = np.zeros(n)
    total = np.zeros(n)
    for i in range(t.size):
        w = _window(t[i], t0, length, n)
        count[w] += 1
        total[w] += values[i]
    return count, total


@njit(cache=True)
def _flight_windows(
    t: np.ndarray,
    known: np.ndarray,
    top: np.ndarray,
    rwnd: np.ndarray,
    t0: float,
    length: float,
    n: int,
    mss: int,
    cap: float,
    scale_known: bool,
) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray, np.ndarray]:  # pragma: no cover
    """Per window, over the segments sent with a known window (flight_levels' top, rwnd):

    how many; how many had the window full (less than a segment of room; never when the
    window scale is unknown); how many sat at the flight's cap (within a segment of its 95th
    percentile) with two segments of room under the window; the highest flight and window.
    """
    counted = np.zeros(n)
    pinned = np.zeros(n)
    capped = np.zeros(n)
    flight_max = np.zeros(n)
    rwnd_max = np.zeros(n)
    j = 0
    for i in range(t.size):
        if not known[i]:
            continue
        w = _window(t[i], t0, length, n)
        level, window = top[j], rwnd[j]
        j += 1
        counted[w] += 1
        if scale_known and window - level < mss:
            pinned[w] += 1
        if scale_known and level >= cap - mss and window - level >= 2 * mss:
            capped[w] += 1
        flight_max[w] = max(flight_max[w], level)
        rwnd_max[w] = max(rwnd_max[w], window)
    return counted, pinned, capped, flight_max, rwnd_max


@njit(cache=True)
def _room_answered(
    ack_frame: np.ndarray,
    ack_t: np.ndarray,
    advance: np.ndarray,
    edge: np.ndarray,
    data_frame: np.ndarray,
    data_end: np.ndarray,
    mss: int,
    t0: float,
    length: float,
    n: int,
) -> tuple[np.ndarray, np.ndarray]:  # pragma: no cover - compiled
    """Per window, ACKs that freed room for a segment and those not answered at once.

    The ACKs and data segments of one direction, merged in capture order (frame numbers): an
    ACK that advances the line frees room when the window's right edge (the highest so far) is
    a segment or more past the highest byte sent; the next packet answers it if it is data.
    """
    room = np.zeros(n)
    unanswered = np.zeros(n)
    n_ack, n_data = ack_frame.size, data_frame.size
    i = j = 0
    edge_high = high = -1
    while i < n_ack:
        if j < n_data and data_frame[j] < ack_frame[i]:
            high = max(high, data_end[j])
            j += 1
            continue
        edge_high = max(edge_high, edge[i])
        # ACKs after the last data segment (the transfer is over) do not count.
        if advance[i] and edge_high - high >= mss and j < n_data:
            w = min(max(np.int64((ack_t[i] - t0) / length), 0), n - 1)
            room[w] += 1
            answered = i + 1 >= n_ack or data_frame[j] < ack_frame[i + 1]
            if not answered:
                unanswered[w] += 1
        i += 1
    return room, unanswered


class RateLimitCause(Detector):
    kind = "rate_limit_cause"
    title = "What limited the transfer's rate, phase by phase"
    severity = Severity.INFO

    @dataclass(frozen=True)
    class Config:
        # A few round trips per window: enough ACKs to measure a rate, short enough to see
        # slow start (which doubles every RTT) as its own phase.
        phase_rtts: float = 4.0
        # ACKs at 80% or more of the path's rate mean the bottleneck was busy (the dispersion
        # estimate is good to a few percent; delayed ACKs and gaps cost some more).
        bandwidth_fraction: float = 0.8
        # Same meaning as window_limited's: half the segments sent with the window full.
        min_pinned_fraction: float = 0.5
        # The flight growing by half per phase of four RTTs or more is slow start (which would
        # multiply it by 16); congestion avoidance adds one segment per RTT.
        slow_start_growth_factor: float = 1.5
        # A flight up by less than 10% per phase is flat: congestion avoidance adds a segment
        # per RTT, which over four RTTs of a flight of a few dozen segments is more than that.
        growing_factor: float = 1.1
        # Half the ACKs that freed room went unanswered: the sender had no data to send (an
        # ACK-clocked sender answers every one, RFC 5681 3.1; pacing delays a few).
        min_unanswered_fraction: float = 0.5
        # Fewer data segments than this in a direction say nothing about its limits.
        min_data_segments: int = 20
        # At most this many windows per direction: a long transfer over a short-RTT path (a
        # LAN's 100 us) would otherwise yield a phase every few milliseconds, thousands of
        # labels nobody reads; the windows then widen to duration / this.
        max_windows_count: int = 200

    config: Config

    def detect(self, ctx: AnalysisContext) -> Iterator[Finding]:
        for conn, direction, d in data_directions(ctx):
            yield from self._direction(ctx, conn, direction, d)

    def _direction(
        self, ctx: AnalysisContext, conn: int, direction: int, d: Any
    ) -> Iterator[Finding]:
        cfg = self.config
        # Counted before any table is sliced (captures of thousands of short connections).
        series = ctx.series
        if series.data_segments(conn, direction) < cfg.min_data_segments or not series.rows(
            "acks", conn, direction
        ):
            return
        data = d.data
        rtt = min_rtt_s(d)
        mss = segment_size_bytes(d.segments)
        if rtt is None or mss == 0:
            return
        path = path_rate_bps(d)
        known = bool(ctx.series.window_known.get((conn, direction), False))
        t0 = float(data["t_s"].iloc[0])
        acks = d.acks[d.acks["t_s"] >= t0]
        t_end = float(max(data["t_s"].iloc[-1], acks["t_s"].max() if len(acks) else t0))
        length = max(cfg.phase_rtts * rtt, (t_end - t0) / cfg.max_windows_count)
        n = int(np.floor((t_end - t0) / length)) + 1

        resent = kind_mask(data, "retransmission", "partial_retransmission")
        sent, retrans = _window_sums(data["t_s"].to_numpy(), resent, t0, length, n)
        any_loss_before = np.cumsum(retrans) - retrans > 0

        top, rwnd, has_rwnd = flight_levels(d)
        cap = float(np.percentile(top, 95)) if top.size else 0.0
        counted, pinned_rwnd, capped, flight_max, rwnd_med = _flight_windows(
            d.flight["t_s"].to_numpy(), has_rwnd, top, rwnd, t0, length, n, mss, cap, known
        )
        pinned = pinned_rwnd / np.maximum(counted, 1)
        at_cap = capped / np.maximum(counted, 1)

        line = np.maximum.accumulate(acks["ack_rel"].to_numpy())
        gain = np.diff(line, prepend=line[0]) if line.size else line
        _, delivered = _window_sums(acks["t_s"].to_numpy(), gain, t0, length, n)
        width = np.full(n, length)
        width[-1] = max(t_end - (t0 + (n - 1) * length), rtt)
        rate = delivered * 8 / width

        room, unanswered = self._unanswered(d, t0, length, n, mss)
        unanswered_share = unanswered / np.maximum(room, 1)
        growth = np.r_[np.inf, flight_max[1:] / np.maximum(flight_max[:-1], 1)]

        bdp = float(bdp_bytes(path, rtt)) if path is not None else None
        lossless = not resent.any()
        # With no loss anywhere in the direction, a flight held flat below every window by
        # nothing else is the sender's own doing (T-RAT's sender/application class); one that
        # still grows is a congestion window in congestion avoidance.
        label = np.full(n, L_CONG, dtype=np.int64)
        if lossless:
            label[growth < cfg.growing_factor] = L_APP
        busy = rate >= cfg.bandwidth_fraction * path if path is not None else np.zeros(n, bool)
        small_window = (rwnd_med < 0.8 * bdp if bdp is not None else np.ones(n, dtype=bool)) & (
            pinned >= cfg.min_pinned_fraction
        )
        slow = (growth >= cfg.slow_start_growth_factor) & ~any_loss_before & (retrans == 0)
        # Precedence, last assignment wins: the weakest evidence first.
        label[(at_cap >= cfg.min_pinned_fraction) & lossless] = L_SNDBUF
        label[slow] = L_SLOW
        label[(unanswered_share >= cfg.min_unanswered_fraction) & (room >= 4)] = L_APP
        label[busy] = L_BW
        label[small_window] = L_RWND
        label[retrans > 0] = L_CONG
        # Windows with nothing sent or acknowledged carry no evidence: they join the phase before.
        # A forward fill from the last window with evidence (the first window keeps its own).
        empty = (sent == 0) & (delivered == 0)
        empty[0] = False
        label = label[np.maximum.accumulate(np.where(empty, 0, np.arange(n)))]

        starts = np.flatnonzero(np.r_[True, label[1:] != label[:-1]])
        ends = np.r_[starts[1:], n]
        # Per phase, over its windows at once. The sums are of whole bytes and counts (exact in
        # any order); the widths, fractional, are summed per phase as numpy sums a slice.
        phase_delivered = np.add.reduceat(delivered, starts)
        phase_window = np.maximum.reduceat(rwnd_med, starts)
        phase_flight = np.maximum.reduceat(flight_max, starts)
        phase_retrans = np.add.reduceat(retrans, starts)
        phase_unanswered = np.add.reduceat(unanswered, starts)
        phase_room = np.add.reduceat(room, starts)
        name = DIRECTIONS[direction]
        for p, (lo, hi) in enumerate(zip(starts.tolist(), ends.tolist(), strict=True)):
            yield self._phase(
                conn,
                name,
                int(label[lo]),
                start_s=t0 + lo * length,
                end_s=min(t0 + hi * length, t_end),
                rate_bps=float(phase_delivered[p] * 8 / width[lo:hi].sum()),
                path=path,
                rtt=rtt,
                bdp=bdp,
                window=float(phase_window[p]),
                flight=float(phase_flight[p]),
                retransmissions=int(phase_retrans[p]),
                unanswered=float(phase_unanswered[p] / max(phase_room[p], 1)),
                windows=hi - lo,
                known=known,
            )

    @staticmethod
    def _unanswered(
        d: Any, t0: float, length: float, n: int, mss: int
    ) -> tuple[npt.NDArray[np.float64], npt.NDArray[np.float64]]:
        """Per window: ACKs that freed room for a segment, and those the sender left unanswered.

        A sender limited by any window answers an ACK that frees room with new data at once
        (the ACK clock); one with no data to send lets it pass. ACKs after the last data
        segment (the transfer is over) do not count.
        """
        acks, data = d.acks, d.data
        return _room_answered(
            acks["frame"].to_numpy(),
            acks["t_s"].to_numpy(),
            acks["advance"].to_numpy(),
            acks["edge_rel"].to_numpy(),
            data["frame"].to_numpy(),
            data["end_rel"].to_numpy(),
            mss,
            t0,
            length,
            n,
        )

    def _phase(
        self,
        conn: int,
        name: str,
        label: int,
        *,
        start_s: float,
        end_s: float,
        rate_bps: float,
        path: float | None,
        rtt: float,
        bdp: float | None,
        window: float,
        flight: float,
        retransmissions: int,
        unanswered: float,
        windows: int,
        known: bool,
    ) -> Finding:
        cause = LABELS[label]
        path_text = f" of a {path / 1e6:.2f} Mbit/s path" if path is not None else ""
        summary = (
            f"{name} {start_s:.2f}-{end_s:.2f} s limited by {cause.replace('_', ' ')}: "
            f"{rate_bps / 1e6:.2f} Mbit/s{path_text}, RTT {rtt * 1e3:.1f} ms"
        )
        share = f" ({rate_bps / path:.0%} of it)" if path else ""
        explanation = (
            f"Over these {windows} window(s) of {self.config.phase_rtts:g} round trips the ACK "
            f"line advanced at {rate_bps / 1e6:.2f} Mbit/s{path_text}{share}: "
            f"{WHY[label]}. The most in flight was {flight:,.0f} bytes against an advertised "
            f"window of {window:,.0f}"
            + ("" if known else " (window scale unknown: raw window field)")
            + f"; {retransmissions} retransmission(s); {unanswered:.0%} of the ACKs that freed "
            "room for a segment were left unanswered. Classes after T-RAT (Zhang et al., "
            "SIGCOMM 2002)."
        )
        evidence: dict[str, Any] = {
            "cause": cause,
            "rate_bps": rate_bps,
            "rtt_s": rtt,
            "flight_max_bytes": flight,
            "window_max_bytes": window,
            "retransmitted_segments": retransmissions,
            "unanswered_ack_fraction": unanswered,
            "windows_count": windows,
            "window_scale_known": known,
        }
        if path is not None and bdp is not None:
            evidence["path_rate_bps"] = path
            evidence["bdp_bytes"] = bdp
            evidence["path_share_ratio"] = rate_bps / path
        return self.finding(
            conn=conn,
            direction=name,
            start_s=start_s,
            end_s=max(end_s, start_s),
            evidence=evidence,
            summary=summary,
            explanation=explanation,
            advice=ADVICE[label],
        )
