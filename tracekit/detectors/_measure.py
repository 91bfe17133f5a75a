"""Measurements several detectors share: directions, sizes, the base RTT, the flight, rates.

Private (the leading underscore): `tracekit.detectors.discover` skips it, it holds no detector.
Everything here reads the series of `tracekit.series` and returns numbers or arrays; the
judgement, what is too much or too little, stays in the detectors.

Two rates come from the spacing of ACKs, and they answer different questions:

- `packet_pair_rate_samples_bps` (and its median, `path_rate_bps`) is the bottleneck's rate as
  a property of the path, from a whole direction: it keeps only the short spans of ACKs whose
  segments the sender emitted closer together than they came back, so it needs no knowledge of
  when the bottleneck was busy, and an idle or window-limited sender does not pull it down.
- `ack_line_rate_bps` is what the bottleneck delivered over one interval the caller picks (a
  slow-start round, a line-rate burst): the slope of the ACK line across it. It is the
  bottleneck's rate only where the caller knows a queue kept the bottleneck busy; over a whole
  transfer it is the goodput.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import NamedTuple

import numpy as np
import numpy.typing as npt
import pandas as pd
from numpy.lib.stride_tricks import sliding_window_view

from tracekit.core.kernels import jit
from tracekit.core.quantile import BLOCK_ROWS, percentile_in_blocks
from tracekit.core.search import search_sorted
from tracekit.detectors._rtt_steps import RttStep, rtt_steps, too_short
from tracekit.detectors.base import AnalysisContext
from tracekit.findings import Finding
from tracekit.merge.clock import PathPhase, joined_phases
from tracekit.schema import PROTO_TCP, TH_ACK, TH_RST, TH_SYN
from tracekit.series import Direction, kind_mask

# IPv4 and TCP headers without options (RFC 791, RFC 9293); IPv6's fixed header (RFC 8200).
IPV4_HEADER_BYTES = 20
IPV6_HEADER_BYTES = 40
TCP_HEADER_BYTES = 20
# The timestamp option, padded to 12 bytes as Linux sends it on every segment (RFC 7323 3.2).
TCP_TIMESTAMP_OPTION_BYTES = 12
# The link header a bottleneck queue counts with each packet: Ethernet II, 14 bytes, what Linux
# counts on an Ethernet or veth device (skb->len).
ETHERNET_HEADER_BYTES = 14
# Fewer ACKs than this give no rate: with delayed ACKs (RFC 9293 3.8.6.3) each ACK covers two
# segments, so four ACKs span about eight segments of the bottleneck's service.
MIN_RATE_ACKS = 4


# --- which directions --------------------------------------------------------------------------


def data_directions(ctx: AnalysisContext) -> Iterator[tuple[int, int, Direction]]:
    """(conn, dir, Direction) for every TCP direction that carried data, in connection order."""
    series = ctx.series
    if series is None or series.segments.empty:
        return
    for conn, direction in series.with_data():
        yield conn, direction, series.of(conn, direction)


# --- where the capture was taken ----------------------------------------------------------------

# A host answers a SYN or a SYN-ACK in its own time (an interrupt and a softirq: microseconds,
# a millisecond on a loaded host), while a packet's round trip to the host at the far end of a
# path crosses every link and queue between. Where the handshake's round trip toward one end is
# at most this share of the way toward the other, the capture was taken at the near end (or a
# hop from it); a tap mid-path splits the round trip far more evenly. On a LAN both parts are
# host times, and no end is told: the round trip is then microseconds from anywhere.
CAPTURE_END_SHARE = 1 / 8


@dataclass(frozen=True)
class CaptureSplit:
    """The path's round trip as the capture point splits it: the round trip from the capture
    point to the server, b, and back, and to the client, a, and back. Their sum is the path's
    round trip from any vantage. From the handshake (`source` "handshake": SYN to SYN-ACK, and
    SYN-ACK to the client's ACK of it), or from TCP timestamps (`echo_floors`: each end's
    quickest echo of the other's timestamp values, `source` "timestamps")."""

    server_s: float
    client_s: float
    source: str = "handshake"

    @property
    def rtt_s(self) -> float:
        return self.server_s + self.client_s

    def sides(self, direction: int) -> tuple[float, float]:
        """The round trips to the direction's sender and to its receiver (a sends a2b)."""
        return (self.client_s, self.server_s) if direction == 0 else (self.server_s, self.client_s)

    def end(self, direction: int) -> str | None:
        """'sender' or 'receiver': the end of the direction the capture was taken at; None
        where the split does not tell (a LAN, a tap mid-path)."""
        to_sender, to_receiver = self.sides(direction)
        if to_receiver <= CAPTURE_END_SHARE * to_sender:
            return "receiver"
        if to_sender <= CAPTURE_END_SHARE * to_receiver:
            return "sender"
        return None


def handshake_splits(ctx: AnalysisContext) -> dict[int, CaptureSplit]:
    """Per connection whose handshake the capture holds once (one SYN of a, one SYN-ACK of b,
    then an ACK of a), how its capture point split the handshake's round trip. A SYN or SYN-ACK
    sent again holds a retransmission timeout, not a round trip: such a connection is left out.
    One compiled pass over the packet table's columns as they are, whatever the number of
    connections: its memory is a few numbers per connection."""
    pk = ctx.packets
    if pk.num_rows == 0:
        return {}
    conn = pk.column("conn").to_numpy(zero_copy_only=False)
    n = max(int(conn.max()), -1) + 1
    if n == 0:
        return {}
    syns, synacks, at = _handshake_times(
        conn,
        pk.column("dir").to_numpy(zero_copy_only=False),
        pk.column("proto").to_numpy(zero_copy_only=False),
        pk.column("tcp_flags").to_numpy(zero_copy_only=False),
        pk.column("ts_ns").to_numpy(zero_copy_only=False),
        n,
    )
    splits: dict[int, CaptureSplit] = {}
    once = np.flatnonzero((syns == 1) & (synacks == 1) & (at[:, 2] >= 0))
    for c in once.tolist():
        syn, synack, ack = (int(x) for x in at[c])
        if syn <= synack <= ack:
            splits[c] = CaptureSplit(server_s=(synack - syn) / 1e9, client_s=(ack - synack) / 1e9)
    return splits


@jit
def _handshake_times(
    conn: np.ndarray,
    side: np.ndarray,
    proto: np.ndarray,
    flags: np.ndarray,
    ts: np.ndarray,
    n: int,
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:  # pragma: no cover - compiled
    """Per connection: its SYNs of a and SYN-ACKs of b, and the times (ns) of the first SYN, the
    first SYN-ACK and a's first ACK after it, in capture order (-1: none)."""
    syns = np.zeros(n, dtype=np.int64)
    synacks = np.zeros(n, dtype=np.int64)
    at = np.full((n, 3), -1, dtype=np.int64)
    mask = TH_SYN | TH_ACK | TH_RST
    for r in range(conn.size):
        c = np.int64(conn[r])
        if c < 0 or c >= n or proto[r] != PROTO_TCP:
            continue
        f = flags[r] & mask
        if side[r] == 0:
            if f == TH_SYN:
                syns[c] += 1
                if at[c, 0] < 0:
                    at[c, 0] = ts[r]
            elif f == TH_ACK and at[c, 1] >= 0 and at[c, 2] < 0:
                at[c, 2] = ts[r]
        elif f == (TH_SYN | TH_ACK):
            synacks[c] += 1
            if at[c, 1] < 0:
                at[c, 1] = ts[r]
    return syns, synacks, at


# The distinct timestamp values of each end that an echo is looked for among: the latest few.
# An end echoes the latest value it took in order (RFC 7323 4.3: TS.Recent), or one a delayed
# ACK or a reordering held back a little; older values are left unmatched, which only leaves
# samples out of a floor that many more make.
ECHO_RECENT_VALUES = 4


def echo_floors(ctx: AnalysisContext, conns: npt.ArrayLike) -> dict[int, tuple[float, float]]:
    """Per connection of `conns` whose packets carry TCP timestamps (RFC 7323), the least delay
    from a packet of a carrying a timestamp value to the first packet of b that echoes it, and
    the same from b to a: the round trip from the capture point to b and back, and to a and
    back, each with that host's quickest answer. Where one end never echoed the other, that
    floor is infinite. One compiled pass; its memory is a few numbers per connection."""
    pk = ctx.packets
    wanted = np.asarray(conns, dtype=np.int64)
    wanted = wanted[wanted >= 0]
    if pk.num_rows == 0 or wanted.size == 0:
        return {}
    conn = pk.column("conn").to_numpy(zero_copy_only=False)
    wanted = np.unique(wanted)
    # Each chosen connection's place in the floors' arrays (-1: not chosen): their state is
    # kept for the chosen ones only.
    chosen = np.full(max(int(conn.max()), int(wanted.max())) + 1, -1, dtype=np.int64)
    chosen[wanted] = np.arange(wanted.size)
    floors = _echo_floors(
        conn,
        pk.column("dir").to_numpy(zero_copy_only=False),
        pk.column("proto").to_numpy(zero_copy_only=False),
        pk.column("tsval").to_numpy(zero_copy_only=False),
        pk.column("tsecr").to_numpy(zero_copy_only=False),
        pk.column("ts_ns").to_numpy(zero_copy_only=False),
        chosen,
        ECHO_RECENT_VALUES,
    )
    # a's values echoed by b: the round trip toward b; b's echoed by a: toward a.
    return {
        int(c): (float(floors[i, 1]) / 1e9, float(floors[i, 0]) / 1e9)
        for i, c in enumerate(wanted.tolist())
        if np.isfinite(floors[i]).any()
    }


@jit
def _echo_floors(
    conn: np.ndarray,
    side: np.ndarray,
    proto: np.ndarray,
    tsval: np.ndarray,
    tsecr: np.ndarray,
    ts: np.ndarray,
    chosen: np.ndarray,
    k: int,
) -> np.ndarray:  # pragma: no cover - compiled
    """Per chosen connection (`chosen`: each connection's place, -1: not chosen) and end (a: 0,
    b: 1), the least delay (ns, inf: none) from the first packet of that end carrying a
    timestamp value to the first packet of the other end echoing it, over the latest k
    distinct values of each end."""
    n = 0
    for x in range(chosen.size):
        n = max(n, chosen[x] + 1)
    value = np.zeros((n, 2, k), dtype=np.int64)
    first = np.full((n, 2, k), -1, dtype=np.int64)
    echoed = np.zeros((n, 2, k), dtype=np.bool_)
    slot = np.zeros((n, 2), dtype=np.int64)
    floors = np.full((n, 2), np.inf)
    for r in range(conn.size):
        g = np.int64(conn[r])
        if g < 0 or g >= chosen.size or chosen[g] < 0 or proto[r] != PROTO_TCP:
            continue
        c = chosen[g]
        e = np.int64(1) if side[r] != 0 else np.int64(0)
        o = 1 - e
        echo = np.int64(tsecr[r])
        if echo != 0:
            for m in range(k):
                if first[c, o, m] >= 0 and value[c, o, m] == echo and not echoed[c, o, m]:
                    echoed[c, o, m] = True
                    delay = np.float64(ts[r] - first[c, o, m])
                    if delay >= 0 and delay < floors[c, o]:
                        floors[c, o] = delay
        v = np.int64(tsval[r])
        if v != 0:
            latest = (slot[c, e] + k - 1) % k
            if first[c, e, latest] < 0 or value[c, e, latest] != v:
                s = slot[c, e]
                value[c, e, s] = v
                first[c, e, s] = ts[r]
                echoed[c, e, s] = False
                slot[c, e] = (s + 1) % k
    return floors


def capture_splits(ctx: AnalysisContext, conns: npt.ArrayLike) -> dict[int, CaptureSplit]:
    """Per connection of `conns`, where its capture point splits the round trip: from its
    handshake where the capture holds it once, else from its timestamps' echoes."""
    splits = handshake_splits(ctx)
    rest = np.setdiff1d(np.asarray(conns, dtype=np.int64), np.fromiter(splits, dtype=np.int64))
    for c, (to_a, to_b) in echo_floors(ctx, rest).items():
        if np.isfinite(to_a) and np.isfinite(to_b):
            splits[c] = CaptureSplit(server_s=to_b, client_s=to_a, source="timestamps")
    return splits


def resend_counts(connections: pd.DataFrame) -> dict[int, tuple[int, int]]:
    """Per connection, the data segments each direction (a2b, b2a) resent: the connections
    table's counts, from the classification the series' segment kinds come from. A direction
    at 0 has no retransmission in its segments, so detectors of losses skip it unsliced."""
    return dict(
        zip(
            connections["conn"].tolist(),
            zip(
                connections["retrans_a2b"].tolist(),
                connections["retrans_b2a"].tolist(),
                strict=True,
            ),
            strict=True,
        )
    )


def findings_per_direction(
    ctx: AnalysisContext,
    judge: Callable[[AnalysisContext, int, int, Direction], Finding | None],
) -> Iterator[Finding]:
    """The finding judge(ctx, conn, dir, Direction) gives each direction with data, if any."""
    for conn, direction, d in data_directions(ctx):
        finding = judge(ctx, conn, direction, d)
        if finding is not None:
            yield finding


def wire_directions(
    ctx: AnalysisContext, link_header_bytes: int
) -> Iterator[tuple[Direction, int]]:
    """Every direction of a TCP connection that carried data, with its per-packet wire overhead.

    The overhead is `wire_overhead_bytes` for the connection's IP version and whether it
    carries timestamps. Directions without data are left out unsliced (a port scan's capture
    holds hundreds of thousands of them).
    """
    if ctx.series is None:
        return
    tcp = ctx.connections[ctx.connections["proto"] == PROTO_TCP]
    overheads = {
        int(conn): wire_overhead_bytes(int(version), bool(ts), link_header_bytes)
        for conn, version, ts in zip(
            tcp["conn"].tolist(), tcp["ip_version"].tolist(), tcp["ts_ok"].tolist(), strict=True
        )
    }
    for conn, direction in ctx.series.with_data():
        if conn in overheads:
            yield ctx.series.of(conn, direction), overheads[conn]


# --- sizes -------------------------------------------------------------------------------------


def serialisation_s(t: npt.NDArray[np.float64]) -> float | None:
    """The time one segment takes to leave back to back, as a capture shows it: the 1st
    percentile of the times between consecutive segments that are more than zero (None: there
    is none), the closest two ever left, above the few captured closer than the NIC sends them.
    The times between are taken a block at a time and never held whole
    (`percentile_in_blocks`)."""

    def positive_gaps() -> Iterator[npt.NDArray[np.float64]]:
        for at in range(0, t.size - 1, BLOCK_ROWS):
            gaps = np.diff(t[at : at + BLOCK_ROWS + 1])
            yield gaps[gaps > 0]

    return percentile_in_blocks(positive_gaps, 1)


def segment_size_bytes(segments: pd.DataFrame) -> int:
    """The sender's usual full segment: the most common payload length among data segments.

    Bulk transfers send mostly full segments, so the mode is the MSS the sender used (1448 on
    an Ethernet path with timestamps) even when a few segments are short or TSO-sized. On a
    tie, the largest of the most common lengths.
    """
    counts = length_counts(segments["len"].to_numpy())
    counts[:1] = 0  # segments without payload are no size
    if counts.size < 2 or counts.max() == 0:
        return 0
    return int(np.flatnonzero(counts == counts.max())[-1])


def length_counts(length: np.ndarray) -> np.ndarray:
    """np.bincount of payload lengths, without an int64 copy of millions of them."""
    if length.dtype.kind not in "iu":  # a table made by hand (an empty one is float)
        length = length.astype(np.int64)
    return _length_counts(length)


@jit
def _length_counts(length: np.ndarray) -> np.ndarray:  # pragma: no cover - compiled
    top: int | np.int64 = 0
    for v in length:
        top = max(top, np.int64(v))
    counts = np.zeros(top + 1, dtype=np.int64)
    for v in length:
        counts[v] += 1
    return counts


def wire_overhead_bytes(ip_version: int, timestamps: bool, link_header_bytes: int) -> int:
    """Bytes a bottleneck queue counts per packet beyond its TCP payload.

    A Linux qdisc (tbf's `limit` and `rate` alike) counts skb->len: the IP packet plus the
    link header on an Ethernet device, no preamble or FCS.
    """
    ip = IPV6_HEADER_BYTES if ip_version == 6 else IPV4_HEADER_BYTES
    tcp = TCP_HEADER_BYTES + (TCP_TIMESTAMP_OPTION_BYTES if timestamps else 0)
    return link_header_bytes + ip + tcp


def packet_basis(payload_bytes: int, overhead_bytes: int, link_header_bytes: int) -> str:
    """One line saying which packet size l the buffer equations used, and why."""
    return (
        f"l = {payload_bytes} payload + {overhead_bytes - link_header_bytes} IP/TCP header + "
        f"{link_header_bytes} link header bytes: a Linux qdisc (tbf's limit and rate) counts "
        "skb->len, the IP packet plus the Ethernet header; rates count the same bytes"
    )


# --- time --------------------------------------------------------------------------------------


def min_rtt_s(direction: Direction) -> float | None:
    """The smallest RTT sample (Karn or timestamp): the path's round trip without queueing."""
    rtt = direction.rtt["rtt_s"].to_numpy()
    rtt = rtt[rtt > 0]
    return float(rtt.min()) if rtt.size else None


@jit
def _warp(
    t: np.ndarray, starts: np.ndarray, knots: np.ndarray, scale: np.ndarray
) -> np.ndarray:  # pragma: no cover
    """RttPhases.warp of each time, in one pass: a time in phase k > 0 (the phases before it
    start at or before it) is knots[k - 1] + (t - starts[k - 1]) * scale[k]; in the first
    phase it is itself. Per point, so a million times make no index or gather temporaries."""
    out = np.empty(t.size)
    for i in range(t.size):
        x = t[i]
        if x != x:
            k = starts.size  # NaN sorts after every start, as np.searchsorted places it
        else:
            k = 0
            while k < starts.size and starts[k] <= x:
                k += 1
        out[i] = x if k == 0 else knots[k - 1] + (x - starts[k - 1]) * scale[k]
    return out


@dataclass(frozen=True)
class RttPhases:
    """The base RTT of each path phase of one direction, and time counted in those RTTs.

    A path that changes mid-transfer (a reroute, a satellite handover) has one base RTT per
    phase. The phases come from the two-capture merge, which tells a step of the round trip's
    and the ACKs' minimal delays from clock skew and from a queue
    (`tracekit.merge.clock.path_steps`), or,
    with the sender's capture alone, from steps of the RTT floor that the transfer's own queue
    cannot explain (`tracekit.detectors._rtt_steps`). A path that held has one phase, and its
    RTT is the smallest sample.
    """

    starts_s: npt.NDArray[np.float64]  # when each phase after the first began
    rtt_s: npt.NDArray[np.float64]  # each phase's smallest RTT sample (one more than starts_s)
    # Warped time added before each later phase, so that it starts on a window edge (cumulative;
    # empty: none).
    pad_s: npt.NDArray[np.float64] = field(default_factory=lambda: np.zeros(0))

    @property
    def count(self) -> int:
        """How many phases."""
        return int(self.rtt_s.size)

    def phase(self, t_s: npt.ArrayLike) -> npt.NDArray[np.int64]:
        """The phase each time falls in."""
        return np.searchsorted(self.starts_s, np.asarray(t_s, dtype=np.float64), side="right")

    def at(self, t_s: npt.ArrayLike) -> npt.NDArray[np.float64]:
        """The base RTT of the phase each time falls in."""
        return self.rtt_s[self.phase(t_s)]

    def over(self, start_s: float, end_s: float) -> float:
        """The base RTT of the phase that holds most of [start_s, end_s]."""
        edges = np.r_[-np.inf, self.starts_s, np.inf]
        held = np.clip(np.minimum(edges[1:], end_s) - np.maximum(edges[:-1], start_s), 0, None)
        return float(self.rtt_s[int(np.argmax(held))] if held.any() else self.at(start_s))

    def _knots(self) -> npt.NDArray[np.float64]:
        # Warped time at each phase start: each phase's seconds count at rtt_0 / rtt_k, and
        # each later phase may start a little later still (`pad_s`, see `aligned`).
        scale = self.rtt_s[0] / self.rtt_s
        knots = self.starts_s[0] + np.r_[0.0, np.cumsum(np.diff(self.starts_s) * scale[1:-1])]
        return knots + self.pad_s if self.pad_s.size else knots

    def warp(self, t_s: npt.ArrayLike) -> npt.NDArray[np.float64]:
        """Time in which one RTT of every phase lasts as long as one of the first.

        Windows of a fixed length in warped time are then a fixed number of round trips of the
        phase they fall in. Within the first phase (and with one phase) time is unchanged.
        """
        t = np.asarray(t_s, dtype=np.float64)
        if self.count < 2:
            return t
        scale = self.rtt_s[0] / self.rtt_s
        knots = self._knots()
        # The pass reads scale[k] and knots[k - 1] for k up to the number of starts.
        if scale.size != self.starts_s.size + 1 or knots.size != self.starts_s.size:
            raise ValueError("RttPhases: one more RTT than phase starts, one knot per start")
        return _warp(t, self.starts_s, knots, scale)

    def unwarp(self, tau: npt.ArrayLike) -> npt.NDArray[np.float64]:
        """Seconds of a warped time (the inverse of `warp`); a warped time in the padding
        before a phase is that phase's start."""
        x = np.asarray(tau, dtype=np.float64)
        if self.count < 2:
            return x
        knots = self._knots()
        k = np.searchsorted(knots, x, side="right")
        later = k > 0
        out = x.copy()
        scale = self.rtt_s[0] / self.rtt_s
        out[later] = (
            self.starts_s[k[later] - 1] + (x[later] - knots[k[later] - 1]) / scale[k[later]]
        )
        # No phase runs past the next one's start: the padding between them is no time.
        ends = np.r_[self.starts_s, np.inf]
        return np.minimum(out, ends[k])

    def aligned(self, origin: float, length: float) -> RttPhases:
        """The same phases with each later one starting on a window edge of warped time
        (`origin` plus whole `length`s): no window then holds two phases' round trips."""
        if self.count < 2:
            return self
        pad = np.zeros(self.count - 1)
        plain = RttPhases(starts_s=self.starts_s, rtt_s=self.rtt_s)._knots()
        for i, knot in enumerate(plain):
            at = knot + (pad[i - 1] if i else 0.0)
            pad[i] = (pad[i - 1] if i else 0.0) + (
                origin + np.ceil((at - origin) / length) * length - at
            )
        return RttPhases(starts_s=self.starts_s, rtt_s=self.rtt_s, pad_s=pad)


def path_phases(ctx: AnalysisContext, direction: Direction) -> tuple[PathPhase, ...]:
    """The merge's path phases (`tracekit.merge.clock.path_steps`) as this direction ran on
    them: a step of the round trip between the two capture points smaller than the sender's
    turnaround (`turnaround_s`) is no step of its path. The hosts' own time, its interrupts,
    softirqs and scheduling, moves the delays between two capture points on a LAN by a few
    microseconds for milliseconds at a time (a veth pair's floor stepped by 2.9 us for 190 ms
    under a sender that answers ACKs in 39 us), and such a step changes none of the transfer's
    round trips by more than the sender itself adds to each. On a WAN path a step is
    milliseconds, hundreds of turnarounds, and is kept. Empty without a clock fit."""
    clock = ctx.merge.clock if ctx.merge is not None else None
    if clock is None or not clock.phases:
        return ()
    host = turnaround_s(direction)
    return joined_phases(clock.phases, lambda a, b: abs(b.rtt_s - a.rtt_s) >= host)


def rtt_phases(ctx: AnalysisContext, direction: Direction) -> RttPhases | None:
    """The direction's base RTT per path phase (None without an RTT sample).

    With a receiver's capture the phases are the merge's (the two captures' one-way delays);
    without one, the steps of the sender's RTT floor that its own queue cannot explain
    (`rtt_steps`)."""
    base = min_rtt_s(direction)
    if base is None:
        return None
    clock = ctx.merge.clock if ctx.merge is not None else None
    if clock is not None:
        phases = path_phases(ctx, direction)
        if len(phases) < 2:
            return RttPhases(starts_s=np.zeros(0), rtt_s=np.array([base]))
        starts = np.array([p.start_s for p in phases[1:]], dtype=np.float64)
        # A phase without a sample of its own takes the merge's round trip of the path there.
        fallback = np.array([p.rtt_s for p in phases], dtype=np.float64)
    else:
        steps = rtt_steps_of(direction)
        if not steps:
            return RttPhases(starts_s=np.zeros(0), rtt_s=np.array([base]))
        starts = np.array([s.at_s for s in steps], dtype=np.float64)
        fallback = np.array(
            [steps[0].rtt_before_s, *(s.rtt_after_s for s in steps)], dtype=np.float64
        )
    t = direction.rtt["t_s"].to_numpy()
    rtt = direction.rtt["rtt_s"].to_numpy()
    # A sample belongs to a phase only if its segment left and its ACK came back within it: a
    # round trip that straddles a step went one way on each path.
    k = np.searchsorted(starts, t, side="right")
    ok = (rtt > 0) & (np.searchsorted(starts, t - rtt, side="right") == k)
    k = k[ok]
    lowest = np.full(starts.size + 1, np.inf)
    np.minimum.at(lowest, k, rtt[ok])
    # Failing both (clocks a hostile capture makes run backwards), the direction's least RTT.
    lowest = np.where(np.isfinite(lowest), lowest, fallback)
    lowest = np.where(np.isfinite(lowest) & (lowest > 0), lowest, base)
    return RttPhases(starts_s=starts, rtt_s=lowest)


class WindowTransitions(NamedTuple):
    """Where the usable window closed and reopened, by event (ACKs and data, capture order)."""

    open_at: np.ndarray  # event index of each first event after a closing
    open_t: np.ndarray
    open_usable: np.ndarray  # the usable window it opened to (0 before the first ACK)
    open_ack: np.ndarray  # index among the ACKs of the last ACK at or before each reopening
    shut_at: np.ndarray  # event index of each closing
    shut_t: np.ndarray
    shut_ack: np.ndarray  # index among the ACKs of the last ACK at or before each closing


def window_transitions(direction: Direction, mss: int, known: bool) -> WindowTransitions:
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
    # The columns as they are stored: the kernel converts each value it reads, so no copy of
    # the data segments' columns is made.
    return WindowTransitions(
        *_window_transitions(
            acks["row"].to_numpy(),
            acks["t_s"].to_numpy(),
            acks["edge_rel"].to_numpy(),
            acks["win_bytes"].to_numpy(),
            data["row"].to_numpy(),
            data["t_s"].to_numpy(),
            data["end_rel"].to_numpy(),
            first,
            float(mss),
            known,
        )
    )


@jit
def _window_transitions(
    ack_row: np.ndarray,
    ack_t: np.ndarray,
    edge: np.ndarray,
    win: np.ndarray,
    data_row: np.ndarray,
    data_t: np.ndarray,
    data_end: np.ndarray,
    first: float,
    mss: float,
    known: bool,
) -> tuple[
    np.ndarray, np.ndarray, np.ndarray, np.ndarray, np.ndarray, np.ndarray, np.ndarray
]:  # pragma: no cover
    # Two passes along the merged timeline: the first counts the closings and reopenings, the
    # second writes them into outputs of exactly that size (a million events close a window
    # a few hundred times).
    n_ack, n_data = ack_row.size, data_row.size
    size = n_ack + n_data
    n_open = n_shut = 0
    open_at = np.empty(0, dtype=np.int64)
    open_t = np.empty(0)
    open_usable = np.empty(0)
    open_ack = np.empty(0, dtype=np.int64)
    shut_at = np.empty(0, dtype=np.int64)
    shut_t = np.empty(0)
    shut_ack = np.empty(0, dtype=np.int64)
    for write in (False, True):
        if write:
            open_at = np.empty(n_open, dtype=np.int64)
            open_t = np.empty(n_open)
            open_usable = np.empty(n_open)
            open_ack = np.empty(n_open, dtype=np.int64)
            shut_at = np.empty(n_shut, dtype=np.int64)
            shut_t = np.empty(n_shut)
            shut_ack = np.empty(n_shut, dtype=np.int64)
        n_open = n_shut = 0
        right = last_win = np.nan
        high = first
        was_closed = False
        i = j = 0
        for k in range(size):
            if j >= n_data or (i < n_ack and ack_row[i] < data_row[j]):
                right, last_win = float(edge[i]), float(win[i])
                t = ack_t[i]
                i += 1
            else:
                high = max(high, float(data_end[j]))
                t = data_t[j]
                j += 1
            usable = right - high
            valid = usable == usable
            closed = (valid and usable < mss) if known else last_win == 0
            if closed and (k == 0 or not was_closed):
                if write:
                    shut_at[n_shut] = k
                    shut_t[n_shut] = t
                    shut_ack[n_shut] = max(i - 1, 0)
                n_shut += 1
            elif not closed and k > 0 and was_closed:
                if write:
                    open_at[n_open] = k
                    open_t[n_open] = t
                    open_usable[n_open] = usable if valid else 0.0
                    open_ack[n_open] = max(i - 1, 0)
                n_open += 1
            was_closed = closed
    return open_at, open_t, open_usable, open_ack, shut_at, shut_t, shut_ack


# A receive window shut this many round trips is a stall (zero_window_stall): the ACK clock has
# stopped for good, and the receiving application's pause, not the window's size, holds the
# sender (a window that closes and reopens within a round trip or two is a slow reader's
# start/stop).
STALL_RTTS = 4.0

# Closings of a receive window that set a reader's rhythm: three or more intervals between them
# (fewer are one pause or two, and no rhythm).
RHYTHM_MIN_CLOSINGS = 3


def reader_rhythm_s(closings_s: npt.NDArray[np.float64]) -> float:
    """The median time between the receive window's closings, a slow reader's rhythm (each
    read reopens the window and the sender fills it again), or zero where fewer than
    RHYTHM_MIN_CLOSINGS closings set none (every long pause is then a stall).

    A shut window that outlasts this rhythm is a pause of the reader's own, a stall; one
    within it is the reader's start/stop, however many round trips a read cycle spans (a
    reader waking every 25 ms on a 3 ms path keeps its window shut for several round trips
    each cycle, and its rhythm is still its rate)."""
    if closings_s.size < RHYTHM_MIN_CLOSINGS:
        return 0.0
    return float(np.median(np.diff(np.sort(closings_s))))


# The share of the sender's answers to ACKs that its turnaround covers: the slow tail of the
# host's scheduling stays inside it, a pause for the application (milliseconds to seconds on
# any path, and at least many answers long) stays out.
TURNAROUND_QUANTILE = 0.9


def turnaround_s(direction: Direction) -> float:
    """How long the sender takes to answer an ACK when it has data: the TURNAROUND_QUANTILE of
    the delays from an ACK that leaves data in flight to the data segment that leaves after it
    and before the next ACK. (An ACK of everything sent is left out: what follows it is the
    pause being judged.)

    It is the host's own time (interrupt, socket lock, scheduling), whatever the path: a few
    microseconds to a few hundred. 0 when no ACK is answered so. Computed once per direction
    (several detectors scale their rules by it).
    """

    def compute() -> float:
        answers = ack_answers(direction)
        # An ACK that leaves data in flight, answered: the sender had the next data ready.
        busy = answers.answered & (answers.sent > answers.line)
        if not busy.any():
            return 0.0
        return float(np.quantile(answers.delay_s[busy], TURNAROUND_QUANTILE))

    return float(direction.memo("turnaround", compute))


def rtt_steps_of(direction: Direction) -> tuple[RttStep, ...]:
    """The path steps of one direction's RTT floor, from its own capture (`rtt_steps`)."""

    def compute() -> tuple[RttStep, ...]:
        t = direction.rtt["t_s"].to_numpy()
        rtt = direction.rtt["rtt_s"].to_numpy()
        departure = t - rtt
        flight = direction.flight
        if flight.empty or too_short(departure, rtt):
            return ()
        # The bytes in flight just after each sampled segment left (the flight table has a row
        # per data segment; a departure before the first is the first's).
        at = search_sorted(flight["t_s"].to_numpy(), departure, side="right") - 1
        in_flight = flight["flight_bytes"].to_numpy()[np.maximum(at, 0)]
        # Whether each sample's ACK was owed at once: one that acknowledged two full segments
        # or more (RFC 1122 4.2.3.2, RFC 5681 4.2). A lone segment's ACK may wait for the
        # delayed-ACK timer, or for the next segment where the one after it was lost, and its
        # sample then holds that wait as well as the path's round trip.
        acks = direction.acks
        mss = segment_size_bytes(direction.segments)
        owed = np.ones(t.size, dtype=bool)
        if mss > 0 and len(acks):
            line = ack_answers(direction).line.astype(np.float64)
            # The bytes each ACK newly acknowledged (the first's are not known: owed).
            newly = np.diff(line, prepend=-np.inf)
            k = search_sorted(acks["t_s"].to_numpy(), t, side="left")
            owed = newly[np.clip(k, 0, len(acks) - 1)] >= 2 * mss
        return rtt_steps(
            departure, rtt, in_flight, path_rate_bps(direction), turnaround_s(direction), owed
        )

    return direction.memo("rtt_steps", compute)


# --- traffic that shared the path ---------------------------------------------------------------

# A flow competes when it carried at least one full segment per round trip of the transfer on
# average: the least rate a congestion window reacts to (RFC 5681 counts the window in
# segments), on any path from a LAN to a satellite hop.
COMPETING_MIN_RTT_RATE_PACKETS = 1.0
# That average is taken over windows of this many round trips of the transfer, and a flow
# competes when it reached it in one of them: a flow that ran for part of the transfer took
# its share while it ran, and a window reacts to it then (a congestion window within a few
# round trips), however long the transfer lasted before or after. Sixteen round trips keep a
# flow of a few stray packets (a lookup, a keep-alive) far below it on any path.
COMPETING_WINDOW_RTTS = 16.0
# The bottleneck was busy when all the flows together arrived at 80% of its rate or more (as
# rate_limit_cause judges the ACKs; the rate estimate is good to about 10%).
COMPETING_BUSY_FRACTION = 0.8


@dataclass(frozen=True)
class Competition:
    """What else arrived at the receiving host while one direction's data did."""

    start_s: float  # the direction's first and last arrival at the receiver, sender's clock
    end_s: float
    rtt_s: float
    names: tuple[str, ...]  # the competing flows, busiest first
    shares: npt.NDArray[np.float64]  # each one's share of the bytes that arrived
    own_share: float
    arrival_bps: float  # all of them together, wire bytes
    path_bps: float | None  # the path's rate (path_rate_bps), as wire bytes
    busy: bool  # together they kept the bottleneck busy
    own_t_s: npt.NDArray[np.float64]
    own_wire_bytes: npt.NDArray[np.int64]
    others: pd.DataFrame  # the competing flows' rows of Merge.competing in the span


def competition(
    ctx: AnalysisContext,
    conn: int,
    direction: int,
    d: Direction,
    min_rtt_rate_packets: float = COMPETING_MIN_RTT_RATE_PACKETS,
    busy_fraction: float = COMPETING_BUSY_FRACTION,
    window_rtts: float = COMPETING_WINDOW_RTTS,
) -> Competition | None:
    """The flows of the receiver's capture that competed with this direction (Merge.competing),
    or None without a receiver capture, without such flows, or without an RTT."""
    merged = ctx.merge
    if merged is None or merged.competing.empty:
        return None
    mine = merged.transmissions_of(conn, direction)
    t = mine["receiver_t_s"].to_numpy()
    ok = np.isfinite(t)
    phases = rtt_phases(ctx, d)
    if ok.sum() < 2 or phases is None:
        return None
    row = ctx.connections.iloc[conn]
    # Ethernet, IP, TCP (with timestamps where the connection uses them), as Merge.competing
    # counts the other flows' headers: what a bottleneck queue counts.
    header = 14 + (40 if int(row["ip_version"]) == 6 else 20) + 20 + 12 * bool(row["ts_ok"])
    t = t[ok]
    length = mine["len"].to_numpy()[ok].astype(np.int64)
    wire = length + header
    start, end = float(t.min()), float(t.max())
    if end <= start:
        return None
    rtt = phases.over(start, end)
    others = merged.competing
    during = others[(others["t_s"] >= start) & (others["t_s"] <= end)]
    per_flow = during.groupby("conn")["wire_bytes"].sum()
    full = int(np.median(length)) + header
    # Each flow's busiest window of `window_rtts` round trips (the whole span where shorter).
    window = min(window_rtts * rtt, end - start)
    k = ((during["t_s"].to_numpy() - start) / window).astype(np.int64)
    busiest = during.assign(window=k).groupby(["conn", "window"])["wire_bytes"].sum()
    peak = busiest.groupby(level="conn").max()
    per_flow = per_flow[peak.reindex(per_flow.index) >= min_rtt_rate_packets * full * window / rtt]
    if per_flow.empty:
        return None
    per_flow = per_flow.sort_values(ascending=False)
    own = float(wire.sum())
    total = own + float(per_flow.sum())
    arrival = total * 8 / (end - start)
    payload_path = path_rate_bps(d)
    path = payload_path * full / (full - header) if payload_path is not None else None
    return Competition(
        start_s=start,
        end_s=end,
        rtt_s=rtt,
        names=tuple(merged.competing_names.get(int(c), f"connection {c}") for c in per_flow.index),
        shares=per_flow.to_numpy(dtype=np.float64) / total,
        own_share=own / total,
        arrival_bps=arrival,
        path_bps=path,
        busy=path is not None and arrival >= busy_fraction * path,
        own_t_s=t,
        own_wire_bytes=wire,
        others=during[during["conn"].isin(per_flow.index)],
    )


# --- rates from the ACKs -----------------------------------------------------------------------


def packet_pair_rate_samples_bps(
    direction: Direction,
    span_acks: int = 4,
    compression_ratio: float = 0.5,
    regularity_factor: float = 2.0,
) -> npt.NDArray[np.float64]:
    """Samples of the bottleneck's rate over a whole direction, from the spacing of its ACKs.

    Sender-based packet pair (Allman and Paxson, "On estimating end-to-end network path
    properties", SIGCOMM 1999, 4): when the segments covered by `span_acks` consecutive ACKs
    left the sender in less than `compression_ratio` of the time their ACKs took to come back,
    the path, not the sender, spaced them, and the ACKs arrive at the bottleneck's rate. A
    sample is the payload bytes those ACKs advanced the ACK line by over their spread. Spans
    with a stall inside (an inter-ACK gap over `regularity_factor` times the span's mean: a
    delayed ACK timer, the end of a flight) and ACKs that carry SACK blocks, are duplicates or
    fill a hole are left out: their spacing says nothing about the path's rate. Because each
    sample selects itself, the caller need not know when the bottleneck was busy.
    """
    acks = direction.acks
    is_new = kind_mask(direction.segments, "new")
    if len(acks) <= span_acks or not is_new.any():
        return np.zeros(0)
    t = acks["t_s"].to_numpy()
    line = acks["ack_rel"].to_numpy()
    # The segment each ACK acknowledges up to its last byte: its first copy's departure.
    ends, sent = _first_copy_sent(
        direction.segments["end_rel"].to_numpy(), direction.segments["t_s"].to_numpy(), is_new, line
    )
    del is_new
    with_sack = _sacked(t, direction)
    prev_dup = np.r_[False, acks["dupack"].to_numpy()[:-1]]
    usable = ends & acks["advance"].to_numpy() & ~acks["dupack"].to_numpy() & ~with_sack & ~prev_dup
    sent = np.where(usable, sent, np.nan)
    # Each a column of the ACKs' length: let go once used, not held to the end.
    del ends, with_sack, prev_dup
    k = span_acks
    run = sliding_window_view(usable, k + 1).all(axis=1)
    gaps = np.diff(t)
    worst_gap = sliding_window_view(gaps, k).max(axis=1)
    del usable, gaps
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


# Segments taken at once where a column of a whole direction's is read: a few megabytes of
# temporaries, however long the direction.
_BLOCK_ROWS = 1 << 20


def _first_copy_sent(
    end: npt.NDArray[np.int64],
    sent_t: npt.NDArray[np.float64],
    is_new: npt.NDArray[np.bool_],
    line: npt.NDArray[np.int64],
) -> tuple[npt.NDArray[np.bool_], npt.NDArray[np.float64]]:
    """Per ACK line, whether a first copy (`is_new`) ends exactly there, and when that copy
    left (NaN: none). First copies carry bytes above every byte sent before them, so their
    ends ascend: the copy an ACK names is the first whose end reaches its line. Taken a block
    of segments at a time, the ACKs in order of their lines: the first copies' columns are
    never copied whole, whatever the losses."""
    order = np.argsort(line, kind="stable")
    lines = line[order]
    found = np.zeros(line.size, dtype=bool)
    sent = np.full(line.size, np.nan)
    lo = 0  # the first line (in order) not yet reached by a first copy's end
    for at in range(0, end.size, _BLOCK_ROWS):
        new = is_new[at : at + _BLOCK_ROWS]
        block_end = end[at : at + _BLOCK_ROWS][new]
        if block_end.size == 0:
            continue
        # The lines this block's ends reach and the blocks before did not.
        hi = int(np.searchsorted(lines, block_end[-1], side="right"))
        if hi > lo:
            j = search_sorted(block_end, lines[lo:hi])
            hit = block_end[j] == lines[lo:hi]
            acks = order[lo:hi]
            found[acks] = hit
            sent[acks[hit]] = sent_t[at : at + _BLOCK_ROWS][new][j[hit]]
            lo = hi
    return found, sent


# A path carries at least what it delivered over this many round trips without a loss: long
# enough that ACK compression or a delayed ACK at either end moves the rate by a few percent
# at most, short enough to hold inside the clean stretches of a lossy transfer.
SUSTAINED_RTTS = 8.0
SUSTAINED_PERCENTILE = 90


def sustained_delivery_bps(direction: Direction, rtts: float = SUSTAINED_RTTS) -> float | None:
    """The payload rate the ACK line advanced at over `rtts` smallest RTTs with no duplicate
    ACK or SACK block inside (no loss recovery: the line then counts exactly what arrived), in
    a tenth of such stretches or more. Bytes acknowledged, not ACKs, so stretch ACKs do not
    slow it. None: no such stretch."""
    rtt = min_rtt_s(direction)
    acks = direction.acks
    if rtt is None or len(acks) < 2:
        return None
    t = acks["t_s"].to_numpy()
    line = np.maximum.accumulate(acks["ack_rel"].to_numpy()).astype(np.float64)
    troubled = acks["dupack"].to_numpy() | _sacked(t, direction)
    span = rtts * rtt
    # For each ACK, the first ACK at least `span` later; the stretch between them is clean
    # when no troubled ACK lies in it.
    j = search_sorted(t, t + span, side="left")
    ok = j < t.size
    i = np.flatnonzero(ok)
    j = j[ok]
    before = np.r_[0, np.cumsum(troubled)]
    clean = (before[j + 1] - before[i]) == 0
    if not clean.any():
        return None
    i, j = i[clean], j[clean]
    rates = (line[j] - line[i]) * 8 / (t[j] - t[i])
    # Held in a tenth of the clean stretches at least, not in one: a single stretch can hold a
    # path change's transient (data still in flight on a longer old path arriving with the new
    # path's) or a burst of compressed ACKs.
    return float(np.percentile(rates, SUSTAINED_PERCENTILE))


def _sacked(ack_t: npt.NDArray[np.float64], direction: Direction) -> npt.NDArray[np.bool_]:
    """Which of the ACK times carry SACK blocks: np.isin's answer, found by a binary search in
    the blocks' times, where np.isin sorts the ACKs' times with them (columns of the ACKs'
    length, several times over, on a capture of millions)."""
    blocks = np.sort(direction.sacks["t_s"].to_numpy())
    if blocks.size == 0:
        return np.zeros(ack_t.size, dtype=bool)
    at = np.minimum(search_sorted(blocks, ack_t), blocks.size - 1)
    found: npt.NDArray[np.bool_] = blocks[at] == ack_t
    return found


def path_rate_bps(direction: Direction, min_samples_count: int = 3) -> float | None:
    """The path's bottleneck rate: the median packet-pair sample, and never below the rate it
    sustained over a few RTTs (`sustained_delivery_bps`); None with too few samples.

    Computed once per direction (several detectors ask; each time it passes over every ACK)."""
    count, rate = direction.memo("path_rate", lambda: _path_rate(direction))
    return rate if count >= min_samples_count else None


def _path_rate(direction: Direction) -> tuple[int, float]:
    """How many packet-pair samples, and the rate `path_rate_bps` gives when they are enough."""
    samples = packet_pair_rate_samples_bps(direction)
    if samples.size == 0:
        return 0, np.nan
    sustained = sustained_delivery_bps(direction)
    return samples.size, max(float(np.median(samples)), sustained or 0.0)


def ack_line_rate_bps(
    acks: pd.DataFrame,
    start_s: float,
    stop_s: float = np.inf,
    above_rel: float = -np.inf,
    up_to_rel: float = np.inf,
) -> tuple[float, int]:
    """Payload rate at which the ACK line advanced over one interval, until it first stalled.

    Takes the ACKs in [start_s, stop_s) whose ACK number lies in (above_rel, up_to_rel], up to
    the first duplicate among them (a hole: from there the line no longer shows what arrived),
    and returns the line's slope from the first to the last of those that advanced it. That is
    what the bottleneck delivered over the interval: its service rate where the caller knows a
    queue kept it busy throughout (ACK dispersion over a burst or a slow-start round), less
    where it idled. Returns (bit/s, or NaN with fewer than MIN_RATE_ACKS ACKs, ACKs used).
    """
    rates, used = ack_line_rates_bps(
        AckLine.of(acks),
        np.array([start_s], dtype=np.float64),
        np.array([stop_s], dtype=np.float64),
        np.array([above_rel], dtype=np.float64),
        np.array([up_to_rel], dtype=np.float64),
    )
    return float(rates[0]), int(used[0])


@dataclass(frozen=True)
class AckLine:
    """The ACK columns `ack_line_rates_bps` scans, pulled out of the DataFrame once."""

    t_s: npt.NDArray[np.float64]
    ack_rel: npt.NDArray[np.int64]
    dupack: npt.NDArray[np.bool_]
    advance: npt.NDArray[np.bool_]

    @staticmethod
    def of(acks: pd.DataFrame) -> AckLine:
        """The columns of a direction's ACK table (`Series.acks`)."""
        return AckLine(
            t_s=acks["t_s"].to_numpy(dtype=np.float64),
            ack_rel=acks["ack_rel"].to_numpy(dtype=np.int64),
            dupack=acks["dupack"].to_numpy(dtype=np.bool_),
            advance=acks["advance"].to_numpy(dtype=np.bool_),
        )


def ack_line_rates_bps(
    acks: AckLine,
    start_s: npt.NDArray[np.float64],
    stop_s: npt.NDArray[np.float64],
    above_rel: npt.NDArray[np.float64],
    up_to_rel: npt.NDArray[np.float64],
) -> tuple[npt.NDArray[np.float64], npt.NDArray[np.int64]]:
    """`ack_line_rate_bps` for many intervals at once: (bit/s or NaN, ACKs used) per interval.

    One compiled pass per interval over only the ACKs that can qualify: it starts at the first
    ACK at or after start_s and ends once no later ACK is before stop_s or at or below
    up_to_rel (the suffix minima), or at the first duplicate. ACKs come in time order with a
    rising line, so each interval reads about its own ACKs, not the whole table.
    """
    n = acks.t_s.size
    rates = np.full(start_s.size, np.nan)
    used = np.zeros(start_s.size, dtype=np.int64)
    if n == 0 or start_s.size == 0:
        return rates, used
    # The first ACK at or after a time is the first where the running maximum reaches it.
    begin = np.searchsorted(np.maximum.accumulate(acks.t_s), start_s, side="left")
    t_after = np.minimum.accumulate(acks.t_s[::-1])[::-1]
    line_after = np.minimum.accumulate(acks.ack_rel[::-1])[::-1]
    _ack_line_rates(
        acks.t_s,
        acks.ack_rel,
        acks.dupack,
        acks.advance,
        t_after,
        line_after,
        begin,
        np.asarray(start_s, dtype=np.float64),
        np.asarray(stop_s, dtype=np.float64),
        np.asarray(above_rel, dtype=np.float64),
        np.asarray(up_to_rel, dtype=np.float64),
        MIN_RATE_ACKS,
        rates,
        used,
    )
    return rates, used


@jit
def _ack_line_rates(
    t: npt.NDArray[np.float64],
    line: npt.NDArray[np.int64],
    dup: npt.NDArray[np.bool_],
    advance: npt.NDArray[np.bool_],
    t_after: npt.NDArray[np.float64],
    line_after: npt.NDArray[np.int64],
    begin: npt.NDArray[np.int64],
    start_s: npt.NDArray[np.float64],
    stop_s: npt.NDArray[np.float64],
    above_rel: npt.NDArray[np.float64],
    up_to_rel: npt.NDArray[np.float64],
    min_acks: int,
    rates: npt.NDArray[np.float64],
    used: npt.NDArray[np.int64],
) -> None:  # pragma: no cover - compiled
    """Fill rates and used per interval; the arithmetic is ack_line_rate_bps's, term for term."""
    n = t.size
    for i in range(start_s.size):
        first = -1
        last = -1
        count = 0
        k = begin[i]
        # Past k, nothing qualifies once every later ACK is at or after stop_s or above the top.
        while k < n and t_after[k] < stop_s[i] and line_after[k] <= up_to_rel[i]:
            if t[k] >= start_s[i] and t[k] < stop_s[i] and above_rel[i] < line[k] <= up_to_rel[i]:
                if dup[k]:
                    break
                if advance[k]:
                    if first < 0:
                        first = k
                    last = k
                    count += 1
            k += 1
        used[i] = count
        if count >= min_acks:
            span = t[last] - t[first]
            if span > 0:
                rates[i] = (line[last] - line[first]) * 8 / span


def achieved_rate_bps(direction: Direction) -> float:
    """Goodput: the ACK line's advance over the time from the first data segment to the last ACK."""
    data = direction.data
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


def lost_data(direction: Direction) -> tuple[npt.NDArray[np.bool_], npt.NDArray[np.bool_]]:
    """Per data segment (`direction.data`'s rows): lost (resent, not D-SACKed), and resent
    needlessly (resent and D-SACKed). Computed once per direction, read-only."""

    def compute() -> tuple[npt.NDArray[np.bool_], npt.NDArray[np.bool_]]:
        flags = direction.resent
        resent = flags["resent"].to_numpy()
        dsacked = flags["dsacked"].to_numpy()
        has_data = direction.segments["len"].to_numpy() > 0
        if not has_data.all():
            resent, dsacked = resent[has_data], dsacked[has_data]
        return resent & ~dsacked, resent & dsacked

    lost, spurious = direction.memo("lost_data", compute)
    lost.flags.writeable = spurious.flags.writeable = False
    return lost, spurious


# --- the flight and the queue ------------------------------------------------------------------


def flight_levels(
    direction: Direction,
) -> tuple[np.ndarray, np.ndarray, npt.NDArray[np.bool_]]:
    """Per data segment: the highest flight of its burst, the window then, and where known.

    Computed once per direction (detectors share it); see `_flight_levels`.
    """
    levels = direction.memo("flight_levels", lambda: _flight_levels(direction))
    for array in levels:
        array.flags.writeable = False  # shared: no detector may change another's input
    return levels


def _flight_levels(
    direction: Direction,
) -> tuple[np.ndarray, np.ndarray, npt.NDArray[np.bool_]]:
    """Per data segment: the highest flight of its burst, the window then, and where known.

    A burst is the run of segments one ACK released; with delayed ACKs the first segment of a
    pair leaves a segment of room that the second then fills, so a segment is judged by the
    most its burst put in flight. The window is the last one advertised before the segment
    (-1 before any: `known` is False there); the levels and windows are those of the known
    segments only, in order. The levels are byte counts: 4-byte integers where every flight
    of the direction fits in them (a flight is at most a window, 2**30 bytes with the largest
    scale, RFC 7323 2.3), floats otherwise (a capture whose ACKs run past its data); either
    is exact.
    """
    data = direction.data
    flight = direction.flight
    fl = flight["flight_bytes"].to_numpy()
    rwnd = flight["rwnd_bytes"].to_numpy()
    known = rwnd >= 0
    fits = fl.size > 0 and int(fl.min()) >= 0 and int(fl.max()) <= np.iinfo(np.uint32).max
    dtype = np.uint32 if fits else np.float64
    if len(data) != len(flight) or fl.size == 0:
        return fl[known].astype(dtype), known_rows(rwnd, known), known
    top = np.empty(int(np.count_nonzero(known)), dtype=dtype)
    _burst_tops(direction.acks["frame"].to_numpy(), data["frame"].to_numpy(), fl, known, top)
    # The windows as the flight table holds them.
    return top, known_rows(rwnd, known), known


def known_rows(values: np.ndarray, known: npt.NDArray[np.bool_]) -> np.ndarray:
    """values[known], for reading only: a view where the known rows are the last ones, as a
    window is unknown only before a direction's first ACK, else a copy."""
    first = int(np.argmax(known)) if known.size else 0
    if known.size and known[first] and known[first:].all():
        return values[first:]
    return values[known]


@jit
def _burst_tops(
    ack_frame: np.ndarray,
    data_frame: np.ndarray,
    fl: np.ndarray,
    known: np.ndarray,
    top_known: np.ndarray,
) -> int:  # pragma: no cover - compiled
    # A burst: the data segments between two ACKs (capture order: frame numbers). Each
    # burst's highest flight goes to its segments where the window is known, into
    # `top_known`, one row per known segment; rows past its end are not written. Returns the
    # rows written.
    n = data_frame.size
    c = 0
    j = 0
    start = 0
    current = -1
    for i in range(n + 1):
        if i < n:
            while j < ack_frame.size and ack_frame[j] < data_frame[i]:
                j += 1
        if i == n or (i > 0 and j != current):
            top = np.float64(fl[start])
            for k in range(start + 1, i):
                top = max(top, np.float64(fl[k]))
            for k in range(start, i):
                if known[k] and c < top_known.size:
                    top_known[c] = top
                    c += 1
            start = i
        current = j
    return c


def queue_at_start_bytes(
    sent_s: float,
    end_rel: int,
    payload_bytes: int,
    acks: pd.DataFrame,
    base_rtt_s: float,
    rate_bps: float,
) -> float:
    """Bytes already queued at the bottleneck when a segment left, from its RTT's excess.

    The first ACK covering the segment came back after the base RTT plus the wait behind the
    queue ahead of it, which drained at rate_bps. NaN when that ACK covers far more than the
    segment (a hole filled by a retransmission: the wait was the recovery's, not a queue's).
    """
    queued = queues_at_start_bytes(
        np.array([sent_s], dtype=np.float64),
        np.array([end_rel], dtype=np.int64),
        payload_bytes,
        AckLine.of(acks),
        base_rtt_s,
        rate_bps,
    )
    return float(queued[0])


def queues_at_start_bytes(
    sent_s: npt.NDArray[np.float64],
    end_rel: npt.NDArray[np.int64],
    payload_bytes: int,
    acks: AckLine,
    base_rtt_s: float,
    rate_bps: float,
) -> npt.NDArray[np.float64]:
    """`queue_at_start_bytes` for many segments at once, with one running maximum of the line."""
    queued = np.full(sent_s.size, np.nan)
    if not (np.isfinite(base_rtt_s) and np.isfinite(rate_bps)):
        return queued
    line = np.maximum.accumulate(acks.ack_rel)
    k = np.searchsorted(line, end_rel, side="left")
    # A delayed ACK covers two segments (RFC 9293 3.8.6.3): allow up to two more full ones.
    ok = np.flatnonzero(k < line.size)
    ok = ok[line[k[ok]] - end_rel[ok] <= 2 * payload_bytes]
    wait = acks.t_s[k[ok]] - sent_s[ok] - base_rtt_s
    # Python's max(wait, 0.0), NaN and -0.0 included, so both forms give the same bits.
    queued[ok] = np.where(wait < 0.0, 0.0, wait) * rate_bps / 8
    return queued


@dataclass(frozen=True)
class AckAnswers:
    """How the sender answered each ACK of a direction (arrays in the ACKs' order)."""

    answered: npt.NDArray[np.bool_]  # a data segment left after it and before the next ACK
    delay_s: npt.NDArray[np.float64]  # from the ACK to the next data segment (inf: none)
    sent: npt.NDArray[np.int64]  # the highest byte sent before the ACK
    line: npt.NDArray[np.int64]  # the ACK line once it arrived (the highest ACK so far)


def ack_answers(d: Direction) -> AckAnswers:
    """Per ACK: whether the sender answered it with data before the next ACK (RFC 5681 3: ACKs
    clock out data), how long it took, and what was sent and acknowledged then. Computed once
    per direction (the limits' turnaround and the send-buffer test share it)."""
    return d.memo("ack_answers", lambda: _ack_answers(d))


def _ack_answers(d: Direction) -> AckAnswers:
    acks, data = d.acks, d.data
    ack_frame = acks["frame"].to_numpy()
    data_frame = data["frame"].to_numpy()
    line = np.maximum.accumulate(acks["ack_rel"].to_numpy().astype(np.int64))
    if data_frame.size == 0:
        none = np.zeros(ack_frame.size, bool)
        nothing = np.zeros_like(line)
        return AckAnswers(none, np.full(ack_frame.size, np.inf), nothing, line)
    following = search_sorted(data_frame, ack_frame)  # the first data segment after each ACK
    has = following < data_frame.size
    nxt = np.minimum(following, data_frame.size - 1)
    next_ack = np.append(ack_frame[1:], np.iinfo(np.int64).max)
    answered = has & (data_frame[nxt] < next_ack)
    delay = np.where(has, data["t_s"].to_numpy()[nxt] - acks["t_s"].to_numpy(), np.inf)
    # The highest byte sent before each ACK: the running maximum read where the ACKs fall,
    # never made whole (a column of the direction's length).
    sent = running_max_at(data["end_rel"].to_numpy(), np.maximum(following - 1, 0))
    sent_before = np.where(following > 0, sent, 0)
    return AckAnswers(answered, np.maximum(delay, 0.0), sent_before, line)


def answer_bytes(d: Direction) -> npt.NDArray[np.uint32]:
    """Per ACK, the payload of the first data segment after it (0: none), as `ack_answers`
    pairs them. Computed once per direction (the send-buffer tests of window_limited and
    rate_limit_cause share it), in the payload's own four bytes."""

    def compute() -> npt.NDArray[np.uint32]:
        ack_frame = d.acks["frame"].to_numpy()
        length = d.data["len"].to_numpy()
        if length.size == 0:
            return np.zeros(ack_frame.size, dtype=np.uint32)
        following = search_sorted(d.data["frame"].to_numpy(), ack_frame)
        has = following < length.size
        first = length[np.minimum(following, length.size - 1)]
        return np.where(has, first, 0).astype(np.uint32, copy=False)

    return d.memo("answer_bytes", compute)


def running_max_at(values: npt.NDArray[np.int64], rows: npt.NDArray[np.int64]) -> np.ndarray:
    """np.maximum.accumulate(values)[rows], a block at a time."""
    out = np.empty(rows.size, dtype=values.dtype)
    high = None
    for at in range(0, values.size, _BLOCK_ROWS):
        top = np.maximum.accumulate(values[at : at + _BLOCK_ROWS])
        if high is not None:
            np.maximum(top, high, out=top)
        high = top[-1]
        inside = (rows >= at) & (rows < at + top.size)
        out[inside] = top[rows[inside] - at]
    return out


def answered_share_at(d: Direction, level: float, within_s: float = np.inf, mss: int = 0) -> float:
    """Of the ACKs that arrive with at least `level` bytes in flight, the share the sender
    answers with data before the next ACK (and within `within_s` of the ACK), in a segment of
    at least `mss` bytes.

    A sender held by its buffer has the next data ready: each ACK that frees room at the cap
    is answered at once (RFC 5681 3: the ACK clocks out data), in full segments. An
    application that wrote that much and no more leaves the ACKs unanswered, and its flight
    drains: its cap is the size of a write, not a window. Its write's tail, shorter than a
    segment, may wait for that ACK (Nagle, RFC 896: a short segment waits until the data
    before it is acknowledged), and answers it with no next data behind it. 0 when no ACK
    arrives at that level.
    """
    answers = ack_answers(d)
    if answers.line.size == 0:
        return 0.0
    acked_before = np.concatenate((answers.line[:1], answers.line[:-1]))
    at_level = answers.sent - acked_before >= level
    if not at_level.any():
        return 0.0
    answered = answers.answered & (answers.delay_s <= within_s)
    if mss > 0:
        answered &= answer_bytes(d) >= mss
    return float(answered[at_level].mean())
