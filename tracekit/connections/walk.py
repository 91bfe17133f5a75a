"""The connections rule as compiled passes in capture order: which flow packets belong to which
TCP incarnation (a new SYN starts one), which end is a, and each direction's 64-bit relative
sequence and ACK numbers, unwrapped across 2**32.

`ConnectionState` keeps what the passes need between chunks, so that `build_connections` (one
chunk, the whole capture) and `tracekit.connections.stream` (chunk by chunk) apply one rule.
The passes are built ahead of time (`tracekit.core.kernels`).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np
import pyarrow as pa

from tracekit import schema
from tracekit.core.columns import to_arrow, to_numpy
from tracekit.core.kernels import bind
from tracekit.schema import (
    OPT_CUT,
    OPT_SACK_PERM,
    OPT_TS,
    OPT_WSCALE,
    PROTO_TCP,
    TH_ACK,
    TH_SYN,
    WRAP,
)

if TYPE_CHECKING:
    pass


# Without an MSS option in the handshake, RFC 9293 3.7.1 says assume 536 (IPv4) / 1220 (IPv6);
# real stacks send far more, so flag TSO/GRO only above the largest Ethernet segment.
_ETHERNET_MSS = {4: 1460, 6: 1440}


class BaseChanged(Exception):
    """A direction's ISN, already used for earlier chunks, changed with a later one."""


class ConnectionState:
    """The connections rule as a scan in capture order, over one chunk of packets or many.

    `add(chunk)` gives the chunk's connection columns (conn, dir, seq_rel, ack_rel) and keeps
    what later chunks and the connections table need: per flow its current connection, per
    connection its side a, per direction its ISN evidence, unwrapping state and sums.

    The ISN rule (the SYN's sequence number; else the first sequence number seen minus one;
    else, for a direction that sent nothing, the other side's first ACK minus one) can look
    ahead: a direction first seen through the other side's ACKs takes its ISN from its own
    first segment once that comes. Over one chunk, the rule sees everything first. Over many,
    `add` raises BaseChanged when an ISN it already used for an earlier chunk changes, and the
    caller starts again with the capture as one chunk.
    """

    # Reader columns a chunk must hold, besides `flow`, `src_end`, `seq` and `ack`.
    COLUMNS = ("proto", "tcp_flags", "payload_bytes", "ts_ns", "opts", "mss", "wscale")

    def __init__(self) -> None:
        self.rows = 0
        self.n_conn = 0
        # Per flow: its current connection; per flow end (2 flow + end), the ISN of the pure
        # SYN it sent in that connection (-1: none); per flow, whether that connection has
        # carried nothing but SYNs so far (its handshake is open).
        self.flow_conn = np.zeros(0, np.int64)
        self.syn_seq = np.zeros(0, np.int64)
        self.handshake = np.zeros(0, np.uint8)
        # Per connection: its flow and side a (capacity grows ahead of n_conn).
        self.conn_flow = np.zeros(0, np.int32)
        self.a_end = np.zeros(0, np.uint8)
        # Per direction (2 conn + dir), ISN evidence: the first SYN's row, sequence number and
        # handshake options; the first sequence number; the first ACK number.
        self.dirs: dict[str, np.ndarray] = {
            name: np.zeros(0, dtype) for name, dtype, _ in self._DIRECTION_ARRAYS
        }
        self.used_isn = np.zeros(0, np.int64)

    # name, dtype, initial value of the per-direction arrays.
    _DIRECTION_ARRAYS = (
        ("syn_row", np.int64, -1),
        ("syn_seqv", np.int64, 0),
        ("syn_opts", np.uint8, 0),
        ("syn_mss", np.uint16, 0),
        ("syn_ws", np.uint8, 0),
        ("first_seq", np.int64, -1),
        ("first_ack", np.int64, -1),
        ("last_seq", np.int64, -1),
        ("wraps_seq", np.int64, 0),
        ("last_ack", np.int64, -1),
        ("wraps_ack", np.int64, 0),
        ("packets", np.int64, 0),
        ("bytes", np.int64, 0),
        ("seq_lo", np.int64, np.iinfo(np.int64).max),
        ("seq_hi", np.int64, 0),
        ("seg_max", np.int64, 0),
        ("udp", np.bool_, False),
        ("used", np.bool_, False),
        ("start_ns", np.int64, np.iinfo(np.int64).max),  # per connection, in the first half
        ("end_ns", np.int64, np.iinfo(np.int64).min),
    )

    def add(self, chunk: dict[str, np.ndarray], n_flows: int) -> dict[str, np.ndarray]:
        """The connection columns of the next chunk of packets (reader columns, capture order);
        `n_flows` is the reader's flow count so far."""
        self._grow_flows(n_flows)
        n = chunk["proto"].size
        self._grow_conns(self.n_conn + n)
        proto, flags, seq, ack = chunk["proto"], chunk["tcp_flags"], chunk["seq"], chunk["ack"]
        conn, direction, self.n_conn = _assign(
            chunk["flow"],
            chunk["src_end"],
            proto,
            flags,
            seq,
            self.flow_conn,
            self.syn_seq,
            self.handshake,
            self.conn_flow,
            self.a_end,
            self.n_conn,
        )
        self._grow_directions()
        d = self.dirs
        # The columns both passes read first, in their argument order.
        packet = (conn, direction, proto, flags, seq, ack)
        _bases(
            *packet,
            chunk["opts"],
            chunk["mss"],
            chunk["wscale"],
            self.rows,
            d["syn_row"],
            d["syn_seqv"],
            d["syn_opts"],
            d["syn_mss"],
            d["syn_ws"],
            d["first_seq"],
            d["first_ack"],
        )
        isn = self.isn()
        n_g = isn.size
        was_used = d["used"][:n_g].copy()
        if (isn[was_used] != self.used_isn[:n_g][was_used]).any():
            raise BaseChanged
        seq_rel, ack_rel = _relative(
            *packet,
            chunk["payload_bytes"],
            chunk["ts_ns"],
            isn,
            *(d[name] for name in _RELATIVE_STATE),
        )
        newly = d["used"][:n_g] & ~was_used
        self.used_isn[:n_g][newly] = isn[newly]
        self.rows += n
        return {"conn": conn, "dir": direction, "seq_rel": seq_rel, "ack_rel": ack_rel}

    def isn(self) -> np.ndarray:
        """Each direction's ISN from the evidence so far (the rule in the class docstring)."""
        n_g = 2 * self.n_conn
        d = {name: values[:n_g] for name, values in self.dirs.items()}
        other_ack = d["first_ack"].reshape(-1, 2)[:, ::-1].ravel()
        # A capture that starts mid-connection may hold ACKs of bytes sent before its first
        # segment of that direction: the line starts at whichever comes first in sequence
        # space (RFC 9293 3.4: the earlier of two numbers within half the space), so that no
        # number of the direction falls before its ISN.
        ack_first = (
            (other_ack >= 0)
            & (d["first_seq"] >= 0)
            & ((other_ack - d["first_seq"]) % WRAP > WRAP // 2)
        )
        return np.where(
            d["syn_row"] >= 0,
            d["syn_seqv"],
            np.where(
                (d["first_seq"] >= 0) & ~ack_first,
                (d["first_seq"] - 1) % WRAP,
                np.where(other_ack >= 0, (other_ack - 1) % WRAP, 0),
            ),
        ).astype(np.int64)

    def table(self, flows: pa.Table, resent: np.ndarray) -> pa.Table:
        """The connections table (CONNECTION_COLUMNS), given the reader's flow table and the
        resent segments per direction (tracekit.connections.segments.classify_data)."""
        n_conn, n_g = self.n_conn, 2 * self.n_conn
        d = {name: values[:n_g] for name, values in self.dirs.items()}
        retrans = np.zeros(n_g, dtype=np.int64)
        retrans[: resent.size] = resent[:n_g]
        return _connection_table(
            flows,
            conn_flow=self.conn_flow[:n_conn],
            a_end=self.a_end[:n_conn],
            dirs=d,
            retrans=retrans,
            isn=self.isn(),
            start_ns=d["start_ns"][:n_conn],
            end_ns=d["end_ns"][:n_conn],
        )

    def _grow_flows(self, n_flows: int) -> None:
        have = self.flow_conn.size
        if n_flows <= have:
            return
        size = max(n_flows, 2 * have)
        self.flow_conn = _grown(self.flow_conn, size, -1)
        self.syn_seq = _grown(self.syn_seq, 2 * size, -1)
        self.handshake = _grown(self.handshake, size, 0)

    def _grow_conns(self, n_conn: int) -> None:
        """Room for n_conn connections in conn_flow and a_end, which _assign fills before it
        reads them: room only (every packet of a chunk may open one), no pages written."""
        have = self.conn_flow.size
        if n_conn <= have:
            return
        size = max(n_conn, 2 * have)
        for name in ("conn_flow", "a_end"):
            old = getattr(self, name)
            grown = np.empty(size, old.dtype)
            grown[: old.size] = old
            setattr(self, name, grown)

    def _grow_directions(self) -> None:
        """The per-direction arrays, for the connections opened so far."""
        have = self.used_isn.size
        if 2 * self.n_conn <= have:
            return
        size = max(2 * self.n_conn, 2 * have)
        self.used_isn = _grown(self.used_isn, size, 0)
        for name, _, initial in self._DIRECTION_ARRAYS:
            self.dirs[name] = _grown(self.dirs[name], size, initial)


# The per-direction arrays _relative updates, in its argument order.
_RELATIVE_STATE = (
    "last_seq",
    "wraps_seq",
    "last_ack",
    "wraps_ack",
    "packets",
    "bytes",
    "seq_lo",
    "seq_hi",
    "seg_max",
    "udp",
    "used",
    "start_ns",
    "end_ns",
)


def _grown(values: np.ndarray, size: int, initial: object) -> np.ndarray:
    out = np.full(size, initial, dtype=values.dtype)
    out[: values.size] = values
    return out


def _assign(
    flow: np.ndarray,
    src_end: np.ndarray,
    proto: np.ndarray,
    flags: np.ndarray,
    seq: np.ndarray,
    flow_conn: np.ndarray,
    syn_seq: np.ndarray,
    handshake: np.ndarray,
    conn_flow: np.ndarray,
    a_end: np.ndarray,
    n_conn: int,
) -> tuple[np.ndarray, np.ndarray, int]:  # pragma: no cover - compiled
    """Connection and direction of every packet of a chunk, in one pass in capture order.

    A pure SYN opens a new incarnation of its 4-tuple (port reuse), unless it resends a SYN
    its end already sent in the current connection (same ISN), or that connection's handshake
    is still open (nothing but SYNs so far) and its end has sent no SYN in it: the two SYNs of
    a simultaneous open are one connection (RFC 9293 3.5, figure 8), and so is a SYN captured
    after the SYN-ACK that answers it. Side a sent the SYN that opened the connection; when a
    SYN-ACK comes first, the other end sent that SYN; without either, it is the first packet's
    source. Connections are numbered in order of first appearance. The per-flow and
    per-connection arrays carry over between chunks; returns the chunk's columns and the
    connection count after it.
    """
    n = flow.size
    conn = np.empty(n, dtype=np.int32)
    direction = np.empty(n, dtype=np.uint8)
    for i in range(n):
        f = flow[i]
        end = src_end[i]
        f2 = 2 * np.int64(f)
        start = flow_conn[f] < 0
        is_syn = proto[i] == PROTO_TCP and (flags[i] & TH_SYN) != 0
        pure_syn = is_syn and (flags[i] & TH_ACK) == 0
        opener = end
        if pure_syn:
            mine = syn_seq[f2 + end]
            if not start and mine != seq[i] and not (handshake[f] and mine < 0):
                start = True
        elif start and is_syn:
            opener = 1 - end  # a SYN-ACK answers a SYN the other end sent
        if start:
            flow_conn[f] = n_conn
            conn_flow[n_conn] = f
            a_end[n_conn] = opener
            n_conn += 1
            syn_seq[f2] = -1
            syn_seq[f2 + 1] = -1
            handshake[f] = 1
        if pure_syn:
            syn_seq[f2 + end] = seq[i]
        if not is_syn:
            handshake[f] = 0
        c = flow_conn[f]
        conn[i] = c
        direction[i] = 0 if end == a_end[c] else 1
    return conn, direction, n_conn


def _bases(
    conn: np.ndarray,
    direction: np.ndarray,
    proto: np.ndarray,
    flags: np.ndarray,
    seq: np.ndarray,
    ack: np.ndarray,
    opts: np.ndarray,
    mss: np.ndarray,
    wscale: np.ndarray,
    row0: int,
    syn_row: np.ndarray,
    syn_seqv: np.ndarray,
    syn_opts: np.ndarray,
    syn_mss: np.ndarray,
    syn_ws: np.ndarray,
    first_seq: np.ndarray,
    first_ack: np.ndarray,
) -> None:  # pragma: no cover - compiled
    """Per direction (2 conn + dir), the ISN evidence of a chunk: the first SYN (its row,
    sequence number and options), the first sequence number and the first ACK number."""
    for i in range(conn.size):
        if proto[i] != PROTO_TCP:
            continue
        g = 2 * conn[i] + direction[i]
        if first_seq[g] < 0:
            first_seq[g] = seq[i]
        if syn_row[g] < 0 and (flags[i] & TH_SYN) != 0:
            syn_row[g] = row0 + i
            syn_seqv[g] = seq[i]
            syn_opts[g] = opts[i]
            syn_mss[g] = mss[i]
            syn_ws[g] = wscale[i]
        if first_ack[g] < 0 and (flags[i] & TH_ACK) != 0:
            first_ack[g] = ack[i]


def _unwrapped(
    delta: np.int64, g: np.uint64, last: np.ndarray, wraps: np.ndarray
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
    last_seq: np.ndarray,
    wraps_seq: np.ndarray,
    last_ack: np.ndarray,
    wraps_ack: np.ndarray,
    packets: np.ndarray,
    nbytes: np.ndarray,
    seq_lo: np.ndarray,
    seq_hi: np.ndarray,
    seg_max: np.ndarray,
    udp: np.ndarray,
    used: np.ndarray,
    start_ns: np.ndarray,
    end_ns: np.ndarray,
) -> tuple[np.ndarray, np.ndarray]:  # pragma: no cover - compiled
    """Relative 64-bit sequence and ACK numbers of a chunk, and the sums of the connections
    table (per direction; start and end per connection). `used` marks the directions whose
    ISN the chunk used."""
    n = conn.size
    seq_rel = np.zeros(n, dtype=np.int64)
    ack_rel = np.zeros(n, dtype=np.int64)
    for i in range(n):
        # Unsigned indices: numba checks a signed one for a negative value at every access.
        c = np.uint64(conn[i])
        g = np.uint64(2 * np.int64(conn[i]) + direction[i])
        other = g ^ np.uint64(1)
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
        used[g] = True
        seq_rel[i] = rel
        if pay > 0:
            if rel < seq_lo[g]:
                seq_lo[g] = rel
            if rel + pay > seq_hi[g]:
                seq_hi[g] = rel + pay
        if (flags[i] & TH_ACK) != 0:
            delta = (np.int64(ack[i]) - isn[other]) % WRAP
            used[other] = True
            ack_rel[i] = _unwrapped(delta, g, last_ack, wraps_ack)
    return seq_rel, ack_rel


def _endpoint(addr: str, port: int, version: int) -> str:
    return f"[{addr}]:{port}" if version == 6 else f"{addr}:{port}"


def _connection_table(
    flows: pa.Table,
    *,
    conn_flow: np.ndarray,
    a_end: np.ndarray,
    dirs: dict[str, np.ndarray],
    retrans: np.ndarray,
    isn: np.ndarray,
    start_ns: np.ndarray,
    end_ns: np.ndarray,
) -> pa.Table:
    """The connections table from ConnectionState's arrays (per direction: `dirs`, `retrans`
    and `isn`; per connection the rest) and the reader's flow table."""
    n_conn = conn_flow.size
    duration_s = (end_ns - start_ns) / 1e9
    packets, byte_sum, rexmt = dirs["packets"], dirs["bytes"], retrans
    seq_lo, seq_hi = dirs["seq_lo"], dirs["seq_hi"]
    # Unique bytes: from the lowest to the highest byte that data segments covered; UDP has no
    # sequence space, so every payload byte counts.
    unique = np.where(seq_hi > 0, seq_hi - np.minimum(seq_lo, seq_hi), 0)
    unique = np.where(dirs["udp"], byte_sum, unique)
    with np.errstate(divide="ignore", invalid="ignore"):
        tput = np.where(np.repeat(duration_s, 2) > 0, unique * 8 / np.repeat(duration_s, 2), 0.0)

    # Handshake options, from the SYN (a2b) and the SYN-ACK (b2a).
    has_syn = dirs["syn_row"] >= 0
    syn_opts = np.where(has_syn, dirs["syn_opts"], 0)
    mss = np.where(has_syn, dirs["syn_mss"], 0).astype(np.uint16)
    ws = np.where(has_syn & ((syn_opts & OPT_WSCALE) != 0), dirs["syn_ws"], -1)
    syn_a, syn_b = has_syn[0::2], has_syn[1::2]
    both = syn_a & syn_b

    def both_have(bit: int) -> np.ndarray:
        return both & ((syn_opts[0::2] & bit) != 0) & ((syn_opts[1::2] & bit) != 0)

    ws_known = both_have(OPT_WSCALE)
    # RFC 7323 2.2: scaling is on only if both SYNs carry the option; a SYN seen without it
    # settles the question even if the SYN-ACK was not captured. A SYN whose options the
    # snapshot length cut settles nothing: its option may lie beyond the cut.
    whole = (syn_opts & OPT_CUT) == 0
    lacks = ((syn_opts & OPT_WSCALE) == 0) & whole
    ws_absent = (both & ~ws_known & (lacks[0::2] | lacks[1::2])) | (syn_a & lacks[0::2])
    ws_state = np.where(ws_known, "known", np.where(ws_absent, "absent", "unknown"))
    ws_a = np.where(ws_known, ws[0::2], -1).astype(np.int8)
    ws_b = np.where(ws_known, ws[1::2], -1).astype(np.int8)

    f_proto = to_numpy(flows.column("proto"))[conn_flow]
    f_ver = to_numpy(flows.column("ip_version"))[conn_flow]
    addr0 = flows.column("addr0").to_pylist()
    addr1 = flows.column("addr1").to_pylist()
    port0 = to_numpy(flows.column("port0"))
    port1 = to_numpy(flows.column("port1"))
    outer = flows.column("outer").to_pylist()
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
    seg_max = dirs["seg_max"]
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
        "tunnel": [outer[f] for f in conn_flow.tolist()],
    }
    arrays = [to_arrow(values[c.name], c.type) for c in schema.CONNECTION_COLUMNS]
    return pa.Table.from_arrays(arrays, schema=schema.arrow_schema(schema.CONNECTION_COLUMNS))


bind(globals(), ("_assign", "_bases", "_relative"), helpers=("_unwrapped",))
