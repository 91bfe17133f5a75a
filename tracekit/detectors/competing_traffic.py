"""competing_traffic: other flows arrived at the receiving host while the transfer ran.

The receiver's capture holds every packet that reached the receiving host, the transfer's and
any other flow's; the other flows crossed the same last hop, so whatever bottleneck lies in
front of it, and took their share of its rate (`tracekit.merge`, `Merge.competing`). Antony
et al. measured exactly this case (section 5.2, fig. 12: 800 Mbit/s of UDP from another host
congesting the receiver), and a test transfer's throughput means little until it is said.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass

import numpy as np

from tracekit import units
from tracekit.detectors._measure import (
    COMPETING_BUSY_FRACTION,
    COMPETING_MIN_RTT_RATE_PACKETS,
    COMPETING_WINDOW_RTTS,
    Competition,
    competition,
    data_directions,
)
from tracekit.detectors.base import AnalysisContext, Detector, Evidence
from tracekit.findings import DIRECTIONS, Finding, Severity

# At most this many windows of shares over time are listed.
MAX_WINDOWS = 50


class CompetingTraffic(Detector):
    kind = "competing_traffic"
    per_connection = True
    title = "Other traffic shared the path's last hop with the transfer"
    severity = Severity.INFO
    evidence = (
        Evidence(
            "competing_flows",
            "",
            "the other flows, busiest first, as `src -> dst proto`, separated by `; `",
        ),
        Evidence(
            "competing_share_fractions",
            "",
            "each one's share of the bytes that arrived, in that order",
        ),
        Evidence("own_share_fraction", "", "the transfer's share"),
        Evidence(
            "arrival_rate_bps",
            "bit/s",
            "all flows together, wire bytes over the transfer's arrival span",
        ),
        Evidence(
            "path_rate_bps",
            "bit/s",
            "the path's rate, as wire bytes (absent when too few ACKs)",
        ),
        Evidence(
            "share_window_starts_s",
            "s",
            "starts of the windows the transfer's share is measured over",
        ),
        Evidence(
            "own_share_by_window_fractions",
            "",
            "the transfer's share in each of those windows",
        ),
        Evidence("rtt_s", "s", "the round trip the windows and the threshold use"),
    )

    measures = frozenset({"path_rate", "rtt_steps"})

    @dataclass(frozen=True)
    class Config:
        # A flow competes when it carried at least one full segment per round trip of the
        # transfer on average: the least rate a congestion window reacts to (RFC 5681).
        min_rtt_rate_packets: float = COMPETING_MIN_RTT_RATE_PACKETS
        # The bottleneck was busy when all the flows together arrived at 80% of its rate or
        # more: then the others' share is rate the transfer could have had, and it warns.
        busy_fraction: float = COMPETING_BUSY_FRACTION
        # Shares over time in windows of this many round trips of the transfer: enough
        # packets per window for a share, short enough to see a flow start and stop. A flow
        # competes when it reached min_rtt_rate_packets in one of them.
        window_rtts: float = COMPETING_WINDOW_RTTS

    config: Config

    def detect(self, ctx: AnalysisContext) -> Iterator[Finding]:
        if ctx.merge is None or ctx.merge.competing.empty:
            return
        cfg = self.config
        for conn, direction, d in data_directions(ctx):
            found = competition(
                ctx,
                conn,
                direction,
                d,
                cfg.min_rtt_rate_packets,
                cfg.busy_fraction,
                cfg.window_rtts,
            )
            if found is not None:
                yield self._finding(conn, direction, found)

    def _finding(self, conn: int, direction: int, c: Competition) -> Finding:
        times, own_shares = self._over_time(c)
        name = DIRECTIONS[direction]
        listed = ", ".join(f"{n} {x:.0%}" for n, x in zip(c.names, c.shares, strict=True))
        path_text = f", on a {units.rate(c.path_bps)} path" if c.path_bps is not None else ""
        summary = (
            f"{name} shared the path's last hop with {len(c.names)} other "
            f"flow{'s' if len(c.names) > 1 else ''}: {listed}; the transfer had "
            f"{c.own_share:.0%} of the {units.rate(c.arrival_bps)} that arrived{path_text}"
        )
        if c.busy and c.path_bps is not None:
            load = (
                f"Together they arrived at {units.rate(c.arrival_bps)}, "
                f"{c.arrival_bps / c.path_bps:.0%} of the path's {units.rate(c.path_bps)}: the "
                "bottleneck was busy, so what the others took is rate the transfer could have "
                "had; its throughput measures the share of the path left to it, not the path."
            )
        else:
            load = (
                "All of them together did not keep the bottleneck busy, so the others took "
                "little that the transfer could have used."
            )
        explanation = (
            "The receiver's capture holds these flows arriving at the receiving host while the "
            f"transfer ran ({units.duration(c.start_s)}-{units.duration(c.end_s)}): they "
            "crossed the same last hop, and so shared whatever bottleneck lies in front of it. "
            "By the bytes that arrived (payload and headers, as a bottleneck queue counts "
            f"them) they took {1 - c.own_share:.0%} of it, the transfer {c.own_share:.0%}. " + load
        )
        advice = (
            "To measure the path, repeat the test when the other flows are idle, or on a path "
            "reserved for it; to measure the share a transfer gets under this load, this is "
            "the result. The transfer's share over time is in the evidence."
        )
        evidence: dict[str, object] = {
            "competing_flows": "; ".join(c.names),
            "competing_share_fractions": tuple(float(x) for x in c.shares),
            "own_share_fraction": c.own_share,
            "arrival_rate_bps": c.arrival_bps,
            "share_window_starts_s": times,
            "own_share_by_window_fractions": own_shares,
            "rtt_s": c.rtt_s,
        }
        if c.path_bps is not None:
            evidence["path_rate_bps"] = c.path_bps
        return self.finding(
            conn=conn,
            direction=name,
            start_s=c.start_s,
            end_s=c.end_s,
            evidence=evidence,
            summary=summary,
            explanation=explanation,
            advice=advice,
            severity=Severity.WARNING if c.busy else Severity.INFO,
        )

    def _over_time(self, c: Competition) -> tuple[tuple[float, ...], tuple[float, ...]]:
        """The transfer's share of the arrivals per window of `window_rtts` round trips."""
        span = c.end_s - c.start_s
        length = max(self.config.window_rtts * c.rtt_s, span / MAX_WINDOWS)
        n = int(span / length) + 1
        k = ((c.own_t_s - c.start_s) / length).astype(np.int64)
        own = np.bincount(k, c.own_wire_bytes.astype(np.float64), minlength=n)[:n]
        k = ((c.others["t_s"].to_numpy() - c.start_s) / length).astype(np.int64)
        other = np.bincount(k, c.others["wire_bytes"].to_numpy(np.float64), minlength=n)[:n]
        total = own + other
        seen = total > 0
        starts = c.start_s + length * np.arange(n)
        return (
            tuple(float(x) for x in starts[seen]),
            tuple(float(x) for x in own[seen] / total[seen]),
        )
