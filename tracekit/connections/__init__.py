"""Packet table -> connections: the second stage.

- `stage`: `build_connections`, the `Connections` value, and the connection table's records.
- `walk`: the compiled passes that number incarnations, orient them and relativize sequence
  numbers (`ConnectionState`, also run chunk by chunk by `stream`).
- `segments`: which data segments are new, resent or out of order, one rule for connections and
  series.
- `stream`: reader and connections as one stream of chunks (`tracekit ingest`, `tracekit flows`).
- `table_io`: the packet table and its connections side file in Parquet, written atomically.
"""

from tracekit.connections.stage import (
    Connections,
    build_connections,
    data_direction,
    packet_schema,
    ranked,
    records,
)
from tracekit.connections.walk import BaseChanged, ConnectionState

__all__ = [
    "BaseChanged",
    "ConnectionState",
    "Connections",
    "build_connections",
    "data_direction",
    "packet_schema",
    "ranked",
    "records",
]
