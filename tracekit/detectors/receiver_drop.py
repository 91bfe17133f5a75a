"""receiver_drop: packets that reached the receiver's capture point and died in its host.

A segment in the receiver's capture that the receiver never acknowledged (no cumulative ACK, no
SACK block) before the sender resent it was discarded after the capture point: by a firewall,
a full socket or backlog queue, or a stack that could not keep up (Antony et al. section 3.2,
"receiver limitations"). tracekit.merge gives these the fate `receiver_drop`.
"""

from __future__ import annotations

from tracekit.detectors._two_vantage import FateDetector
from tracekit.detectors.base import Evidence
from tracekit.findings import Severity


class ReceiverDrop(FateDetector):
    kind = "receiver_drop"
    title = "The receiving host dropped packets that had reached it"
    severity = Severity.WARNING
    evidence = (
        Evidence(
            "receiver_drops_packets",
            "packets",
            "transmissions that reached the receiver's capture point and were dropped in its host",
        ),
        Evidence("receiver_drop_bytes", "bytes", "their payload bytes"),
        Evidence(
            "transmissions_packets",
            "packets",
            "data transmissions of the direction in the sender capture",
        ),
        Evidence("drop_ratio", "", "the drops over the transmissions"),
        Evidence("drop_times_s", "s", "when each one left the sender"),
    )
    explanation = (
        "The receiver's capture shows these segments arriving, yet the receiver "
        "never acknowledged them, cumulatively or by SACK, before the sender resent "
        "them: the host discarded them after the capture point (a firewall rule, a "
        "full socket or backlog queue, a CPU that could not keep up; Antony et al. "
        "section 3.2). The sender took each as congestion and slowed down, though "
        "the network delivered them."
    )
    advice = (
        "Look inside the receiving host: firewall drop counters (nft list ruleset, "
        "iptables -nvL), `nstat` (TcpExtTCPBacklogDrop, TcpExtTCPRcvQDrop, "
        "TcpExtPFMemallocDrop), `ethtool -S` and /proc/net/softnet_stat for NIC and "
        "backlog drops; raise net.core.netdev_max_backlog and the socket buffer, or "
        "spread interrupts over more CPUs."
    )

    def summary_text(self, count: int, total: int) -> str:
        return (
            f"{count} of {total} packets reached the receiver's capture point and were "
            "dropped inside the receiving host"
        )
