"""ack_loss: pure ACKs that left the receiver and never reached the sender.

Only the two captures together show this: the receiver's capture holds every ACK it sent, the
sender's every ACK that arrived (`tracekit.merge`, `Merge.reverse_acks`). A lost ACK costs no
data, since the next one acknowledges cumulatively (RFC 9293 3.4), but each lost ACK lets the
next one release as many segments as both would have: the sender's ACK clock coarsens, and it
sends in trains where the receiver's ACKs asked for pairs (RFC 5681 4.2 expects an ACK for at
least every second full segment; RFC 3449 2.1 describes the burstiness of ACK loss and
thinning on the way back).
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass, field

import numpy as np
import numpy.typing as npt
import pandas as pd

from tracekit import units
from tracekit.detectors.base import AnalysisContext, Detector, Evidence
from tracekit.findings import DIRECTIONS, Finding, Severity

# At most this many loss times are listed in the evidence (the count says how many there were).
MAX_LISTED_TIMES = 200


class AckLoss(Detector):
    kind = "ack_loss"
    title = "ACKs were lost on the way back from the receiver"
    severity = Severity.WARNING
    evidence = (
        Evidence(
            "acks_sent_packets",
            "packets",
            "pure ACKs the receiver sent while the sender's capture ran",
        ),
        Evidence("acks_lost_packets", "packets", "those the sender's capture does not hold"),
        Evidence("ack_loss_ratio", "", "the ACKs lost over the ACKs sent"),
        Evidence(
            "segments_per_ack_sent_ratio",
            "",
            "data segments that reached the receiver per ACK it sent",
        ),
        Evidence(
            "segments_per_ack_arrived_ratio",
            "",
            "the same segments per ACK that reached the sender (absent when none did)",
        ),
        Evidence(
            "ack_loss_times_s",
            "s",
            "when each lost ACK left the receiver, on the sender's clock (at most 200)",
        ),
    )

    @dataclass(frozen=True)
    class Config:
        # With two captures each lost ACK is a fact, not a sample: one is enough to report
        # (and at least one: a finding about no lost ACK has no ACK to show).
        min_lost_packets: int = field(default=1, metadata={"min": 1})
        # The sender's segments per arriving ACK against the receiver's per ACK sent: at twice
        # as many, each ACK that arrives releases a train twice the one the receiver asked for
        # (two segments per ACK become four), the burst the loss causes. Below that it is noted
        # as info: an ACK lost now and then changes no train.
        burst_growth_factor: float = 2.0

    config: Config

    def detect(self, ctx: AnalysisContext) -> Iterator[Finding]:
        merged = ctx.merge
        if merged is None or merged.reverse_acks.empty:
            return
        acks = merged.reverse_acks
        keys = np.unique(acks["conn"].to_numpy().astype(np.int64) * 2 + acks["dir"].to_numpy())
        for conn, direction in zip((keys // 2).tolist(), (keys % 2).tolist(), strict=True):
            rows = merged.reverse_acks_of(conn, direction)
            lost = ~rows["arrived"].to_numpy()
            if lost.sum() < self.config.min_lost_packets:
                continue
            yield self._finding(
                conn, direction, rows, lost, merged.transmissions_of(conn, direction)
            )

    def _finding(
        self,
        conn: int,
        direction: int,
        rows: pd.DataFrame,
        lost: npt.NDArray[np.bool_],
        tx: pd.DataFrame,
    ) -> Finding:
        sent = int(lost.size)
        count = int(lost.sum())
        t = rows["t_s"].to_numpy()
        lost_t = t[lost]
        arrived = sent - count
        # Data segments the receiver acknowledged, per ACK it sent and per ACK the sender got.
        delivered = int(tx["receiver_t_s"].notna().sum()) if len(tx) else 0
        per_ack_sent = delivered / sent if sent else float("nan")
        per_ack_arrived = delivered / arrived if arrived else float("inf")
        bursty = arrived == 0 or (
            per_ack_sent > 0 and per_ack_arrived >= self.config.burst_growth_factor * per_ack_sent
        )
        name = DIRECTIONS[direction]
        share = count / sent
        summary = (
            f"{count} of {sent} pure ACKs the receiver sent ({share:.0%}) never reached the "
            f"sender, {units.duration(float(lost_t[0]))}-{units.duration(float(lost_t[-1]))}"
            + (
                f"; each ACK that arrived released {per_ack_arrived:.1f} segments, where the "
                f"receiver acknowledged every {per_ack_sent:.1f}"
                if np.isfinite(per_ack_arrived)
                else "; none arrived"
            )
        )
        explanation = (
            "The receiver's capture holds these ACKs leaving, and the sender's capture does not "
            "hold them: they were lost on the way back, between the two capture points (a "
            "congested or lossy reverse path, a middlebox or firewall that drops or thins pure "
            "ACKs). No data is lost with them, because the next ACK acknowledges everything "
            "before it (RFC 9293 3.4), but the sender's ACK clock coarsens: "
            + (
                f"each ACK that arrived let out {per_ack_arrived:.1f} data segments on average, "
                f"against the {per_ack_sent:.1f} per ACK the receiver sent (RFC 5681 4.2 "
                "expects an ACK for every second full segment at least). "
                if arrived
                else "no ACK arrived at all, so the sender could only retransmit on its timer. "
            )
            + (
                "That is a train at least twice as long as the receiver's ACKs asked for, sent "
                "back to back at the sender's line rate (RFC 3449 2.1): see line_rate_burst "
                "for what such trains do at the bottleneck."
                if bursty
                else "That changes the sender's trains little."
            )
            + " The sender's capture may also miss packets of its own (tcpdump's drops): if "
            "its capture reported drops, some of these may be capture gaps instead."
        )
        advice = (
            "Look at the path from the receiver back to the sender: drop counters of its "
            "interfaces and queues, a firewall or middlebox that filters or thins pure ACKs, "
            "an asymmetric link (cable, satellite, cellular uplink) whose slow direction loses "
            "them. Pacing the sender (the fq qdisc, SO_MAX_PACING_RATE) keeps the coarser ACK "
            "clock from turning into line-rate trains."
        )
        evidence: dict[str, object] = {
            "acks_sent_packets": sent,
            "acks_lost_packets": count,
            "ack_loss_ratio": share,
            "segments_per_ack_sent_ratio": per_ack_sent,
            "ack_loss_times_s": tuple(float(x) for x in lost_t[:MAX_LISTED_TIMES]),
        }
        if arrived:
            evidence["segments_per_ack_arrived_ratio"] = per_ack_arrived
        return self.finding(
            conn=conn,
            direction=name,
            start_s=float(lost_t[0]),
            end_s=float(lost_t[-1]),
            evidence=evidence,
            summary=summary,
            explanation=explanation,
            advice=advice,
            severity=Severity.WARNING if bursty else Severity.INFO,
        )
