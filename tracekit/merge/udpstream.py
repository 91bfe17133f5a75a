"""Numbered UDP test streams (UDPmon, iperf): received against sent, as Antony et al. fig. 2.

A test stream's datagrams carry a sequence number at a fixed place in the payload (default:
the first 4 bytes, big-endian, as UDPmon sends them). From the numbers: which were lost, the
index of the first loss, the loss pattern after it (one in three lost means the sender ran at
about 3/2 of the bottleneck rate), blocks lost in one piece, and the bottleneck buffer that the
first loss implies by Antony et al. eq. 1 with N_d = 0.

With the sender's capture too, "sent" is what it saw leave; with one capture, every number from
the lowest to the highest seen counts as sent (as a UDPmon receiver assumes).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import numpy as np
import pandas as pd

from tracekit import physics
from tracekit.errors import TracekitError
from tracekit.schema import PROTO_UDP

if TYPE_CHECKING:
    from tracekit.connections import Connections

# Frame bytes around a UDP payload: UDP 8 + IPv4 20 (IPv6 40) + Ethernet 14. A buffer holds
# frames (Linux qdiscs count skb->len, the Ethernet frame without FCS).
_OVERHEAD_BYTES = {4: 8 + 20 + 14, 6: 8 + 40 + 14}
# A stream needs this many datagrams before its numbers are trusted as a counter.
MIN_DATAGRAMS = 10
# Of consecutive datagrams, at least this fraction must go up by 1..MAX_STEP: a counter with
# losses and a little reordering, not random payload bytes.
_COUNTER_FRACTION = 0.9
_MAX_STEP = 1000
# A counter's number range is its datagrams plus the ones lost in between; with one capture
# every number from the lowest to the highest seen counts as sent, and the per-number table
# is that range. A range over this many numbers per datagram seen (90% lost), plus one step
# for a short stream, numbers something else: RTP (a 16-bit sequence under its version and
# payload-type bytes) with one RTCP packet or another payload type among it spans billions.
_MAX_RANGE_PER_DATAGRAM = 10


@dataclass(frozen=True)
class Layout:
    """Where the sequence number sits in a datagram's payload (the reader keeps 8 bytes)."""

    offset_bytes: int = 0
    width_bytes: int = 4

    def __post_init__(self) -> None:
        if not 1 <= self.width_bytes <= 8 or self.offset_bytes < 0:
            raise TracekitError("UDP sequence number: width 1..8 bytes, offset 0 or more")
        if self.offset_bytes + self.width_bytes > 8:
            raise TracekitError(
                "UDP sequence number must lie within the first 8 payload bytes "
                f"(offset {self.offset_bytes} + width {self.width_bytes})"
            )

    def numbers(self, head: np.ndarray) -> np.ndarray:
        """The numbers inside big-endian 8-byte heads."""
        shift = np.uint64(8 * (8 - self.offset_bytes - self.width_bytes))
        mask = np.uint64((1 << (8 * self.width_bytes)) - 1)
        return ((head.astype(np.uint64) >> shift) & mask).astype(np.int64)


@dataclass(frozen=True)
class UdpStream:
    """One numbered stream: what was sent, what arrived, and what the losses imply.

    `arrivals` has one row per number sent (fig. 2): number, index (0 for the first sent),
    arrival_s (arrival since the first arrival, NaN if lost), lost. `blocks` are runs of at
    least `block_min` consecutive lost numbers as (first, last). `rate_ratio` is f / s, the
    sender's rate over the bottleneck's, from the loss fraction after the first loss (outside
    blocks). `buffer_bytes` is eq. 1 with N_d = 0 and N_b the burst that ended in the first
    loss: with the sender's capture, from the last datagram that found the bottleneck queue
    empty (`burst_packets`); with one capture, from the first datagram, f from the loss ratio.
    `queue_at_first_loss_bytes` measures the same buffer from the one-way delay instead: the
    queueing delay of the last datagram before the first loss times the bottleneck's rate.
    `competing_share` is the share of the bytes that reached the same host, from the stream's
    first arrival to the first loss, that other flows carried: eq. 1 takes one stream into an
    empty queue, so where others put more than one of the stream's frames into that span the
    buffer is not estimated, and the loss is set against that load instead.
    """

    conn: int
    direction: int
    sent_count: int
    received_count: int
    lost: np.ndarray
    arrivals: pd.DataFrame
    first_loss_index: int | None
    loss_ratio_after_first: float
    rate_ratio: float | None
    blocks: tuple[tuple[int, int], ...]
    frame_bytes: float
    sender_rate_bps: float | None
    bottleneck_rate_bps: float | None
    buffer_bytes: float | None
    burst_packets: int | None = None
    queue_at_first_loss_bytes: float | None = None
    competing_share: float = 0.0
    # Source and destination, and the capture whose connection `conn` numbers: the sender's,
    # or the receiver's for a stream only the receiver's capture holds (another host's).
    endpoints: tuple[str, str] = ("", "")
    numbered_in: str = "sender"

    def to_dict(self) -> dict[str, Any]:
        """Plain values for JSON and the text output (not the per-number table)."""
        return {
            "conn": self.conn,
            "direction": ("a2b", "b2a")[self.direction],
            "sent_packets": self.sent_count,
            "received_packets": self.received_count,
            "lost_packets": int(self.lost.size),
            "first_loss_index": self.first_loss_index,
            "loss_ratio_after_first": self.loss_ratio_after_first,
            "rate_ratio": self.rate_ratio,
            "lost_blocks": [list(b) for b in self.blocks],
            "frame_bytes": self.frame_bytes,
            "sender_rate_bps": self.sender_rate_bps,
            "bottleneck_rate_bps": self.bottleneck_rate_bps,
            "buffer_bytes": self.buffer_bytes,
            "burst_packets": self.burst_packets,
            "queue_at_first_loss_bytes": self.queue_at_first_loss_bytes,
            "competing_share": self.competing_share,
            "source": self.endpoints[0],
            "destination": self.endpoints[1],
            "conn_of_capture": self.numbered_in,
        }


@dataclass(frozen=True)
class _Seen:
    conn: int
    direction: int
    endpoints: tuple[str, str]
    numbers: np.ndarray
    ts_ns: np.ndarray
    frame_bytes: float
    # Every packet of the same capture toward the stream's destination host, this stream's
    # included: arrival times (sorted) and the running sum of their bytes (payload plus UDP,
    # IPv4 and Ethernet headers, roughly as a queue counts them); and this stream's own bytes
    # per datagram, counted the same way.
    host_ts_ns: np.ndarray = field(default_factory=lambda: np.zeros(0, np.int64))
    host_bytes_cum: np.ndarray = field(default_factory=lambda: np.zeros(1))
    own_bytes: np.ndarray = field(default_factory=lambda: np.zeros(0))


def _streams(conns: Connections, layout: Layout) -> list[_Seen]:
    """Numbered streams of one capture: per UDP (conn, dir) whose numbers look like a counter."""
    pk = conns.packets
    udp = conns.capture.udp
    if udp.num_rows == 0:
        return []
    rows = udp.column("row").to_numpy().astype(np.int64)
    long_enough = udp.column("head_len").to_numpy() >= layout.offset_bytes + layout.width_bytes
    rows = rows[long_enough]
    numbers = layout.numbers(udp.column("head").to_numpy()[long_enough])
    proto = pk.column("proto").to_numpy()[rows]
    rows, numbers = rows[proto == PROTO_UDP], numbers[proto == PROTO_UDP]
    conn = pk.column("conn").to_numpy()[rows].astype(np.int64)
    direction = pk.column("dir").to_numpy()[rows].astype(np.int64)
    ts = pk.column("ts_ns").to_numpy()[rows]
    size = pk.column("payload_bytes").to_numpy()[rows].astype(np.float64)
    table = conns.table
    version = table.column("ip_version").to_numpy()
    a, b = table.column("a").to_pylist(), table.column("b").to_pylist()
    out = []
    key = conn * 2 + direction
    # Every packet by destination host, then time, with the running sum of its bytes: each
    # stream then finds what reached its host over any span in two searches, whatever the
    # number of streams (a capture of thousands of calls).
    _, host_of_end = np.unique(
        np.asarray([e.rsplit(":", 1)[0] for e in a + b], dtype=object), return_inverse=True
    )
    n_conn = len(a)
    all_conn = pk.column("conn").to_numpy().astype(np.int64)
    all_dir = pk.column("dir").to_numpy().astype(np.int64)
    dest = host_of_end[np.where(all_dir == 0, all_conn + n_conn, all_conn)]  # b, else a
    all_ts = pk.column("ts_ns").to_numpy()
    by_host = np.lexsort((all_ts, dest))
    host_sorted, ts_sorted = dest[by_host], all_ts[by_host]
    payload_all = pk.column("payload_bytes").to_numpy().astype(np.float64)
    cum = np.r_[0.0, np.cumsum(payload_all[by_host] + _OVERHEAD_BYTES[4])]
    for k in np.unique(key):  # one iteration per stream, not per packet
        sel = key == k
        nums = numbers[sel]
        if nums.size < MIN_DATAGRAMS:
            continue
        step = np.diff(nums)
        if np.mean((step >= 1) & (step <= _MAX_STEP)) < _COUNTER_FRACTION:
            continue
        if int(nums.max()) - int(nums.min()) >= _MAX_RANGE_PER_DATAGRAM * nums.size + _MAX_STEP:
            continue
        c, d = int(k // 2), int(k % 2)
        ends = (a[c], b[c]) if d == 0 else (b[c], a[c])
        overhead = _OVERHEAD_BYTES.get(int(version[c]), _OVERHEAD_BYTES[4])
        host = host_of_end[(c + n_conn) if d == 0 else c]
        lo, hi = np.searchsorted(host_sorted, [host, host + 1])
        out.append(
            _Seen(
                c,
                d,
                ends,
                nums,
                ts[sel],
                float(np.median(size[sel])) + overhead,
                ts_sorted[lo:hi],
                cum[lo : hi + 1],
                size[sel] + _OVERHEAD_BYTES[4],
            )
        )
    return out


def _rate_bps(ts_ns: np.ndarray, frame_bytes: float) -> float | None:
    if ts_ns.size < 2 or ts_ns[-1] <= ts_ns[0]:
        return None
    return (ts_ns.size - 1) * frame_bytes * 8 / ((ts_ns[-1] - ts_ns[0]) / 1e9)


def _runs(values: np.ndarray) -> list[tuple[int, int]]:
    """Runs of consecutive integers in a sorted array, as (first, last)."""
    if values.size == 0:
        return []
    breaks = np.flatnonzero(np.diff(values) != 1)
    firsts = values[np.concatenate([[0], breaks + 1])]
    lasts = values[np.concatenate([breaks, [values.size - 1]])]
    return list(zip(firsts.tolist(), lasts.tolist(), strict=True))


def _in_runs(values: np.ndarray, runs: list[tuple[int, int]]) -> np.ndarray:
    """Which values lie in one of the sorted, disjoint runs (first, last), in one search."""
    if not runs:
        return np.zeros(values.size, dtype=bool)
    firsts = np.array([r[0] for r in runs])
    lasts = np.array([r[1] for r in runs])
    k = np.searchsorted(firsts, values, side="right") - 1
    return (k >= 0) & (values <= lasts[np.maximum(k, 0)])


def analyze_stream(
    received: _Seen,
    sent: _Seen | None,
    *,
    conn: int,
    direction: int,
    block_min: int = 10,
    numbered_in: str = "sender",
) -> UdpStream:
    """Received against sent for one stream; sent None: every number from first to last seen."""
    got_nums, first_at = np.unique(received.numbers, return_index=True)
    got_ts = received.ts_ns[first_at]
    if sent is not None:
        sent_nums = np.unique(sent.numbers)
        sent_order = sent.numbers[np.sort(np.unique(sent.numbers, return_index=True)[1])]
    else:
        sent_nums = np.arange(got_nums.min(), got_nums.max() + 1)
        sent_order = sent_nums
    arrived = np.isin(sent_order, got_nums)
    t0 = got_ts.min()
    where = np.searchsorted(got_nums, sent_order)
    arrival_s = np.where(arrived, (got_ts[np.clip(where, 0, got_nums.size - 1)] - t0) / 1e9, np.nan)
    arrivals = pd.DataFrame(
        {
            "number": sent_order,
            "index": np.arange(sent_order.size),
            "arrival_s": arrival_s,
            "lost": ~arrived,
        }
    )
    lost = np.setdiff1d(sent_nums, got_nums)
    lost_at = np.flatnonzero(~arrived)
    blocks = [r for r in _runs(np.sort(lost)) if r[1] - r[0] + 1 >= block_min]
    first = int(lost_at[0]) if lost_at.size else None
    p, ratio = 0.0, None
    if first is not None:
        # The pattern between the first and the last loss, blocks left out: while the queue is
        # full, a fraction (f - s) / f of what arrives at rate f is dropped (eq. 1's slope).
        in_block = _in_runs(sent_order, blocks)
        span = slice(first, int(lost_at[-1]) + 1)
        window = ~in_block[span]
        n = int(window.sum())
        p = float((~arrived[span])[window].sum() / n) if n else 0.0
        ratio = 1.0 / (1.0 - p) if p < 1.0 else None
    frame = received.frame_bytes
    # The bottleneck's rate: what arrived while the queue stayed full (first to last loss).
    s_rate = None
    if first is not None and lost_at[-1] > first:
        lo_n, hi_n = sent_order[first], sent_order[lost_at[-1]]
        busy = (got_nums > lo_n) & (got_nums < hi_n)
        s_rate = _rate_bps(np.sort(got_ts[busy]), frame)
    # Eq. 1 takes one burst at a constant rate f into a queue that starts empty. A sender that
    # stalls (the lab's did, for 10-15 ms) lets the queue drain: the burst that overran the
    # buffer starts at the last datagram that found the queue empty, its one-way delay at the
    # floor (within one datagram's service time). Its mean rate is f; then eq. 1 is exactly
    # what it integrates, M = N_b l - s T_b.
    f_rate = None
    burst = first
    queued = None
    if sent is not None and first is not None and s_rate:
        sent_ts = sent.ts_ns[np.sort(np.unique(sent.numbers, return_index=True)[1])]
        before = np.arange(first)
        ok = arrived[before]
        owd = (got_ts[np.clip(where[before], 0, got_nums.size - 1)] - sent_ts[before]) / 1e9
        queue = owd - owd[ok].min() if ok.any() else owd
        empty = np.flatnonzero(ok & (queue <= frame * 8 / s_rate))
        start = int(empty[-1]) if empty.size else 0
        burst = first - start
        f_rate = _rate_bps(sent_ts[start : first + 1], frame)
        # Independent of f: the queue the last datagram before the loss found, its delay
        # above the floor times the bottleneck's rate. Eq. 1 needs f at the bottleneck's input;
        # anything between the sender's capture point and the queue that holds packets back
        # and lets them go in a bunch (the lab's relay, 10-40 ms) changes f there, not this.
        last_ok = np.flatnonzero(ok)
        if last_ok.size:
            queued = float(queue[last_ok[-1]]) * s_rate / 8
    if f_rate is None and s_rate is not None and ratio is not None:
        f_rate = s_rate * ratio
    # What other flows brought to the same host from the first arrival to the first loss:
    # eq. 1 takes the queue as this stream's alone, an error of every byte they put in it.
    competing = 0.0
    shared = False
    if first is not None and received.host_ts_ns.size:
        # Up to the arrival of the first datagram numbered after the first lost one.
        after = int(np.searchsorted(got_nums, sent_order[first]))
        lo = got_ts.min()
        hi = got_ts[after] if after < got_nums.size else got_ts.max()
        inside = np.searchsorted(received.host_ts_ns, [lo, hi], side="right")
        everything = float(received.host_bytes_cum[inside[1]] - received.host_bytes_cum[inside[0]])
        within = (received.ts_ns > lo) & (received.ts_ns <= hi)
        mine = float(received.own_bytes[within].sum())
        theirs = max(everything - mine, 0.0)
        competing = theirs / everything if everything > 0 else 0.0
        shared = theirs > frame
    buffer = None
    if burst is not None and f_rate and s_rate and f_rate > s_rate and not shared:
        buffer = float(physics.buffer_from_burst_bytes(burst, 0, f_rate, s_rate, frame))
    return UdpStream(
        conn=conn,
        direction=direction,
        sent_count=int(sent_order.size),
        received_count=int(arrived.sum()),
        lost=lost,
        arrivals=arrivals,
        first_loss_index=first,
        loss_ratio_after_first=p,
        rate_ratio=ratio,
        blocks=tuple(blocks),
        frame_bytes=frame,
        sender_rate_bps=f_rate,
        bottleneck_rate_bps=s_rate,
        buffer_bytes=buffer,
        burst_packets=burst,
        queue_at_first_loss_bytes=queued,
        competing_share=competing,
        endpoints=(sent or received).endpoints,
        numbered_in=numbered_in,
    )


def udp_streams(
    sender: Connections,
    receiver: Connections | None = None,
    layout: Layout | None = None,
    addr_map: dict[str, str] | None = None,
) -> list[UdpStream]:
    """The numbered UDP streams, received (receiver capture) against sent (sender capture).

    With one capture, its streams against their own number range. Streams are named by the
    sender capture's connection and direction; `addr_map` maps NAT'd sender addresses.
    """
    from tracekit.merge.match import map_endpoint

    layout = layout or Layout()
    seen_s = _streams(sender, layout)
    if receiver is None:
        return [analyze_stream(s, None, conn=s.conn, direction=s.direction) for s in seen_s]
    amap = addr_map or {}
    by_ends = {
        (map_endpoint(s.endpoints[0], amap), map_endpoint(s.endpoints[1], amap)): s for s in seen_s
    }
    out = []
    for r in _streams(receiver, layout):
        s = by_ends.get(r.endpoints)
        if s is not None:
            out.append(analyze_stream(r, s, conn=s.conn, direction=s.direction))
        else:
            # Only the receiver's capture holds it: numbered by that capture's connection.
            out.append(
                analyze_stream(r, None, conn=r.conn, direction=r.direction, numbered_in="receiver")
            )
    return out


def has_udp_stream(conns: Connections, layout: Layout | None = None) -> bool:
    """Whether a capture holds at least one numbered UDP stream."""
    return bool(_streams(conns, layout or Layout()))
