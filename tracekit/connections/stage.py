"""Packet table -> connections: split flows into TCP incarnations, orient them, relativize numbers.

Every step works on whole columns: the packets are sorted once by (flow, capture order) and
each per-connection quantity is a segmented reduction over that order.
"""

from __future__ import annotations

from collections.abc import Collection
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING, Any

import numpy as np
import numpy.typing as npt
import pyarrow as pa

from tracekit import schema
from tracekit.connections.segments import classify_data
from tracekit.connections.walk import ConnectionState
from tracekit.core.columns import to_arrow, to_numpy
from tracekit.schema import (
    PROTO_TCP,
)

if TYPE_CHECKING:
    import pandas as pd

    from tracekit.capture import Capture

# Reader columns that the connections stage replaces with CONNECTION_PACKET_COLUMNS.
_REPLACED = frozenset({"flow", "src_end", "seq", "ack"})


@dataclass(frozen=True)
class Connections:
    """The capture's connections and its packet table with connection columns.

    `packets` keeps the reader's row order (capture order) and columns, with `flow`, `src_end`,
    `seq` and `ack` replaced by `conn`, `dir`, `seq_rel` and `ack_rel`; `table` has one row
    per connection (CONNECTION_COLUMNS). The raw numbers are (seq_rel + isn) mod 2**32.
    `capture` is the capture read, its packet table without those four columns.
    """

    capture: Capture
    packets: pa.Table
    table: pa.Table
    # Per packet, the tracekit.connections.segments kind code of TCP data (-1 elsewhere), which
    # the series stage reuses; not a packet-table column.
    data_kind: np.ndarray | None = field(default=None, repr=False, compare=False)
    # The time every later table counts its seconds from: the capture's first packet. Set when
    # `packets` is a selection of the capture's, whose own first packet may come later.
    origin_ns: int | None = None

    def frame(self) -> pd.DataFrame:
        """The connections table as a pandas DataFrame."""
        return self.table.to_pandas()

    @property
    def t0_ns(self) -> int:
        """The capture's first packet's time: what `t_s`, `start_s` and `end_s` count from."""
        if self.origin_ns is not None:
            return self.origin_ns
        ts = self.packets.column("ts_ns").to_numpy()
        return int(ts.min()) if ts.size else 0

    def without_packets(self) -> Connections:
        """These connections with the packet table (and the reader's SACK and UDP side
        tables, and the segment kinds) emptied, their columns kept: the connections table and
        the times' origin stay."""

        def empty(table: pa.Table) -> pa.Table:
            return table.schema.empty_table()

        capture = replace(
            self.capture,
            packets=empty(self.capture.packets),
            sack=empty(self.capture.sack),
            udp=empty(self.capture.udp),
        )
        return replace(
            self, capture=capture, packets=empty(self.packets), data_kind=None, origin_ns=self.t0_ns
        )

    def keeping(self, columns: Collection[str], *, side_tables: bool = True) -> Connections:
        """These connections with only `columns` of the packet table, for the stages after one
        that read the others: the reader's own packet table, which shares their buffers, keeps
        only those of them it has. With `side_tables` False, the reader's SACK and UDP side
        tables and the segment kinds go too (emptied, their columns kept), for the stages after
        the series and the merge. Times still count from the capture's first packet.
        """
        capture = replace(
            self.capture,
            packets=self.capture.packets.select(
                [name for name in self.capture.packets.column_names if name in columns]
            ),
        )
        if not side_tables:
            capture = replace(
                capture,
                sack=capture.sack.schema.empty_table(),
                udp=capture.udp.schema.empty_table(),
            )
        kept = [name for name in self.packets.column_names if name in columns]
        return replace(
            self,
            capture=capture,
            packets=self.packets.select(kept),
            data_kind=self.data_kind if side_tables else None,
            origin_ns=self.t0_ns,
        )

    def select(self, keep: np.ndarray) -> Connections:
        """These connections with only the packets `keep` (a mask over `packets`) selects.

        Connection numbers, the connections table and each packet's relative numbers and
        segment kind stay those of the whole capture; times still count from its first packet.
        The SACK and UDP side tables follow their packets.
        """
        origin = self.t0_ns
        rows = np.cumsum(keep, dtype=np.int64) - 1

        def side(table: pa.Table) -> pa.Table:
            row = to_numpy(table.column("row")).astype(np.int64)
            kept = keep[row]
            out = table.filter(pa.array(kept))
            i = out.schema.get_field_index("row")
            return out.set_column(i, "row", to_arrow(rows[row[kept]], table.schema.field(i).type))

        capture = replace(
            self.capture,
            packets=self.capture.packets.filter(pa.array(keep)),
            sack=side(self.capture.sack),
            udp=side(self.capture.udp),
        )
        return replace(
            self,
            capture=capture,
            packets=self.packets.filter(pa.array(keep)),
            data_kind=None if self.data_kind is None else self.data_kind[keep],
            origin_ns=origin,
        )


def build_connections(capture: Capture) -> Connections:
    """Split the capture's flows into connections, orient them, and relativize TCP numbers.

    The reader's `flow`, `src_end`, `seq` and `ack` columns are let go once the connection
    scan has used them: a caller that hands its capture over (`build_connections(read_capture(
    path))`, no other reference kept) has their memory back before segments are classified.
    """
    pk = capture.packets
    if pk.num_rows == 0:
        empty = [to_arrow([], c.type) for c in schema.CONNECTION_COLUMNS]
        return Connections(
            capture=capture,
            packets=packet_schema().empty_table(),
            table=pa.Table.from_arrays(
                empty, schema=schema.arrow_schema(schema.CONNECTION_COLUMNS)
            ),
        )

    raw = {name: to_numpy(pk.column(name)) for name in sorted(_REPLACED)}
    kept = replace(capture, packets=pk.drop_columns(sorted(_REPLACED)))
    del capture, pk  # from here on only `raw` holds the replaced columns
    kept_pk = kept.packets
    cols = {name: to_numpy(kept_pk.column(name)) for name in ConnectionState.COLUMNS}
    cols.update(raw)
    del raw
    # The whole capture is one chunk of the streaming rule (ConnectionState).
    state = ConnectionState()
    added = state.add(cols, kept.flows.num_rows)
    del cols
    conn, direction, seq_rel = added["conn"], added["dir"], added["seq_rel"]
    proto, payload = to_numpy(kept_pk.column("proto")), to_numpy(kept_pk.column("payload_bytes"))
    # Retransmission: a data segment that resends bytes this direction carried before (holes
    # filled for the first time are out of order, not resent: tracekit.connections.segments).
    kind, resent = classify_data(conn, direction, seq_rel, payload, proto)
    packets = _connection_packets(kept_pk, added)
    table = state.table(kept.flows, resent)
    return Connections(capture=kept, packets=packets, table=table, data_kind=kind)


def packet_schema() -> pa.Schema:
    """Arrow schema of `Connections.packets`: the reader's columns with the connection columns."""
    fields = []
    for col in schema.PACKET_COLUMNS:
        if col.name in _REPLACED:
            continue
        fields.append(pa.field(col.name, col.type, nullable=False))
        if col.name == "iface":
            fields += [
                pa.field(c.name, c.type, nullable=False) for c in schema.CONNECTION_PACKET_COLUMNS
            ]
    return pa.schema(fields)


def _connection_packets(pk: pa.Table, added: dict[str, np.ndarray]) -> pa.Table:
    out = packet_schema()
    arrays = [
        to_arrow(added[f.name], f.type) if f.name in added else pk.column(f.name) for f in out
    ]
    return pa.Table.from_arrays(arrays, schema=out)


def data_direction(bytes_a2b: npt.ArrayLike, bytes_b2a: npt.ArrayLike) -> np.ndarray:
    """Per connection, its data direction: 0 (a2b) or 1 (b2a), the one that carried more payload
    bytes, a tie being a2b. The merge sends that direction's packets from the sender's capture
    to the receiver's, and the report and the CI metrics describe the transfer by it."""
    return (np.asarray(bytes_b2a) > np.asarray(bytes_a2b)).astype(np.int64)


def ranked(table: pa.Table, first: Collection[int], limit: int) -> list[int]:
    """Up to `limit` connection numbers of a connections table, in connection order: those in
    `first` (with findings, drawn), then the busiest (payload bytes both ways)."""
    conn = to_numpy(table.column("conn")).astype(np.int64)
    total = to_numpy(table.column("bytes_a2b")) + to_numpy(table.column("bytes_b2a"))
    chosen = np.isin(conn, np.fromiter(first, dtype=np.int64, count=len(first)))
    # lexsort: the last key sorts first; stable, so ties keep connection order.
    order = np.lexsort((-total, ~chosen))
    return sorted(conn[order[:limit]].tolist())


def records(table: pa.Table) -> list[dict[str, Any]]:
    """Connection rows as plain JSON-ready dicts: `proto` as a name, unknown shifts as None.

    `start_s` (seconds since the first connection's start) is added beside `start_ns`.
    """
    rows = table.to_pylist()
    t0 = min((r["start_ns"] for r in rows), default=0)
    for r in rows:
        r["proto"] = {PROTO_TCP: "tcp", 17: "udp"}.get(r["proto"], str(r["proto"]))
        r["start_s"] = (r["start_ns"] - t0) / 1e9
        for key in ("ws_a", "ws_b"):
            if r[key] < 0:
                r[key] = None
    return rows
