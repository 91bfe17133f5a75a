"""receiver_drop: packets that reached the receiver's capture point and died in its host.

A segment in the receiver's capture that the receiver never acknowledged (no cumulative ACK, no
SACK block) before the sender resent it was discarded after the capture point: by a firewall,
a full socket or backlog queue, or a stack that could not keep up (Antony et al. section 3.2,
"receiver limitations"). tracekit.merge gives these the fate `receiver_drop`.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass

import numpy as np

from tracekit.detectors._two_vantage import DIRECTION_NAMES, by_connection, times
from tracekit.detectors.base import AnalysisContext, Detector
from tracekit.findings import Finding, Severity


class ReceiverDrop(Detector):
    kind = "receiver_drop"
    title = "The receiving host dropped packets that had reached it"
    severity = Severity.WARNING

    @dataclass(frozen=True)
    class Config:
        # Each is proven by the receiver's own ACKs: one is enough to report.
        min_drops_packets: int = 1

    config: Config

    def detect(self, ctx: AnalysisContext) -> Iterator[Finding]:
        if ctx.merge is None:
            return
        for conn, direction, rows, total in by_connection(ctx.merge.transmissions, "receiver_drop"):
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
                    "receiver_drops_packets": count,
                    "receiver_drop_bytes": int(rows["len"].sum()),
                    "transmissions_packets": total,
                    "drop_ratio": count / total,
                    "drop_times_s": t,
                },
                summary=(
                    f"{count} of {total} packets reached the receiver's capture point and were "
                    "dropped inside the receiving host"
                ),
                explanation=(
                    "The receiver's capture shows these segments arriving, yet the receiver "
                    "never acknowledged them, cumulatively or by SACK, before the sender resent "
                    "them: the host discarded them after the capture point (a firewall rule, a "
                    "full socket or backlog queue, a CPU that could not keep up; Antony et al. "
                    "section 3.2). The sender took each as congestion and slowed down, though "
                    "the network delivered them."
                ),
                advice=(
                    "Look inside the receiving host: firewall drop counters (nft list ruleset, "
                    "iptables -nvL), `nstat` (TcpExtTCPBacklogDrop, TcpExtTCPRcvQDrop, "
                    "TcpExtPFMemallocDrop), `ethtool -S` and /proc/net/softnet_stat for NIC and "
                    "backlog drops; raise net.core.netdev_max_backlog and the socket buffer, or "
                    "spread interrupts over more CPUs."
                ),
            )
