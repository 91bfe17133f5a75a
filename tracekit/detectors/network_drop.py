"""network_drop: packets the sender's capture shows leaving that never reached the receiver's.

Only two captures tell this loss from one inside the receiving host: a transmission in the
sender capture with no copy in the receiver capture was lost between the two capture points
(tracekit.merge, fate `network_drop`), at a bottleneck queue (Antony et al. eq. 1) or on a link.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass

import numpy as np

from tracekit.detectors._two_vantage import DIRECTION_NAMES, by_connection, times
from tracekit.detectors.base import AnalysisContext, Detector
from tracekit.findings import Finding, Severity


class NetworkDrop(Detector):
    kind = "network_drop"
    title = "Packets were lost in the network between the two capture points"
    severity = Severity.WARNING

    @dataclass(frozen=True)
    class Config:
        # One loss is already a fact with two captures: no sampling noise to filter out.
        min_drops_packets: int = 1

    config: Config

    def detect(self, ctx: AnalysisContext) -> Iterator[Finding]:
        if ctx.merge is None:
            return
        for conn, direction, rows, total in by_connection(ctx.merge.transmissions, "network_drop"):
            if len(rows) < self.config.min_drops_packets:
                continue
            t = np.sort(times(rows))
            count = len(rows)
            yield self.finding(
                conn=conn,
                direction=DIRECTION_NAMES[direction],
                start_s=float(t[0]),
                end_s=float(t[-1]),
                evidence={
                    "network_drops_packets": count,
                    "network_drop_bytes": int(rows["len"].sum()),
                    "transmissions_packets": total,
                    "drop_ratio": count / total,
                    "drop_times_s": t,
                },
                summary=(
                    f"{count} of {total} packets sent were lost between the sender's and the "
                    "receiver's capture points"
                ),
                explanation=(
                    "These packets appear in the sender's capture and not in the receiver's: "
                    "the network dropped them, most often at a bottleneck whose queue overflowed "
                    "(Antony et al. eq. 1), else on a lossy link. Each loss cost a retransmission "
                    "and a cut of the congestion window."
                ),
                advice=(
                    "Find the bottleneck and compare its buffer with the burst the sender sends "
                    "(`tracekit plan` gives the buffer a loss-free slow start needs); pace the "
                    "sender (fq with SO_MAX_PACING_RATE) or enlarge that buffer; check link error "
                    "counters if the losses are isolated and not at queue peaks."
                ),
            )
