"""network_drop: packets the sender's capture shows leaving that never reached the receiver's.

Only two captures tell this loss from one inside the receiving host: a transmission in the
sender capture with no copy in the receiver capture was lost between the two capture points
(tracekit.merge, fate `network_drop`), at a bottleneck queue (Antony et al. eq. 1) or on a link.
"""

from __future__ import annotations

from tracekit.detectors._two_vantage import FateDetector
from tracekit.detectors.base import Evidence
from tracekit.findings import Severity


class NetworkDrop(FateDetector):
    kind = "network_drop"
    title = "Packets were lost in the network between the two capture points"
    severity = Severity.WARNING
    evidence = (
        Evidence(
            "network_drops_packets",
            "packets",
            "transmissions lost between the capture points",
        ),
        Evidence("network_drop_bytes", "bytes", "their payload bytes"),
        Evidence(
            "transmissions_packets",
            "packets",
            "data transmissions of the direction in the sender capture",
        ),
        Evidence("drop_ratio", "", "the drops over the transmissions"),
        Evidence("drop_times_s", "s", "when each lost packet left the sender"),
    )
    explanation = (
        "These packets appear in the sender's capture and not in the receiver's: "
        "the network dropped them, most often at a bottleneck whose queue overflowed "
        "(Antony et al. eq. 1), else on a lossy link. Each loss cost a retransmission "
        "and a cut of the congestion window."
    )
    advice = (
        "Find the bottleneck and compare its buffer with the burst the sender sends "
        "(`tracekit plan` gives the buffer a loss-free slow start needs); pace the "
        "sender (fq with SO_MAX_PACING_RATE) or enlarge that buffer; check link error "
        "counters if the losses are isolated and not at queue peaks."
    )

    def summary_text(self, count: int, total: int) -> str:
        return (
            f"{count} of {total} packets sent were lost between the sender's and the "
            "receiver's capture points"
        )
