"""The numbers the thresholds judge, one row per connection, from an analysis.

Each connection is judged on its data direction: the direction that carried more payload bytes
(a2b for an upload, b2a for iperf3 -R), so one threshold fits both ways of running a test.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Any

import numpy as np
import pyarrow as pa

from tracekit.connections import records
from tracekit.pipeline import Analysis


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
    # Data segments the receiver's capture saw more than once (same sequence number and
    # length): the receiver host dropped the first copy after its capture point, or the sender
    # resent it spuriously. None without a receiver capture or a matching connection there,
    # and for UDP.
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


def _duplicates(packets: pa.Table, n_conns: int) -> np.ndarray:
    """Data segments per (conn, dir) whose (seq_rel, payload_bytes) came before, shape
    (n_conns, 2): one pass over the table, whatever the number of connections."""
    length = packets["payload_bytes"].to_numpy()
    data = length > 0
    cell = packets["conn"].to_numpy()[data].astype(np.int64) * 2 + packets["dir"].to_numpy()[data]
    keys = np.stack([cell, packets["seq_rel"].to_numpy()[data], length[data].astype(np.int64)])
    unique_cells = np.unique(keys, axis=1)[0]
    total = np.bincount(cell, minlength=n_conns * 2)
    distinct = np.bincount(unique_cells, minlength=n_conns * 2)
    return (total - distinct)[: n_conns * 2].reshape(n_conns, 2)


def connection_metrics(analysis: Analysis) -> list[ConnectionMetrics]:
    """The judged numbers of every connection of the sender's capture."""
    rows = records(analysis.sender.connections.table)
    segments = _data_segments(analysis.sender.connections.packets, len(rows))
    # The receiver capture's connection of each sender connection, and whether it names the
    # sides the other way round: the merge's match (protocol, endpoints through any NAT map,
    # incarnation order).
    matched: dict[int, tuple[int, bool]] = {}
    duplicates = np.zeros((0, 2), np.int64)
    if analysis.receiver is not None and analysis.merge is not None:
        pairs = analysis.merge.connections.pairs
        for conn_s, conn_r, flip in zip(
            pairs["conn_s"].tolist(), pairs["conn_r"].tolist(), pairs["flip"].tolist(), strict=True
        ):
            matched[int(conn_s)] = (int(conn_r), bool(flip))
        received = analysis.receiver.connections.table.num_rows
        duplicates = _duplicates(analysis.receiver.connections.packets, received)
    metrics = []
    for row in rows:
        d = 0 if row["bytes_a2b"] >= row["bytes_b2a"] else 1
        direction = ("a2b", "b2a")[d]
        data_segments = int(segments[row["conn"], d])
        retrans = int(row[f"retrans_{direction}"])
        drops = None
        match = matched.get(int(row["conn"]))
        # UDP has no sequence numbers in the packet table: a copy cannot be told from the next
        # datagram, and a datagram is never resent, so the number is TCP's alone.
        if match is not None and row["proto"] == "tcp":
            conn_r, flip = match
            drops = int(duplicates[conn_r, 1 - d if flip else d])
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
