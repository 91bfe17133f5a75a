"""capture_holes: first copies of data the capture saw only after later bytes.

A TCP sender sends new bytes in order (RFC 9293 3.8: SND.NXT only advances); only a
retransmission goes back. So when a capture shows bytes for the first time after bytes beyond
them (a hole in the sequence, filled later: the `out_of_order` segments), the first copy of those
bytes never passed the capture point. Where that point is decides what the hole means:

- **at the sending host**, the packet was lost between the TCP stack and the capture: the
  host's own queue dropped it (a qdisc such as a tc shaper on that host, a full NIC ring), or the
  capture did (tcpdump's "packets dropped by kernel"). The fill is the sender's retransmission,
  which the connections table's `retrans` cannot count, since it counts bytes seen twice;
- **downstream**, at the receiver or between, the packet was lost upstream of the capture, on
  the path, and the fill is its retransmission;
- **a fill sooner than half a round trip** after the later bytes cannot answer news of a loss
  (three duplicate ACKs or a SACK take a round trip to come back, RFC 5681 3.2, RFC 6675):
  the packets were reordered on the way to the capture (multi-queue capture, a reordering link).

The capture's place comes from the handshake, at the connection's own scale: at the client, the
SYN waits a round trip for the SYN-ACK and the client answers that at once; at the server, the
reverse. Without the handshake, or where neither end's wait dominates it (a capture between the
ends, or a LAN whose round trip is the hosts' own turnaround), tracekit cannot tell where the
capture was, and says so.
"""

from __future__ import annotations

from collections.abc import Iterator

import numpy as np
import pandas as pd

from tracekit import units
from tracekit.core.kernels import jit
from tracekit.detectors.base import AnalysisContext, Detector, Evidence
from tracekit.findings import DIRECTIONS, Finding, Severity
from tracekit.schema import PROTO_TCP, TH_ACK, TH_SYN
from tracekit.series import kind_mask

# A capture is at one end when that end's wait in the handshake is at least this share of the
# round trip (SYN to SYN-ACK at the client, SYN-ACK to the third packet at the server): the
# other end's share is then the capture's distance from it, its own host's turnaround at most.
# At 3/4 a capture point a quarter of the way along the path is still "near" neither end, from
# a LAN (whose round trip is tens of microseconds, of which the host's turnaround is a few) to
# a satellite path.
NEAR_END_FRACTION = 0.75
# A fill this soon after the later bytes (in round trips) cannot be a retransmission: news of a
# loss (duplicate ACKs, a SACK) takes a round trip to reach the sender (RFC 5681 3.2).
REORDER_RTTS = 0.5


class CaptureHoles(Detector):
    kind = "capture_holes"
    title = "First copies missing from the capture: lost before the capture point, then resent"
    severity = Severity.INFO
    evidence = (
        Evidence("hole_segments_count", "", "segments whose bytes the capture saw first late"),
        Evidence("hole_bytes", "bytes", "their payload"),
        Evidence("data_segments_count", "", "data segments of the direction"),
        Evidence("hole_fraction", "", "hole segments over data segments"),
        Evidence("resent_segments_count", "", "fills half a round trip or more after the jump"),
        Evidence("reordered_segments_count", "", "fills sooner: reordering, not loss"),
        Evidence("fill_delay_median_rtts", "RTTs", "from the later bytes to the fill"),
        Evidence("rtt_s", "s", "the round trip the delays are counted in"),
        Evidence(
            "capture_point",
            "",
            "where the capture was for this direction's data: sender, receiver, or unknown (no "
            "handshake, or one in which neither end waited most of the round trip)",
        ),
        Evidence("handshake_near_fraction", "", "the data sender's wait over the round trip"),
    )

    def detect(self, ctx: AnalysisContext) -> Iterator[Finding]:
        seg = ctx.series.segments
        if seg.empty:
            return
        hole = kind_mask(seg, "out_of_order")
        if not hole.any():
            return
        keys = pd.DataFrame(
            {"conn": seg["conn"].to_numpy()[hole], "dir": seg["dir"].to_numpy()[hole]}
        )
        places = _handshake_places(ctx, np.unique(keys["conn"].to_numpy()))
        for conn, direction in keys.drop_duplicates().itertuples(index=False):
            found = self._direction(ctx, int(conn), int(direction), places.get(int(conn)))
            if found is not None:
                yield found

    def _direction(
        self,
        ctx: AnalysisContext,
        conn: int,
        direction: int,
        place: tuple[float, float] | None,
    ) -> Finding | None:
        d = ctx.series.of(conn, direction)
        data = d.data
        t = data["t_s"].to_numpy()
        seq = data["seq_rel"].to_numpy()
        hole = kind_mask(data, "out_of_order")
        n = int(hole.sum())
        if n == 0:
            return None
        # When the capture first saw bytes beyond each hole's: the highest sequence number so
        # far only climbs, so the first segment that passed the hole's start is found by search.
        high = np.maximum.accumulate(seq)
        jump = np.searchsorted(high, seq[hole], side="right")
        jump_t = t[np.minimum(jump, t.size - 1)]
        delay = t[hole] - jump_t
        rtt_s, near = _round_trip(d, place, direction)
        resent = delay >= REORDER_RTTS * rtt_s if np.isfinite(rtt_s) else np.ones(n, bool)
        n_resent = int(resent.sum())
        hole_bytes = int(data["len"].to_numpy()[hole].sum())
        total = len(data)
        point = _point(near)
        evidence: dict[str, object] = {
            "hole_segments_count": n,
            "hole_bytes": hole_bytes,
            "data_segments_count": total,
            "hole_fraction": n / total,
            "resent_segments_count": n_resent,
            "reordered_segments_count": n - n_resent,
            "capture_point": point,
        }
        if np.isfinite(rtt_s) and rtt_s > 0:
            evidence["fill_delay_median_rtts"] = float(np.median(delay) / rtt_s)
            evidence["rtt_s"] = rtt_s
        if near is not None:
            evidence["handshake_near_fraction"] = near
        where = {
            "sender": (
                "The capture was taken at the sending host (its handshake shows it), so these "
                "packets were lost between the sender's TCP stack and the capture point: the "
                "host's own queue dropped them (a qdisc such as a tc shaper on this host, a "
                'full NIC ring) or the capture did (tcpdump\'s "packets dropped by kernel"). '
                "Each fill is the sender's retransmission, which the connections table's "
                "resent count cannot see: it counts bytes the capture saw twice."
            ),
            "receiver": (
                "The capture was taken at the receiving host (its handshake shows it), so these "
                "packets were lost upstream of it, on the path, and each fill is the sender's "
                "retransmission. The sender's capture, given with --receiver, tells where."
            ),
            "unknown": (
                "tracekit cannot tell where the capture was taken: "
                + (
                    "the handshake is not in it. "
                    if near is None
                    else "in its handshake neither end waited most of the round trip, as at a "
                    "point between the ends, or on a path whose round trip is the hosts' own "
                    "turnaround (a LAN). "
                )
                + "At the "
                "sending host, these packets were lost between its TCP stack and the capture "
                "(its qdisc or NIC queue) or by the capture itself (tcpdump's \"packets dropped "
                'by kernel"); anywhere downstream, they were lost upstream of the capture '
                "point. Either way each fill is a retransmission the connections table's "
                "resent count cannot see."
            ),
        }[point]
        reordered = (
            f" {n - n_resent} filled sooner than half a round trip after the later bytes, "
            "before news of a loss could reach the sender: those were reordered on the way "
            "to the capture, not lost."
            if n_resent < n
            else ""
        )
        if point == "sender":
            summary = (
                f"{n_resent} of {total} segments were lost inside the sending host before the "
                f"capture and resent ({units.size(hole_bytes)} seen first as fills)"
            )
            advice = (
                "Count these with the resent segments. Look at the sending host's qdisc and "
                "NIC drops (`tc -s qdisc show dev IF`, `ethtool -S IF`) and the capture's own "
                "(tcpdump's closing line): a shaper on the host is a bottleneck of its own, and "
                "a capture taken after it shows the RTT and the queue from past it only. "
                "Capture before the shaper, or with a larger buffer (tcpdump -B), to see them."
            )
            severity = Severity.WARNING
        else:
            summary = (
                f"{n} of {total} segments seen first after later bytes: their first copies "
                f"never reached the capture ({units.size(hole_bytes)})"
            )
            advice = (
                "Give the sender's capture (and this one with --receiver) to tell losses on the "
                "path from losses in either host; `tcpdump`'s closing line says whether the "
                "capture itself dropped packets."
            )
            severity = Severity.INFO
        return self.finding(
            conn=conn,
            direction=DIRECTIONS[direction],
            start_s=float(t[hole].min()),
            end_s=float(t[hole].max()),
            evidence=evidence,
            summary=summary,
            explanation=(
                f"{n} data segments carried bytes this capture had not seen, after it had "
                "seen bytes beyond them: a hole in the sequence, filled later. A sender sends "
                "new bytes in order, so the first copy of each never passed the capture point. "
                + where
                + reordered
            ),
            advice=advice,
            severity=severity,
        )


def _point(near: float | None) -> str:
    """The capture point for a direction's data from its sender's share of the handshake."""
    if near is None:
        return "unknown"
    if near >= NEAR_END_FRACTION:
        return "sender"
    if near <= 1 - NEAR_END_FRACTION:
        return "receiver"
    # Between the ends, or a path whose round trip is the two hosts' turnaround (a LAN): the
    # handshake cannot tell them apart.
    return "unknown"


def _round_trip(
    d: object, place: tuple[float, float] | None, direction: int
) -> tuple[float, float | None]:
    """The round trip to count fill delays in, and the data sender's share of the handshake.

    The handshake's round trip is the whole path's wherever the capture was; without it, the
    smallest RTT sample of the direction (a round trip at the sender, less downstream).
    """
    if place is not None:
        rtt, client_share = place
        # Direction 0 is a's data, and a sent the SYN (the client).
        near = client_share if direction == 0 else 1.0 - client_share
        return rtt, near
    samples = d.rtt["rtt_s"].to_numpy()  # type: ignore[attr-defined]
    return (float(samples.min()) if samples.size else float("nan")), None


def _handshake_places(ctx: AnalysisContext, conns: np.ndarray) -> dict[int, tuple[float, float]]:
    """Per connection of `conns` whose handshake was captured: its round trip (SYN to the
    client's answer to the SYN-ACK) and the client's share of it (SYN to SYN-ACK).

    a is the end that sent the SYN (the connections stage names the ends so), so the SYN is
    a's (dir 0), the SYN-ACK b's (dir 1), and the third packet a's first after the SYN-ACK.
    """
    pk = ctx.packets
    wanted = np.zeros(int(conns.max()) + 1 if conns.size else 0, dtype=np.bool_)
    wanted[conns] = True
    # One compiled pass over the columns, not a frame of every packet: a connection of
    # millions of packets has a handful of handshake packets.
    syn, synack, third = _handshake_times(
        *(pk.column(name).to_numpy() for name in ("conn", "dir", "ts_ns", "tcp_flags", "proto")),
        wanted,
    )
    out: dict[int, tuple[float, float]] = {}
    for c in np.flatnonzero((synack > syn) & (third < _NEVER)):
        rtt_ns = float(third[c] - syn[c])
        if rtt_ns > 0:
            out[int(c)] = (rtt_ns / 1e9, float(synack[c] - syn[c]) / rtt_ns)
    return out


# A time no packet has: where a connection has no packet of the kind asked for.
_NEVER = np.iinfo(np.int64).max


@jit
def _handshake_times(
    conn: np.ndarray,
    dirs: np.ndarray,
    t: np.ndarray,
    flags: np.ndarray,
    proto: np.ndarray,
    wanted: np.ndarray,
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:  # pragma: no cover - compiled
    """Per connection row (those `wanted` marks), the times of its first SYN from a, its first
    SYN-ACK from b, and a's first packet without SYN after that SYN-ACK (_NEVER: none)."""
    k = wanted.size
    syn = np.full(k, _NEVER, dtype=np.int64)
    synack = np.full(k, _NEVER, dtype=np.int64)
    third = np.full(k, _NEVER, dtype=np.int64)
    for i in range(conn.size):
        c = conn[i]
        if c < 0 or c >= k or not wanted[c] or proto[i] != PROTO_TCP or not flags[i] & TH_SYN:
            continue
        if flags[i] & TH_ACK:
            if dirs[i] == 1 and t[i] < synack[c]:
                synack[c] = t[i]
        elif dirs[i] == 0 and t[i] < syn[c]:
            syn[c] = t[i]
    for i in range(conn.size):
        c = conn[i]
        if c < 0 or c >= k or not wanted[c] or proto[i] != PROTO_TCP or dirs[i] != 0:
            continue
        if not flags[i] & TH_SYN and synack[c] < t[i] < third[c]:
            third[c] = t[i]
    return syn, synack, third
