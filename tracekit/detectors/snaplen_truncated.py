"""snaplen_truncated: the capture's snapshot length cut TCP headers, so options are unknown.

A capture taken with a short snapshot length (tcpdump -s 54 keeps Ethernet, IPv4 and the fixed
TCP header only) keeps every packet's sequence numbers, flags and window, and tracekit counts
payload from the IP header, so volumes stay exact. But the TCP options are cut: the window
scale of the SYNs (RFC 7323 2), SACK blocks (RFC 2018) and timestamps (RFC 7323 3) are unknown,
not absent. Windows then are raw field values, loss recovery cannot be told from SACK, and RTTs
come from sequence numbers only. This finding says so, so that no other finding is read as
more than the capture can show.
"""

from __future__ import annotations

from collections.abc import Iterator

import numpy as np

from tracekit.detectors.base import AnalysisContext, Detector, Evidence
from tracekit.findings import Finding, Severity
from tracekit.schema import OPT_CUT, PROTO_TCP, TH_SYN


class SnaplenTruncated(Detector):
    kind = "snaplen_truncated"
    title = "The snapshot length cut TCP headers: options unknown"
    severity = Severity.INFO
    evidence = (
        Evidence("cut_packets_count", "", "TCP packets whose header was cut"),
        Evidence("tcp_packets_count", "", "TCP packets"),
        Evidence("cut_fraction", "", "the cut over all"),
        Evidence("handshake_cut", "", "whether a SYN's options were cut"),
    )

    def detect(self, ctx: AnalysisContext) -> Iterator[Finding]:
        pk = ctx.packets
        opts = pk.column("opts").to_numpy()
        cut = ((opts & OPT_CUT) != 0) & (pk.column("proto").to_numpy() == PROTO_TCP)
        if not cut.any():
            return
        conn = pk.column("conn").to_numpy()
        tcp = pk.column("proto").to_numpy() == PROTO_TCP
        syn = (pk.column("tcp_flags").to_numpy() & TH_SYN) != 0
        t0 = ctx.series.t0_ns
        ts = pk.column("ts_ns").to_numpy()
        per_conn = np.bincount(conn[cut], minlength=int(conn.max()) + 1)
        totals = np.bincount(conn[tcp], minlength=per_conn.size)
        syn_cut = np.bincount(conn[cut & syn], minlength=per_conn.size)
        for c in np.flatnonzero(per_conn):
            mine = np.flatnonzero(cut & (conn == c))
            start_s = (int(ts[mine].min()) - t0) / 1e9
            end_s = (int(ts[mine].max()) - t0) / 1e9
            count, total = int(per_conn[c]), int(totals[c])
            handshake = bool(syn_cut[c])
            lost = (
                "window scale, SACK blocks and timestamps"
                if handshake
                else ("SACK blocks and timestamps")
            )
            yield self.finding(
                conn=int(c),
                direction=None,
                start_s=start_s,
                end_s=max(end_s, start_s),
                evidence={
                    "cut_packets_count": count,
                    "tcp_packets_count": total,
                    "cut_fraction": count / total if total else 1.0,
                    "handshake_cut": handshake,
                },
                summary=(
                    f"{count} of {total} TCP headers cut by the snapshot length: {lost} unknown"
                ),
                explanation=(
                    f"The capture kept fewer bytes of {count} TCP packets than their headers "
                    "hold (a short snapshot length, such as tcpdump -s 54): sequence numbers, "
                    "flags, windows and payload sizes are exact, but the options beyond the "
                    f"cut are unknown: {lost}. "
                    + (
                        "Without the handshake's window scale, advertised windows are raw "
                        "field values, so a receive window's share of the time is a lower "
                        "bound. "
                        if handshake
                        else ""
                    )
                    + "Findings that need SACK or timestamps (D-SACK, timestamp RTTs) read "
                    "nothing from these packets."
                ),
                advice=(
                    "Capture with a snapshot length that keeps the whole TCP header: tcpdump "
                    "-s 128 (or -s 0) keeps every option at a small cost in file size."
                ),
            )
