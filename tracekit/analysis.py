"""What an analysis holds: each capture point's view (Vantage) and the findings (Analysis).

These are values: the report, the check, the exports and the notebook read them without importing
the stages that made them (`tracekit.pipeline` does the making).
"""

from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass
from typing import Any

import numpy as np
import pyarrow as pa

from tracekit.connections import Connections, records
from tracekit.findings import Finding
from tracekit.merge import Merge
from tracekit.merge.udpstream import UdpStream
from tracekit.series import Series


@dataclass(frozen=True)
class Selection:
    """Which part of the sender's capture an analysis looks at: one connection (its number as
    `tracekit flows` shows it), and a time window in seconds since the capture's first packet
    (both ends included). None: no limit."""

    conn: int | None = None
    from_s: float | None = None
    to_s: float | None = None

    def __post_init__(self) -> None:
        if self.conn is not None and self.conn < 0:
            raise ValueError(f"--connection must be 0 or more, got {self.conn}")
        for name, value in (("--from", self.from_s), ("--to", self.to_s)):
            if value is not None and not (math.isfinite(value) and value >= 0):
                raise ValueError(f"{name} must be a number of seconds, 0 or more, got {value}")
        if self.from_s is not None and self.to_s is not None and self.from_s >= self.to_s:
            raise ValueError(
                f"--from {self.from_s:g} must come before --to {self.to_s:g}: the window is empty"
            )

    @property
    def everything(self) -> bool:
        """Whether nothing is left out."""
        return self.conn is None and self.from_s is None and self.to_s is None


@dataclass(frozen=True)
class Vantage:
    """One capture point's view: its connections and their series."""

    connections: Connections
    series: Series

    def without_packets(self) -> Vantage:
        """This view with its packet table (and the reader's SACK and UDP side tables) emptied,
        their columns kept: the connections table, the series and the times' origin stay. What
        the receiver's view keeps once the merge has read its packets."""
        return Vantage(connections=self.connections.without_packets(), series=self.series)


@dataclass(frozen=True)
class Analysis:
    """What an analysis found: the sender's view, the receiver's if given, and the findings."""

    sender: Vantage
    findings: list[Finding]
    # The receiver's view, its packet table let go once merged (Vantage.without_packets).
    receiver: Vantage | None = None
    # The two captures merged (tracekit.merge), when a receiver capture was given.
    merge: Merge | None = None
    # Numbered UDP test streams (tracekit.merge.udpstream), received against sent.
    udp: tuple[UdpStream, ...] = ()
    # The part of the sender's capture analysed (tracekit.pipeline.analyze).
    selection: Selection = Selection()

    def without_packets(self) -> Analysis:
        """This analysis with the sender's packet table let go (`Vantage.without_packets`):
        its connections table, series, merge and findings stay, all a report draws from. With a
        selection the packets say which connections it kept (`connection_table`), so they stay.
        """
        if not self.selection.everything:
            return self
        return dataclasses.replace(self, sender=self.sender.without_packets())

    def connection_table(self) -> pa.Table:
        """The sender's connections table, only the rows the selection kept: with a connection
        or a time window, those with a packet in it. Each row describes its whole connection."""
        table = self.sender.connections.table
        if self.selection.everything:
            return table
        present = np.unique(self.sender.connections.packets.column("conn").to_numpy())
        keep = np.isin(table.column("conn").to_numpy(), present)
        return table.filter(pa.array(keep))

    def wireshark_filter(
        self, conn: int, start_s: float | None = None, end_s: float | None = None
    ) -> str:
        """A Wireshark display filter that selects one connection's packets of the sender's
        capture, from `start_s` to `end_s` (both included; default: the connection's packets in
        the selection), in seconds since the capture's first packet.

        The connection is named by its endpoints and ports both ways, never by `tcp.stream`,
        whose numbering differs from ours (an incarnation of a reused 4-tuple, UDP); the time
        range tells incarnations apart. Times are written to the nanosecond, rounded outwards,
        so the first and the last packet are kept.
        """
        row = self.sender.connections.table.slice(conn, 1).to_pylist()[0]
        t0 = self.sender.connections.t0_ns
        lo_ns, hi_ns = row["start_ns"] - t0, row["end_ns"] - t0
        sel = self.selection
        if sel.from_s is not None:
            lo_ns = max(lo_ns, math.ceil(sel.from_s * 1e9))
        if sel.to_s is not None:
            hi_ns = min(hi_ns, math.floor(sel.to_s * 1e9))
        if start_s is not None:
            lo_ns = math.floor(start_s * 1e9)
        if end_s is not None:
            hi_ns = math.ceil(end_s * 1e9)
        return (
            f"{_endpoints_filter(row['a'], row['b'], row['proto'])} && "
            f"frame.time_relative >= {_seconds(lo_ns)} && frame.time_relative <= {_seconds(hi_ns)}"
        )

    def to_dict(self) -> dict[str, Any]:
        """The JSON document of `tracekit analyze --json` (docs/analyze.schema.json).

        With a receiver capture it adds `two_vantage` (the clock fit, the fate counts, the
        connections seen in one capture only); with numbered UDP streams, `udp_streams`.
        """
        connections = records(self.connection_table())
        for row in connections:
            row["wireshark_filter"] = self.wireshark_filter(row["conn"])
        doc: dict[str, Any] = {
            "connections": connections,
            "findings": [
                {
                    **f.to_dict(),
                    "wireshark_filter": self.wireshark_filter(f.conn, f.start_s, f.end_s),
                }
                for f in self.findings
            ],
        }
        if self.merge is not None:
            doc["two_vantage"] = {
                "clock": self.merge.clock.to_dict() if self.merge.clock is not None else None,
                "fates": self.merge.counts(),
                "sender_only_connections": [int(c) for c in self.merge.connections.sender_only],
                "receiver_only_connections": [int(c) for c in self.merge.connections.receiver_only],
            }
        if self.udp:
            doc["udp_streams"] = [
                {**stream.to_dict(), "lost_numbers": stream.lost.astype(int).tolist()}
                for stream in self.udp
            ]
        return json_numbers(doc)


def _split(endpoint: str) -> tuple[str, str]:
    """`10.0.0.1:80` or `[2001:db8::1]:80` as (address, port)."""
    addr, port = endpoint.rsplit(":", 1)
    return addr.strip("[]"), port


def _endpoints_filter(a: str, b: str, proto: int | str) -> str:
    """Packets from a to b or from b to a, by address and port: exactly one 4-tuple."""
    (addr_a, port_a), (addr_b, port_b) = _split(a), _split(b)
    ip = "ipv6" if ":" in addr_a else "ip"
    l4 = "udp" if proto in (17, "udp") else "tcp"

    def way(src: str, sport: str, dst: str, dport: str) -> str:
        return (
            f"{ip}.src == {src} && {l4}.srcport == {sport} && "
            f"{ip}.dst == {dst} && {l4}.dstport == {dport}"
        )

    return f"(({way(addr_a, port_a, addr_b, port_b)}) || ({way(addr_b, port_b, addr_a, port_a)}))"


def _seconds(ns: int) -> str:
    """Nanoseconds as exact decimal seconds, as a display filter compares them."""
    sign = "-" if ns < 0 else ""
    whole, frac = divmod(abs(int(ns)), 10**9)
    return f"{sign}{whole}.{frac:09d}"


def json_numbers(value: Any) -> Any:
    """The document with every NaN or infinity as null: JSON has neither (RFC 8259 6)."""
    if isinstance(value, float):
        return value if math.isfinite(value) else None
    if isinstance(value, dict):
        return {k: json_numbers(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [json_numbers(v) for v in value]
    return value
