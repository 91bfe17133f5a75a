"""Steps of the way back's delay, read against the receiving host's own TCP clock.

A path change can leave the round trip's floor where it was. Where a window larger than the
path's bandwidth-delay product keeps a standing queue at the bottleneck, the round trip is the
window over the rate: a longer path drains the queue by as much as it adds, and a shorter one
fills it. The one-way delays still move: the ACKs' by the way back's share of the change, the
data's by its own share less the queue's. A capture's clock stepped by NTP moves the two
one-way delays apart in the same way, and the merge, which reads the captures' clocks alone,
cannot tell the two (`tracekit.merge.clock.path_steps` calls neither); nor can the sender's
RTT samples, whose floor did not move (`tracekit.detectors._rtt_steps`).

TCP timestamps tell them apart (RFC 7323 3): each host stamps its segments with its own TCP
clock, a counter that runs at a steady rate (1 kHz on Linux, the BSDs and macOS) and is never
stepped. At the sender's capture, an ACK's arrival time less its timestamp value (in seconds
of the receiving host's clock) is the way back's one-way delay plus a constant: its floor
steps where the way back's delay stepped, or where the sender capture's own clock stepped. A
data segment's departure less its own timestamp value (the sending host's TCP clock against
its own capture) steps only with the latter. A step of the first that the second does not
share is the path's.

What this cannot tell: a step of the way out alone (its one-way delay needs the receiver's
capture, and carries the transfer's own queue), a step of fewer than `MIN_TICKS` ticks of the
receiving host's clock (2 ms at 1 kHz), and another flow's queue on the way back, which moves
the ACKs' floor as a longer path would. Without timestamps in both directions it says nothing.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import numpy.typing as npt
from numpy.lib.stride_tricks import sliding_window_view

from tracekit.detectors._rtt_steps import MIN_FILLED_BINS, step_boundaries
from tracekit.merge.clock import (
    MAX_SKEW_PPM,
    MAX_STEP_BINS,
    STEP_BIN_PACKETS,
    STEP_BIN_RTTS,
    STEP_MIN_WAY_FRACTION,
    STEP_SPAN_BINS,
    _bin_minima,
    windowed_min,
)

# A floor is the least of many arrival times less the tick each ACK was stamped in, so it sits
# within a fraction of a tick of the way back's delay; a move of one tick can be the ticks'
# phase against the ACKs, and two cannot.
MIN_TICKS = 2
# A host's TCP clock runs at a nominal rate (RFC 7323 5.4: from 1 ms to 1 s a tick), its
# crystal off by at most MAX_SKEW_PPM: a receiver whose clock's rate, read over the capture,
# is within 1% of the sender's runs at the same nominal rate, and is read at the sender's, the
# rate read against its own capture with no path between. Read from the ACKs themselves, a
# step of their delay in a short capture would tilt it.
SAME_RATE = 0.01
# The sender's clock must hold while the ACKs' floor steps: its own floor moves by less than
# this share of the ACKs' step (a capture clock stepped by NTP moves both by all of it).
SENDER_SHARE = 0.5


@dataclass(frozen=True)
class WayBackStep:
    """One step of the ACKs' one-way delay floor that the sender's clock did not share."""

    at_s: float  # a bin edge after the step, within a bin of where it fell
    change_s: float  # the ACKs' one-way delay after it less before it
    span_s: float  # the time each side's floor was read over


# The rows read a block at a time: the stamps, their ticks and their offsets are held for a
# block, not for the whole direction (a capture of tens of millions of segments).
BLOCK_ROWS = 1 << 20


def _ticks(tsval: npt.NDArray[np.integer], first: int) -> npt.NDArray[np.int64]:
    """Timestamp values as ticks since `first`, across the 32-bit counter's wrap (RFC 7323
    5.2: a value is read modulo 2**32, and within a capture the clock moves by less than half
    of that: 24 days at 1 kHz)."""
    v = tsval.astype(np.int64)
    v -= first
    v &= 0xFFFFFFFF
    v[v >= 1 << 31] -= 1 << 32
    return v


@dataclass(frozen=True)
class _Stamps:
    """One way's stamped rows: their count, their first and last arrivals in capture order,
    their least and most arrivals, the first stamp's value and the last stamp's ticks since
    it."""

    count: int
    first_t: float
    last_t: float
    least_t: float
    most_t: float
    first_tsval: int
    last_ticks: int

    @staticmethod
    def of(t: npt.NDArray[np.float64], rows: npt.NDArray[np.integer], tsval: np.ndarray) -> _Stamps:
        count, first_at, last_at = 0, -1, -1
        least, most = np.inf, -np.inf
        for at in range(0, t.size, BLOCK_ROWS):
            keep = np.flatnonzero(tsval[rows[at : at + BLOCK_ROWS]] != 0)
            if keep.size == 0:
                continue
            if first_at < 0:
                first_at = at + int(keep[0])
            last_at = at + int(keep[-1])
            count += keep.size
            times = t[at : at + BLOCK_ROWS][keep]
            least, most = min(least, float(times.min())), max(most, float(times.max()))
        if count == 0:
            return _Stamps(0, 0.0, 0.0, 0.0, 0.0, 0, 0)
        first = int(tsval[rows[first_at]])
        last = int(_ticks(np.asarray([tsval[rows[last_at]]]), first)[0])
        return _Stamps(count, float(t[first_at]), float(t[last_at]), least, most, first, last)

    def rate(self) -> float:
        """Ticks per second over the whole run of stamps (0 where they do not advance)."""
        span = self.last_t - self.first_t
        return self.last_ticks / span if span > 0 else 0.0


def _floor_bins(
    t: npt.NDArray[np.float64],
    rows: npt.NDArray[np.integer],
    tsval: np.ndarray,
    stamps: _Stamps,
    hz: float,
    lo: float,
    width: float,
    n: int,
) -> npt.NDArray[np.float64]:
    """The least arrival time less its stamp (in seconds of a clock of `hz` ticks) in each of
    n bins of `width` from lo: a way's one-way delay floor plus a constant."""
    out = np.full(n, np.inf)
    for at in range(0, t.size, BLOCK_ROWS):
        stamp = tsval[rows[at : at + BLOCK_ROWS]]
        keep = stamp != 0
        times = t[at : at + BLOCK_ROWS][keep]
        offset = _ticks(stamp[keep], stamps.first_tsval).astype(np.float64)
        offset /= -hz
        offset += times
        np.minimum(out, _bin_minima(times, offset, lo, width, n), out=out)
    return out


def way_back_steps(
    ack_t: npt.NDArray[np.float64],
    ack_rows: npt.NDArray[np.integer],
    data_t: npt.NDArray[np.float64],
    data_rows: npt.NDArray[np.integer],
    tsval: np.ndarray,
    base_rtt_s: float,
) -> tuple[WayBackStep, ...]:
    """The steps of the ACKs' one-way delay floor, read at the sender's capture against the
    receiving host's TCP clock, that the sender's own clock did not share, oldest first.

    `ack_t` and `ack_rows`: the ACKs' arrival times at the sender's capture (s) and their
    packet-table rows; `data_t` and `data_rows` the same of the sender's data; `tsval` the
    packet table's timestamp values, 0 where a packet has none. `base_rtt_s`: the least RTT,
    which sizes the bins as the merge's (4 round trips each: a floor at every scale from a LAN
    to a satellite hop)."""
    acks, data = _Stamps.of(ack_t, ack_rows, tsval), _Stamps.of(data_t, data_rows, tsval)
    if acks.count < 2 or data.count < 2 or not base_rtt_s > 0:
        return ()
    sender_hz = data.rate()
    receiver_hz = acks.rate()
    if not (sender_hz > 0 and receiver_hz > 0):
        return ()
    if abs(receiver_hz / sender_hz - 1) < SAME_RATE:
        receiver_hz = sender_hz
    # Each way's clock offset is a constant: only the floors' moves are read.
    lo = min(acks.least_t, data.least_t)
    span = max(acks.most_t, data.most_t) - lo
    if span <= 0:
        return ()
    sparse = min(acks.count, data.count)
    width = max(STEP_BIN_RTTS * base_rtt_s, span * STEP_BIN_PACKETS / sparse, span / MAX_STEP_BINS)
    n = int(span / width) + 1
    if n < 2 * STEP_SPAN_BINS:
        return ()
    back_bins = _floor_bins(ack_t, ack_rows, tsval, acks, receiver_hz, lo, width, n)
    own_bins = _floor_bins(data_t, data_rows, tsval, data, sender_hz, lo, width, n)
    b_before, b_after = windowed_min(back_bins, STEP_SPAN_BINS)
    o_before, o_after = windowed_min(own_bins, STEP_SPAN_BINS)
    with np.errstate(invalid="ignore"):
        jump, own_jump = b_after - b_before, o_after - o_before
    # Boundary p lies between bins p and p + 1; the windows' filled bins are counted there.
    filled = np.isfinite(back_bins)
    pad = np.zeros(STEP_SPAN_BINS)
    counts = sliding_window_view(np.r_[pad, filled, pad], STEP_SPAN_BINS).sum(axis=1)
    k = np.arange(1, n)
    seen = np.isfinite(jump) & np.isfinite(own_jump)
    # Each side of a step holds ACKs in at least half its bins, as the RTT floor's rule asks.
    seen &= np.minimum(counts[k], counts[k + STEP_SPAN_BINS]) >= MIN_FILLED_BINS
    jump = np.where(seen, jump, 0.0)
    # An eighth of the round trip, as the merge asks of the ACKs' floor; more than the clocks
    # can drift apart across the two windows; and at least MIN_TICKS of the receiver's clock.
    drift = MAX_SKEW_PPM * 1e-6 * 2 * STEP_SPAN_BINS * width
    least = max(STEP_MIN_WAY_FRACTION * base_rtt_s, drift, MIN_TICKS / receiver_hz)
    step = seen & (np.abs(jump) >= least)
    step &= np.abs(np.where(seen, own_jump, 0.0)) < SENDER_SHARE * np.abs(jump)
    # Each standing out of the floors' own noise, one per run of boundaries (as the RTT's).
    return tuple(
        WayBackStep(
            at_s=lo + (p + 1) * width,
            change_s=float(jump[p]),
            span_s=STEP_SPAN_BINS * width,
        )
        for p in step_boundaries(step, jump, back_bins)
    )
