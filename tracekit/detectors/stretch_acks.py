"""stretch_acks: each ACK the sender got acknowledged many segments at once.

A receiver should acknowledge at least every second full-sized segment (RFC 5681 4.2, RFC
1122 4.2.3.2). A receiver whose NIC or stack merges segments before TCP sees them (GRO, LRO)
acknowledges each merged super-segment once: stretch ACKs (RFC 2525 2.13 names them). ACKs
lost or thinned on the way back look the same from the sender. Either way the sender's ACK
clock coarsens: each ACK releases a train as long as the segments it acknowledged, and rate
estimates that count ACKs rather than bytes read the path too slow.

With the receiver's capture the two are told apart: segments per ACK the receiver sent is its
own policy, reported here; what the way back lost is `ack_loss`'s, and this finding stays
quiet. With the sender's capture alone, the text says that the cause is an inference.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass

import numpy as np

from tracekit.detectors._measure import data_directions, segment_size_bytes
from tracekit.detectors.base import AnalysisContext, Detector, Evidence
from tracekit.findings import DIRECTIONS, Finding, Severity
from tracekit.series import Direction


class StretchAcks(Detector):
    kind = "stretch_acks"
    per_connection = True
    title = "Each ACK acknowledged many segments at once"
    severity = Severity.INFO
    evidence = (
        Evidence(
            "segments_per_ack_median_segments",
            "segments",
            "median segments acknowledged per ACK that reached the sender",
        ),
        Evidence(
            "segments_per_ack_mean_segments",
            "segments",
            "mean segments acknowledged per such ACK",
        ),
        Evidence("acks_count", "", "the ACKs that advanced the acknowledged data"),
        Evidence(
            "measured_where",
            "",
            "where the policy was seen",
            values=("measured at the receiver", "inferred at the sender"),
        ),
        Evidence(
            "receiver_segments_per_ack_segments",
            "segments",
            "with the receiver's capture: data segments that reached it per pure ACK it sent",
        ),
    )

    @dataclass(frozen=True)
    class Config:
        # Twice RFC 5681's two full-sized segments per ACK: past what delayed ACKs and a
        # receiver's window updates under memory pressure produce (the lab's slow readers
        # show a median of 3), where GRO, LRO or a thinned way back begin.
        min_segments_per_ack_segments: float = 4.0
        # Fewer ACKs than this say nothing about a policy.
        min_acks_count: int = 20

    config: Config

    def detect(self, ctx: AnalysisContext) -> Iterator[Finding]:
        for conn, direction, d in data_directions(ctx):
            if ctx.series.rows("acks", conn, direction) < self.config.min_acks_count:
                continue
            found = self._direction(ctx, conn, direction, d)
            if found is not None:
                yield found

    def _direction(
        self, ctx: AnalysisContext, conn: int, direction: int, d: Direction
    ) -> Finding | None:
        cfg = self.config
        mss = segment_size_bytes(d.segments)
        if mss == 0:
            return None
        acks = d.acks
        line = np.maximum.accumulate(acks["ack_rel"].to_numpy())
        gain = np.diff(line, prepend=line[0]).astype(np.float64)
        # The ACKs that moved the line: duplicates and window updates acknowledge nothing new.
        moved = acks["advance"].to_numpy() & ~acks["dupack"].to_numpy() & (gain > 0)
        if moved.sum() < cfg.min_acks_count:
            return None
        per_ack = gain[moved] / mss
        median = float(np.median(per_ack))
        if median < cfg.min_segments_per_ack_segments:
            return None
        t = acks["t_s"].to_numpy()[moved]
        # With the receiver's capture: what the receiver itself sent, against what arrived.
        receiver_side = None
        merged = ctx.merge
        if merged is not None and not merged.reverse_acks.empty:
            mine = merged.reverse_acks_of(conn, direction)
            delivered = int(merged.transmissions_of(conn, direction)["receiver_t_s"].notna().sum())
            if len(mine) and delivered:
                receiver_side = delivered / len(mine)
                # The receiver acknowledged as RFC 5681 asks; the way back lost the rest,
                # which ack_loss counts exactly.
                if receiver_side < cfg.min_segments_per_ack_segments:
                    return None
        name = DIRECTIONS[direction]
        summary = (
            f"{name} each ACK that reached the sender acknowledged {median:.1f} segments "
            f"(median over {per_ack.size} ACKs; RFC 5681 asks for one per 2 at most)"
        )
        if receiver_side is not None and receiver_side >= cfg.min_segments_per_ack_segments:
            cause = (
                f"The receiver's capture shows the receiver itself sent one ACK per "
                f"{receiver_side:.1f} segments that reached it: its own policy, most often GRO "
                "or LRO merging segments before TCP acknowledges them, a receiver too busy to "
                "answer each segment (its backlog processed in batches), or one that delays "
                "its ACKs."
            )
            where = "measured at the receiver"
        else:
            cause = (
                "Without the receiver's capture the cause is an inference: either the receiver "
                "stretches its ACKs (GRO or LRO merging segments, a delayed-ACK policy) or ACKs "
                "were lost or thinned on the way back. The receiver's capture would tell which."
            )
            where = "inferred at the sender"
        explanation = (
            f"Each ACK the sender received advanced the acknowledged data by {median:.1f} "
            f"segments of {mss} bytes (median; mean {per_ack.mean():.1f}), where a receiver "
            "should acknowledge at least every second full-sized segment (RFC 5681 4.2). "
            f"{cause} Each such ACK releases a train as long as what it acknowledged, and a "
            "rate measured by counting ACKs instead of bytes reads the path too slow; "
            "tracekit's rates count the bytes each ACK acknowledged."
        )
        advice = (
            "Nothing to change if throughput is good: GRO and LRO save the receiver's CPU. If "
            "the sender's trains overflow a buffer (see line_rate_burst), pace the sender (the "
            "fq qdisc, SO_MAX_PACING_RATE), or turn GRO off on the receiver (`ethtool -K IFACE "
            "gro off`) to compare; if the way back thinned them, look at its middleboxes."
        )
        evidence: dict[str, object] = {
            "segments_per_ack_median_segments": median,
            "segments_per_ack_mean_segments": float(per_ack.mean()),
            "acks_count": int(per_ack.size),
            "measured_where": where,
        }
        if receiver_side is not None:
            evidence["receiver_segments_per_ack_segments"] = receiver_side
        return self.finding(
            conn=conn,
            direction=name,
            start_s=float(t[0]),
            end_s=float(t[-1]),
            evidence=evidence,
            summary=summary,
            explanation=explanation,
            advice=advice,
        )
