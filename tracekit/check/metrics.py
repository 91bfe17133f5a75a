"""The numbers the thresholds judge, one row per connection, from an analysis.

Each connection is judged on its data direction: the direction that carried more payload bytes
(a2b for an upload, b2a for iperf3 -R), so one threshold fits both ways of running a test.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Any

import numpy as np
import pandas as pd
import pyarrow as pa

from tracekit.analysis import Analysis
from tracekit.connections import data_direction, records


@dataclass(frozen=True)
class ConnectionMetrics:
    """One connection's judged numbers; units in the names."""

    conn: int
    a: str
    b: str
    proto: str
    direction: str  # "a2b" or "b2a": the data direction
    bytes: int  # payload bytes sent that way, retransmissions included
    duration_s: float
    throughput_bps: float  # unique payload bytes times 8 over the duration
    data_segments: int  # segments with payload, at the sender's capture point
    retrans_segments: int
    retrans_ratio: float  # retrans_segments / data_segments (0 without data)
    # Data transmissions that reached the receiver's capture point and were discarded by its
    # host (the merge's fate `receiver_drop`, as the finding of that name counts them). None
    # without a receiver capture or a matching connection there, and for UDP.
    receiver_drops: int | None

    @property
    def label(self) -> str:
        """`conn N a -> b` as the outputs name a connection."""
        return f"conn {self.conn} {self.a} -> {self.b}"

    def to_dict(self) -> dict[str, Any]:
        """The JSON form."""
        return asdict(self)


def _data_segments(packets: pa.Table, n_conns: int) -> np.ndarray:
    """Data segments per (conn, dir) as an array of shape (n_conns, 2)."""
    conn = packets["conn"].to_numpy()
    direction = packets["dir"].to_numpy().astype(np.int64)
    data = packets["payload_bytes"].to_numpy() > 0
    counts = np.bincount(conn[data] * 2 + direction[data], minlength=n_conns * 2)
    return counts[: n_conns * 2].reshape(n_conns, 2)


def _receiver_drops(transmissions: pd.DataFrame, n_conns: int) -> np.ndarray:
    """Per (conn, dir) of the sender's capture, its transmissions whose merge fate is
    `receiver_drop` (arrived at the receiver's capture point, then discarded by its host): the
    same rule as the `receiver_drop` finding's. Shape (n_conns, 2)."""
    dropped = transmissions[transmissions["fate"] == "receiver_drop"]
    cell = dropped["conn"].to_numpy().astype(np.int64) * 2 + dropped["dir"].to_numpy()
    counts = np.bincount(cell, minlength=n_conns * 2)
    return counts[: n_conns * 2].reshape(n_conns, 2)


def connection_metrics(analysis: Analysis) -> list[ConnectionMetrics]:
    """The judged numbers of every connection of the sender's capture."""
    rows = records(analysis.sender.connections.table)
    segments = _data_segments(analysis.sender.connections.packets, len(rows))
    # The sender connections found in the receiver's capture too (the merge's match: protocol,
    # endpoints through any NAT map, incarnation order): only they have their drops judged.
    matched: set[int] = set()
    drops_of = np.zeros((len(rows), 2), np.int64)
    if analysis.receiver is not None and analysis.merge is not None:
        matched = {int(c) for c in analysis.merge.connections.pairs["conn_s"].tolist()}
        drops_of = _receiver_drops(analysis.merge.transmissions, len(rows))
    metrics = []
    for row in rows:
        d = int(data_direction(row["bytes_a2b"], row["bytes_b2a"]))
        direction = ("a2b", "b2a")[d]
        data_segments = int(segments[row["conn"], d])
        retrans = int(row[f"retrans_{direction}"])
        drops = None
        # The merge judges the fates of TCP transmissions only: a UDP datagram has no sequence
        # number in the packet table and is never resent, so no drop in the host can be told.
        if int(row["conn"]) in matched and row["proto"] == "tcp":
            drops = int(drops_of[row["conn"], d])
        metrics.append(
            ConnectionMetrics(
                conn=int(row["conn"]),
                a=row["a"],
                b=row["b"],
                proto=str(row["proto"]),
                direction=direction,
                bytes=int(row[f"bytes_{direction}"]),
                duration_s=float(row["duration_s"]),
                throughput_bps=float(row[f"throughput_{direction}_bps"]),
                data_segments=data_segments,
                retrans_segments=retrans,
                retrans_ratio=retrans / data_segments if data_segments else 0.0,
                receiver_drops=drops,
            )
        )
    return metrics
