"""window_limited: the flight pinned at a window smaller than the bandwidth-delay product.

A window-based sender keeps at most one window in flight per round trip, so its rate is at most
window / RTT (tracekit.physics.window_limited_rate_bps). When the window that caps the flight is
the receiver's advertised window (receiver-limited) or a constant cap below it (the sender's
socket buffer), and that window is below the path's bandwidth-delay product, the path idles
for part of every round trip: the window, not the path, sets the rate. Cooper et al. size the
window a path needs as rate x RTT (135 Mbit/s x 539 ms = 9,095,625 bytes, window scale shift 8).

The path's rate comes from the ACKs (`_measure.path_rate_bps`): where the sender emitted
segments back to back, the bottleneck spread them out, and the receiver's ACKs come back at the
bottleneck's rate.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from tracekit import physics, units
from tracekit.core.kernels import jit
from tracekit.core.quantile import percentile
from tracekit.core.search import search_sorted
from tracekit.detectors._measure import (
    STALL_RTTS,
    RttPhases,
    achieved_rate_bps,
    answered_share_at,
    findings_per_direction,
    flight_levels,
    known_rows,
    path_rate_bps,
    reader_rhythm_s,
    rtt_phases,
    segment_size_bytes,
    serialisation_s,
)
from tracekit.detectors.base import AnalysisContext, Detector, Evidence
from tracekit.findings import DIRECTIONS, Finding, Severity
from tracekit.series import kind_mask


class WindowLimited(Detector):
    kind = "window_limited"
    per_connection = True
    title = "The window, not the path, limited the rate"
    severity = Severity.WARNING
    evidence = (
        Evidence("limited_by", "", "what pinned the flight", values=("receiver", "sender")),
        Evidence("window_bytes", "bytes", "the window the flight was pinned at"),
        Evidence(
            "pinned_fraction",
            "",
            "share of data segments sent in round trips in which a burst filled it",
        ),
        Evidence(
            "flight_mean_bytes",
            "bytes",
            "bytes in flight on average over the round trips the window filled",
        ),
        Evidence("rtt_s", "s", "the smallest RTT sample"),
        Evidence("achieved_rate_bps", "bit/s", "goodput"),
        Evidence("window_rate_bps", "bit/s", "what the window allows, window x 8 / RTT"),
        Evidence("path_rate_bps", "bit/s", "the path's rate"),
        Evidence(
            "path_rate_source",
            "",
            "where it came from",
            values=("ack_dispersion", "arrival_dispersion", "config"),
        ),
        Evidence("window_needed_bytes", "bytes", "the bandwidth-delay product, path rate x RTT"),
        Evidence("window_scale_shift_needed", "", "the RFC 7323 shift that window needs"),
        Evidence("window_scale_shift_announced", "", "the shift the receiver announced (-1: none)"),
        Evidence("mss_bytes", "bytes", "the sender's usual segment size"),
    )

    measures = frozenset({"ack_answers", "flight_levels", "path_rate", "rtt_steps"})

    @dataclass(frozen=True)
    class Config:
        # The path's rate when the user knows it (e.g. the rate given to `tracekit plan`);
        # 0 means measure it from the ACK dispersion of the capture.
        path_rate_bps: float = 0.0
        # "Pinned": at least half of the data segments left with less than one segment of the
        # window to spare, so the window, not the sender's congestion window, held them back.
        # Above 0: the window is measured on the pinned segments, so some must be.
        min_pinned_fraction: float = field(default=0.5, metadata={"above": 0})
        # Below this the window is not clearly under the BDP: the dispersion estimate of the
        # path's rate is good to a few percent, and a window at 80% of the BDP already leaves
        # a fifth of the path idle. The flight's mean over the round trips the window filled is
        # held to the same bound: with no queue the path is busy the share of the time that
        # mean is of the BDP (Little's law), on a LAN as on a satellite path.
        max_window_bdp_ratio: float = 0.8
        # Fewer segments than a few round trips of a small window say nothing steady.
        min_data_segments: int = 50
        # The sender-side cap: flight within one segment of the same level for this share of
        # sends, at least two segments below the advertised window.
        min_cap_segments: int = 2

    config: Config

    def detect(self, ctx: AnalysisContext) -> Iterator[Finding]:
        return findings_per_direction(ctx, self._direction)

    def _direction(self, ctx: AnalysisContext, conn: int, direction: int, d: Any) -> Finding | None:
        cfg = self.config
        if not ctx.series.window_known.get((conn, direction), False):
            # RFC 7323 2.3: without the SYNs the shift is unknown and the window field is not
            # a byte count; claiming a window limit from it would be a guess.
            return None
        # Counted before any table is sliced (captures of thousands of short connections).
        series = ctx.series
        if series.data_segments(conn, direction) < cfg.min_data_segments or not series.rows(
            "flight", conn, direction
        ):
            return None
        # After a loss the congestion window, not a buffer, caps the flight: a sender-side cap
        # is only claimed for a direction without retransmissions.
        lossless = not kind_mask(d.segments, "retransmission", "partial_retransmission").any()
        mss = segment_size_bytes(d.segments)
        phases = rtt_phases(ctx, d)
        if mss == 0 or phases is None:
            return None
        # The round trip of the path phase that holds most of the flight.
        flight_t = d.flight["t_s"].to_numpy()
        rtt = phases.over(float(flight_t[0]), float(flight_t[-1]))
        fl, rwnd, known = flight_levels(d)
        if fl.size < cfg.min_data_segments:
            return None
        # Sender-limited: a constant cap clearly below the advertised window (only the levels
        # above their 95th percentile are held to find it, not a copy of them all).
        cap = percentile(fl, 95)
        # Receiver-limited: the flight of each burst reached the advertised window.
        flight_t = known_rows(flight_t, known)
        trips = _RoundTrips(flight_t, phases)
        at_rwnd = _per_round_trip(_room_below(rwnd, fl, mss), trips)
        at_cap = _at_cap(fl, rwnd, cap - mss, cfg.min_cap_segments * mss)
        if at_rwnd.mean() >= cfg.min_pinned_fraction:
            limited_by, pinned, window = "receiver", at_rwnd, float(np.median(rwnd[at_rwnd]))
        elif (
            lossless
            and at_cap.mean() >= cfg.min_pinned_fraction
            and answered_share_at(d, cap - mss, _at_once_s(d), mss) >= cfg.min_pinned_fraction
        ):
            limited_by, pinned, window = "sender", at_cap, float(np.median(fl[at_cap]))
        else:
            return None
        rate_path: float | None = float(cfg.path_rate_bps)
        source = "config"
        if cfg.path_rate_bps <= 0:
            rate_path, source = path_rate_bps(d), "ack_dispersion"
        if rate_path is None and ctx.merge is not None:
            # A receiver that acknowledges each burst at once (a stretch ACK, or one delayed
            # until its reader frees the window) leaves no ACK spacing to measure; with its
            # capture too the segments' own arrivals show the bottleneck's spacing.
            rate_path = _arrival_rate_bps(ctx.merge.transmissions_of(conn, direction))
            source = "arrival_dispersion"
        if rate_path is None:
            return None
        bdp = float(physics.bdp_bytes(rate_path, rtt))
        # The window bounds the flight from above, at the moments a burst fills it. A receiver
        # whose application reads slower than the ACK clock frees its buffer (Haas's start/stop)
        # offers its window only in bursts: the sender fills it, waits with little or nothing
        # in flight, and fills it again when a read moves the right edge. Its round trips are
        # pinned, its window may reach the BDP, and still the path idles most of the time. A
        # window at or above the BDP that the ACK clock keeps refilling keeps its whole flight
        # out: the mean stays at the window.
        rows = known_rows(d.data["row"].to_numpy(), known) if len(d.data) == known.size else None
        carried = (
            _mean_flight_bytes(
                d, flight_t, rows, trips, _per_round_trip(pinned, trips), mss, phases
            )
            if rows is not None
            else float(np.inf)
        )
        if min(window, carried) >= cfg.max_window_bdp_ratio * bdp:
            return None
        if limited_by == "sender":
            # Over the round trips the cap held, from its first pinned segment to its last
            # (slow start's waits before it are no window's).
            held_t = flight_t[pinned]
            data_t = d.data["t_s"].to_numpy()
            lo, hi = np.searchsorted(data_t, [held_t[0], held_t[-1]], side="left")
            if not _idles_each_round_trip(data_t[lo : hi + 1], window, bdp, rtt):
                return None
        achieved = achieved_rate_bps(d)
        allows = float(physics.window_limited_rate_bps(window, rtt))
        shift = int(physics.window_scale_shift(min(bdp, physics.MAX_WINDOW_BYTES)))
        row = ctx.connections.iloc[conn]
        receiver_side = "b" if direction == 0 else "a"
        announced = int(row[f"ws_{receiver_side}"])
        times = flight_t
        name = DIRECTIONS[direction]
        how = {
            "config": "as configured",
            "ack_dispersion": "measured from the spacing of the ACKs of back-to-back segments",
            "arrival_dispersion": "measured from the spacing at which segments that left back "
            "to back reached the receiver",
        }[source]
        who = (
            "the receiver's advertised window"
            if limited_by == "receiver"
            else "a constant cap below the advertised window (the sender's socket buffer)"
        )
        summary = (
            f"{name} window-limited by the {limited_by}: {window:,.0f}-byte window, "
            f"{units.rate(achieved)} at RTT {units.duration(rtt)}; the path "
            f"({units.rate(rate_path)}) needs {bdp:,.0f} bytes (window scale shift {shift})"
        )
        in_bursts = window >= cfg.max_window_bdp_ratio * bdp
        held = (
            f"the window reached {window / bdp:.0%} of that only in bursts, and over those "
            f"round trips {carried:,.0f} bytes were in flight on average ({carried / bdp:.0%} "
            "of it): the path idled for the rest"
            + (
                " (the receiver reopened its window no faster than its application read)"
                if limited_by == "receiver"
                else ""
            )
            if in_bursts
            else f"the window is {window / bdp:.0%} of that and the path idles for the rest of "
            "every round trip"
        )
        explanation = (
            f"For {pinned.mean():.0%} of its data segments the sender had {who} full: about "
            f"{window:,.0f} bytes in flight, and no room for another segment. One window per "
            f"round trip of {units.duration(rtt)} allows at most {units.rate(allows)}; the "
            f"transfer achieved {units.rate(achieved)}. The path delivers "
            f"{units.rate(rate_path)} ({how}), "
            f"so keeping it busy takes rate x RTT = {bdp:,.0f} bytes in flight: {held} "
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
            if in_bursts:
                advice += (
                    " A larger buffer helps only as far as the receiving application keeps up: "
                    "a window that reopens as fast as it reads holds the flight below the path "
                    "whatever its size, so let it read at least as fast as the path delivers."
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
                "flight_mean_bytes": carried,
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


class _RoundTrips:
    """Per segment, the round trip it left in, counted in the RTT of the path phase it falls
    in, so the unit is the transfer's own from a LAN to a satellite path. Computed a block of
    the flight at a time each time it is read (`blocks`): never held for the whole flight, and
    nothing sized by the span (a capture's stamps may span billions of round trips)."""

    def __init__(self, t_s: np.ndarray, phases: RttPhases) -> None:
        self.t_s = t_s
        self.rtt0 = float(phases.rtt_s[0])
        self.aligned = phases.aligned(float(t_s[0]), self.rtt0) if t_s.size else phases

    def blocks(self) -> Iterator[tuple[slice, np.ndarray]]:
        """(rows, their round trips) a block of rows at a time, in order."""
        t_s = self.t_s
        for at in range(0, t_s.size, _BLOCK_ROWS):
            block = slice(at, at + _BLOCK_ROWS)
            trip = np.floor((self.aligned.warp(t_s[block]) - t_s[0]) / self.rtt0)
            yield block, trip.astype(np.int64)

    def firsts(self) -> np.ndarray:
        """The rows where a round trip starts: the first row, and each whose round trip is not
        the row's before it."""
        found = [np.zeros(0, dtype=np.int64)]
        before: np.int64 | None = None
        for block, trip in self.blocks():
            change = np.empty(trip.size, dtype=bool)
            change[0] = before is None or trip[0] != before
            np.not_equal(trip[1:], trip[:-1], out=change[1:])
            found.append(np.flatnonzero(change) + block.start)
            before = trip[-1]
        return np.concatenate(found)


def _per_round_trip(reached: np.ndarray, trips: _RoundTrips) -> np.ndarray:
    """Per segment, whether the flight reached the window within its round trip (`trips`).

    A sender the window holds fills it each time an ACK frees room (RFC 9293 3.8.6.2.1), but
    the capture point may lie behind a queue in the sending host (the qdisc, a shaped NIC, up
    to the millisecond of the pacing rate that TCP small queues lets wait there): segments TCP
    has sent wait there unseen, and the captured flight stays that far below the window until
    the queue drains, which it does at least once in every round trip the window binds (the
    window lets out no more than the ACKs free). A round trip in which the flight reached the
    window is pinned whole; one that never reached it was held by the congestion window or
    the application.
    """
    # The round trips that hold a segment that reached the window, in order; each segment is
    # pinned where its own round trip is one of them. As wide as searchsorted's positions,
    # which take into them in place.
    hit = np.unique(
        np.concatenate(
            [np.zeros(0, dtype=np.int64)]
            + [np.unique(trip[reached[block]]) for block, trip in trips.blocks()]
        )
    ).astype(np.intp)
    pinned = np.zeros(reached.size, dtype=bool)
    if hit.size == 0:
        return pinned
    for block, trip in trips.blocks():
        found = search_sorted(hit, trip)
        np.take(hit, found, out=found, mode="clip")
        pinned[block] = found == trip
    return pinned


# Rows of the flight taken at once: a few megabytes of temporaries, however long the flight.
_BLOCK_ROWS = 1 << 20


def _room_below(rwnd: np.ndarray, fl: np.ndarray, mss: int) -> np.ndarray:
    """Per segment, whether its burst's flight came within a segment of the window."""
    out = np.empty(fl.size, dtype=bool)
    for at in range(0, fl.size, _BLOCK_ROWS):
        block = slice(at, at + _BLOCK_ROWS)
        out[block] = (rwnd[block] - fl[block]) < mss
    return out


def _at_cap(fl: np.ndarray, rwnd: np.ndarray, low: float, margin: float) -> np.ndarray:
    """Per segment, whether its burst's flight is at the cap (at least `low`) with at least
    `margin` bytes of window left."""
    out = np.empty(fl.size, dtype=bool)
    for at in range(0, fl.size, _BLOCK_ROWS):
        block = slice(at, at + _BLOCK_ROWS)
        out[block] = (fl[block] >= low) & (rwnd[block] - fl[block] >= margin)
    return out


def _mean_flight_bytes(
    d: Any,
    t_s: np.ndarray,
    row: np.ndarray,
    trips: _RoundTrips,
    pinned: np.ndarray,
    mss: int,
    phases: RttPhases,
) -> float:
    """The bytes in flight on average over the pinned round trips and the waits on a shut
    window after them. Infinite with no pinned round trip (no flight to judge).

    `t_s`, `row` and `trips` are the segments' times, packet-table rows and round trips.
    Each pinned round trip counts from its first segment until the first of the next round
    trip that sent one, or until an ACK left room for a segment under the window's right
    edge, if that came first: a wait on a shut window is the window's, one with room under it
    the sender's own (an application with nothing written, a congestion window). A wait of
    STALL_RTTS round trips (of the path phase it falls in) or more that outlasts the rhythm of
    such waits is the receiving application's pause, and not counted: a window of any size
    stays shut while its reader does not read (zero_window_stall reports such a pause where
    the sender's persist timer probed it). The flight is
    followed through every ACK and data segment, not only at the sends: a sender that waits
    on its window with nothing in flight sends nothing to sample it by.
    """
    if t_s.size == 0 or not pinned.any() or d.acks.empty:
        return float(np.inf)
    first = trips.firsts()
    held = pinned[first]
    # Times that step back (a hostile capture's stamps) count as no time.
    start = np.maximum.accumulate(t_s[first])
    nxt = np.r_[start[1:], max(float(t_s[-1]), float(start[-1]))]
    # The highest byte sent when each round trip's last segment left, and the first ACK after
    # it whose right edge leaves a segment's room past that: the window open again.
    data, acks = d.data, d.acks
    ack_row = acks["row"].to_numpy()
    ack_t = acks["t_s"].to_numpy()
    edge = np.maximum.accumulate(acks["edge_rel"].to_numpy())
    last = np.r_[first[1:], t_s.size] - 1
    sent_end = np.maximum.accumulate(data["end_rel"].to_numpy())
    data_rows = data["row"].to_numpy()
    high = sent_end[np.searchsorted(data_rows, row[last], side="right") - 1]
    after = np.searchsorted(ack_row, row[last], side="right")
    opened = np.searchsorted(edge, high + mss, side="left")
    reopen = np.where(
        opened < after,  # room already when the last segment left: the sender's own stop
        t_s[last],
        np.where(opened < ack_t.size, ack_t[np.minimum(opened, ack_t.size - 1)], np.inf),
    )
    stop = np.clip(reopen, t_s[last], nxt)
    stalled = (stop - t_s[last]) >= STALL_RTTS * phases.at(t_s[last])
    # Waits that come on a rhythm are a slow reader's start/stop (each read reopens the window
    # within its cycle): only a wait that outlasts the median time between them is a stall.
    stalled &= (stop - t_s[last]) > reader_rhythm_s(t_s[last][stalled])
    stop[stalled] = t_s[last][stalled]
    del edge, sent_end
    at = np.empty(2 * start.size)
    at[0::2], at[1::2] = start, stop
    np.maximum.accumulate(at, out=at)
    area = _flight_area_at(
        data_rows,
        data["t_s"].to_numpy(),
        data["end_rel"].to_numpy(),
        ack_row,
        ack_t,
        acks["ack_rel"].to_numpy(),
        float(data["seq_rel"].min()),
        at,
        STANDING_RTTS * float(np.max(phases.rtt_s)),
    )
    span = at[1::2] - at[0::2]
    seconds = float(span[held].sum())
    if seconds <= 0:
        return float(np.median(d.flight["flight_bytes"].to_numpy()))
    return float((area[1::2] - area[0::2])[held].sum() / seconds)


# Round trips without an ACK or a departure after which a flight stands: the bytes in flight
# are no longer being carried. A path that carries a flight returns an ACK at least every other
# segment (RFC 5681 4.2, RFC 1122 4.2.3.2) within about a round trip of its departure, and a
# queue, however long, only spaces those ACKs by the bottleneck's service time; two round trips
# of the slowest path phase with neither means the receiver is holding its acknowledgement (its
# delayed-ACK timer: a full buffer's few reopened segments are not owed at once, and 40 ms or
# more is tens of round trips on a LAN) or the flight was lost and waits on a timeout. Either
# way the path idles then, whatever the flight's size, on a LAN as on a satellite path.
STANDING_RTTS = 2.0


@jit
def _flight_area_at(
    data_row: np.ndarray,
    data_t: np.ndarray,
    data_end: np.ndarray,
    ack_row: np.ndarray,
    ack_t: np.ndarray,
    ack_rel: np.ndarray,
    first: float,
    at: np.ndarray,
    standing_s: float,
) -> np.ndarray:  # pragma: no cover - compiled
    # The bytes in flight (the highest byte sent less the ACK line) integrated over time, from
    # the first packet to each time of `at` (ascending): one walk of the data segments and
    # ACKs in capture order, the output as long as `at`. A flight counts until `standing_s`
    # after the last event, an ACK or a departure (see STANDING_RTTS), and no longer: past
    # that it stands unacknowledged.
    out = np.zeros(at.size)
    n_data, n_ack = data_row.size, ack_row.size
    i = j = k = 0
    high = line = first
    flight = 0.0
    area = 0.0
    clock = 0.0
    heard = 0.0  # when the last ACK came or the last segment left
    started = False
    while k < at.size:
        take_data = i < n_data and (j >= n_ack or data_row[i] < ack_row[j])
        if take_data:
            t = data_t[i]
        elif j < n_ack:
            t = ack_t[j]
        else:
            t = np.inf
        if not t <= at[k]:
            if started and at[k] > clock:
                out[k] = area + flight * max(min(at[k], heard + standing_s) - clock, 0.0)
            else:
                out[k] = area
            k += 1
            continue
        if not started:
            clock = heard = t
            started = True
        if t > clock:
            area += flight * max(min(t, heard + standing_s) - clock, 0.0)
            clock = t
        heard = max(heard, t)
        if take_data:
            high = max(high, float(data_end[i]))
            i += 1
        else:
            line = max(line, float(ack_rel[j]))
            j += 1
        flight = max(high - line, 0.0)
    return out


def _idles_each_round_trip(t: np.ndarray, window: float, bdp: float, rtt: float) -> bool:
    """Whether the sender's departures leave the idle time a window below the BDP leaves.

    A window of W bytes under a BDP of B lets the sender keep the path busy W / B of each
    round trip: the rest it waits, with the window full, for the ACK of the window's first
    bytes (Antony et al.: one window per round trip, sent as fast as the ACKs allow). That wait
    comes once a round trip, in one gap of about (1 - W / B) RTT, and the gaps of that kind
    fill (1 - W / B) of the time in all. A pacer whose rate times the RTT is the same flight
    spreads it over the whole round trip at its own interval: its flight is as constant, but
    no window holds it, and its idle time is cut into one gap per burst, RTT / interval of
    them a round trip (Linux lets out 2**-10 s of its pacing rate at a time, so a gap of about
    a millisecond on a path of tens). A gap counts as the window's wait when it outlasts both
    twice the mean spacing (a window's segments leave at the ACKs' spacing, far closer) and a
    quarter of the wait the window implies: a round trip's wait split by one stray ACK or
    interrupt still counts, a pacer's interval a fraction of the round trip does not. Both
    bounds are the transfer's own; where a round trip holds only a few of the pacer's intervals
    (a path of a few ms), its gaps pass the second, and the ACKs' answers (`answered_share_at`,
    a pacer's come on its timer) tell it instead. Half the idle time the window implies
    is enough, the round trips' own jitter aside. At a window of 0.8 BDP at the most
    (`max_window_bdp_ratio`) each round trip's wait is a fifth of it, longer than two mean
    spacings wherever a round trip carries more than ten segments.
    """
    if t.size < 3 or bdp <= 0 or window >= bdp:
        return True
    span = float(t[-1] - t[0])
    wait = (1 - window / bdp) * rtt
    long = max(2 * span / (t.size - 1), 0.25 * wait)
    idle = 0.0
    # A block of gaps at a time: no copy of the column's differences.
    for at in range(1, t.size, _BLOCK_ROWS):
        gaps = t[at : at + _BLOCK_ROWS] - t[at - 1 : at - 1 + min(_BLOCK_ROWS, t.size - at)]
        idle += float(gaps[gaps > long].sum())
    return idle >= 0.5 * (1 - window / bdp) * span


def _at_once_s(d: Any) -> float:
    """How soon after an ACK a sender held by its buffer answers it: at once, within two
    segments' serialisation (the NIC's queue ahead of the capture), or a quarter of the ACKs'
    spacing where that is longer (a host's wake-up on a LAN).

    A buffer's cap is a window: each ACK that frees room under it is answered as soon as the
    host runs (RFC 5681 3: the ACK clocks out data). A pacer's flight is as constant (its rate
    times the RTT), but its departures keep the pacer's timer, set by the departures before and
    not by the ACK: the next segment leaves up to a pacing interval after the ACK (half the
    ACKs' spacing where each ACK covers two segments), at a delay set by the RTT's phase
    against that interval. The same "at once" tells rate_limit_cause's pacer from an ACK clock.
    """
    data_t = d.data["t_s"].to_numpy()
    serialisation = serialisation_s(data_t) or 0.0
    ack_t = d.acks["t_s"].to_numpy()
    spacing = float(np.median(np.diff(ack_t))) if ack_t.size > 1 else 0.0
    return max(2 * serialisation, 0.25 * spacing)


# Samples of the arrival spacing needed for a rate: fewer than a few pairs are one burst's
# accident (an interrupt at the receiver, a cross-traffic packet between the two).
MIN_ARRIVAL_PAIRS_COUNT = 3


def _arrival_rate_bps(tx: Any, compression_ratio: float = 0.5) -> float | None:
    """The bottleneck's payload rate from the receiver's capture: receiver-based packet pair
    (Allman and Paxson, SIGCOMM 1999, 4; Paxson's PBM). Two segments that left back to back,
    in less than `compression_ratio` of the time between their arrivals, were spaced by the
    path: the second's payload over that time is the bottleneck's rate. The median of such
    pairs; None with fewer than MIN_ARRIVAL_PAIRS_COUNT (or no receiver capture rows).
    """
    if len(tx) < MIN_ARRIVAL_PAIRS_COUNT + 1:
        return None
    tx = tx[tx["fate"] == "delivered"].sort_values("sender_t_s")
    sent = tx["sender_t_s"].to_numpy(dtype=np.float64)
    arrived = tx["receiver_t_s"].to_numpy(dtype=np.float64)
    size = tx["len"].to_numpy(dtype=np.float64)
    ds, da = np.diff(sent), np.diff(arrived)
    with np.errstate(invalid="ignore"):
        spread = (da > 0) & (ds >= 0) & (ds < compression_ratio * da)
    if spread.sum() < MIN_ARRIVAL_PAIRS_COUNT:
        return None
    return float(np.median(size[1:][spread] * 8 / da[spread]))
