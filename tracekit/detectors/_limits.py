"""What held the sender back at each moment, as the Linux kernel accounts it (tcp_chrono).

Linux keeps, per socket, how long the sender was busy (data unacknowledged or unsent), and of
that how long it was stalled by the receive window and by its send buffer (tcp_chrono_start,
net/ipv4/tcp_output.c; TCP_INFO's tcpi_busy_time, tcpi_rwnd_limited, tcpi_sndbuf_limited).
The rest of the time the application gave it nothing to send. This module reads the same
account off the sender's capture, so that the verdict can be checked against the kernel's:

- `application`: every byte sent is acknowledged and nothing new goes out: the sender's queues
  are empty (the kernel stops its busy clock when they empty, tcp_chrono_stop). A pause no
  longer than the sender's own answer to an ACK (its turnaround, see `turnaround_s`) is not
  counted so: a sender with data queued takes that long too, and on a LAN, whose RTT is
  microseconds, such pauses (the writer holding the socket, the host's scheduling) fill much
  of the transfer while the kernel's queue is never empty. Nor are two pauses the capture
  cannot tell from a queue with data in it (`limit_states` counts them busy, and can leave
  them to the application, the most its share can be): one no longer than the sender takes
  to send the burst that ends it (`copy_pauses`: the host copying that burst in), and one
  after a burst cut at whole segments (`full_tail_pauses`: a pacer's timer; a write's end
  leaves a short segment).
- `receive_window`: the room left under the receiver's advertised right edge (SND.UNA + SND.WND,
  RFC 9293 3.8.6.2.1) is too small for the sender to use: less than a segment (tcp_snd_wnd_test),
  or less than the burst Linux waits for before it sends into a window (tcp_tso_should_defer
  counts that wait as the window's). A window with more room than that after the sender has
  answered an ACK did not hold it: Linux asks its congestion window first (tcp_write_xmit:
  tcp_cwnd_test, then tcp_snd_wnd_test), and the congestion window had stopped it, as in slow
  start, when a doubling round nearly fills the window and leaves it a segment or two of room
  that the sender does not take. That burst is 1 ms of the
  sender's pacing rate (tcp_tso_autosize, sk_pacing_shift 10), 1.2 windows per RTT in
  congestion avoidance (tcp_update_pacing_rate), at least two segments and at most one 64 KiB
  GSO burst, or a third of the window (tcp_tso_win_divisor), past which Linux sends anyway.
  Both are the transfer's own scale: its segment, its window over its RTT. Measured just
  before each ACK arrives, once the sender has answered the ACK before (a capture after the
  sender's queue sees its answer a few serialisation times late, and the kernel judged it at
  the ACK), except while more of that answer is still to leave than TCP small queues let into
  the device (the same 1 ms of pacing rate): the rest waits in the sender's queue for the
  device to drain, busy time, not the window's; nor while the sender's pacer holds it after
  a burst (Linux asks its pacer first): the window's time starts when the pacer would have
  let the next burst go (`pacer_holds`).
- `network`: data in flight and room under the window: the congestion window or pacing held
  it, the path's business (slow start, loss recovery, a full bottleneck, a pacing rate).

The send buffer is not told here: from the wire it looks like a congestion window that stopped
growing (the detectors that look for a flight pinned below every window say so).
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import NamedTuple

import numpy as np
import numpy.typing as npt
import pandas as pd

from tracekit.core.kernels import jit
from tracekit.core.quantile import quantile_in_blocks
from tracekit.core.search import search_sorted
from tracekit.detectors._measure import TURNAROUND_QUANTILE, running_max_at, turnaround_s
from tracekit.series import Direction, kind_mask

APPLICATION, RECEIVE_WINDOW, NETWORK = 0, 1, 2
# The burst Linux waits for before it sends into a window: 2**-10 s of its pacing rate
# (tcp_tso_autosize with sk_pacing_shift 10), which is 120% of a window per smoothed RTT in
# congestion avoidance (tcp_update_pacing_rate); at least 2 segments (tcp_min_tso_segs), at most
# one GSO burst of 64 KiB.
BURST_S = 2.0**-10
PACING_RATIO = 1.2
MIN_BURST_SEGMENTS = 2
GSO_MAX_BYTES = 65536.0
# Linux sends without waiting for that burst once the room is a third of the window
# (tcp_tso_should_defer, sysctl tcp_tso_win_divisor, 3 by default): a window's room past that
# is not the window's doing whatever the burst, as on a short path with a small window.
TSO_WIN_DIVISOR = 3.0
# And to each turn Linux adds a share of a GSO burst that halves for every 2**9 us of the
# path's least RTT (tcp_tso_autosize: gso_max_size >> (min_rtt_us >> tcp_tso_rtt_log), the
# sysctl 9 by default, since Linux 5.18): a whole 64 KiB burst on a LAN's round trip of under
# 512 us, 16 KiB at 1 ms, less than a segment from 3.5 ms, nothing past 16 ms. On short paths
# the skbs TCP small queues count (`_queue_limit`) hold that much more.
TSO_RTT_UNIT_S = 2.0**9 * 1e-6
# The least RTT Linux keeps may read up to one tick of its TCP timestamp clock (1 ms, RFC 7323
# 5.4's 1 ms to 1 s) short of the capture's: where retransmitted data is acknowledged, Karn's
# rule leaves only the timestamp's echo to time it (tcp_rtt_tsopt_us).
TS_TICK_S = 1e-3
STATES = ("application", "receive_window", "network")


# RFC 7323 2.3: a window scale shift is at most 14.
MAX_SHIFT = 14


def least_shift(direction: Direction, mss: int) -> int:
    """The smallest window scale shift the capture allows when the handshake is not in it.

    A sender never has more in flight than the receiver's window (RFC 9293 3.8.6.2.1): each
    data segment's flight over the raw window field advertised before it bounds the shift from
    below. Flights of a segment or less are left out (a probe into a zero window goes past it
    by design). 0 when no flight passes its raw window.
    """
    flight = direction.flight
    fl = flight["flight_bytes"].to_numpy().astype(np.float64)
    raw = flight["rwnd_bytes"].to_numpy().astype(np.float64)
    usable = (raw > 0) & (fl > mss)
    if not usable.any():
        return 0
    ratio = float(np.max(fl[usable] / raw[usable]))
    if ratio <= 1.0:
        return 0
    return min(int(np.ceil(np.log2(ratio))), MAX_SHIFT)


def limit_states(
    direction: Direction,
    mss: int,
    window_known: bool,
    rtt_s: float,
    least: int | None = None,
    tell_queued: bool = True,
) -> tuple[npt.NDArray[np.float64], npt.NDArray[np.float64], npt.NDArray[np.int8]]:
    """Runs of one state: (start_s, end_s, state), from the first data segment until the ACK
    of the last byte (or the last event), covering that time without gaps.

    A pause the capture cannot tell from a queue with data in it (`queued_pauses`) is the
    network's (busy), as the kernel counts a queue not empty; with `tell_queued` False it stays
    the application's, the most that share can be.

    Without a known window scale the advertised window is a raw field, not bytes (RFC 7323
    2.3): only a zero window is certain, so only a zero window counts as the window's doing.
    Given `least`, a shift the window scale is at least (`least_shift`), the raw windows are
    taken at that shift instead: the smallest windows the capture allows, so the receive
    window's time is then the most it can have been.
    """
    acks, data = direction.acks, direction.data
    if data.empty:
        empty = np.zeros(0)
        return empty, empty, np.zeros(0, np.int8)
    ack_line = acks["ack_rel"].to_numpy().astype(np.int64, copy=False)
    window = acks["win_bytes"].to_numpy().astype(np.int64, copy=False)
    edge = acks["edge_rel"].to_numpy().astype(np.int64, copy=False)
    # The handshake's own window scale: the capture holds the connection's first round.
    from_handshake = window_known
    if not window_known and least is not None:
        window = window << least
        edge = ack_line + window
        window_known = True
    data_t = data["t_s"].to_numpy()
    data_end = data["end_rel"].to_numpy().astype(np.int64, copy=False)
    # The kernel's account of the window's time follows Linux's own pacing schedule.
    holds, line, release = pacer_holds(direction, mss, rtt_s, scheduled=True)
    # Frame numbers are only compared, to merge the two in capture order: as they are stored.
    start, end, state = _limit_runs(
        acks["frame"].to_numpy(),
        acks["t_s"].to_numpy(),
        ack_line,
        edge,
        window,
        data["frame"].to_numpy(),
        data_t,
        data_end,
        data["len"].to_numpy(),
        holds,
        line,
        release,
        float(mss),
        float(rtt_s),
        smoothed_rtt_at(direction, acks["t_s"].to_numpy(), rtt_s),
        turnaround_s(direction),
        window_known,
        from_handshake,
    )
    if tell_queued:
        state[queued_pauses(direction, start, end, state)] = NETWORK
    return start, end, state


def queued_pauses(
    direction: Direction,
    start_s: npt.NDArray[np.float64],
    end_s: npt.NDArray[np.float64],
    state: npt.NDArray[np.int8],
) -> npt.NDArray[np.int64]:
    """The application runs (indices into the runs of `limit_states`) the capture cannot tell
    from a queue with data in it: `full_tail_pauses` and `copy_pauses`, both judged on the
    runs as given."""
    data = direction.data
    if data.empty:
        return np.zeros(0, np.int64)
    data_t = data["t_s"].to_numpy()
    data_end = data["end_rel"].to_numpy().astype(np.int64, copy=False)
    length = data["len"].to_numpy()
    full = full_tail_pauses(
        start_s, state, data_t, data_end, length, wire_segment_bytes(length, direction.peer_mss)
    )
    first = int(data["seq_rel"].min())
    rate = line_rate(data_t, length)
    copy = copy_pauses(start_s, end_s, state, data_t, data_end, first, rate)
    return np.union1d(full, copy)


# The share of the sender's departures at least as fast as its line: back-to-back segments are
# a large share of any window-limited sender's (each ACK releases two or more, RFC 5681 3.1),
# and the fastest tenth of the pairs is the line, not a burst of a faster ACK clock.
LINE_RATE_QUANTILE = 0.9


def line_rate(data_t: npt.NDArray[np.float64], length: npt.NDArray[np.integer]) -> float:
    """The rate in bytes per second at which the sender hands segments to its line: the
    LINE_RATE_QUANTILE of each segment's bytes over its gap from the one before (a
    super-segment's bytes over its gap, with segmentation offload). 0 without two. The rates
    are made a block at a time, and only the fastest tenth is held (`quantile_in_blocks`)."""
    got = quantile_in_blocks(lambda: _gap_rates(data_t, length), LINE_RATE_QUANTILE)
    return 0.0 if got is None else got


# Segments taken at once by the per-segment steps here: a few megabytes of temporaries,
# however long the transfer.
_BLOCK_ROWS = 1 << 20


def _gap_rates(
    data_t: npt.NDArray[np.float64], length: npt.NDArray[np.integer]
) -> Iterator[npt.NDArray[np.float64]]:
    """Each segment's bytes over its gap from the one before, where that gap is positive: a
    block of segments at a time."""
    for at in range(1, data_t.size, _BLOCK_ROWS):
        t = data_t[at : at + _BLOCK_ROWS]
        gap = t - data_t[at - 1 : at - 1 + t.size]
        keep = gap > 0
        yield length[at : at + t.size][keep] / gap[keep]


# RFC 9293 3.7.1: the send MSS every IPv4 host takes without an MSS option. A divisor of
# segment lengths below it is a coincidence of short tails, not the size segments are cut at.
LEAST_MSS_BYTES = 536


# An IP packet's payload is at most 65,535 bytes (RFC 791, RFC 8200 without jumbograms): the
# lengths are counted in a table of that many bins, a larger one (a jumbogram) sorted instead.
MAX_COUNTED_LENGTH_BYTES = 65_535


def wire_segment_bytes(length: npt.NDArray[np.int64], peer_mss: int = 0) -> int:
    """The size the sender cuts its data at (its MSS on the wire): the greatest common
    divisor of the data segments' lengths, the most common first, leaving out a length that
    would bring it below LEAST_MSS_BYTES (a short segment: the end of a write).

    Segmentation offload (TSO, GSO) hands the capture super-segments of whole MSS; their
    common divisor is the MSS even where no single-MSS segment is seen. A pacer that always
    sends the same number of segments at once leaves a multiple of it: no segment is larger
    than the MSS option its receiver sent (`peer_mss`, RFC 9293 3.7.1; 0 when not seen), so
    the size is then the largest divisor of that multiple within it. 0 when no length reaches
    LEAST_MSS_BYTES.
    """
    if length.size and int(length.max()) <= MAX_COUNTED_LENGTH_BYTES:
        # np.unique's answer (the lengths in order and how often each), by counting: no sorted
        # copy of a column of the direction's length, nor the widened one np.bincount makes of
        # narrower integers (a block at a time).
        counts = np.zeros(int(length.max()) + 1, dtype=np.int64)
        for at in range(0, length.size, _BLOCK_ROWS):
            counts += np.bincount(length[at : at + _BLOCK_ROWS], minlength=counts.size)
        counts[0] = 0
        sizes = np.flatnonzero(counts)
        counts = counts[sizes]
    else:
        sizes, counts = np.unique(length[length > 0], return_counts=True)
    divisor = 0
    # One step per distinct length (a few to a few hundred), not per segment.
    for size in sizes[np.argsort(-counts, kind="stable")]:
        common = int(np.gcd(divisor, int(size)))
        if common >= LEAST_MSS_BYTES:
            divisor = common
    if peer_mss >= LEAST_MSS_BYTES and divisor > peer_mss:
        # The fewest equal parts that fit: divisor // parts is the largest such size.
        parts = -(-divisor // peer_mss)
        while divisor % parts:
            parts += 1
        divisor //= parts
    return divisor


def full_tail_pauses(
    start_s: npt.NDArray[np.float64],
    state: npt.NDArray[np.int8],
    data_t: npt.NDArray[np.float64],
    data_end: npt.NDArray[np.int64],
    length: npt.NDArray[np.integer],
    segment: int,
) -> npt.NDArray[np.int64]:
    """The application runs (indices into the runs) that follow a burst whose last new
    segment is a whole number of `segment`s (`wire_segment_bytes`).

    A sender sends a segment shorter than its MSS only when nothing more is queued (RFC 9293
    3.7.4, Nagle; Linux pushes the partial tail at the end of a write, tcp_push): a short last
    segment says the queue emptied, and the pause after it is the application's. A burst cut
    at whole segments says nothing of the kind: Linux's pacer sends bursts of whole segments
    (tcp_tso_autosize) and waits on its timer with the rest queued, as TCP small queues do;
    only a write that happens to be a multiple of the MSS ends so with its queue empty. The
    capture cannot tell them apart; the kernel counts the pacer's wait busy.
    """
    app = np.flatnonzero(state == APPLICATION)
    if app.size == 0 or data_t.size == 0 or segment <= 0:
        return app[:0]
    before = _rank(data_t, start_s[app], "right") - 1
    # The segment that last raised (or reached) the highest byte sent, at each departure: the
    # last new data, retransmissions below it left out.
    tail = length[_last_new(data_end, np.maximum(before, 0))]
    return app[(before >= 0) & (tail > 0) & (tail % segment == 0)]


def _rank(data_t: npt.NDArray[np.float64], at_s: npt.NDArray[np.float64], side: str) -> np.ndarray:
    """np.searchsorted(np.maximum.accumulate(data_t), at_s, side): the departures before (or
    at) each time, times that step back (a hostile capture's stamps) taken at the highest so
    far. A block at a time: the highest so far ascends, so its elements before a time are the
    sum of each block's."""
    rank = np.zeros(at_s.size, dtype=np.int64)
    high = -np.inf
    for at in range(0, data_t.size, _BLOCK_ROWS):
        block = np.maximum.accumulate(data_t[at : at + _BLOCK_ROWS])
        np.maximum(block, high, out=block)
        high = block[-1]
        rank += search_sorted(block, at_s, side)
    return rank


def _last_new(data_end: npt.NDArray[np.int64], rows: npt.NDArray[np.int64]) -> np.ndarray:
    """Per row of `rows`, the last segment at or before it that raised (or reached) the
    highest byte sent so far; a block at a time."""
    out = np.zeros(rows.size, dtype=np.int64)
    high = last = None
    for at in range(0, data_end.size, _BLOCK_ROWS):
        block = data_end[at : at + _BLOCK_ROWS]
        top = np.maximum.accumulate(block)
        if high is not None:
            np.maximum(top, high, out=top)
        high = top[-1]
        new = np.where(block < top, 0, np.arange(at, at + block.size))
        if last is not None:
            new[0] = max(new[0], last)
        np.maximum.accumulate(new, out=new)
        last = new[-1]
        inside = (rows >= at) & (rows < at + block.size)
        out[inside] = new[rows[inside] - at]
    return out


def after_short_tail(
    data_end: npt.NDArray[np.int64], length: npt.NDArray[np.integer], segment: int
) -> npt.NDArray[np.uint8]:
    """Per data segment, whether the new data sent last before it ended short of a whole
    `segment` (`wire_segment_bytes`): the sender's queue had emptied there (RFC 9293 3.7.4,
    Nagle; Linux pushes a write's partial tail, tcp_push), so what it sends next came from
    the application, not from a queue a timer held. Retransmissions below the highest byte
    sent are not new data. A bit a segment (`bit_at`), a block at a time: no column as long
    as the transfer but the answer, an eighth of a byte a segment."""
    n = data_end.size
    out = np.zeros((n + 7) >> 3, dtype=np.uint8)
    if n < 2 or segment <= 0:
        return out
    high = None
    last_short = False
    for at in range(0, n, _BLOCK_ROWS):
        block = data_end[at : at + _BLOCK_ROWS]
        top = np.maximum.accumulate(block)
        if high is not None:
            np.maximum(top, high, out=top)
        high = top[-1]
        new = block >= top
        short = new & (length[at : at + block.size] % segment != 0)
        # The last new segment at or before each row, -1 where none in the block.
        last = np.where(new, np.arange(block.size), -1)
        np.maximum.accumulate(last, out=last)
        state = np.where(last >= 0, short[np.maximum(last, 0)], last_short)
        flags = np.empty(block.size, dtype=bool)
        flags[0] = last_short if at else False
        flags[1:] = state[:-1]
        # Blocks start on whole bytes of bits (_BLOCK_ROWS is a multiple of 8).
        out[at >> 3 : (at + block.size + 7) >> 3] = np.packbits(flags, bitorder="little")
        last_short = bool(state[-1])
    return out


def bit_at(bits: npt.NDArray[np.uint8], rows: npt.NDArray[np.int64]) -> npt.NDArray[np.bool_]:
    """The flags of `rows` from flags kept a bit a row, in `np.packbits`' little bit order."""
    return ((bits[rows >> 3] >> (rows & 7).astype(np.uint8)) & 1).astype(bool)


def from_empty_queue(direction: Direction) -> npt.NDArray[np.uint8]:
    """Per data segment, whether the sender sent it from an empty queue: the new data before
    it ended short of a segment (`after_short_tail`: nothing more was queued) and every byte
    sent was acknowledged when it left (`_all_acknowledged`: nothing in flight). The kernel's
    busy clock had stopped (tcp_chrono_stop), and the application's next write released it,
    neither a pacer's timer nor an ACK. A bit a segment (`bit_at`); once per direction."""

    def compute() -> npt.NDArray[np.uint8]:
        data, acks = direction.data, direction.acks
        data_end = data["end_rel"].to_numpy().astype(np.int64, copy=False)
        length = data["len"].to_numpy()
        short = after_short_tail(data_end, length, wire_segment_bytes(length, direction.peer_mss))
        short &= _all_acknowledged(
            acks["frame"].to_numpy(),
            acks["ack_rel"].to_numpy().astype(np.int64, copy=False),
            data["frame"].to_numpy(),
            data_end,
        )
        return short

    return direction.memo("from_empty_queue", compute)


@jit
def _all_acknowledged(
    ack_frame: np.ndarray, ack_line: np.ndarray, data_frame: np.ndarray, data_end: np.ndarray
) -> np.ndarray:  # pragma: no cover - compiled
    """Per data segment, whether every byte sent before it was acknowledged by then (ACKs and
    data merged in capture order by frame number). A bit a segment (`bit_at`)."""
    n_ack, n_data = ack_frame.size, data_frame.size
    out = np.zeros((n_data + 7) >> 3, dtype=np.uint8)
    una = np.int64(-1)
    nxt = np.int64(-1)
    i = 0
    for j in range(n_data):
        while i < n_ack and ack_frame[i] < data_frame[j]:
            una = max(una, ack_line[i])
            i += 1
        if nxt <= una:
            out[j >> 3] |= np.uint8(1 << (j & 7))
        nxt = max(nxt, data_end[j])
    return out


def copy_pauses(
    start_s: npt.NDArray[np.float64],
    end_s: npt.NDArray[np.float64],
    state: npt.NDArray[np.int8],
    data_t: npt.NDArray[np.float64],
    data_end: npt.NDArray[np.int64],
    first: int,
    line_bytes_per_s: float = 0.0,
) -> npt.NDArray[np.int64]:
    """The application runs (indices into the runs) no longer than the sender takes to hand
    the burst that ends them to its line: the bytes it sends from the run's end until its next
    pause, at its line rate (`line_rate`, bytes per second; 0 when unknown).

    Linux starts its busy clock when a write's first buffer enters the write queue
    (tcp_skb_entail, tcp_chrono_start), before the bytes are copied in; the wire sees them only
    once the copy ends (tcp_push at the end of the write, or of a full GSO buffer). A host
    copies at memory speed, no slower than it feeds its line, so a pause no longer than its
    burst takes at the line rate may be that copy, the queue not empty: the capture cannot tell
    it from an idle writer, and the kernel counts it busy. A pause longer than that is more
    than a copy of the burst takes. On a CPU-bound LAN a 64 KiB write takes tens of
    microseconds at the line's rate, as long as the host's pauses between writes; on a WAN the
    line is the sender's NIC, and a writer that pauses between writes pauses longer than its
    write takes at that rate, however close to the path's rate it writes (the path's rate, or
    the transfer's rate while busy, would take such pauses for copies: a write of 17 ms at
    30 Mbit/s every 40 ms at RTT 10 ms idles 12 ms).
    """
    app = np.flatnonzero(state == APPLICATION)
    if app.size == 0 or data_t.size == 0:
        return app[:0]

    # Bytes sent by a time: the highest end of the data sent then (capture order, its clock
    # made monotonic where it steps back), `first` before any.
    def sent(departed: np.ndarray) -> np.ndarray:
        return np.where(departed > 0, running_max_at(data_end, np.maximum(departed - 1, 0)), first)

    # The burst ending a pause: from the pause's end (its first departure included) until
    # the next pause starts, or the last byte.
    at_end = sent(_rank(data_t, end_s[app], "left"))
    last = np.array([data_t.size])
    burst = np.r_[sent(_rank(data_t, start_s[app[1:]], "right")), sent(last)] - at_end
    if line_bytes_per_s <= 0:
        return app[:0]
    return app[(end_s[app] - start_s[app]) * line_bytes_per_s <= burst]


# A pacer is told from at least this many bursts it held past the moment they could have left:
# the least sample whose spread says anything (eight, as for the paced windows' starts).
MIN_HELD_BURSTS = 8
# The host's least answer to an ACK, read as this quantile of the delays of the starts after
# an ACK: the floor of an ACK clock's answers, past a stray early start or two.
HOST_FLOOR_QUANTILE = 0.1
# An answer as late as this many of the host's floor is still the host's at once: its own path
# through the stack, then as long again waiting its turn.
ANSWER_SPREAD = 2.0
# Linux forgives a burst sent late, after its pacer's time had passed (the window or the ACKs
# held it), up to half of its pacing interval: the next burst may leave half an interval
# after it (tcp_update_skb_after_send: "take into account OS jitter", len_ns -= min(len_ns/2,
# credit)). A burst that answered an ACK left late so; one the timer released left on time.
LATE_CREDIT = 0.5


def pacer_holds(
    direction: Direction, mss: int, rtt_s: float, scheduled: bool = False
) -> tuple[npt.NDArray[np.float64], float, float]:
    """How long the sender's pacer held it after each of its bursts: (seconds from each
    burst's start until the pacer would let the next one go, the line rate in bytes per
    second and the release time the bursts are told by, as `_limit_runs` groups them again).
    The holds are empty where no pacer is told.

    Linux asks its pacer before its windows (tcp_write_xmit: tcp_pacing_check, then
    tcp_cwnd_test, then tcp_snd_wnd_test): while the pacer holds the sender after a burst
    (SO_MAX_PACING_RATE, BBR; for B bytes at pacing rate P, B/P, tcp_update_skb_after_send),
    the kernel counts the sender busy even where the receive window has no room; the window's
    time starts once the pacer would have let the next burst go. The capture shows the pacer's
    interval only where it ran past the moment the next burst could have left: a burst that
    starts later than the host's turnaround after the ACK before it, or after the burst before
    it with no ACK between, was released by the timer, and its start is where the pacer let go
    (an exact reading of the interval, in seconds per byte of the burst before). A burst that
    answers an ACK at once says only that the pacer had let go by then (the interval is at
    most that long). Those are the two sides of a left-censored sample, and the Kaplan-Meier
    estimate of it (`_censored_means`) gives each answered burst the interval expected below
    its bound. A sender without a pacer leaves no burst to the timer but by its host's own
    jitter, each after an ACK: those tell no pacer (`_timer_shown`). Nor does a host whose
    turnaround outlasts the round trip (a LAN): its own pace hides any timer's. Nor a writer's
    pause: a burst after a short tail with every byte acknowledged (`EMPTIED`) left when the
    application wrote, and its wait reads the writer, not the pacer. Nor a loss timer's: a
    burst that resends with no ACK since the burst before (`RESENT`) was released by the
    retransmission timer or the tail loss probe's (RFC 6298, RFC 8985: two round trips and
    more), whose wait is the timer's, not the pacer's. Nor a wait longer than a pacer keeps
    after its burst (`_longest_holds`): a host that answers the ACK which opens a full window
    a little later than its turnaround, after a round trip's wait, left on that ACK, and the
    round trip was the window's. Nor a wait with no ACK between after a burst shorter than
    a pacer lets go a turn where the window has room (`_least_bursts`).

    With `scheduled`, a burst that answered an ACK is held instead as Linux's own schedule
    holds it (`_scheduled_holds`), where the pacing rate can be read near it: the kernel's
    account of the window's time follows that schedule, and the censored sample's estimate
    gives each such burst a hold drawn from every phase of the transfer.
    """

    def compute() -> tuple[npt.NDArray[np.float64], float, float]:
        bursts = pacer_bursts(direction, mss, rtt_s)
        if bursts is None:
            return np.zeros(0), 0.0, 0.0
        rate = _delivery_rates(direction, bursts, rtt_s)
        most = _longest_holds(bursts.size, rate, mss, rtt_s)
        least = _least_bursts(rate, mss)
        holds = _expected_holds(
            bursts.start,
            bursts.size,
            bursts.flags,
            bursts.queue,
            timer_paired(bursts),
            most,
            least,
            mss,
        )
        if scheduled and holds.size:
            linux = _scheduled_holds(bursts, most, least, rtt_s)
            # Only where the censored estimate gave a hold (a wait read as the pacer's, not
            # a write's, a loss timer's or the device's) and the next burst answered an ACK.
            answered = np.zeros(holds.size, dtype=bool)
            answered[:-1] = ((bursts.flags[1:] & ANSWERED) > 0) & (holds[:-1] > 0)
            answered &= np.isfinite(linux)
            # The next burst left by then: the pacer had let go.
            gap = np.maximum(np.diff(bursts.start, append=bursts.start[-1]), 0.0)
            holds = np.where(answered, np.minimum(linux, gap), holds)
        return holds, bursts.line, bursts.release

    # Once per direction, RTT and reading: the verdict's states and its paced windows reuse it.
    return direction.memo(f"pacer_holds:{mss}:{rtt_s!r}:{scheduled}", compute)


# A pacing rate read at the timer's releases holds for the round trips around it: Linux sets
# it on each ACK from what a round trip measures (tcp_update_pacing_rate: 1.2 windows per
# smoothed RTT, the window growing by the round; BBR's gain, changed by the round, times its
# bandwidth filter's maximum), so two round trips either side hold the rate as it stands, on
# a path of a millisecond as over a satellite hop.
RATE_SPAN_RTTS = 2.0
# The rate is read this high among the readings within the span. A pacer never lets a burst
# go sooner than its rate allows, so a reading is at most the rate; it falls short where the
# wait had another cause as well (an answer to an ACK the host gave later than its release
# time). The top quarter is left out for the capture clock's own jitter, which makes a wait
# read shorter as often as longer.
RATE_QUANTILE = 0.75


def _scheduled_holds(
    bursts: Bursts,
    most: npt.NDArray[np.float64],
    least: npt.NDArray[np.float64],
    rtt_s: float,
) -> npt.NDArray[np.float64]:
    """Per burst, how long Linux's pacer held the sender after its start, at the pacing rate
    read near it (`_rates_near`); NaN where no rate is read within RATE_SPAN_RTTS round trips.

    The rate is read where the timer released two bursts running (neither answered an ACK,
    nor was a write's or a loss timer's): the second waited the first's bytes at the rate
    exactly, with no credit (tcp_update_skb_after_send). Not a wait longer than a pacer keeps
    (`most`), nor one after a burst shorter than a pacer's turn with no ACK between (`least`).
    The schedule (`_linux_schedule`) then gives every burst's hold, late ones included."""
    start, size, flags = bursts.start, bursts.size, bursts.flags
    n = start.size
    if n < 3 or rtt_s <= 0:
        return np.full(n, np.nan)
    gap = np.diff(start)
    timer = ((flags & ANSWERED) == 0) & ((flags & NOT_PACED) == 0)
    clean = timer[:-1] & timer[1:] & (gap > 0) & (gap <= most[:-1])
    # The first burst has no schedule before it.
    clean[0] = False
    clean &= ((flags[1:] & AFTER_ACK) > 0) | (size[:-1] >= least[:-1])
    if int(clean.sum()) < MIN_HELD_BURSTS:
        return np.full(n, np.nan)
    # Times made monotonic where the capture's clock steps back: the spans are read in order.
    times = np.maximum.accumulate(start)
    rate = _rates_near(
        times[:-1][clean],
        size[:-1][clean] / gap[clean],
        times,
        rtt_s,
        RATE_SPAN_RTTS,
        RATE_QUANTILE,
    )
    return _linux_schedule(start, size, rate)


@jit
def _rates_near(
    read_t: np.ndarray,
    read: np.ndarray,
    t: np.ndarray,
    rtt_s: float,
    span_rtts: float,
    quantile: float,
) -> np.ndarray:  # pragma: no cover - compiled
    """Per time t (ascending), the quantile of the readings (at ascending read_t) within
    span_rtts round trips of its round trip: the transfer cut into round trips, each reading
    the rounds around it. NaN where none is read there. One quantile per round trip that has
    a time in it, not one per time."""
    out = np.full(t.size, np.nan)
    if read.size == 0 or t.size == 0:
        return out
    origin = min(t[0], read_t[0])
    reach = np.int64(np.ceil(span_rtts))
    lo = 0
    hi = 0
    current = np.int64(-1)
    value = np.nan
    for i in range(t.size):
        b = np.int64((t[i] - origin) / rtt_s)
        if b != current:
            current = b
            while lo < read.size and np.int64((read_t[lo] - origin) / rtt_s) < b - reach:
                lo += 1
            if hi < lo:
                hi = lo
            while hi < read.size and np.int64((read_t[hi] - origin) / rtt_s) <= b + reach:
                hi += 1
            value = np.quantile(read[lo:hi], quantile) if hi > lo else np.nan
        out[i] = value
    return out


@jit
def _linux_schedule(
    start: np.ndarray, size: np.ndarray, rate: np.ndarray
) -> np.ndarray:  # pragma: no cover - compiled
    """Per burst, from its start until Linux's pacer lets the next go, at rate[i] bytes per
    second (NaN where the rate is not known; the schedule goes on at the rates around it).

    tcp_update_skb_after_send: a burst sent at its time leaves the next its bytes' time at
    the rate later; one sent late (the window or the ACKs held it past its time) earns the
    lateness as credit, up to half of that ("take into account OS jitter": len_ns -=
    min(len_ns / 2, credit)). A burst the capture shows leaving before its scheduled time
    was let go by then: the schedule starts afresh from it, with no credit."""
    n = start.size
    out = np.full(n, np.nan)
    known = rate[np.isfinite(rate)]
    if known.size == 0:
        return out
    fallback = np.median(known)
    due = -np.inf
    for i in range(n):
        credit = start[i] - due if due < start[i] and np.isfinite(due) else 0.0
        r = rate[i] if np.isfinite(rate[i]) else fallback
        interval = size[i] / r
        due = start[i] + interval - min(interval / 2, credit)
        if np.isfinite(rate[i]):
            out[i] = due - start[i]
    return out


class Bursts(NamedTuple):
    """The sender's bursts in capture order, as `_bursts` groups them: each one's start
    (seconds), bytes and flags (ANSWERED, AFTER_ACK); the line rate (bytes per second) and
    release time (seconds) they are told by, and the bytes TCP small queues let into the
    device."""

    start: npt.NDArray[np.float64]
    size: npt.NDArray[np.float64]
    flags: npt.NDArray[np.int8]
    line: float
    release: float
    queue: float


def pacer_bursts(direction: Direction, mss: int, rtt_s: float) -> Bursts | None:
    """The sender's bursts (`Bursts`), once per direction and RTT; None where no timer can be
    told from the host's own pace (no data or ACKs, no line rate, or a host whose turnaround
    outlasts the round trip)."""

    def compute() -> Bursts | None:
        data, acks = direction.data, direction.acks
        turnaround = turnaround_s(direction)
        if data.empty or acks.empty or turnaround > rtt_s:
            return None
        data_t = data["t_s"].to_numpy()
        length = data["len"].to_numpy()
        line = line_rate(data_t, length)
        if line <= 0:
            return None
        # A segment released when it could leave leaves within the host's turnaround of that
        # moment, and no sooner than two of its serialisations (the NIC's queue ahead of the
        # capture spaces back-to-back segments by one).
        release = max(turnaround, 2 * mss / line)
        ack_t = acks["t_s"].to_numpy()
        walk = (
            acks["frame"].to_numpy(),
            data["frame"].to_numpy(),
            ack_t,
            data_t,
            length,
            from_empty_queue(direction),
            kind_mask(data, "retransmission", "partial_retransmission"),
            line,
        )
        start, size, flags = _bursts(*walk, release)
        # Where the bursts keep a timer's interval, the turnaround read the timer's phase and
        # the host answers within its floor (`_timer_release`): a burst later than that after
        # its ACK is the timer's, not an answer.
        timed = _timer_release(start, flags, ack_t, mss / line)
        if timed < release:
            release = timed
            start, size, flags = _bursts(*walk, release)
        # A loss timer fires two smoothed round trips after the last send at the soonest (the
        # tail loss probe, RFC 8985 and tcp_schedule_loss_probe; the retransmission timer,
        # RFC 6298, later still), and the smoothed RTT is never below the least: a resend
        # sooner than that after the burst before was the pacer's, in loss recovery as ever.
        sooner = np.diff(start, prepend=-np.inf) < 2 * rtt_s
        flags[sooner & ((flags & RESENT) > 0)] &= ~np.int8(RESENT)
        # What TCP small queues let into the device (`_queue_limit`), at the rate 1.2 windows
        # per RTT: the flight the sender keeps.
        flight = direction.flight["flight_bytes"].to_numpy()
        window = float(np.median(flight)) if flight.size else 0.0
        queue = _queue_limit(window, mss, rtt_s, rtt_s)
        return Bursts(start, size, flags, line, release, queue)

    return direction.memo(f"pacer_bursts:{mss}:{rtt_s!r}", compute)


def _timer_release(
    start: npt.NDArray[np.float64],
    flags: npt.NDArray[np.int8],
    ack_t: npt.NDArray[np.float64],
    serialisation: float,
) -> float:
    """The release time of a host whose bursts keep a timer's interval: its floor answer to
    an ACK (ANSWER_SPREAD times the HOST_FLOOR_QUANTILE of the delays from the ACK before each
    burst that follows one), and at least one `serialisation` (the segment its device may
    still be sending); infinite where the bursts keep no timer's interval.

    The turnaround (`turnaround_s`) is a quantile of the delays from ACKs to the data after
    them, the host's own answer where the ACKs released the data. A pacer releases each burst
    its interval after the one before (an hrtimer), at whatever phase against the ACKs its
    rate leaves: its starts keep their spacing, within the two serialisations the device's
    queue ahead of the capture spaces them by, and their delays from the ACKs spread as wide
    as the ACKs' spacing. Under an ACK clock a start moves with its ACK, and the spacing of
    the starts spreads at least as wide as the delays. Where the spacing spreads less than
    the delays (a pacer at the path's rate on a path of a few ms, its ACKs in step with it),
    the turnaround read the timer's phase, as long as the ACKs' spacing, and would call most
    of the timer's releases answers; the host's own answer is its floor, which the timer's
    phase does not move. Both spreads are the transfer's own (its line's serialisation, its
    ACKs' delays), on a path of a millisecond as over a satellite hop; a host whose
    turnaround outlasts the round trip (a LAN) has no bursts read at all (`pacer_bursts`).
    At least MIN_HELD_BURSTS starts, as every reading of the timer."""
    after = np.flatnonzero((flags[1:] & AFTER_ACK) > 0) + 1
    if after.size < MIN_HELD_BURSTS or ack_t.size == 0:
        return np.inf
    k = search_sorted(ack_t, start[after], side="right") - 1
    delay = start[after] - ack_t[np.maximum(k, 0)]
    between = start[after] - start[after - 1]
    spread = float(np.subtract(*np.percentile(between, [75, 25])))
    if spread > 2 * serialisation or spread >= float(np.subtract(*np.percentile(delay, [75, 25]))):
        return np.inf
    return max(ANSWER_SPREAD * float(np.quantile(delay, HOST_FLOOR_QUANTILE)), serialisation)


def timer_paired(bursts: Bursts) -> npt.NDArray[np.bool_]:
    """Per burst but the last, whether the wait until the next one was the pacer's timer, told
    between two ACKs: Linux sets the pacing rate on an ACK (tcp_update_pacing_rate, BBR's
    cong_control), so between two ACKs every burst the timer holds waits for its bytes at one
    rate. Two waits running, with no ACK since the burst before either, that read the same rate
    (the second's start within the host's release time of where the first's rate puts it) and
    outlast what the device could still have had to send (TCP small queues' bytes at the line
    rate, past the end of the burst before) were the timer's: a wait on the device ends as the
    qdisc drains, at no rate of its own, and one on the application at the writer's."""
    start, size, flags = bursts.start, bursts.size, bursts.flags
    n = start.size
    paired = np.zeros(max(n - 1, 0), dtype=bool)
    if n < 3:
        return paired
    gap, scale = _read_per_byte(start, size, flags)
    # A wait that ends in the application's write (`EMPTIED`) is the writer's, not the pacer's
    # timer's, and one that ends in a loss timer's resend (`RESENT`) that timer's.
    no_ack = (flags[1:] & (AFTER_ACK | NOT_PACED)) == 0
    drain = bursts.queue / bursts.line + bursts.release
    long = no_ack & (gap - size[:-1] / bursts.line > drain)
    # Each long wait against the next one's, read at its rate.
    rate_gap = np.divide(gap[:-1], scale[:-1], out=np.zeros(n - 2), where=scale[:-1] > 0)
    pair = long[:-1] & long[1:] & (np.abs(gap[1:] - size[1:-1] * rate_gap) <= bursts.release)
    paired[:-1] |= pair
    paired[1:] |= pair
    return paired


def _read_per_byte(
    start: npt.NDArray[np.float64], size: npt.NDArray[np.float64], flags: npt.NDArray[np.int8]
) -> tuple[npt.NDArray[np.float64], npt.NDArray[np.float64]]:
    """Per burst but the last: the wait until the next one starts, and the bytes it reads the
    pacer's interval by (the interval per byte at the pacing rate is wait / bytes): the burst's
    own, halved where it answered an ACK, for it was sent late and earns the pacer's credit."""
    credit = np.where(flags[:-1] & ANSWERED, LATE_CREDIT, 1.0)
    return np.diff(start), size[:-1] * credit


def timer_waits(
    direction: Direction, mss: int, rtt_s: float
) -> tuple[npt.NDArray[np.float64], npt.NDArray[np.float64]]:
    """The waits the pacer's timer is told by between two ACKs (`timer_paired`): each one's
    start (the burst before it, seconds) and length (seconds)."""
    bursts = pacer_bursts(direction, mss, rtt_s)
    if bursts is None:
        return np.zeros(0), np.zeros(0)
    paired = timer_paired(bursts)
    return bursts.start[:-1][paired], np.diff(bursts.start)[paired]


def pacer_held(
    direction: Direction, mss: int, rtt_s: float
) -> tuple[npt.NDArray[np.float64], npt.NDArray[np.float64]]:
    """How long the pacer held the sender after each burst (`pacer_holds`), up to the next
    burst's start: each burst's start (seconds) and that time (seconds). Empty where no pacer
    is told."""
    holds, _, _ = pacer_holds(direction, mss, rtt_s)
    bursts = pacer_bursts(direction, mss, rtt_s)
    if holds.size == 0 or bursts is None:
        return np.zeros(0), np.zeros(0)
    # The last burst is followed by none: the transfer's end, not the pacer, came next.
    gap = np.diff(bursts.start, append=bursts.start[-1])
    return bursts.start, np.minimum(holds, np.maximum(gap, 0.0))


@jit
def _starts_burst(
    t: float, prev_end: float, serialisation: float, after_ack: bool, release: float
) -> bool:  # pragma: no cover - compiled
    """Whether a data segment leaving at `t` starts a burst, the one before it having left the
    line at `prev_end`. A segment that follows it back to back (within one serialisation: the
    NIC's queue ahead of the capture) is the same burst, an ACK between them or not: the kernel
    queued them together (a TSO burst, or the answer to an ACK the NIC was still busy with).
    After an ACK any later one starts a burst; with no ACK between, one later than the release
    time (the host's turnaround) does: a timer, not the host, let it go."""
    gap = t - prev_end
    return gap > release or (after_ack and gap > serialisation)


# `_bursts` flags: the burst answered an ACK (left within the release time of it), an ACK
# came since the burst before, the new data before it ended short of a segment (the queue
# had emptied: the application released it, `after_short_tail`), and it resends with no ACK
# since the burst before (a loss timer released it).
ANSWERED, AFTER_ACK, EMPTIED, RESENT = 1, 2, 4, 8
# Neither an ACK nor the pacer released these bursts.
NOT_PACED = EMPTIED | RESENT


@jit
def _bursts(
    ack_frame: np.ndarray,
    data_frame: np.ndarray,
    ack_t: np.ndarray,
    data_t: np.ndarray,
    length: np.ndarray,
    emptied: np.ndarray,
    resent: np.ndarray,
    line: float,
    release: float,
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:  # pragma: no cover - compiled
    """The sender's bursts in capture order: (start, bytes, flags), where `_starts_burst`
    starts one (the segment before ended at the `line` rate); `_limit_runs` groups them by the
    same rule. A burst whose first segment is `emptied` (`from_empty_queue`'s bits) is EMPTIED; one
    whose first segment is `resent` with no ACK since the burst before is RESENT.
    Counted first, then filled: the arrays are as long as the bursts."""
    n_ack, n_data = ack_frame.size, data_frame.size
    count = 0
    i = 0
    after_ack = False
    prev_end = -np.inf
    for j in range(n_data):
        while i < n_ack and ack_frame[i] < data_frame[j]:
            after_ack = True
            i += 1
        if _starts_burst(data_t[j], prev_end, length[j] / line, after_ack, release):
            count += 1
        prev_end = data_t[j] + length[j] / line
        after_ack = False
    start = np.empty(count)
    size = np.zeros(count)
    flags = np.zeros(count, dtype=np.int8)
    b = -1
    i = 0
    after_ack = False
    last_ack = -np.inf
    prev_end = -np.inf
    for j in range(n_data):
        while i < n_ack and ack_frame[i] < data_frame[j]:
            after_ack = True
            last_ack = ack_t[i]
            i += 1
        t = data_t[j]
        if _starts_burst(t, prev_end, length[j] / line, after_ack, release) and b + 1 < count:
            b += 1
            start[b] = t
            if after_ack:
                flags[b] = AFTER_ACK | (ANSWERED if t - last_ack <= release else 0)
            if (emptied[j >> 3] >> (j & 7)) & 1:
                flags[b] |= EMPTIED
            if resent[j] and not after_ack:
                flags[b] |= RESENT
        if b >= 0:
            size[b] += length[j]
        prev_end = t + length[j] / line
        after_ack = False
    return start, size, flags


# ACKs a delivery rate is read over at the least: one or two say little of a rate, whose ACKs
# may come in bunches (stretch ACKs, a receiver's interrupt coalescing).
RATE_ACKS = 8


def _delivery_rates(direction: Direction, bursts: Bursts, rtt_s: float) -> npt.NDArray[np.float64]:
    """Per burst, the rate the ACKs delivered at over the round trip before it (back to the
    RATE_ACKS-th ACK where the round trip holds fewer: a path of a few ms carries a few ACKs
    per round trip), in bytes per second; 0 before any byte was acknowledged."""
    acks = direction.acks
    if acks.empty or rtt_s <= 0:
        return np.zeros(bursts.start.size)
    ack_t = acks["t_s"].to_numpy()
    line = np.maximum.accumulate(acks["ack_rel"].to_numpy())

    def acked_by(t: npt.NDArray[np.float64]) -> npt.NDArray[np.float64]:
        k = search_sorted(ack_t, t, side="right") - 1
        return np.where(k >= 0, line[np.maximum(k, 0)], 0).astype(np.float64)

    k = search_sorted(ack_t, bursts.start, side="right") - 1
    since = np.minimum(bursts.start - rtt_s, ack_t[np.clip(k - RATE_ACKS, 0, None)])
    span = bursts.start - since
    delivered = acked_by(bursts.start) - acked_by(since)
    return np.divide(delivered, span, out=np.zeros(span.size), where=span > 0)


def _longest_holds(
    size: npt.NDArray[np.float64], rate: npt.NDArray[np.float64], segment: float, least_rtt: float
) -> np.ndarray:
    """Per burst of `size` bytes, the longest a pacer can hold the sender after it: twice the
    burst's time at the least pacing rate it allows, and at least twice BURST_S, the least a
    Linux pacer's burst lasts (tcp_tso_autosize); infinite where nothing bounds the rate.

    Linux paces at a rate set from the congestion window and the smoothed RTT, twice the
    window per RTT in slow start and 1.2 times after (tcp_update_pacing_rate), and BBR at
    gains of its bandwidth estimate, the delivery rate's maximum: a pacer runs at least as
    fast as the data it delivered (`_delivery_rates`). And it lets go one turn at a time: 2**-10
    s of its rate and the short path's share of a GSO burst (`_rtt_allowance`), or two
    segments where that is more (tcp_tso_autosize, tcp_min_tso_segs); the share is read at
    the least RTT less a timestamp tick (TS_TICK_S), the least Linux's own can be. A burst of
    more than two segments and more than that share, let go at once, was one turn of a rate at
    least its bytes past the share per 2**-10 s, and the pacer holds the sender that turn's
    time at most. A longer wait after a burst, on a path of any length, is a window's (the
    round trip for the ACKs of a full window, as each round of a long path's slow start
    waits) or the application's, not the timer's: the factor of two leaves room for a
    delivery rate read over one round trip of ACKs that came in bunches."""
    wait = np.divide(size, rate, out=np.full(rate.size, np.inf), where=rate > 0)
    share = _rtt_allowance(least_rtt - TS_TICK_S)
    turn = size > max(MIN_BURST_SEGMENTS * segment, share)
    wait[turn] = np.minimum(wait[turn], size[turn] * BURST_S / (size[turn] - share))
    return 2 * np.maximum(wait, BURST_S)


def _least_bursts(rate: npt.NDArray[np.float64], segment: float) -> npt.NDArray[np.float64]:
    """Per burst, the fewest bytes a pacer lets go before its timer holds the sender while the
    window has room for more: more than one segment (tcp_min_tso_segs: two; fq's own pacing
    two MTUs, its quantum, above its low_rate_threshold of 550 kbit/s), and half of BURST_S
    at the delivery rate before the burst (`_delivery_rates`), up to half a GSO burst.

    Linux sends 2**-10 s of its pacing rate a turn (tcp_tso_autosize, at most one 64 KiB GSO
    burst), and the rate is at least the delivery rate (see `_longest_holds`; BBR's lowest
    gain past its start is 0.75): the half leaves room for that gain and for a delivery rate
    read over ACKs that came in bunches, as the longest hold's factor of two does. Both in
    the transfer's own segments and rate, on any path."""
    turn = np.minimum(rate * BURST_S, GSO_MAX_BYTES) / 2
    return np.maximum(turn, np.nextafter(segment, np.inf))


def _expected_holds(
    start: npt.NDArray[np.float64],
    size: npt.NDArray[np.float64],
    flags: npt.NDArray[np.int8],
    queue_bytes: float,
    paired: npt.NDArray[np.bool_],
    most: npt.NDArray[np.float64],
    least: npt.NDArray[np.float64],
    segment: float,
) -> npt.NDArray[np.float64]:
    """Per burst, the pacer's hold after its start (see `pacer_holds`): read where the next
    burst waited on the timer, expected where it answered an ACK at once; empty where no timer
    shows itself among those waits (`_timer_shown`) or fewer than MIN_HELD_BURSTS waited.

    A burst that waits with no ACK since the one before, in a release (the bursts between two
    ACKs) larger than TCP small queues let into the device (`queue_bytes`), may wait on the
    device, not on a pacer (the kernel queued the release at the ACK; tcp_small_queue_check):
    its reading is left out, neither exact nor bound, unless its wait is one the timer is
    told by there (`paired`, from `timer_paired`).
    """
    n = start.size
    if n < 2:
        return np.zeros(0)
    gap, scale = _read_per_byte(start, size, flags)
    # A capture's clock may step back, and a burst of no bytes reads nothing: left out.
    usable = (scale > 0) & (gap >= 0)
    x = np.divide(gap, scale, out=np.zeros(n - 1), where=usable)
    exact = (flags[1:] & ANSWERED) == 0
    # The bytes of each release: the bursts since the last ACK (an ACK starts the next).
    release = np.cumsum((flags & AFTER_ACK) > 0)
    total = np.bincount(release, weights=size)
    queued = exact & ((flags[1:] & AFTER_ACK) == 0) & (total[release[1:]] > queue_bytes)
    queued &= ~paired
    # A wait that ends in the application's write (`EMPTIED`) reads the writer, and one that
    # ends in a loss timer's resend (`RESENT`) that timer, not the pacer: neither exact nor a
    # bound, and no hold.
    read = usable & ~queued & ((flags[1:] & NOT_PACED) == 0)
    # A timer's release after a wait longer than a pacer keeps (`_longest_holds`) reads a
    # window or the writer: neither exact nor a bound.
    read &= ~(exact & (gap > most[:-1]))
    # A wait with no ACK since a burst shorter than a pacer lets go (`_least_bursts`), whose
    # next bytes the same window already let go, was not the pacer's timer's: a device's
    # shaper whose watchdog fires late cuts the release it was handed anywhere, and so does
    # the host's scheduling. Neither exact nor a bound.
    short = ((flags[1:] & AFTER_ACK) == 0) & (size[:-1] < least[:-1])
    read &= ~(exact & short)
    if not _timer_shown(flags, read & exact, size, segment):
        return np.zeros(0)
    held = _censored_means(x[read], exact[read])
    if held is None:
        return np.zeros(0)
    expected = np.zeros(n - 1)
    expected[read] = held
    holds = np.zeros(n)
    holds[:-1] = expected * scale
    return holds


def _timer_shown(
    flags: npt.NDArray[np.int8],
    released: npt.NDArray[np.bool_],
    size: npt.NDArray[np.float64],
    segment: float,
) -> bool:
    """Whether the bursts the timer released (`released`, per burst but the first: read
    exactly) show a timer rather than an ACK clock's late answers.

    Only a timer releases a burst with no ACK since the one before (the application's write,
    a loss timer and the device's queue are left out of what is read): a pacer faster than
    its ACKs does so between them, and every pacer in its first round, whose initial window
    has no ACK to release it. A pacer slower than its ACKs starts each burst after one, late
    by up to its interval, and so more of them late than a host's own tail: the host's
    turnaround covers TURNAROUND_QUANTILE of its answers, and the rest, its scheduling's
    tail, is the most an ACK clock leaves late. An ACK clock's late answers are exact
    readings all the same; imputed to every burst that answered an ACK at once, they would
    hold the sender busy where its window held it. At least MIN_HELD_BURSTS either way.

    A wait between two ACKs is the host's tail too where few bursts show one: a device's
    shaper whose watchdog fires late, or TCP small queues' completion run late, cuts the
    release an ACK let go anywhere in it, so the bursts before such waits have every size up
    to the release's. A pacer's do not: Linux lets go one turn of its pacing rate each time
    (tcp_tso_autosize, whole segments), the same number of them while the rate holds, so a
    pacer whose window lets it wait between ACKs only now and then (a receive window near its
    flight) still shows itself by bursts of one size, less than a segment apart, on any path.
    """
    after = (flags[1:] & AFTER_ACK) > 0
    # The bursts that could be read at all: not a write's or a loss timer's.
    readable = (flags[1:] & NOT_PACED) == 0
    between = released & ~after
    count = int(between.sum())
    if count >= MIN_HELD_BURSTS:
        if count > (1 - TURNAROUND_QUANTILE) * int(readable.sum()):
            return True
        low, high = np.quantile(size[:-1][between], [TURN_LOW_QUANTILE, 1 - TURN_LOW_QUANTILE])
        if high - low < segment:
            return True
    late = int((released & after).sum())
    answering = int((after & readable).sum())
    return late >= MIN_HELD_BURSTS and late > (1 - TURNAROUND_QUANTILE) * answering


# The bursts a pacer's turns are read by, but a tenth at either end: a turn the window cut
# short, or one sent as the pacing rate changed (an ACK sets it), is not the rate's own.
TURN_LOW_QUANTILE = 0.1


def _censored_means(
    x: npt.NDArray[np.float64], exact: npt.NDArray[np.bool_]
) -> npt.NDArray[np.float64] | None:
    """Each reading where `exact`, else its expected value below its bound, under the
    Kaplan-Meier estimate of the left-censored sample (sorted, then a running product: no
    step per reading). None with fewer than MIN_HELD_BURSTS exact readings."""
    m = x.size
    if int(exact.sum()) < MIN_HELD_BURSTS:
        return None
    # Left-censored (an answered burst: the interval is at most x) becomes right-censored in
    # -x; sorted ascending in -x, i.e. from the longest interval down. Each step works in
    # place and lets go of what it no longer needs: a burst's few columns, not dozens.
    order = np.argsort(-x, kind="stable")
    # The hazard at each exact reading: one over the readings at or below it.
    survive = exact[order].astype(np.float64)
    survive /= m - np.arange(m, dtype=np.float64)
    np.subtract(1.0, survive, out=survive)
    np.cumprod(survive, out=survive)
    # What is left below the shortest interval read exactly may lie anywhere below it, down to
    # no hold at all: it is given none, the least the pacer can have held. A sender with no
    # pacer has only its host's jitter to read, and most of its bursts answer sooner.
    rest = float(survive[-1])
    mass = np.empty(m)
    mass[0] = 1.0 - survive[0]
    np.subtract(survive[:-1], survive[1:], out=mass[1:])
    del survive
    # Ascending in x: the mass and its moment at or below each interval.
    mass = mass[::-1]
    xs = x[order[::-1]]
    del order
    below = np.cumsum(mass)
    mass *= xs
    moment = np.cumsum(mass)
    del mass
    k = np.searchsorted(xs, x, side="right") - 1
    del xs
    none = k < 0
    np.maximum(k, 0, out=k)
    within = below[k]
    within[none] = 0.0
    within += rest
    expected = moment[k]
    expected[none] = 0.0
    del below, moment, k, none
    np.divide(expected, within, out=expected, where=within > 0)
    expected[within <= 0] = 0.0
    return np.where(exact, x, expected)


# RFC 6298's gain for the smoothed RTT (alpha, 1/8), which Linux keeps (tcp_rtt_estimator).
SRTT_GAIN = 0.125


def smoothed_rtt_at(
    direction: Direction, at_s: npt.NDArray[np.float64], least_s: float
) -> npt.NDArray[np.float64]:
    """The sender's smoothed RTT as of each time in `at_s` (RFC 6298: each sample moves it by
    SRTT_GAIN), from the direction's RTT samples in time order; never below `least_s`, and that
    before the first sample.

    Linux sets its pacing rate from the smoothed RTT, not the least one (tcp_update_pacing_rate:
    1.2 windows per SRTT), so the bytes it sends a turn (tcp_tso_autosize) and lets into the
    device (tcp_small_queue_check) shrink as a standing queue lengthens the round trip: behind a
    buffer many times the BDP, a path's RTT of 2 ms reads 50."""
    samples = direction.rtt
    out = np.full(at_s.size, float(least_s))
    if samples.empty or at_s.size == 0:
        return out
    order = np.argsort(samples["t_s"].to_numpy(), kind="stable")
    sample_t = samples["t_s"].to_numpy()[order]
    srtt = (
        pd.Series(samples["rtt_s"].to_numpy()[order])
        .ewm(alpha=SRTT_GAIN, adjust=False)
        .mean()
        .to_numpy()
    )
    k = search_sorted(sample_t, at_s, side="right") - 1
    has = k >= 0
    out[has] = np.maximum(srtt[k[has]], least_s)
    return out


def state_seconds(
    start_s: npt.NDArray[np.float64], end_s: npt.NDArray[np.float64], state: npt.NDArray[np.int8]
) -> npt.NDArray[np.float64]:
    """Seconds spent in each state (indexed by APPLICATION, RECEIVE_WINDOW, NETWORK)."""
    # numpy's stub types bincount as intp whatever the weights; with weights it is float64.
    return np.bincount(state, weights=end_s - start_s, minlength=len(STATES))  # type: ignore[return-value]


@jit
def _limit_runs(
    ack_frame: np.ndarray,
    ack_t: np.ndarray,
    ack_line: np.ndarray,
    edge: np.ndarray,
    win: np.ndarray,
    data_frame: np.ndarray,
    data_t: np.ndarray,
    data_end: np.ndarray,
    length: np.ndarray,
    holds: np.ndarray,
    line: float,
    release: float,
    mss: float,
    rtt: float,
    ack_rtt: np.ndarray,
    turnaround: float,
    known: bool,
    from_handshake: bool,
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:  # pragma: no cover - compiled
    n_ack, n_data = ack_frame.size, data_frame.size
    size = n_ack + n_data
    last_end = np.int64(-1)
    for j in range(n_data):
        last_end = max(last_end, data_end[j])
    first = data_t[0]
    # The first data byte: until an ACK covers it, the sender is in its first round (where the
    # capture holds the handshake; one that starts later has no first round to tell).
    opening = data_end[0] - length[0] if from_handshake else np.int64(-2)
    # Each event ends at most two runs: the pacer's hold, then the state after it.
    start = np.empty(2 * size)
    end = np.empty(2 * size)
    state = np.empty(2 * size, dtype=np.int8)
    n = 0
    # The sender's bursts, grouped as `_bursts` groups them, and until when the pacer held it
    # after the last one started (`pacer_holds`; -inf without a pacer told).
    burst = -1
    after_ack = False
    prev_end = -np.inf
    held_until = -np.inf
    # One walk over the events (ACKs and data merged in capture order), holding after each
    # SND.UNA, the highest byte sent and the window's right edge: no array per event, on a
    # capture of millions of them.
    una = np.int64(-1)
    nxt = np.int64(-1)
    right = np.inf
    i = j = 0
    # The state of each interval after an event: idle when nothing is in flight; otherwise as
    # it stands at the last event q before the next ACK (the sender has answered the ACK
    # before by then). Up to q come data segments only, so SND.UNA and the right edge are
    # still those of now; the highest byte sent by q is found once per run of segments.
    q = -1
    sent_q = np.int64(-1)
    flight_before = np.int64(0)  # the flight after the event before
    # The smoothed RTT Linux paces by as of the last ACK, the least before the first.
    smoothed = rtt
    idle_since = 0.0  # when the flight last fell to nothing
    for k in range(size - 1):
        is_ack = j >= n_data or (i < n_ack and ack_frame[i] < data_frame[j])
        if is_ack:
            t = ack_t[i]
            smoothed = ack_rtt[i]
            una = max(una, ack_line[i])
            # Unscaled, only a zero window is a byte count: the right edge is then SND.UNA.
            right = np.float64(edge[i]) if known else (np.inf if win[i] > 0 else np.float64(una))
            after_ack = True
            i += 1
        else:
            t = data_t[j]
            nxt = max(nxt, data_end[j])
            if holds.size > 0:
                if _starts_burst(t, prev_end, length[j] / line, after_ack, release):
                    burst += 1
                    held_until = t + holds[burst] if burst < holds.size else -np.inf
                prev_end = t + length[j] / line
            after_ack = False
            j += 1
        if k == 0:
            idle_since = t
        if k > q:
            # The segments that come before the next ACK (the merge's own rule, ahead).
            ahead = j
            sent_q = nxt
            while ahead < n_data and not (i < n_ack and ack_frame[i] < data_frame[ahead]):
                sent_q = max(sent_q, data_end[ahead])
                ahead += 1
            q = k + ahead - j
        flight = _flight(nxt, una)
        flight_previous = flight_before
        flight_before = flight
        if t < first:
            continue
        if is_ack and j >= n_data and una >= last_end:
            break  # the last byte is acknowledged and nothing more is sent: the transfer is over
        flight_q = _flight(sent_q, una)
        usable = right - nxt
        usable_q = right - sent_q
        window_q = right - una
        if flight > 0 or k == 0 or flight_previous > 0:
            idle_since = t
        # A segment that does not fit waits on the window (tcp_snd_wnd_test: its first MSS
        # must fit); a window with room for one is shut only to a sender that waits for more.
        closed = usable_q < max(mss, _burst(window_q, mss, smoothed))
        if (flight <= 0 or flight_q <= 0) and not (flight <= 0 and usable < mss):
            # Nothing in flight: the application's time, unless the sender went on within its
            # turnaround (then its queue was not empty, as far as the wire can tell). That
            # turnaround is the wait of the window that held the sender up to the ACK which
            # emptied the flight: with a larger window data would have been in flight across
            # it (the kernel too counts it until its next send).
            next_data_t = data_t[j] if j < n_data else np.inf
            if next_data_t - idle_since > turnaround:
                s = 0
            else:
                s = 1 if n > 0 and state[n - 1] == 1 else 2
        elif flight <= 0 and usable < mss:
            # With nothing in flight, a window that cannot take a segment is shut: the
            # sender's data waits on it (zero-window probes), as the kernel counts it.
            s = 1
        elif closed:
            # The window's, once the answer to the last ACK is in the sender's queues; until
            # then TCP small queues hold what passes their limit, and the sender is busy.
            s = 2 if sent_q - nxt > _queue_limit(window_q, mss, smoothed, rtt) else 1
            if s == 1 and una <= opening and window_q >= INITIAL_WINDOW_SEGMENTS * mss:
                # The first round's flight is the sender's initial window, all of its
                # congestion window, and Linux asks the congestion window before the receive
                # window (tcp_write_xmit: tcp_cwnd_test, then tcp_snd_wnd_test): a receive
                # window the first flight also fills did not hold it as the kernel counts it.
                # A receiver's first window sized for the sender's initial one is Linux's own
                # rule (TCP_DEFAULT_INIT_RCVWND, 10 segments, for RFC 6928's initial window),
                # in rounds of any length, a LAN's or a satellite's. Below 10 segments the
                # window is smaller than any default initial window, and holds the sender.
                s = 2
        else:
            s = 2
        # Runs follow one another without overlap even where the capture's clock steps back
        # (events are in capture order, their stamps not always).
        a = max(t, end[n - 1]) if n > 0 else t
        next_is_ack = j >= n_data or (i < n_ack and ack_frame[i] < data_frame[j])
        b = ack_t[i] if next_is_ack else data_t[j]
        if b <= a:
            continue
        if s == 1 and flight > 0 and held_until > a:
            # The window has no room, but the pacer holds the sender until then: busy.
            cut = min(held_until, b)
            if n > 0 and state[n - 1] == 2 and end[n - 1] == a:
                end[n - 1] = cut
            else:
                start[n] = a
                end[n] = cut
                state[n] = 2
                n += 1
            a = cut
            if b <= a:
                continue
        if n > 0 and state[n - 1] == s and end[n - 1] == a:
            end[n - 1] = b
        else:
            start[n] = a
            end[n] = b
            state[n] = s
            n += 1
    return start[:n].copy(), end[:n].copy(), state[:n].copy()


# RFC 6928's initial congestion window, Linux's default (TCP_INIT_CWND) and the first window its
# receiver offers (TCP_DEFAULT_INIT_RCVWND), in segments.
INITIAL_WINDOW_SEGMENTS = 10


@jit
def _flight(sent: np.int64, una: np.int64) -> np.int64:  # pragma: no cover - compiled
    """Bytes in flight after an event: sent and not yet acknowledged (none before any data)."""
    return sent - max(una, np.int64(0)) if sent >= 0 else np.int64(0)


@jit
def _rtt_allowance(least_rtt: float) -> float:  # pragma: no cover - compiled
    """The bytes Linux adds to each turn for a path whose least RTT is `least_rtt` seconds
    (see TSO_RTT_UNIT_S)."""
    shift = int(max(least_rtt, 0.0) / TSO_RTT_UNIT_S)
    return GSO_MAX_BYTES / 2.0**shift if shift < 32 else 0.0


@jit
def _turn(window: float, rtt: float, least_rtt: float) -> float:  # pragma: no cover - compiled
    """The bytes Linux lets go a turn, before its least of two segments: 2**-10 s of its
    pacing rate (BURST_S) and the short path's allowance (TSO_RTT_UNIT_S), the allowance at
    most up to one GSO burst."""
    paced = PACING_RATIO * window / rtt * BURST_S if rtt > 0 else GSO_MAX_BYTES
    return paced + min(_rtt_allowance(least_rtt), max(GSO_MAX_BYTES - paced, 0.0))


@jit
def _queue_limit(
    window: float, mss: float, rtt: float, least_rtt: float
) -> float:  # pragma: no cover - compiled
    """The bytes TCP small queues let a socket have in its qdisc and device
    (tcp_small_queue_check): 2**-10 s of its pacing rate (sk_pacing_rate >> sk_pacing_shift),
    or twice an skb's truesize where that is more. An skb holds what the sender lets go a turn
    (`_turn`), at least two segments (tcp_min_tso_segs), and its truesize counts them with
    their buffers' overhead: twice that, at the least. What an ACK releases past it leaves
    only as the device drains the rest, the kernel's time busy, not the window's."""
    if rtt <= 0:
        return np.inf
    return 2 * max(_turn(window, rtt, least_rtt), MIN_BURST_SEGMENTS * mss)


@jit
def _burst(window: float, mss: float, rtt: float) -> float:  # pragma: no cover - compiled
    """The bytes Linux waits to have room for before it sends into a window (see BURST_S),
    at most a third of the window (TSO_WIN_DIVISOR)."""
    burst = PACING_RATIO * window / rtt * BURST_S if rtt > 0 else GSO_MAX_BYTES
    return min(max(burst, MIN_BURST_SEGMENTS * mss), GSO_MAX_BYTES, window / TSO_WIN_DIVISOR)


def shut_below(
    window: npt.NDArray[np.float64], mss: float, rtt: npt.NDArray[np.float64]
) -> npt.NDArray[np.float64]:
    """Per window offered (bytes) and the smoothed RTT then (`smoothed_rtt_at`), the room below
    which it held the sender, as `limit_states` reads a window shut: less than a segment, or
    than the burst Linux waits for (`_burst`)."""
    pace = np.divide(window, rtt, out=np.full(window.size, np.inf), where=rtt > 0)
    burst = PACING_RATIO * pace * BURST_S
    burst = np.minimum(np.maximum(burst, MIN_BURST_SEGMENTS * mss), GSO_MAX_BYTES)
    return np.maximum(np.minimum(burst, window / TSO_WIN_DIVISOR), mss)
