"""Packet table -> connections: split flows into TCP incarnations, orient them, relativize numbers.

Every step works on whole columns: the packets are sorted once by (flow, capture order) and
each per-connection quantity is a segmented reduction over that order.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import numpy as np
import pyarrow as pa

from tracekit import schema
from tracekit.groups import (
    WRAP,
    first_index,
    segment_starts,
    unwrap_where,
)
from tracekit.schema import OPT_SACK_PERM, OPT_TS, OPT_WSCALE, PROTO_TCP, TH_ACK, TH_SYN
from tracekit.segments import RESENT, classify_data

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
    """

    capture: Capture
    packets: pa.Table
    table: pa.Table

    def frame(self) -> pd.DataFrame:
        """The connections table as a pandas DataFrame."""
        return self.table.to_pandas()


def build_connections(capture: Capture) -> Connections:
    """Split the capture's flows into connections, orient them, and relativize TCP numbers."""
    pk = capture.packets
    n = pk.num_rows
    flow = pk.column("flow").to_numpy()
    src_end = pk.column("src_end").to_numpy()
    proto = pk.column("proto").to_numpy()
    flags = pk.column("tcp_flags").to_numpy()
    seq = pk.column("seq").to_numpy().astype(np.int64)
    ack = pk.column("ack").to_numpy().astype(np.int64)
    payload = pk.column("payload_bytes").to_numpy()
    opts = pk.column("opts").to_numpy()

    if n == 0:
        empty = [pa.array([], type=c.type) for c in schema.CONNECTION_COLUMNS]
        return Connections(
            capture=capture,
            packets=packet_schema().empty_table(),
            table=pa.Table.from_arrays(
                empty, schema=schema.arrow_schema(schema.CONNECTION_COLUMNS)
            ),
        )
    order = np.argsort(flow, kind="stable")  # capture order within each flow
    f_s = flow[order]
    tcp_s = proto[order] == PROTO_TCP
    end_s = src_end[order]
    seq_s = seq[order]
    pure_syn_s = tcp_s & ((flags[order] & (TH_SYN | TH_ACK)) == TH_SYN)

    # A pure SYN opens a new incarnation of its 4-tuple (port reuse), unless it resends the
    # previous SYN of that flow (same sender, same ISN).
    flow_start = segment_starts(f_s)
    new_conn = flow_start.copy()
    syn_pos = np.flatnonzero(pure_syn_s)
    if syn_pos.size:
        resend = np.zeros(syn_pos.size, dtype=bool)
        resend[1:] = (
            (f_s[syn_pos[1:]] == f_s[syn_pos[:-1]])
            & (end_s[syn_pos[1:]] == end_s[syn_pos[:-1]])
            & (seq_s[syn_pos[1:]] == seq_s[syn_pos[:-1]])
        )
        new_conn[syn_pos[~resend]] = True
    conn_sorted = np.cumsum(new_conn) - 1
    n_conn = int(conn_sorted[-1]) + 1 if n else 0

    # Number connections by first appearance in the capture, not by flow id.
    first_row = order[np.flatnonzero(new_conn)]
    renumber = np.empty(n_conn, dtype=np.int64)
    renumber[np.argsort(first_row, kind="stable")] = np.arange(n_conn)
    conn_sorted = renumber[conn_sorted]

    # Side a sent the first SYN; without one, it is the first packet's source.
    first_pos = first_index(conn_sorted, np.ones(n, dtype=bool), n_conn)
    syn_first = first_index(conn_sorted, pure_syn_s, n_conn)
    a_pos = np.where(syn_first >= 0, syn_first, first_pos)
    a_end = end_s[a_pos] if n_conn else np.zeros(0, dtype=np.uint8)
    dir_sorted = (end_s != a_end[conn_sorted]).astype(np.uint8)

    # Per (conn, dir) groups, in capture order.
    cd_sorted = conn_sorted * 2 + dir_sorted
    order2 = np.argsort(cd_sorted, kind="stable")
    rows = order[order2]  # original row numbers, grouped by (conn, dir)
    cd = cd_sorted[order2]
    n_cd = 2 * n_conn
    g_flags = flags[rows]
    g_seq = seq[rows]
    g_ack = ack[rows]
    g_tcp = proto[rows] == PROTO_TCP
    g_payload = payload[rows].astype(np.int64)

    # ISN per direction: the SYN's sequence number (SYN = 0, first data byte = 1). Without the
    # SYN, the first sequence number seen minus one, so the first data byte is 1 either way.
    g_syn = g_tcp & ((g_flags & TH_SYN) != 0)
    syn_idx = first_index(cd, g_syn, n_cd)
    any_idx = first_index(cd, g_tcp, n_cd)
    isn = np.zeros(n_cd, dtype=np.int64)
    has_any = any_idx >= 0
    isn[has_any] = (g_seq[any_idx[has_any]] - 1) % WRAP
    has_syn = syn_idx >= 0
    isn[has_syn] = g_seq[syn_idx[has_syn]]
    # A direction that sent nothing takes its base from the first ACK the other side sent.
    g_ackf = g_tcp & ((g_flags & TH_ACK) != 0)
    ack_idx = first_index(cd, g_ackf, n_cd)
    other = np.arange(n_cd) ^ 1
    silent = ~has_any & (ack_idx[other] >= 0)
    isn[silent] = (g_ack[ack_idx[other][silent]] - 1) % WRAP

    seq_rel_g = unwrap_where((g_seq - isn[cd]) % WRAP, cd, g_tcp)
    # ACK numbers are relative to the other direction's ISN; only packets with ACK set carry one.
    ack_rel_g = unwrap_where((g_ack - isn[cd ^ 1]) % WRAP, cd, g_ackf)

    # Retransmission: a data segment that resends bytes this direction carried before (holes
    # filled for the first time are out of order, not resent: tracekit.segments).
    kind, _ = classify_data(cd, seq_rel_g, g_payload, g_tcp & (g_payload > 0))
    retrans = np.isin(kind, RESENT)

    # Back to capture order.
    conn_col = np.empty(n, dtype=np.int32)
    dir_col = np.empty(n, dtype=np.uint8)
    seq_col = np.empty(n, dtype=np.int64)
    ack_col = np.empty(n, dtype=np.int64)
    conn_col[rows] = cd // 2
    dir_col[rows] = cd % 2
    seq_col[rows] = seq_rel_g
    ack_col[rows] = ack_rel_g

    packets = _connection_packets(
        pk, {"conn": conn_col, "dir": dir_col, "seq_rel": seq_col, "ack_rel": ack_col}
    )
    table = _connection_table(
        capture,
        n_conn=n_conn,
        conn_flow=f_s[first_pos] if n_conn else np.zeros(0, dtype=np.int32),
        a_end=a_end,
        cd=cd,
        rows=rows,
        g_tcp=g_tcp,
        g_flags=g_flags,
        g_payload=g_payload,
        seq_rel=seq_rel_g,
        retrans=retrans,
        isn=isn,
        syn_idx=syn_idx,
        opts=opts,
    )
    return Connections(capture=capture, packets=packets, table=table)


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
        pa.array(added[f.name], type=f.type) if f.name in added else pk.column(f.name) for f in out
    ]
    return pa.Table.from_arrays(arrays, schema=out)


def _endpoint(addr: str, port: int, version: int) -> str:
    return f"[{addr}]:{port}" if version == 6 else f"{addr}:{port}"


def _connection_table(
    capture: Capture,
    *,
    n_conn: int,
    conn_flow: np.ndarray,
    a_end: np.ndarray,
    cd: np.ndarray,
    rows: np.ndarray,
    g_tcp: np.ndarray,
    g_flags: np.ndarray,
    g_payload: np.ndarray,
    seq_rel: np.ndarray,
    retrans: np.ndarray,
    isn: np.ndarray,
    syn_idx: np.ndarray,
    opts: np.ndarray,
) -> pa.Table:
    pk = capture.packets
    n_cd = 2 * n_conn
    ts = pk.column("ts_ns").to_numpy()[rows]
    conn_of = cd // 2

    start_ns = np.full(n_conn, np.iinfo(np.int64).max, dtype=np.int64)
    end_ns = np.full(n_conn, np.iinfo(np.int64).min, dtype=np.int64)
    np.minimum.at(start_ns, conn_of, ts)
    np.maximum.at(end_ns, conn_of, ts)
    duration_s = (end_ns - start_ns) / 1e9

    packets = np.bincount(cd, minlength=n_cd)
    byte_sum = np.bincount(cd, weights=g_payload, minlength=n_cd).astype(np.int64)
    rexmt = np.bincount(cd, weights=retrans, minlength=n_cd).astype(np.int64)

    # Unique bytes: from the lowest to the highest byte that data segments covered.
    data = g_tcp & (g_payload > 0)
    hi = np.zeros(n_cd, dtype=np.int64)
    lo = np.full(n_cd, np.iinfo(np.int64).max, dtype=np.int64)
    np.maximum.at(hi, cd[data], seq_rel[data] + g_payload[data])
    np.minimum.at(lo, cd[data], seq_rel[data])
    unique = np.where(hi > 0, hi - np.minimum(lo, hi), 0)
    # UDP has no sequence space: every payload byte is new.
    udp_cd = np.zeros(n_cd, dtype=bool)
    udp_cd[cd[~g_tcp]] = True
    unique = np.where(udp_cd, byte_sum, unique)
    with np.errstate(divide="ignore", invalid="ignore"):
        tput = np.where(np.repeat(duration_s, 2) > 0, unique * 8 / np.repeat(duration_s, 2), 0.0)

    # Handshake options, from the SYN (a2b) and the SYN-ACK (b2a).
    mss_col = pk.column("mss").to_numpy()
    ws_col = pk.column("wscale").to_numpy()
    has_syn = syn_idx >= 0
    syn_rows = np.where(has_syn, rows[np.maximum(syn_idx, 0)], 0)
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
    f_proto = flows.column("proto").to_numpy()[conn_flow]
    f_ver = flows.column("ip_version").to_numpy()[conn_flow]
    addr0 = flows.column("addr0").to_pylist()
    addr1 = flows.column("addr1").to_pylist()
    port0 = flows.column("port0").to_numpy()
    port1 = flows.column("port1").to_numpy()
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
    seg_max = np.zeros(n_cd, dtype=np.int64)
    np.maximum.at(seg_max, cd, g_payload)
    mss_recv = np.empty(n_cd, dtype=np.int64)
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
    arrays = [pa.array(values[c.name], type=c.type) for c in schema.CONNECTION_COLUMNS]
    return pa.Table.from_arrays(arrays, schema=schema.arrow_schema(schema.CONNECTION_COLUMNS))


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
