"""receiver_untold: packets resent before the receiving host's ACKs could say what it did.

A segment in the receiver's capture whose copy arrived before the host's ACKs showed it had
taken anything that arrived after it: its ACKs trail its capture point by more than the time the
sender waited to resend. Whether the host kept the first copy (the sender resent it for
nothing) or dropped it, the two captures cannot tell, and tracekit says so rather than guess
(tracekit.merge, fate `receiver_untold`).
"""

from __future__ import annotations

from tracekit.detectors._two_vantage import FateDetector
from tracekit.detectors.base import Evidence
from tracekit.findings import Severity


class ReceiverUntold(FateDetector):
    kind = "receiver_untold"
    title = "The receiving host acknowledged too late to tell what it did with resent packets"
    severity = Severity.INFO
    packets_key = "untold_packets"
    bytes_key = "untold_bytes"
    ratio_key = "untold_ratio"
    times_key = "untold_times_s"
    evidence = (
        Evidence(
            "untold_packets",
            "packets",
            "transmissions that reached the receiver's capture point and were resent before "
            "its ACKs showed it had taken anything that arrived after them",
        ),
        Evidence("untold_bytes", "bytes", "their payload bytes"),
        Evidence(
            "transmissions_packets",
            "packets",
            "data transmissions of the direction in the sender capture",
        ),
        Evidence("untold_ratio", "", "those transmissions over all of them"),
        Evidence("untold_times_s", "s", "when each one left the sender"),
    )
    explanation = (
        "These segments reached the receiver's capture point, and the sender resent them "
        "before the receiver's ACKs showed it had taken even the data that arrived after "
        "them: the receiving host acknowledges later than the sender waits to resend (a CPU "
        "that cannot keep up, ACKs held back while the reader owns the socket). Its ACKs "
        "cannot tell whether it kept the first copies, so they are counted neither as "
        "receiver drops nor as delivered. Where it kept them, the sender resent them for "
        "nothing and cut its window for a loss that did not happen."
    )
    advice = (
        "Count the receiving host's own drops (`nstat`: TcpExtTCPBacklogDrop, "
        "TcpExtTCPRcvQDrop, TcpExtTCPOFODrop) and its duplicates (TcpExtTCPDSACKOldSent); "
        "on the sender, `ss -ti` shows `dsack_dups`, the resends the receiver reported as "
        "duplicates. If the host kept them, give the receiver more CPU (spread the NIC's "
        "interrupts, RPS) or let the sender wait longer before it resends "
        "(net.ipv4.tcp_recovery, net.ipv4.tcp_reordering)."
    )

    def summary_text(self, count: int, total: int) -> str:
        return (
            f"{count} of {total} packets reached the receiver's capture point and were resent "
            "before its ACKs could tell whether its host kept them"
        )
