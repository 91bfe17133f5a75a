"""The sender bursts at its line rate, far above what the path delivers.

Antony et al. (2003) section 3.2 and fig. 6: packets leave the host back to back at the speed
of its interface (512 packets in about 4 ms, close to 1 Gbit/s) however slow the path behind it.
Every such train queues at the bottleneck at f - s (eq. 1); once a train is longer than the
buffer absorbs, its tail is dropped. A paced sender spaces its packets at about the path's rate
and shows no trains.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass, field

import numpy as np
import pandas as pd

from tracekit import physics, units
from tracekit.core.kernels import jit
from tracekit.core.quantile import BLOCK_ROWS, percentile_in_blocks
from tracekit.core.search import search_sorted
from tracekit.detectors._measure import (
    ETHERNET_HEADER_BYTES,
    AckLine,
    ack_line_rates_bps,
    length_counts,
    lost_data,
    packet_basis,
    path_rate_bps,
    queues_at_start_bytes,
    wire_directions,
)
from tracekit.detectors.base import AnalysisContext, Detector, Evidence
from tracekit.findings import DIRECTIONS, Finding, Severity
from tracekit.series import Direction, train_rows

# The line rate is the rate of the sender's tightest spacing: the 10th percentile of the gaps
# between consecutive data segments, taken per wire byte. Back-to-back departures are a large
# share of an unpaced sender's gaps (every ACK releases two or more segments), and the lowest
# few percent are left out, where the capture clock batches timestamps closer than the wire can.
LINE_RATE_GAP_PERCENTILE = 10
# At most this many burst sizes are listed in the evidence (the count says how many there were).
MAX_LISTED_BURSTS = 50


@dataclass(frozen=True)
class _Bursts:
    """The line-rate trains of one direction, measured."""

    table: pd.DataFrame  # start_s, end_s, packets, rate_bps (wire), lost, delivered_bps, ahead
    line_rate_bps: float
    average_bps: float
    bottleneck_bps: float
    payload_bytes: int
    lost_total: int


def _median_length(length: np.ndarray) -> int:
    """np.median of payload lengths (whole bytes under 64 KiB), by counting, truncated."""
    counts = np.cumsum(length_counts(length))
    n = int(counts[-1])
    low = int(np.searchsorted(counts, (n - 1) // 2, side="right"))
    high = int(np.searchsorted(counts, n // 2, side="right"))
    return int((low + high) / 2)


@jit
def _gap_rates_bps(
    t: np.ndarray, length: np.ndarray, overhead: int
) -> np.ndarray:  # pragma: no cover - compiled
    # Each gap is the time the later packet took to leave: its wire bits over the gap are its
    # rate. Gaps of zero (the capture clock's batches) say nothing.
    out = np.empty(max(t.size - 1, 0))
    n = 0
    for i in range(1, t.size):
        gap = t[i] - t[i - 1]
        if gap > 0:
            out[n] = (np.float64(length[i]) + overhead) * 8 / gap
            n += 1
    return out[:n]


@jit
def _busy_spans(
    t: np.ndarray,
    length: np.ndarray,
    overhead: int,
    rate_bps: float,
    clocked: np.ndarray,
    first: np.ndarray,
    last: np.ndarray,
) -> tuple[np.ndarray, np.ndarray]:  # pragma: no cover - compiled
    """Each train first[k]..last[k] widened to the packets released with it: back to where
    the bottleneck's queue was last empty, and on to that queue's peak, but never across a
    gap in which an ACK came back (clocked[i]: one came before packet i). Its first and
    last row.

    The bottleneck's queue, a packet at a time (Lindley's recursion): each arrival adds its
    wire bits, and each gap drains the gap times the rate. A period begins where an arrival
    finds the queue empty. A capture clock that steps back drains nothing."""
    n = t.size
    begun = np.empty(n, dtype=np.int64)
    queue = np.empty(n)
    q = 0.0
    b = 0
    for i in range(n):
        if i:
            q -= max(t[i] - t[i - 1], 0.0) * rate_bps
        if q <= 0.0:
            q = 0.0
            b = i
        q += (np.float64(length[i]) + overhead) * 8
        begun[i] = b
        queue[i] = q
    start = np.empty(first.size, dtype=np.int64)
    peak = np.empty(first.size, dtype=np.int64)
    for k in range(first.size):
        i = first[k]
        while i > begun[first[k]] and not clocked[i]:
            i -= 1
        start[k] = i
        top = last[k]
        i = last[k] + 1
        while i < n and begun[i] == begun[last[k]] and not clocked[i]:
            if queue[i] > queue[top]:
                top = i
            i += 1
        peak[k] = top
    return start, peak


@jit
def _sum_between(
    values: np.ndarray, first: np.ndarray, last: np.ndarray
) -> np.ndarray:  # pragma: no cover - compiled
    """The sum of values[first[k]..last[k]] (inclusive; 0 where last[k] < first[k]): bytes,
    or how many flags are set."""
    out = np.zeros(first.size, dtype=np.int64)
    for k in range(first.size):
        for i in range(first[k], last[k] + 1):
            out[k] += values[i]
    return out


class LineRateBurst(Detector):
    kind = "line_rate_burst"
    per_connection = True
    title = "The sender bursts at line rate, far above the path's rate"
    severity = Severity.WARNING
    evidence = (
        Evidence("bursts_count", "", "bursts of the direction"),
        Evidence("burst_packets", "packets", "each burst's size (the first 50)"),
        Evidence("burst_packets_max", "packets", "the largest burst"),
        Evidence("burst_packets_median", "packets", "the median burst"),
        Evidence(
            "burst_rate_bps",
            "bit/s",
            "the median burst's rate at the sender, first to last departure",
        ),
        Evidence(
            "line_rate_bps",
            "bit/s",
            "the sender's line rate, from its tightest packet spacing",
        ),
        Evidence("average_rate_bps", "bit/s", "the direction's average sending rate"),
        Evidence(
            "bottleneck_bps",
            "bit/s",
            "what the path delivered, from the spacing of the bursts' ACKs",
        ),
        Evidence("burst_to_bottleneck_ratio", "", "burst rate over bottleneck rate"),
        Evidence(
            "lost_in_bursts_packets",
            "packets",
            "segments of the bursts resent, D-SACKed ones excepted",
        ),
        Evidence("bursts_with_loss_count", "", "bursts that lost a segment"),
        Evidence(
            "lost_in_direction_packets",
            "packets",
            "segments of the whole direction resent, D-SACKed ones excepted",
        ),
        Evidence("queue_at_start_bytes", "bytes", "the queue each lossy burst met at its start"),
        Evidence(
            "buffer_estimate_bytes",
            "bytes",
            "the bottleneck buffer by eq. 1, median over lossy bursts",
        ),
        Evidence(
            "buffer_at_least_bytes",
            "bytes",
            "without a lossy burst: the most any burst queued",
        ),
        Evidence(
            "largest_loss_free_burst_packets",
            "packets",
            "eq. 1 with no loss at the median burst rate",
        ),
        Evidence("bursts_over_buffer_count", "", "bursts larger than that"),
        Evidence("packet_bytes", "bytes", "the packet size l of eq. 1, headers included"),
        Evidence("packet_size_basis", "", "how the packet size was measured"),
        Evidence("rate_basis", "", "which bytes the rates count"),
    )

    measures = frozenset({"lost_data", "path_rate"})

    @dataclass(frozen=True)
    class Config:
        # Longer than the initial window (10 segments, RFC 6928), which leaves back to back on
        # every connection, and than the 2-4 segments an ACK releases in ACK-clocked sending.
        min_burst_packets: int = 16
        # A gap up to 1.5 packet times at the line rate is still back to back: timers and the
        # capture clock add jitter of a fraction of a packet time (121 us at 100 Mbit/s).
        max_gap_factor: float = 1.5
        # Faster than the path by more than its rate estimate's error (ACK dispersion and
        # packet pairs are good to about 10%): a sender paced at the path's rate stays out.
        min_rate_factor: float = 1.25
        # A train counts by the queue it builds at the bottleneck, N_b (f - s) / f packets
        # (eq. 1 with M = 0), whatever its rate ratio: at least the 8 packets of the shortest
        # train that is surely no ACK clock's (min_burst_packets at twice the path's rate),
        # where an ACK releases 2-3 segments (RFC 3465, L = 2) that queue 1-2.
        min_queue_packets: float = 8.0
        # A pattern, not one event: a single burst after an idle spell or the initial window
        # is what every unpaced TCP does once (RFC 5681 4.1); three make a habit. At least one:
        # a finding of no burst has no burst to describe.
        min_bursts_count: int = field(default=3, metadata={"min": 1})
        # The link header a bottleneck queue counts with each packet (Ethernet II, as Linux
        # counts it on an Ethernet or veth device); 0 for a raw IP link.
        link_header_bytes: int = ETHERNET_HEADER_BYTES

    config: Config

    def detect(self, ctx: AnalysisContext) -> Iterator[Finding]:
        for ser, overhead in wire_directions(ctx, self.config.link_header_bytes):
            # Too few data segments for one burst (what _bursts checks first), told without
            # slicing the direction's tables: captures of thousands of short connections.
            if ctx.series.data_segments(ser.conn, ser.direction) < self.config.min_burst_packets:
                continue
            found = self._bursts(ser, overhead)
            if found is not None:
                yield self._finding(ser, found, overhead)

    def _bursts(self, ser: Direction, overhead: int) -> _Bursts | None:
        """The direction's line-rate bursts, or None when there are too few."""
        cfg = self.config
        data = ser.data
        if len(data) < cfg.min_burst_packets:
            return None
        t = data["t_s"].to_numpy()
        length = data["len"].to_numpy()
        payload = _median_length(length)

        def per_gap_bps() -> Iterator[np.ndarray]:
            # A block of gaps at a time: of the rates only the fastest tenth is held.
            for at in range(0, t.size - 1, BLOCK_ROWS):
                rows = slice(at, at + BLOCK_ROWS + 1)
                yield _gap_rates_bps(t[rows], length[rows], overhead)

        line_rate = percentile_in_blocks(per_gap_bps, 100 - LINE_RATE_GAP_PERCENTILE)
        if line_rate is None:
            return None
        gap_s = cfg.max_gap_factor * (payload + overhead) * 8 / line_rate
        # The trains at the line rate, by rows: where the capture's clock steps back their
        # times do not find them.
        first, last, _ = train_rows(t, length, gap_s, cfg.min_burst_packets)
        if first.size < cfg.min_bursts_count:
            return None
        # Each train's ACKs: from its first byte to its last, until the first duplicate.
        seq = data["seq_rel"].to_numpy()
        end = data["end_rel"].to_numpy()
        acks = AckLine.of(ser.acks)
        delivered = ack_line_rates_bps(
            acks,
            start_s=t[first],
            stop_s=np.full(first.size, np.inf),
            above_rel=seq[first].astype(np.float64),
            up_to_rel=end[last].astype(np.float64),
        )[0] * ((payload + overhead) / payload)
        bottleneck = float(np.nanmedian(delivered)) if np.isfinite(delivered).any() else np.nan
        # A burst's ACKs come back no faster than the bottleneck serves, and slower where it
        # idled or a loss held the ACK line: the path's packet-pair rate bounds it from below.
        pairs = path_rate_bps(ser)
        if pairs is not None:
            bottleneck = np.fmax(bottleneck, pairs * (payload + overhead) / payload)
        if not np.isfinite(bottleneck):
            return None
        # A train as the bottleneck's queue sees it: from where the queue it joins was last
        # empty to where that queue peaks. A timer or capture-clock hiccup of a few packet
        # times cuts a write's train in two at the sender's spacing, but the bottleneck drains
        # no more than the gap's worth of its own rate meanwhile, so both halves build one
        # queue; and a train that joins a queue the packets just before it left (a stream,
        # such as a pacer that fills the line) is measured with them. Eq. 1 counts the queue
        # from an empty bottleneck, where each period begins by construction, on any path.
        # Only what left with no ACK between is one release: an ACK that comes back in a gap
        # clocks out what follows it (slow start's pairs keep a bottleneck busy for rounds).
        # ACKs before each departure, counted once: more than before the one before, and one
        # came in the gap.
        before = search_sorted(np.sort(acks.t_s), t)
        clocked = np.zeros(t.size, dtype=np.bool_)
        clocked[1:] = before[1:] > before[:-1]
        first, last = _busy_spans(t, length, overhead, bottleneck, clocked, first, last)
        # Trains of one period are one burst; the first's peak is sought over all of them.
        first, keep = np.unique(first, return_index=True)
        last = last[keep]
        span = t[last] - t[first]
        wire_bytes_before_last = _sum_between(length, first, last - 1) + (last - first) * overhead
        wire_bits = wire_bytes_before_last.astype(np.float64) * 8
        with np.errstate(divide="ignore", invalid="ignore"):
            wire_rate = np.where(span > 0, wire_bits / span, np.inf)
        # No train leaves faster than the sender's line. One that reads faster was stamped by a
        # clock that takes frames in batches (a host's software timestamps: on a LAN's veth
        # trains read at three times the tightest rate the sender keeps), and it reached the
        # bottleneck at the line's rate, whatever the path.
        wire_rate = np.minimum(wire_rate, line_rate)
        lost, _ = lost_data(ser)
        table = pd.DataFrame(
            {
                "start_s": t[first],
                "end_s": t[last],
                "packets": last - first + 1,
                "rate_bps": wire_rate,
                "lost": _sum_between(lost, first, last),
            }
        )
        # What already waited at the bottleneck when each lossy burst began (eq. 1 assumes an
        # empty queue): its first packet's RTT beyond the base RTT, drained at the bottleneck.
        base_rtt = float(ser.rtt["rtt_s"].min()) if len(ser.rtt) else np.nan
        lossy = table["lost"].to_numpy() != 0
        ahead = np.full(len(table), np.nan)
        ahead[lossy] = queues_at_start_bytes(
            t[first[lossy]], end[first[lossy]], payload, acks, base_rtt, bottleneck
        )
        table["ahead"] = ahead
        rate = table["rate_bps"].to_numpy()
        queue = table["packets"].to_numpy() * (1 - bottleneck / rate)
        fast = table[(rate >= cfg.min_rate_factor * bottleneck) & (queue >= cfg.min_queue_packets)]
        if len(fast) < cfg.min_bursts_count:
            return None
        duration = t[-1] - t[0]
        # The wire bytes of every packet but the last, which leaves at the end of the span.
        wire_bytes = int(length[:-1].sum(dtype=np.int64)) + overhead * (length.size - 1)
        return _Bursts(
            table=fast.reset_index(drop=True),
            line_rate_bps=line_rate,
            average_bps=float(wire_bytes * 8 / duration) if duration > 0 else np.nan,
            bottleneck_bps=bottleneck,
            payload_bytes=payload,
            lost_total=int(lost.sum()),
        )

    def _finding(self, ser: Direction, b: _Bursts, overhead: int) -> Finding:
        link = self.config.link_header_bytes
        size = b.payload_bytes + overhead  # l of eq. 1
        s = b.bottleneck_bps
        packets = b.table["packets"].to_numpy()
        rate = b.table["rate_bps"].to_numpy()
        lost = b.table["lost"].to_numpy()
        burst_rate = float(np.median(rate))
        evidence: dict[str, object] = {
            "bursts_count": len(b.table),
            "burst_packets": tuple(int(x) for x in packets[:MAX_LISTED_BURSTS]),
            "burst_packets_max": int(packets.max()),
            "burst_packets_median": float(np.median(packets)),
            "burst_rate_bps": burst_rate,
            "line_rate_bps": b.line_rate_bps,
            "bottleneck_bps": s,
            "burst_to_bottleneck_ratio": burst_rate / s,
            "rate_basis": "wire bytes of l-byte packets: burst rates from first to last "
            "departure at the sender (median over bursts), the line rate from the sender's "
            "tightest spacing, the bottleneck rate from each burst's returning ACKs (ACK "
            "dispersion, median over bursts)",
            "lost_in_bursts_packets": int(lost.sum()),
            "bursts_with_loss_count": int((lost > 0).sum()),
            "lost_in_direction_packets": b.lost_total,
            "packet_bytes": size,
            "packet_size_basis": packet_basis(b.payload_bytes, overhead, link),
        }
        if np.isfinite(b.average_bps):
            evidence["average_rate_bps"] = b.average_bps
        # Eq. 1 per burst that lost packets, plus the queue it met: M = l (N_b (f - s) / f -
        # N_d) + Q_0; the median of those is the buffer. A burst whose start cannot be dated
        # (its first ACK came after a recovery) gives none.
        ahead = b.table["ahead"].to_numpy()
        lossy = (lost > 0) & (rate > s) & np.isfinite(ahead)
        excess = packets * (rate - s) / rate
        estimates = size * (excess[lossy] - lost[lossy]) + ahead[lossy]
        estimates = estimates[estimates >= 0]
        if estimates.size:
            buffer = float(np.median(estimates))
            over = int((excess > buffer / size).sum())
            evidence["queue_at_start_bytes"] = tuple(float(x) for x in ahead[lossy])
            largest = float(physics.largest_loss_free_burst_packets(buffer, burst_rate, s, size))
            evidence |= {
                "buffer_estimate_bytes": buffer,
                "largest_loss_free_burst_packets": largest,
                "bursts_over_buffer_count": over,
            }
            buffer_text = (
                f"Eq. 1, M = l (N_b (f - s) / f - N_d) with l = {size} bytes, plus the queue "
                "each lossy burst met (its first packet's RTT beyond the base RTT), puts the "
                f"bottleneck buffer at about {buffer:,.0f} bytes ({buffer / size:.0f} packets): "
                f"at this rate a burst longer than {largest:.0f} packets overflows it, and "
                f"{over} of the {len(b.table)} bursts did."
            )
        elif lost.sum():
            buffer_text = (
                f"{int((lost > 0).sum())} bursts lost packets, but none of them gives eq. 1 a "
                "buffer size: the queue each met cannot be dated (its first ACK came only after "
                "a loss recovery) or its drops exceed its excess over the bottleneck rate."
            )
        else:
            floor = float(size * excess.max())
            evidence["buffer_at_least_bytes"] = floor
            buffer_text = (
                f"No burst lost packets at the bottleneck, so its buffer holds at least the "
                f"{floor:,.0f} bytes the longest burst queued (eq. 1 with N_d = 0)."
            )
        severity = Severity.WARNING if lost.sum() > 0 else Severity.INFO
        summary = (
            f"{len(b.table)} bursts of up to {packets.max()} packets at "
            f"{units.rate(burst_rate)}, {burst_rate / s:.1f}x the bottleneck's "
            f"{units.rate(s)}; {int(lost.sum())} packets lost in them"
        )
        average = (
            f" while the direction averaged {units.rate(b.average_bps)}"
            if np.isfinite(b.average_bps)
            else ""
        )
        explanation = (
            f"The sender let trains of {int(np.median(packets))} packets (median; "
            f"{packets.min()} to {packets.max()}) leave back to back at "
            f"{units.rate(burst_rate)}, near its line rate of "
            f"{units.rate(b.line_rate_bps)}{average}, into a path whose bottleneck "
            f"delivers {units.rate(s)} (the ACKs of each burst return at that rate). Each "
            "burst queues at the bottleneck at the difference of the two rates (Antony et al. "
            "eq. 1 and fig. 6) and loses its tail once the queue outgrows the buffer. "
            f"{buffer_text}"
            + (
                ""
                if lost.sum()
                else " Nothing was lost, so this finding is only informational (severity "
                "info): the next, longer burst or a smaller buffer elsewhere will drop."
            )
        )
        advice = (
            "Pace the sender at or just below the bottleneck rate, so trains leave at s instead "
            "of the line rate: the fq qdisc (`tc qdisc replace dev IFACE root fq`, which also "
            "honours `maxrate`) or SO_MAX_PACING_RATE on the socket. Otherwise write smaller "
            "chunks more often, or give the bottleneck queue room for a whole burst's excess "
            "(eq. 1 with N_d = 0: N_b (f - s) / f packets; `tracekit plan --ingress --buffer` "
            "shows the largest loss-free burst)."
        )
        return self.finding(
            conn=ser.conn,
            direction=DIRECTIONS[ser.direction],
            start_s=float(b.table["start_s"].iloc[0]),
            end_s=float(b.table["end_s"].iloc[-1]),
            evidence=evidence,
            summary=summary,
            explanation=explanation,
            advice=advice,
            severity=severity,
        )
