"""Find the same connections and the same transmissions in a sender and a receiver capture.

Connections are matched by their endpoints (after mapping NAT'd sender addresses to what the
receiver sees) and, for a 4-tuple used several times, by incarnation order. Transmissions are
matched, not sequence ranges: a retransmission is a new packet with its own IP ID and TCP
timestamp, so the key is (direction, sequence and acknowledgment numbers, length, flags, IP ID,
TSval, first UDP payload bytes) plus the arrival order among packets with equal keys. Passes
relax the key for rewriting middleboxes (NAT rewrites IP IDs), then match by byte range for
segments the sender's NIC split (TSO) or the receiver's merged (GRO).
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass

import numpy as np
import pandas as pd
import pyarrow as pa

from tracekit.core.band import band
from tracekit.core.kernels import jit
from tracekit.errors import TracekitError
from tracekit.schema import WRAP

_ENDPOINT = re.compile(r"^(?:\[(?P<v6>[^\]]+)\]|(?P<v4>[^:\[\]]+)):(?P<port>\d+)$")
_HALF = np.int64(1 << 31)

# Key columns of the matching passes, strictest first. IP ID and TSval tell a retransmission
# from the original (Linux gives each packet of a socket the next IP ID, RFC 6864 4.2, and
# each millisecond a new TSval, RFC 7323 5.4); NAT may rewrite the IP ID; a middlebox that
# rewrites TCP options or numbers leaves only (sequence, length) and the arrival order.
_PASSES: tuple[tuple[str, tuple[str, ...]], ...] = (
    ("exact", ("cd", "seq", "ack", "len", "flags", "ip_id", "tsval", "head")),
    ("no_ip_id", ("cd", "seq", "ack", "len", "flags", "tsval", "head")),
    ("range", ("cd", "seq", "len")),
)


def parse_map(items: Iterable[str], label: str = "--map") -> dict[str, str]:
    """`SENDER_ADDR=RECEIVER_ADDR` strings (an address or ip:port on each side) as a dict.

    `label` names where the rules came from in an error (the option, or a manifest's key).
    """
    out: dict[str, str] = {}
    for item in items:
        left, sep, right = item.partition("=")
        if not sep or not left.strip() or not right.strip():
            raise TracekitError(f"{label} {item!r}: expected SENDER_ADDR=RECEIVER_ADDR")
        out[left.strip()] = right.strip()
    return out


def _split(endpoint: str) -> tuple[str, str]:
    m = _ENDPOINT.match(endpoint)
    if m is None:
        return endpoint, ""
    return m.group("v6") or m.group("v4"), m.group("port")


def _join(addr: str, port: str) -> str:
    return f"[{addr}]:{port}" if ":" in addr else f"{addr}:{port}"


def map_endpoint(endpoint: str, addr_map: Mapping[str, str]) -> str:
    """A sender-side endpoint as the receiver sees it: a whole ip:port rule wins over an address."""
    if endpoint in addr_map:
        return addr_map[endpoint]
    addr, port = _split(endpoint)
    if addr in addr_map:
        target = addr_map[addr]
        t_addr, t_port = _split(target)
        return _join(t_addr, t_port) if t_port else _join(target.strip("[]"), port)
    return endpoint


@dataclass(frozen=True)
class ConnectionMatch:
    """Connections seen in both captures, and the ones seen in one only.

    `pairs` has one row per connection in both: conn_s (sender capture's connection), conn_r
    (the receiver capture's), flip (the receiver capture calls a what the sender's calls b).
    """

    pairs: pd.DataFrame
    sender_only: tuple[int, ...]
    receiver_only: tuple[int, ...]


def match_connections(
    sender: pa.Table, receiver: pa.Table, addr_map: Mapping[str, str] | None = None
) -> ConnectionMatch:
    """Match the rows of two connections tables by protocol, endpoints and incarnation order."""
    addr_map = addr_map or {}
    s = sender.select(["conn", "proto", "a", "b", "start_ns"]).to_pandas()
    r = receiver.select(["conn", "proto", "a", "b", "start_ns"]).to_pandas()
    s["a"] = [map_endpoint(e, addr_map) for e in s["a"]]
    s["b"] = [map_endpoint(e, addr_map) for e in s["b"]]
    for df in (s, r):
        lo = np.minimum(df["a"].to_numpy(dtype=object), df["b"].to_numpy(dtype=object))
        hi = np.maximum(df["a"].to_numpy(dtype=object), df["b"].to_numpy(dtype=object))
        df["lo"], df["hi"] = lo, hi
    s, r = (df.sort_values(["start_ns", "conn"]) for df in (s, r))
    for df in (s, r):
        # Reused 4-tuples: the n-th incarnation in one capture is the n-th in the other.
        df["nth"] = df.groupby(["proto", "lo", "hi"]).cumcount()
    both = s.merge(r, on=["proto", "lo", "hi", "nth"], suffixes=("_s", "_r"))
    pairs = pd.DataFrame(
        {
            "conn_s": both["conn_s"].to_numpy(np.int64),
            "conn_r": both["conn_r"].to_numpy(np.int64),
            "flip": (both["a_s"] != both["a_r"]).to_numpy(bool),
        }
    ).sort_values("conn_s", ignore_index=True)
    return ConnectionMatch(
        pairs=pairs,
        sender_only=tuple(sorted(set(s["conn"].tolist()) - set(pairs["conn_s"].tolist()))),
        receiver_only=tuple(sorted(set(r["conn"].tolist()) - set(pairs["conn_r"].tolist()))),
    )


def _signed(delta: np.ndarray) -> np.ndarray:
    return (delta + _HALF) % WRAP - _HALF


# How each pair was found (Found.how): the passes of _PASSES in order, then by byte range.
HOW = (*(name for name, _ in _PASSES), "bytes")
BYTES = np.uint8(len(_PASSES))


@dataclass(frozen=True)
class Side:
    """One capture's packet columns as the merge reads them, in the sender capture's terms.

    The columns are views of the packet table (no copies). The capture's own connection,
    direction and sequence numbers become the sender capture's through per-connection tables:
    `cd` (conn * 2 + dir, -1 for a packet of no connection found in both captures) is the only
    column made, from `to_conn` (each of the capture's connections' number in the sender
    capture, -1: not in both) and `flip` (whether a and b swap), and the sequence and ACK
    numbers move by `seq_shift` and `ack_shift`, indexed by the capture's own (conn, dir).
    `head` holds the first payload bytes of UDP datagrams (empty when the capture has none: 0
    for every packet).
    """

    ts_ns: np.ndarray
    frame: np.ndarray
    conn: np.ndarray
    dir: np.ndarray
    proto: np.ndarray
    seq_rel: np.ndarray
    ack_rel: np.ndarray
    length: np.ndarray
    flags: np.ndarray
    ip_id: np.ndarray
    tsval: np.ndarray
    head: np.ndarray
    cd: np.ndarray
    seq_shift: np.ndarray
    ack_shift: np.ndarray
    to_conn: np.ndarray
    flip: np.ndarray

    @property
    def rows(self) -> int:
        """Packets in the capture."""
        return int(self.ts_ns.size)

    def seq(self, rows: np.ndarray) -> np.ndarray:
        """Sequence numbers of `rows`, relative to the sender capture's ISN."""
        return _shifted(self.seq_rel, self.seq_shift, self.conn, self.dir, rows)

    def ack(self, rows: np.ndarray) -> np.ndarray:
        """ACK numbers of `rows`, relative to the sender capture's ISN."""
        return _shifted(self.ack_rel, self.ack_shift, self.conn, self.dir, rows)


def _shifted(
    values: np.ndarray, shift: np.ndarray, conn: np.ndarray, direction: np.ndarray, rows: np.ndarray
) -> np.ndarray:
    """values[rows] + shift[conn[rows], direction[rows]], with no temporary as long as `rows`:
    the merge asks this of millions of rows, beside both packet tables."""
    rows = np.ascontiguousarray(rows, dtype=np.int64)
    if rows.size and not (rows.min() >= 0 and rows.max() < values.size):
        raise IndexError(f"rows outside the {values.size} packets")
    out, ok = _shifted_rows(values, np.ascontiguousarray(shift), conn, direction, rows)
    if not ok:
        raise IndexError(f"a connection or direction outside the {shift.shape} shifts")
    return out


@jit
def _shifted_rows(
    values: np.ndarray, shift: np.ndarray, conn: np.ndarray, direction: np.ndarray, rows: np.ndarray
) -> tuple[np.ndarray, bool]:  # pragma: no cover - numba
    """_shifted's loop, over rows inside `values` (the caller checks): also whether every
    connection and direction was inside `shift`."""
    out = np.empty(rows.size, dtype=np.int64)
    n_conn, n_dir = shift.shape
    for k in range(rows.size):
        r = rows[k]
        c = conn[r]
        d = direction[r]
        if not (0 <= c < n_conn and 0 <= d < n_dir):
            return out[:k], False
        out[k] = values[r] + shift[c, d]
    return out, True


@jit
def _cd(
    conn: np.ndarray, direction: np.ndarray, to_conn: np.ndarray, flip: np.ndarray
) -> np.ndarray:  # pragma: no cover - numba
    """Per packet: the sender capture's conn * 2 + dir (-1 where its connection is unmatched)."""
    out = np.empty(conn.size, dtype=np.int64)
    for i in range(conn.size):
        c = conn[i]
        s = to_conn[c] if 0 <= c < to_conn.size else -1
        out[i] = 2 * s + (direction[i] ^ flip[c]) if s >= 0 else -1
    return out


def side(
    packets: pa.Table,
    udp: pa.Table,
    to_conn: np.ndarray,
    flip: np.ndarray | None = None,
    seq_shift: np.ndarray | None = None,
    ack_shift: np.ndarray | None = None,
) -> Side:
    """A packet table as a `Side`: `to_conn` gives each of its connections' number in the sender
    capture (-1: not in both), `flip` whether the sides a and b swap, the shifts what moves its
    relative numbers onto the sender capture's ISNs (default: none, the sender's own capture)."""
    n_conn = to_conn.size
    flip = np.zeros(n_conn, dtype=np.uint8) if flip is None else flip.astype(np.uint8)
    zero = np.zeros((n_conn, 2), dtype=np.int64)
    head = np.zeros(0, dtype=np.uint64)
    if udp.num_rows:
        head = np.zeros(packets.num_rows, dtype=np.uint64)
        head[udp.column("row").to_numpy()] = udp.column("head").to_numpy()
    conn = packets.column("conn").to_numpy()
    direction = packets.column("dir").to_numpy()
    to_conn = to_conn.astype(np.int64)
    return Side(
        ts_ns=packets.column("ts_ns").to_numpy(),
        frame=packets.column("frame").to_numpy(),
        conn=conn,
        dir=direction,
        proto=packets.column("proto").to_numpy(),
        seq_rel=packets.column("seq_rel").to_numpy(),
        ack_rel=packets.column("ack_rel").to_numpy(),
        length=packets.column("payload_bytes").to_numpy(),
        flags=packets.column("tcp_flags").to_numpy(),
        ip_id=packets.column("ip_id").to_numpy(),
        tsval=packets.column("tsval").to_numpy(),
        head=head,
        cd=_cd(conn, direction, to_conn, flip),
        seq_shift=zero if seq_shift is None else seq_shift,
        ack_shift=zero if ack_shift is None else ack_shift,
        to_conn=to_conn,
        flip=flip,
    )


def isn(table: pa.Table) -> np.ndarray:
    """Per connection of a connections table, the ISN of each direction (a2b, b2a)."""
    return np.stack(
        [table.column("isn_a").to_numpy(), table.column("isn_b").to_numpy()], axis=1
    ).astype(np.int64)


def receiver_side(
    packets: pa.Table,
    udp: pa.Table,
    pairs: pd.DataFrame,
    sender_isn: np.ndarray,
    receiver_isn: np.ndarray,
    receiver_tcp: np.ndarray,
) -> Side:
    """The receiver's packets in the sender's terms: its connections renamed to the sender's
    (by `pairs`), and its sequence numbers moved onto the sender capture's view of the ISNs.

    `*_isn` are (n_conn, 2) arrays of the ISN per connection and direction (a2b, b2a);
    `receiver_tcp` says per receiver connection whether it is TCP. Sequence numbers are
    relative to each capture's own view of the ISN; the raw numbers are the same on the wire,
    so the receiver's are moved by the signed difference of the two bases. A UDP flow has no
    sequence numbers: its stay 0.
    """
    n_conn = receiver_isn.shape[0]
    to_conn = np.full(n_conn, -1, dtype=np.int64)
    flip = np.zeros(n_conn, dtype=np.int64)
    c_r = pairs["conn_r"].to_numpy()
    to_conn[c_r] = pairs["conn_s"].to_numpy()
    flip[c_r] = pairs["flip"].to_numpy()
    seq_shift = np.zeros((n_conn, 2), dtype=np.int64)
    ack_shift = np.zeros((n_conn, 2), dtype=np.int64)
    tcp = c_r[receiver_tcp[c_r]]
    c_s = to_conn[tcp]
    for d_r in (0, 1):
        d_s = d_r ^ flip[tcp]
        seq_shift[tcp, d_r] = _signed(receiver_isn[tcp, d_r] - sender_isn[c_s, d_s])
        ack_shift[tcp, d_r] = _signed(receiver_isn[tcp, 1 - d_r] - sender_isn[c_s, 1 - d_s])
    return side(packets, udp, to_conn, flip, seq_shift, ack_shift)


@dataclass(frozen=True)
class Found:
    """Pairs of rows that are the same packet in the two captures: `s_row` in the capture that
    saw it leave, `r_row` in the one that saw it arrive, `how` the index in HOW of the pass
    that found them."""

    s_row: np.ndarray
    r_row: np.ndarray
    how: np.ndarray

    def swapped(self) -> Found:
        """The same pairs with the captures' roles swapped (data going the other way)."""
        return Found(s_row=self.r_row, r_row=self.s_row, how=self.how)


# The key columns of each pass (_PASSES), most significant first, after cd.
_KEYS: tuple[tuple[str, ...], ...] = tuple(keys[1:] for _, keys in _PASSES)
_COLUMN = {
    "seq": "seq_rel",
    "ack": "ack_rel",
    "len": "length",
    "flags": "flags",
    "ip_id": "ip_id",
    "tsval": "tsval",
    "head": "head",
}
# A pass whose packets are this share of the capture or more sorts the whole columns (those
# of other packets keyed out) rather than copy its packets' columns.
_GATHER_BELOW = 0.25


def _key_order(s: Side, left: np.ndarray, level: int) -> np.ndarray:
    """The rows `left` marks, in the order of the pass's key (cd first), then capture time, then
    row: the k-th row of a key is the k-th to arrive with it.

    The receiver's numbers are sorted in its own terms: they move by one amount per cd, which
    keeps their order within it.
    """
    names = [_COLUMN[k] for k in reversed(_KEYS[level]) if k != "head" or s.head.size]
    count = int(np.count_nonzero(left))
    if count >= _GATHER_BELOW * left.size:
        # Every other packet keyed out at cd -1, so first: the marked rows are the last.
        cd = np.where(left, s.cd, -1)
        order = np.lexsort((s.ts_ns, *(getattr(s, n) for n in names), cd))
        return order[order.size - count :]
    rows = np.flatnonzero(left)
    order = np.lexsort((s.ts_ns[rows], *(getattr(s, n)[rows] for n in names), s.cd[rows]))
    return rows[order]


# A Side's columns as the matching kernels take them (`_key_columns`), by position.
(_CD, _SEQ, _ACK, _LEN, _FLAGS, _IP_ID, _TSVAL, _HEAD) = range(8)
(_SEQ_SHIFT, _ACK_SHIFT, _CONN, _DIR) = range(8, 12)


def _key_columns(s: Side) -> tuple[np.ndarray, ...]:
    return (
        *(s.cd, s.seq_rel, s.ack_rel, s.length, s.flags, s.ip_id, s.tsval, s.head),
        *(s.seq_shift, s.ack_shift, s.conn, s.dir),
    )


@jit
def _zip_equal(
    level: int,
    s_order: np.ndarray,
    r_order: np.ndarray,
    s: tuple[np.ndarray, ...],
    r: tuple[np.ndarray, ...],
) -> tuple[np.ndarray, np.ndarray]:  # pragma: no cover - numba
    """Pairs (sender row, receiver row) of equal keys: both orders sorted by key and then
    arrival, the k-th of a key at one end pairs with the k-th at the other. The walk runs
    twice, counting the pairs and then writing them: the output is sized exactly.

    Two rows are compared as `_key_order` sorts them: the key of pass `level`, in the sender
    capture's terms. The comparison is written out in the loop, on the columns taken out of
    `s` and `r` (their `_key_columns`) once: a function handed them would count a reference
    to each of the two dozen arrays, an atomic operation each, at every step."""
    s_cd, s_seq, s_ack, s_len = s[_CD], s[_SEQ], s[_ACK], s[_LEN]
    s_flags, s_ip_id, s_tsval, s_head = s[_FLAGS], s[_IP_ID], s[_TSVAL], s[_HEAD]
    s_seq_shift, s_ack_shift, s_conn, s_dir = s[_SEQ_SHIFT], s[_ACK_SHIFT], s[_CONN], s[_DIR]
    r_cd, r_seq, r_ack, r_len = r[_CD], r[_SEQ], r[_ACK], r[_LEN]
    r_flags, r_ip_id, r_tsval, r_head = r[_FLAGS], r[_IP_ID], r[_TSVAL], r[_HEAD]
    r_seq_shift, r_ack_shift, r_conn, r_dir = r[_SEQ_SHIFT], r[_ACK_SHIFT], r[_CONN], r[_DIR]
    count = 0
    out_s = np.empty(0, dtype=np.int64)
    out_r = np.empty(0, dtype=np.int64)
    for write in (False, True):
        if write:
            out_s = np.empty(count, dtype=np.int64)
            out_r = np.empty(count, dtype=np.int64)
        i = 0
        j = 0
        k = 0
        while i < s_order.size and j < r_order.size:
            a = s_order[i]
            b = r_order[j]
            # -1, 0 or 1 as sender row a's key is below, equal to or above receiver row b's.
            c = 0
            if s_cd[a] != r_cd[b]:
                c = -1 if s_cd[a] < r_cd[b] else 1
            else:
                x = s_seq[a] + s_seq_shift[s_conn[a], s_dir[a]]
                y = r_seq[b] + r_seq_shift[r_conn[b], r_dir[b]]
                if x == y and level < 2:
                    x = s_ack[a] + s_ack_shift[s_conn[a], s_dir[a]]
                    y = r_ack[b] + r_ack_shift[r_conn[b], r_dir[b]]
                if x != y:
                    c = -1 if x < y else 1
                elif s_len[a] != r_len[b]:
                    c = -1 if s_len[a] < r_len[b] else 1
                elif level != 2:
                    if s_flags[a] != r_flags[b]:
                        c = -1 if s_flags[a] < r_flags[b] else 1
                    elif level == 0 and s_ip_id[a] != r_ip_id[b]:
                        c = -1 if s_ip_id[a] < r_ip_id[b] else 1
                    elif s_tsval[a] != r_tsval[b]:
                        c = -1 if s_tsval[a] < r_tsval[b] else 1
                    else:
                        h = s_head[a] if s_head.size else np.uint64(0)
                        g = r_head[b] if r_head.size else np.uint64(0)
                        if h != g:
                            c = -1 if h < g else 1
            if c < 0:
                i += 1
            elif c > 0:
                j += 1
            else:
                if write:
                    out_s[k] = s_order[i]
                    out_r[k] = r_order[j]
                k += 1
                i += 1
                j += 1
        count = k
    return out_s, out_r


def _in_time_order(s: Side, rows: np.ndarray) -> np.ndarray:
    """Rows sorted by capture time, then row."""
    return rows[np.argsort(s.ts_ns[rows], kind="stable")]


def match_packets(snd: Side, rcv: Side) -> Found:
    """The pairs of the same packet in both captures.

    Each pass matches what the stricter ones left; the k-th unmatched packet with a key at the
    sender is the k-th with that key at the receiver. A pass's pairs are in the sender's
    capture order (time, then row). The last pass, "bytes", pairs what is left by byte range:
    a receiver segment inside a larger sender one (TSO) or a sender segment inside a larger
    receiver one (GRO); one packet may then pair with several.
    """
    s_left = snd.cd >= 0
    r_left = rcv.cd >= 0
    found: list[tuple[np.ndarray, np.ndarray, int]] = []
    for level, (how, _) in enumerate(_PASSES):
        if how == "range":  # only data: pure ACKs are too alike to pair without IP ID or TSval
            s_left_now, r_left_now = s_left & (snd.length > 0), r_left & (rcv.length > 0)
        else:
            s_left_now, r_left_now = s_left, r_left
        if not (s_left_now.any() and r_left_now.any()):
            continue
        s_order = _key_order(snd, s_left_now, level)
        r_order = _key_order(rcv, r_left_now, level)
        del s_left_now, r_left_now
        s_row, r_row = _zip_equal(level, s_order, r_order, _key_columns(snd), _key_columns(rcv))
        del s_order, r_order
        if not s_row.size:
            continue
        by_time = np.lexsort((s_row, snd.ts_ns[s_row]))
        found.append((s_row[by_time], r_row[by_time], level))
        s_left[s_row] = False
        r_left[r_row] = False
    s_data = _in_time_order(snd, np.flatnonzero(s_left & (snd.length > 0)))
    r_data = _in_time_order(rcv, np.flatnonzero(r_left & (rcv.length > 0)))
    del s_left, r_left
    # Receiver pieces of a sender super-segment (TSO), then sender segments merged on arrival
    # (GRO) into what the first left.
    tso_r, tso_s = _inside(rcv, r_data, snd, s_data)
    if tso_r.size:
        found.append((tso_s, tso_r, int(BYTES)))
        r_data = r_data[~np.isin(r_data, tso_r)]
    gro_s, gro_r = _inside(snd, s_data, rcv, r_data)
    if gro_s.size:
        found.append((gro_s, gro_r, int(BYTES)))
    if not found:
        none = np.zeros(0, dtype=np.int64)
        return Found(s_row=none, r_row=none, how=np.zeros(0, dtype=np.uint8))
    return Found(
        s_row=np.concatenate([f[0] for f in found]),
        r_row=np.concatenate([f[1] for f in found]),
        how=np.concatenate([np.full(f[0].size, f[2], dtype=np.uint8) for f in found]),
    )


def _inside(
    inner: Side, inner_rows: np.ndarray, outer: Side, outer_rows: np.ndarray
) -> tuple[np.ndarray, np.ndarray]:
    """Each inner segment (in the order of `inner_rows`) with the outer segment of its
    direction that starts at or before it and ends at or after it (the latest-starting such
    one), where there is one: (inner rows, outer rows)."""
    if not (inner_rows.size and outer_rows.size):
        none = np.zeros(0, dtype=np.int64)
        return none, none
    i_cd = inner.cd[inner_rows]
    i_seq = inner.seq(inner_rows)
    o_cd = outer.cd[outer_rows]
    o_seq = outer.seq(outer_rows)
    # Band by direction so one sorted search respects directions.
    i_key = band(i_cd, i_seq)
    o_order = np.lexsort((o_seq, o_cd))
    o_key = band(o_cd, o_seq)[o_order]
    o_end = (o_seq + outer.length[outer_rows])[o_order]
    o_cd = o_cd[o_order]
    o_row = outer_rows[o_order]
    pos = np.searchsorted(o_key, i_key, side="right") - 1
    ok = pos >= 0
    p = np.maximum(pos, 0)
    i_end = i_seq + inner.length[inner_rows]
    ok &= (o_cd[p] == i_cd) & (o_end[p] >= i_end)
    return inner_rows[ok], o_row[p[ok]]
