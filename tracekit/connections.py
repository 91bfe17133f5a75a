"""Packet table -> connections: split flows into TCP incarnations, orient them, relativize numbers.

Every step works on whole columns: the packets are sorted once by (flow, capture order) and
each per-connection quantity is a segmented reduction over that order.
"""

from __future__ import annotations

from collections.abc import Collection
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING, Any

import numpy as np
import pyarrow as pa

from tracekit import schema
from tracekit.columns import to_arrow, to_numpy
from tracekit.kernels import bind
from tracekit.schema import (
    OPT_SACK_PERM,
    OPT_TS,
    OPT_WSCALE,
    PROTO_TCP,
    TH_ACK,
    TH_SYN,
    WRAP,
)
from tracekit.segments import classify_data

if TYPE_CHECKING:
    import pandas as pd

    from tracekit.capture import Capture

# Without an MSS option in the handshake, RFC 9293 3.7.1 says assume 536 (IPv4) / 1220 (IPv6);
# real stacks send far more, so flag TSO/GRO only above the largest Ethernet segment.
_ETHERNET_MSS = {4: 1460, 6: 1440}
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
    # Per packet, the tracekit.segments kind code of TCP data (-1 elsewhere), which the series
    # stage reuses; not a packet-table column.
    data_kind: np.ndarray | None = field(default=None, repr=False, compare=False)

    def frame(self) -> pd.DataFrame:
        """The connections table as a pandas DataFrame."""
        return self.table.to_pandas()


def build_connections(capture: Capture) -> Connections:
    """Split the capture's flows into connections, orient them, and relativize TCP numbers.

    The reader's `flow`, `src_end`, `seq` and `ack` columns are let go as soon as they are
    used: a caller that hands its capture over (`build_connections(read_capture(path))`, no
    other reference kept) has their memory back before the 64-bit columns are all made.
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

    def col(name: str) -> np.ndarray:
        return to_numpy(kept_pk.column(name))

    proto, flags, payload = col("proto"), col("tcp_flags"), col("payload_bytes")
    seq, ack = raw.pop("seq"), raw.pop("ack")
    conn, direction, conn_flow, a_end = _assign(
        raw.pop("flow"), raw.pop("src_end"), proto, flags, seq, kept.flows.num_rows
    )
    n_conn = conn_flow.size
    syn_row, isn = _bases(conn, direction, proto, flags, seq, ack, n_conn)
    seq_rel, ack_rel, *sums = _relative(
        conn, direction, proto, flags, seq, ack, payload, col("ts_ns"), isn, n_conn
    )
    del seq, ack
    tally = _Tally(tuple(sums))
    # Retransmission: a data segment that resends bytes this direction carried before (holes
    # filled for the first time are out of order, not resent: tracekit.segments).
    kind, resent = classify_data(conn, direction, seq_rel, payload, proto)
    tally.retrans = np.zeros(2 * n_conn, dtype=np.int64)
    tally.retrans[: resent.size] = resent

    packets = _connection_packets(
        kept_pk, {"conn": conn, "dir": direction, "seq_rel": seq_rel, "ack_rel": ack_rel}
    )
    table = _connection_table(
        kept, conn_flow=conn_flow, a_end=a_end, tally=tally, isn=isn, syn_row=syn_row
    )
    return Connections(capture=kept, packets=packets, table=table, data_kind=kind)


def _assign(
    flow: np.ndarray,
    src_end: np.ndarray,
    proto: np.ndarray,
    flags: np.ndarray,
    seq: np.ndarray,
    n_flows: int,
) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:  # pragma: no cover - compiled
    """Connection and direction of every packet, in one pass in capture order.

    A pure SYN opens a new incarnation of its 4-tuple (port reuse), unless it resends the
    previous SYN of that flow (same sender, same ISN). Side a sent the SYN that opened the
    connection; without one, it is the first packet's source. Connections are numbered in
    order of first appearance.
    """
    n = flow.size
    conn = np.empty(n, dtype=np.int32)
    direction = np.empty(n, dtype=np.uint8)
    flow_conn = np.full(n_flows, -1, dtype=np.int64)
    syn_end = np.full(n_flows, -1, dtype=np.int64)
    syn_seq = np.zeros(n_flows, dtype=np.int64)
    conn_flow = np.empty(n, dtype=np.int32)
    a_end = np.empty(n, dtype=np.uint8)
    n_conn = 0
    for i in range(n):
        f = flow[i]
        end = src_end[i]
        start = flow_conn[f] < 0
        if proto[i] == PROTO_TCP and (flags[i] & (TH_SYN | TH_ACK)) == TH_SYN:
            if not (syn_end[f] == end and syn_seq[f] == seq[i]):
                start = True
            syn_end[f] = end
            syn_seq[f] = seq[i]
        if start:
            flow_conn[f] = n_conn
            conn_flow[n_conn] = f
            a_end[n_conn] = end
            n_conn += 1
        c = flow_conn[f]
        conn[i] = c
        direction[i] = 0 if end == a_end[c] else 1
    return conn, direction, conn_flow[:n_conn].copy(), a_end[:n_conn].copy()


def _bases(
    conn: np.ndarray,
    direction: np.ndarray,
    proto: np.ndarray,
    flags: np.ndarray,
    seq: np.ndarray,
    ack: np.ndarray,
    n_conn: int,
) -> tuple[np.ndarray, np.ndarray]:  # pragma: no cover - compiled
    """Per direction (2 conn + dir): the row of its first SYN (-1: none) and its ISN.

    The ISN is the SYN's sequence number (SYN = 0, first data byte = 1). Without the SYN, the
    first sequence number seen minus one, so the first data byte is 1 either way; a direction
    that sent nothing takes it from the first ACK the other side sent.
    """
    n_g = 2 * n_conn
    syn_row = np.full(n_g, -1, dtype=np.int64)
    first_seq = np.full(n_g, -1, dtype=np.int64)
    first_ack = np.full(n_g, -1, dtype=np.int64)
    for i in range(conn.size):
        if proto[i] != PROTO_TCP:
            continue
        g = 2 * conn[i] + direction[i]
        if first_seq[g] < 0:
            first_seq[g] = seq[i]
        if syn_row[g] < 0 and (flags[i] & TH_SYN) != 0:
            syn_row[g] = i
        if first_ack[g] < 0 and (flags[i] & TH_ACK) != 0:
            first_ack[g] = ack[i]
    isn = np.zeros(n_g, dtype=np.int64)
    for g in range(n_g):
        if syn_row[g] >= 0:
            isn[g] = seq[syn_row[g]]
        elif first_seq[g] >= 0:
            isn[g] = (first_seq[g] - 1) % WRAP
        elif first_ack[g ^ 1] >= 0:
            isn[g] = (first_ack[g ^ 1] - 1) % WRAP
    return syn_row, isn


class _Tally:
    """Per-connection and per-direction sums gathered in the relativizing pass."""

    def __init__(self, arrays: tuple[np.ndarray, ...]) -> None:
        (
            self.packets,
            self.bytes,
            self.seq_lo,
            self.seq_hi,
            self.seg_max,
            self.udp,
            self.start_ns,
            self.end_ns,
        ) = arrays
        self.retrans = np.zeros(0, dtype=np.int64)


def _unwrapped(
    delta: np.int64, g: np.int64, last: np.ndarray, wraps: np.ndarray
) -> np.int64:  # pragma: no cover - compiled
    """delta (in [0, 2**32)) on the direction's 64-bit line: a step of more than half the
    sequence space from the last number is a wrap (RFC 9293 3.4: comparisons are mod 2**32)."""
    if last[g] >= 0:
        step = delta - last[g]
        if step < -(WRAP // 2):
            wraps[g] += 1
        elif step > WRAP // 2:
            wraps[g] -= 1
    last[g] = delta
    return delta + wraps[g] * WRAP


def _relative(
    conn: np.ndarray,
    direction: np.ndarray,
    proto: np.ndarray,
    flags: np.ndarray,
    seq: np.ndarray,
    ack: np.ndarray,
    payload: np.ndarray,
    ts_ns: np.ndarray,
    isn: np.ndarray,
    n_conn: int,
) -> tuple[np.ndarray, ...]:  # pragma: no cover - compiled
    """Relative 64-bit sequence and ACK numbers, then the sums of the connections table."""
    n = conn.size
    n_g = 2 * n_conn
    seq_rel = np.zeros(n, dtype=np.int64)
    ack_rel = np.zeros(n, dtype=np.int64)
    # Unwrapping state per direction: the last offset seen and the wraps counted so far.
    last_seq = np.full(n_g, -1, dtype=np.int64)
    wraps_seq = np.zeros(n_g, dtype=np.int64)
    last_ack = np.full(n_g, -1, dtype=np.int64)
    wraps_ack = np.zeros(n_g, dtype=np.int64)
    packets = np.zeros(n_g, dtype=np.int64)
    nbytes = np.zeros(n_g, dtype=np.int64)
    seq_lo = np.full(n_g, np.iinfo(np.int64).max, dtype=np.int64)
    seq_hi = np.zeros(n_g, dtype=np.int64)
    seg_max = np.zeros(n_g, dtype=np.int64)
    udp = np.zeros(n_g, dtype=np.bool_)
    start_ns = np.full(n_conn, np.iinfo(np.int64).max, dtype=np.int64)
    end_ns = np.full(n_conn, np.iinfo(np.int64).min, dtype=np.int64)
    for i in range(n):
        c = conn[i]
        g = 2 * c + direction[i]
        pay = np.int64(payload[i])
        packets[g] += 1
        nbytes[g] += pay
        if pay > seg_max[g]:
            seg_max[g] = pay
        t = ts_ns[i]
        if t < start_ns[c]:
            start_ns[c] = t
        if t > end_ns[c]:
            end_ns[c] = t
        if proto[i] != PROTO_TCP:
            udp[g] = True
            continue
        rel = _unwrapped((np.int64(seq[i]) - isn[g]) % WRAP, g, last_seq, wraps_seq)
        seq_rel[i] = rel
        if pay > 0:
            if rel < seq_lo[g]:
                seq_lo[g] = rel
            if rel + pay > seq_hi[g]:
                seq_hi[g] = rel + pay
        if (flags[i] & TH_ACK) != 0:
            delta = (np.int64(ack[i]) - isn[g ^ 1]) % WRAP
            ack_rel[i] = _unwrapped(delta, g, last_ack, wraps_ack)
    return seq_rel, ack_rel, packets, nbytes, seq_lo, seq_hi, seg_max, udp, start_ns, end_ns


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


def _endpoint(addr: str, port: int, version: int) -> str:
    return f"[{addr}]:{port}" if version == 6 else f"{addr}:{port}"


def _connection_table(
    capture: Capture,
    *,
    conn_flow: np.ndarray,
    a_end: np.ndarray,
    tally: _Tally,
    isn: np.ndarray,
    syn_row: np.ndarray,
) -> pa.Table:
    pk = capture.packets
    opts = to_numpy(pk.column("opts"))
    n_conn = conn_flow.size
    duration_s = (tally.end_ns - tally.start_ns) / 1e9
    packets, byte_sum, rexmt = tally.packets, tally.bytes, tally.retrans
    # Unique bytes: from the lowest to the highest byte that data segments covered; UDP has no
    # sequence space, so every payload byte counts.
    unique = np.where(tally.seq_hi > 0, tally.seq_hi - np.minimum(tally.seq_lo, tally.seq_hi), 0)
    unique = np.where(tally.udp, byte_sum, unique)
    with np.errstate(divide="ignore", invalid="ignore"):
        tput = np.where(np.repeat(duration_s, 2) > 0, unique * 8 / np.repeat(duration_s, 2), 0.0)
    start_ns, end_ns = tally.start_ns, tally.end_ns

    # Handshake options, from the SYN (a2b) and the SYN-ACK (b2a).
    mss_col = to_numpy(pk.column("mss"))
    ws_col = to_numpy(pk.column("wscale"))
    has_syn = syn_row >= 0
    syn_rows = np.maximum(syn_row, 0)
    syn_opts = np.where(has_syn, opts[syn_rows], 0)
    mss = np.where(has_syn, mss_col[syn_rows], 0).astype(np.uint16)
    ws = np.where(has_syn & ((syn_opts & OPT_WSCALE) != 0), ws_col[syn_rows], -1)
    syn_a, syn_b = has_syn[0::2], has_syn[1::2]
    both = syn_a & syn_b

    def both_have(bit: int) -> np.ndarray:
        return both & ((syn_opts[0::2] & bit) != 0) & ((syn_opts[1::2] & bit) != 0)

    ws_known = both_have(OPT_WSCALE)
    # RFC 7323 2.2: scaling is on only if both SYNs carry the option; a SYN seen without it
    # settles the question even if the SYN-ACK was not captured.
    ws_absent = (both & ~ws_known) | (syn_a & ((syn_opts[0::2] & OPT_WSCALE) == 0))
    ws_state = np.where(ws_known, "known", np.where(ws_absent, "absent", "unknown"))
    ws_a = np.where(ws_known, ws[0::2], -1).astype(np.int8)
    ws_b = np.where(ws_known, ws[1::2], -1).astype(np.int8)

    flows = capture.flows
    f_proto = to_numpy(flows.column("proto"))[conn_flow]
    f_ver = to_numpy(flows.column("ip_version"))[conn_flow]
    addr0 = flows.column("addr0").to_pylist()
    addr1 = flows.column("addr1").to_pylist()
    port0 = to_numpy(flows.column("port0"))
    port1 = to_numpy(flows.column("port1"))
    ends = [
        (
            _endpoint(addr0[f], int(port0[f]), int(v)),
            _endpoint(addr1[f], int(port1[f]), int(v)),
        )
        for f, v in zip(conn_flow.tolist(), f_ver.tolist(), strict=True)
    ]
    a_txt = [e[int(x)] for e, x in zip(ends, a_end.tolist(), strict=True)]
    b_txt = [e[1 - int(x)] for e, x in zip(ends, a_end.tolist(), strict=True)]

    # TSO/GRO: a segment longer than the MSS the receiving side announced.
    limit = np.array([_ETHERNET_MSS.get(int(v), 1460) for v in f_ver], dtype=np.int64)
    seg_max = tally.seg_max
    mss_recv = np.empty(2 * n_conn, dtype=np.int64)
    mss_recv[0::2] = np.where(mss[1::2] > 0, mss[1::2], limit)
    mss_recv[1::2] = np.where(mss[0::2] > 0, mss[0::2], limit)
    tso = (seg_max > mss_recv).reshape(-1, 2).any(axis=1)

    values = {
        "conn": np.arange(n_conn, dtype=np.int32),
        "proto": f_proto,
        "ip_version": f_ver,
        "a": a_txt,
        "b": b_txt,
        "start_ns": start_ns,
        "end_ns": end_ns,
        "duration_s": duration_s,
        "packets_a2b": packets[0::2],
        "packets_b2a": packets[1::2],
        "bytes_a2b": byte_sum[0::2],
        "bytes_b2a": byte_sum[1::2],
        "throughput_a2b_bps": tput[0::2],
        "throughput_b2a_bps": tput[1::2],
        "retrans_a2b": rexmt[0::2],
        "retrans_b2a": rexmt[1::2],
        "syn_seen": syn_a,
        "synack_seen": syn_b,
        "isn_a": isn[0::2].astype(np.uint32),
        "isn_b": isn[1::2].astype(np.uint32),
        "mss_a": mss[0::2],
        "mss_b": mss[1::2],
        "ws_a": ws_a,
        "ws_b": ws_b,
        "ws_state": ws_state.tolist(),
        "sack_ok": both_have(OPT_SACK_PERM),
        "ts_ok": both_have(OPT_TS),
        "tso": tso,
    }
    arrays = [to_arrow(values[c.name], c.type) for c in schema.CONNECTION_COLUMNS]
    return pa.Table.from_arrays(arrays, schema=schema.arrow_schema(schema.CONNECTION_COLUMNS))


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


bind(globals(), ("_assign", "_bases", "_relative"), helpers=("_unwrapped",))
