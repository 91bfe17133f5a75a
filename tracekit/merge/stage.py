"""The merge stage: the `Merge` value and `merge`, which joins the two captures (see __init__)."""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np
import pandas as pd
import pyarrow as pa

from tracekit.connections import data_direction
from tracekit.core.band import BAND, band
from tracekit.core.groups import segment_starts, segmented_cummax_prev
from tracekit.core.kernels import jit
from tracekit.errors import CaptureError, TracekitError
from tracekit.merge.clock import ClockFit, fit_clocks
from tracekit.merge.fate import RESENT_UNACKED, scan_rows
from tracekit.merge.match import (
    BYTES,
    ConnectionMatch,
    Found,
    Side,
    map_endpoint,
    match_connections,
    match_packets,
    receiver_side,
    side,
)
from tracekit.schema import (
    COMPETING_COLUMNS,
    FATE_NONE,
    FATES,
    PROTO_TCP,
    REVERSE_ACK_COLUMNS,
    TH_ACK,
    TH_FIN,
    TH_RST,
    TH_SYN,
    WRAP,
)

if TYPE_CHECKING:
    from tracekit.connections import Connections


_CODE = {name: np.uint8(i) for i, name in enumerate(FATES)}


class ReceiverMismatch(TracekitError):
    """A receiver capture that holds none of the sender capture's connections: nothing merges,
    so no fate and no receiver drop can be told, and a verdict would be about nothing."""

    def __init__(self, sender: str | Path, receiver: str | Path) -> None:
        super().__init__(
            f"{receiver}: holds none of the connections of the sender's capture {sender}: the "
            "wrong capture, or a NAT between the capture points (say how the receiver's capture "
            "names a sender-side address: --map SENDER_ADDR=RECEIVER_ADDR)"
        )


def same_file(a: str | Path, b: str | Path) -> bool:
    """Whether two paths name one file (the same path, or links to one file)."""
    try:
        return Path(a).absolute() == Path(b).absolute() or Path(a).samefile(b)
    except (OSError, ValueError):
        return False


@dataclass(frozen=True)
class Merge:
    """The two captures merged: matched connections, clocks, fates, delays.

    - `connections`: pairs of (sender, receiver) connection ids, and those seen in one only.
    - `clock`: the receiver's clock against the sender's (None: no packet seen at both ends).
    - `transmissions`: one row per data transmission (schema.TRANSMISSION_COLUMNS), in sender
      order, then arrivals the sender capture lacks: the combined TSG of fig. 7.
    - `delay`: one-way and queueing delay over time (schema.DELAY_COLUMNS).
    - `sender_fate`, `receiver_fate`: the fate code (index in schema.FATES, FATE_NONE where not
      judged) of each row of the sender's and the receiver's packet tables.
    - `data_dir`: per sender connection, the direction judged (0 a2b, 1 b2a).
    - `reverse_acks`: the receiver's pure ACKs sent while the sender's capture ran, each with
      whether the sender's capture holds it (schema.REVERSE_ACK_COLUMNS): ACKs lost on the
      way back, counted as exactly as data losses.
    - `competing`: the packets of the receiver capture's other flows (in no connection of
      the sender's) that arrived at the receiving host, on the sender's clock
      (schema.COMPETING_COLUMNS): the traffic that shared the path's last hop;
      `competing_names` names each of those flows (`a -> b tcp`, toward the receiving host).
    - `unused_map_rules`: the NAT rules (`SENDER_ADDR=RECEIVER_ADDR`) that rewrote no
      connection found in both captures: a mistyped address, or a NAT that is not there.
    """

    connections: ConnectionMatch
    clock: ClockFit | None
    transmissions: pd.DataFrame
    delay: pd.DataFrame
    sender_fate: np.ndarray
    receiver_fate: np.ndarray
    data_dir: np.ndarray
    unused_map_rules: tuple[str, ...] = ()
    reverse_acks: pd.DataFrame = dataclasses.field(
        default_factory=lambda: pd.DataFrame({c.name: [] for c in REVERSE_ACK_COLUMNS})
    )
    competing: pd.DataFrame = dataclasses.field(
        default_factory=lambda: pd.DataFrame({c.name: [] for c in COMPETING_COLUMNS})
    )
    competing_names: Mapping[int, str] = dataclasses.field(default_factory=dict)
    # Row positions of each (conn, dir) in transmissions and in reverse_acks, grouped once: a
    # detector asks per direction, and a capture may hold thousands of connections.
    transmission_rows: Mapping[tuple[int, int], np.ndarray] = dataclasses.field(
        default_factory=dict
    )
    reverse_ack_rows: Mapping[tuple[int, int], np.ndarray] = dataclasses.field(default_factory=dict)

    @property
    def matched(self) -> int:
        """How many connections were found in both captures."""
        return len(self.connections.pairs)

    def counts(self, conn: int | None = None) -> dict[str, int]:
        """Transmissions per fate, of one sender connection or of all."""
        tx = self.transmissions
        if conn is not None:
            tx = tx[tx["conn"] == conn]
        found = tx["fate"].value_counts()
        return {name: int(found.get(name, 0)) for name in FATES}

    def transmissions_of(self, conn: int, direction: int) -> pd.DataFrame:
        """The transmissions of one connection's direction."""
        return _of(self.transmissions, self.transmission_rows, conn, direction)

    def reverse_acks_of(self, conn: int, direction: int) -> pd.DataFrame:
        """The receiver's pure ACKs of one connection's direction (`reverse_acks`)."""
        return _of(self.reverse_acks, self.reverse_ack_rows, conn, direction)

    def sender_packets(self, packets: pa.Table) -> pa.Table:
        """The sender's packet table with the fate column (schema.FATE_PACKET_COLUMNS)."""
        return packets.append_column("fate", pa.array(self.sender_fate, type=pa.uint8()))


def _isn(table: pa.Table) -> np.ndarray:
    return np.stack(
        [table.column("isn_a").to_numpy(), table.column("isn_b").to_numpy()], axis=1
    ).astype(np.int64)


def _data_dir(table: pa.Table) -> np.ndarray:
    return data_direction(
        table.column("bytes_a2b").to_numpy(), table.column("bytes_b2a").to_numpy()
    )


def merge(
    sender: Connections, receiver: Connections, addr_map: Mapping[str, str] | None = None
) -> Merge:
    """Merge the sender's and the receiver's captures of the same transfer(s).

    Raises CaptureError when both are one file: every packet would match itself, with no delay
    and no loss, a merge that says nothing. A receiver capture that shares no connection with the
    sender's merges into nothing (`Merge.matched` is 0); what that means is the caller's call.
    """
    if same_file(sender.capture.path, receiver.capture.path):
        raise CaptureError(
            receiver.capture.path,
            f"is the sender's capture ({sender.capture.path}) too: give the receiver's capture",
        )
    cm = match_connections(sender.table, receiver.table, addr_map)
    pairs = cm.pairs
    data_dir_s = _data_dir(sender.table)
    n_s, n_r = sender.packets.num_rows, receiver.packets.num_rows
    origin_ns = sender.t0_ns

    matched_s = np.full(sender.table.num_rows, -1, dtype=np.int64)
    matched_s[pairs["conn_s"].to_numpy()] = pairs["conn_s"].to_numpy()
    snd = side(sender.packets, sender.capture.udp, matched_s)
    rcv = receiver_side(
        receiver.packets,
        receiver.capture.udp,
        pairs,
        _isn(sender.table),
        _isn(receiver.table),
        receiver.table.column("proto").to_numpy() == PROTO_TCP,
    )
    found = match_packets(snd, rcv)

    s_row, r_row = found.s_row, found.r_row
    s_cd = snd.cd[s_row]
    forward = (s_cd & 1) == data_dir_s[s_cd >> 1]
    del s_cd
    timed = found.how != BYTES  # GRO holds merged segments back: no timing
    f, r = np.flatnonzero(timed & forward), np.flatnonzero(timed & ~forward)
    del timed, forward
    t_s = (snd.ts_ns[s_row[f]] - origin_ns) / 1e9
    t_r = (rcv.ts_ns[r_row[f]] - origin_ns) / 1e9
    back_s = (snd.ts_ns[s_row[r]] - origin_ns) / 1e9
    back_r = (rcv.ts_ns[r_row[r]] - origin_ns) / 1e9
    clock = fit_clocks(t_s, t_r - t_s, back_s, back_s - back_r) if f.size else None
    del back_s, back_r, r
    to_sender = clock.to_sender_s if clock else (lambda x: np.asarray(x, dtype=np.float64))
    f_cd = snd.cd[s_row[f]]
    delay = _delay(f_cd >> 1, f_cd & 1, t_s, to_sender(t_r) - t_s, clock)
    del f_cd, t_s, t_r, f

    # Which receiver rows the sender's capture holds too: arrivals and ACKs that came back.
    r_found = np.zeros(n_r, dtype=bool)
    r_found[r_row] = True
    verdict, duplicate = _receiver_scan(receiver, pairs, data_dir_s)
    columns, sender_fate, receiver_fate = _fates(
        leave=snd,
        arrive=rcv,
        found=found,
        arrived_rows=r_found,
        data_dir=data_dir_s,
        origin_ns=origin_ns,
        to_sender=to_sender,
        verdict=verdict,
        duplicate=duplicate,
        n_conn=sender.table.num_rows,
    )
    del verdict, duplicate
    returning = _returning_fates(
        sender=sender,
        receiver=receiver,
        snd=snd,
        rcv=rcv,
        found=found,
        pairs=pairs,
        data_dir_s=data_dir_s,
        origin_ns=origin_ns,
        to_sender=to_sender,
    )
    del found, s_row, r_row
    if returning is not None:
        back, fate_at_receiver, fate_at_sender = returning
        for name in list(columns):  # one column at a time: the parts go as each is joined
            columns[name] = np.concatenate([columns[name], back.pop(name)])
        # Each packet is data one way or the other: the two judgements touch other rows.
        sender_fate = np.where(sender_fate == FATE_NONE, fate_at_sender, sender_fate)
        receiver_fate = np.where(receiver_fate == FATE_NONE, fate_at_receiver, receiver_fate)
        del back, fate_at_receiver, fate_at_sender
    transmissions = _transmission_frame(columns)
    del columns
    span_s = (int(snd.ts_ns.max()) - origin_ns) / 1e9 if n_s else 0.0
    reverse = _reverse_acks(rcv, r_found, origin_ns, data_dir_s, to_sender, clock, span_s)
    del r_found, snd, rcv
    competing, competing_names = _competing(receiver, cm, data_dir_s, origin_ns, to_sender)
    return Merge(
        connections=cm,
        clock=clock,
        transmissions=transmissions,
        delay=delay,
        sender_fate=sender_fate if n_s else np.zeros(0, np.uint8),
        receiver_fate=receiver_fate if n_r else np.zeros(0, np.uint8),
        data_dir=data_dir_s,
        unused_map_rules=_unused_rules(sender.table, pairs, addr_map or {}),
        reverse_acks=reverse,
        competing=competing,
        competing_names=competing_names,
        transmission_rows=_rows_by_direction(transmissions),
        reverse_ack_rows=_rows_by_direction(reverse),
    )


def _of(
    table: pd.DataFrame,
    grouped: Mapping[tuple[int, int], np.ndarray],
    conn: int,
    direction: int,
) -> pd.DataFrame:
    """One direction's rows of a table, from its grouping (or by a scan, for a Merge made
    without one)."""
    if not grouped and not table.empty:
        return table[(table["conn"] == conn) & (table["dir"] == direction)]
    return table.iloc[grouped.get((conn, direction), np.zeros(0, dtype=np.int64))]


def _rows_by_direction(table: pd.DataFrame) -> dict[tuple[int, int], np.ndarray]:
    """Row positions per (conn, dir), in table order."""
    if table.empty:
        return {}
    key = table["conn"].to_numpy().astype(np.int64) * 2 + table["dir"].to_numpy()
    order = np.argsort(key, kind="stable")
    keys, first = np.unique(key[order], return_index=True)
    return {
        (int(k) // 2, int(k) % 2): rows
        for k, rows in zip(keys, np.split(order, first[1:]), strict=True)
    }


def _competing(
    receiver: Connections,
    cm: ConnectionMatch,
    data_dir_s: np.ndarray,
    origin_ns: int,
    to_sender: Callable[[np.ndarray], np.ndarray],
) -> tuple[pd.DataFrame, dict[int, str]]:
    """Arrivals of the receiver capture's unmatched flows at the hosts that received the data
    of a matched connection (schema.COMPETING_COLUMNS), and each flow's name."""
    table = receiver.table
    pairs = cm.pairs
    if pairs.empty or not cm.receiver_only:
        return pd.DataFrame({c.name: [] for c in COMPETING_COLUMNS}), {}
    a = np.asarray(table.column("a").to_pylist(), dtype=object)
    b = np.asarray(table.column("b").to_pylist(), dtype=object)
    host = np.vectorize(lambda end: end.rsplit(":", 1)[0], otypes=[object])
    # The receiving hosts: the data's destination of every matched connection.
    to_b = (data_dir_s[pairs["conn_s"].to_numpy()] ^ pairs["flip"].to_numpy()) == 0
    conn_r = pairs["conn_r"].to_numpy()
    hosts = set(host(np.where(to_b, b[conn_r], a[conn_r])).tolist())
    others = np.asarray(cm.receiver_only, dtype=np.int64)
    # Per other flow, the direction toward a receiving host (a2b when b is one).
    toward = np.full(table.num_rows, -1, dtype=np.int64)
    toward[others[np.isin(host(b[others]), list(hosts))]] = 0
    toward[others[np.isin(host(a[others]), list(hosts))]] = 1
    pk = receiver.packets
    conn = pk.column("conn").to_numpy().astype(np.int64)
    keep = (conn >= 0) & (toward[np.maximum(conn, 0)] == pk.column("dir").to_numpy())
    conn = conn[keep]
    proto = pk.column("proto").to_numpy()[keep]
    ip = np.where(table.column("ip_version").to_numpy()[conn] == 6, 40, 20)
    timestamps = table.column("ts_ok").to_numpy()[conn]
    transport = np.where(proto == PROTO_TCP, 20 + 12 * timestamps, 8)
    wire = pk.column("payload_bytes").to_numpy()[keep].astype(np.int64) + transport + ip + 14
    t = to_sender((pk.column("ts_ns").to_numpy()[keep] - origin_ns) / 1e9)
    proto_of = table.column("proto").to_numpy()
    names = {
        int(c): (f"{a[c]} -> {b[c]}" if toward[c] == 0 else f"{b[c]} -> {a[c]}")
        + (" tcp" if proto_of[c] == PROTO_TCP else " udp")
        for c in np.unique(conn)
    }
    frame = pd.DataFrame(
        {"conn": conn.astype(np.int32), "t_s": t, "wire_bytes": wire.astype(np.uint32)}
    )
    return frame, names


def _reverse_acks(
    rcv: Side,
    arrived: np.ndarray,
    origin_ns: int,
    data_dir_s: np.ndarray,
    to_sender: Callable[[np.ndarray], np.ndarray],
    clock: ClockFit | None,
    span_s: float,
) -> pd.DataFrame:
    """The receiver's pure ACKs (schema.REVERSE_ACK_COLUMNS), each found or not at the sender
    (`arrived`, per receiver row).

    Only ACKs that left after the sender's capture began and would have reached it before it
    ended count (sent on the sender's clock, plus the way back's minimal delay): one sent
    outside that span says nothing about the path.
    """
    rows = _pure_acks(rcv.cd, rcv.proto, rcv.length, rcv.flags, data_dir_s.astype(np.int64))
    cd = rcv.cd[rows]
    t = to_sender((rcv.ts_ns[rows] - origin_ns) / 1e9)
    back = clock.min_delay_rev_s if clock is not None and clock.min_delay_rev_s else 0.0
    inside = (t >= 0) & (t + back <= span_s)
    return pd.DataFrame(
        {
            "conn": (cd[inside] >> 1).astype(np.int32),
            "dir": (data_dir_s[cd[inside] >> 1]).astype(np.uint8),
            "t_s": t[inside],
            "arrived": arrived[rows[inside]],
        }
    )


@jit
def _pure_acks(
    cd: np.ndarray, proto: np.ndarray, length: np.ndarray, flags: np.ndarray, data_dir: np.ndarray
) -> np.ndarray:  # pragma: no cover - numba
    """Rows of TCP pure ACKs (no payload, no SYN, FIN or RST) against a matched connection's
    data direction, in row order."""
    keep = np.zeros(cd.size, dtype=np.bool_)
    for i in range(cd.size):
        c = cd[i]
        keep[i] = (
            c >= 0
            and proto[i] == PROTO_TCP
            and (c & 1) != data_dir[c >> 1]
            and length[i] == 0
            and (flags[i] & TH_ACK) != 0
            and (flags[i] & (TH_SYN | TH_FIN | TH_RST)) == 0
        )
    out = np.flatnonzero(keep)
    return out


def _unused_rules(
    table: pa.Table, pairs: pd.DataFrame, addr_map: Mapping[str, str]
) -> tuple[str, ...]:
    """The NAT rules that rewrote no endpoint of a connection found in both captures."""
    if not addr_map:
        return ()
    conn = table.column("conn").to_numpy()
    matched = np.isin(conn, pairs["conn_s"].to_numpy())
    endpoints = set(table.column("a").filter(matched).to_pylist())
    endpoints |= set(table.column("b").filter(matched).to_pylist())
    return tuple(
        f"{left}={right}"
        for left, right in addr_map.items()
        if not any(map_endpoint(e, {left: right}) != e for e in endpoints)
    )


def _delay(
    conn: np.ndarray, direction: np.ndarray, t: np.ndarray, owd: np.ndarray, clock: ClockFit | None
) -> pd.DataFrame:
    order = np.argsort(t, kind="stable")
    floor = clock.floor_fwd_s(t[order]) if clock else 0.0
    return pd.DataFrame(
        {
            "conn": conn[order].astype(np.int32),
            "dir": direction[order].astype(np.uint8),
            "t_s": t[order],
            "owd_s": owd[order],
            # After the skew is removed the floor is flat within each path phase: the minimal
            # delay, propagation and serialization; what is above it waited in a queue.
            "queue_s": np.maximum(owd[order] - floor, 0.0),
        }
    )


@jit
def _events(
    conn: np.ndarray,
    direction: np.ndarray,
    proto: np.ndarray,
    length: np.ndarray,
    flags: np.ndarray,
    data_dir: np.ndarray,
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:  # pragma: no cover - numba
    """The events of a receiver's scan: each row that carries data in the judged direction
    of its connection (`data_dir`, -1: not judged) or an ACK of it, of connections with any
    such data. Returns the rows sorted by (connection, row), where each connection's start in
    them (n_conn + 1 offsets), and per row whether it is a data event.

    Counted before they are written: the outputs are sized exactly."""
    n_conn = data_dir.size
    has_data = np.zeros(n_conn, dtype=np.bool_)
    is_data = np.zeros(conn.size, dtype=np.bool_)
    for i in range(conn.size):
        c = conn[i]
        if (
            0 <= c < n_conn
            and data_dir[c] >= 0
            and proto[i] == PROTO_TCP
            and direction[i] == data_dir[c]
            and length[i] > 0
        ):
            is_data[i] = True
            has_data[c] = True
    event = np.zeros(conn.size, dtype=np.bool_)
    counts = np.zeros(n_conn + 1, dtype=np.int64)
    for i in range(conn.size):
        c = conn[i]
        if 0 <= c < n_conn and has_data[c] and proto[i] == PROTO_TCP:
            event[i] = is_data[i] or (direction[i] != data_dir[c] and (flags[i] & TH_ACK) != 0)
            if event[i]:
                counts[c + 1] += 1
    starts = np.cumsum(counts)
    fill = starts[:-1].copy()
    rows = np.empty(starts[-1], dtype=np.int64)
    for i in range(conn.size):
        if event[i]:
            rows[fill[conn[i]]] = i
            fill[conn[i]] += 1
    return rows, starts, is_data


@jit
def _owners(
    rows: np.ndarray, starts: np.ndarray, conn: np.ndarray, sack_rows: np.ndarray
) -> np.ndarray:  # pragma: no cover - numba
    """The event index of each SACK block's packet row (-1: not an event): a binary search
    within its connection's events, which are in row order."""
    out = np.full(sack_rows.size, -1, dtype=np.int64)
    for k in range(sack_rows.size):
        row = sack_rows[k]
        if not 0 <= row < conn.size:
            continue
        c = conn[row]
        if not 0 <= c < starts.size - 1:
            continue
        lo = starts[c]
        hi = starts[c + 1]
        while lo < hi:
            mid = (lo + hi) // 2
            if rows[mid] < row:
                lo = mid + 1
            else:
                hi = mid
        if lo < starts[c + 1] and rows[lo] == row:
            out[k] = lo
    return out


def _receiver_scan(
    receiver: Connections, pairs: pd.DataFrame, data_dir_s: np.ndarray
) -> tuple[np.ndarray, np.ndarray]:
    """Per receiver packet row: the ACK verdict (-1 where not a data arrival) and duplicate flag.

    Only connections that carried data in the judged direction are scanned: elsewhere no row
    is a data arrival, and an ACK event has no verdict of its own."""
    pk = receiver.packets
    n = pk.num_rows
    verdict = np.full(n, -1, dtype=np.int8)
    duplicate = np.zeros(n, dtype=bool)
    if n == 0 or pairs.empty:
        return verdict, duplicate
    data_dir_r = np.full(receiver.table.num_rows, -1, dtype=np.int64)
    data_dir_r[pairs["conn_r"].to_numpy()] = (
        data_dir_s[pairs["conn_s"].to_numpy()] ^ pairs["flip"].to_numpy()
    )
    conn = pk.column("conn").to_numpy()
    seq = pk.column("seq_rel").to_numpy()
    ack = pk.column("ack_rel").to_numpy()
    order, starts, is_data = _events(
        conn,
        pk.column("dir").to_numpy(),
        pk.column("proto").to_numpy(),
        pk.column("payload_bytes").to_numpy(),
        pk.column("tcp_flags").to_numpy(),
        data_dir_r,
    )
    if not order.size:
        return verdict, duplicate

    # SACK blocks the receiver sent, relative to the data direction's ISN, placed next to the
    # ACK number that carried them (as tracekit.series does).
    sack = receiver.capture.sack
    s_row = sack.column("row").to_numpy().astype(np.int64)
    owner = _owners(order, starts, conn, s_row)
    keep = owner >= 0
    if keep.any():
        keep &= ~is_data[s_row]
    owner, s_row = owner[keep], s_row[keep]
    isn = _isn(receiver.table)
    base = isn[conn[s_row], data_dir_r[conn[s_row]]]
    left_raw = sack.column("left").to_numpy().astype(np.int64)[keep]
    right_raw = sack.column("right").to_numpy().astype(np.int64)[keep]
    delta = (left_raw - base) % WRAP
    left = delta + np.round((ack[s_row] - delta) / WRAP).astype(np.int64) * WRAP
    right = left + (right_raw - left_raw) % WRAP
    by_owner = np.argsort(owner, kind="stable")

    v, dup = scan_rows(
        order,
        conn,
        is_data,
        seq,
        pk.column("payload_bytes").to_numpy(),
        ack,
        owner[by_owner],
        left[by_owner],
        right[by_owner],
    )
    verdict[order] = v
    duplicate[order] = dup & is_data[order]
    return verdict, duplicate


def _returning_fates(
    *,
    sender: Connections,
    receiver: Connections,
    snd: Side,
    rcv: Side,
    found: Found,
    pairs: pd.DataFrame,
    data_dir_s: np.ndarray,
    origin_ns: int,
    to_sender: Callable[[np.ndarray], np.ndarray],
) -> tuple[dict[str, np.ndarray], np.ndarray, np.ndarray] | None:
    """The fates of the data connections carried back, from the receiver's host to the
    sender's (None when no connection carried any): the transmissions' columns, and the fate
    of each row of the receiver's and of the sender's packet tables.

    The same judgement as the data's own direction, with the captures' roles swapped: the
    receiver's capture saw this data leave, the sender's saw it arrive, and the sender's host
    acknowledged it. The rows are in the sender's terms (its connection, direction and sequence
    base) and on its clock, and their columns keep their roles: `sender_*` is where the data
    left (the receiver's capture here), `receiver_*` where it arrived.
    """
    back = (1 - data_dir_s).astype(np.int64)
    if pairs.empty or not (_data_rows(snd, back).size or _data_rows(rcv, back).size):
        return None
    # The data's receiver is the sender capture's host: its ACKs and SACK blocks tell what its
    # TCP took in. _receiver_scan reads a capture in its own terms, so the pairs swap sides and
    # the direction judged is given per receiver-capture connection.
    swapped = pairs.rename(columns={"conn_s": "conn_r", "conn_r": "conn_s"})
    back_r = np.zeros(receiver.table.num_rows, dtype=np.int64)
    back_r[pairs["conn_r"].to_numpy()] = back[pairs["conn_s"].to_numpy()] ^ pairs["flip"].to_numpy()
    verdict, duplicate = _receiver_scan(sender, swapped, back_r)
    s_found = np.zeros(snd.rows, dtype=bool)
    s_found[found.s_row] = True
    columns, fate_at_receiver, fate_at_sender = _fates(
        leave=rcv,
        arrive=snd,
        found=found.swapped(),
        arrived_rows=s_found,
        data_dir=back,
        origin_ns=origin_ns,
        to_sender=lambda seconds: np.asarray(seconds, dtype=np.float64),
        verdict=verdict,
        duplicate=duplicate,
        n_conn=sender.table.num_rows,
    )
    # Departures were stamped by the receiver's clock: on the sender's, as every time is.
    columns["sender_t_s"] = to_sender(columns["sender_t_s"])
    return columns, fate_at_receiver, fate_at_sender


@jit
def _data_rows_of(
    cd: np.ndarray, length: np.ndarray, data_dir: np.ndarray
) -> np.ndarray:  # pragma: no cover - numba
    """Rows with payload in their matched connection's `data_dir`, in row order, counted
    first so the output is sized exactly."""
    n = 0
    for i in range(cd.size):
        c = cd[i]
        if c >= 0 and length[i] > 0 and (c & 1) == data_dir[c >> 1]:
            n += 1
    out = np.empty(n, dtype=np.int64)
    n = 0
    for i in range(cd.size):
        c = cd[i]
        if c >= 0 and length[i] > 0 and (c & 1) == data_dir[c >> 1]:
            out[n] = i
            n += 1
    return out


def _data_rows(s: Side, data_dir: np.ndarray) -> np.ndarray:
    """The rows of `s` that carry data in the direction `data_dir` names per sender
    connection, in row order."""
    return _data_rows_of(s.cd, s.length, data_dir.astype(np.int64))


@jit
def _max_ack(
    cd: np.ndarray,
    proto: np.ndarray,
    flags: np.ndarray,
    ack_rel: np.ndarray,
    conn: np.ndarray,
    direction: np.ndarray,
    ack_shift: np.ndarray,
    data_dir: np.ndarray,
    n_conn: int,
) -> np.ndarray:  # pragma: no cover - numba
    """Per (conn * 2 + data direction), the highest ACK number (in the sender capture's terms)
    of the TCP packets that acknowledge that direction (-1: none)."""
    out = np.full(2 * n_conn + 2, -1, dtype=np.int64)
    for i in range(cd.size):
        c = cd[i]
        if c < 0 or proto[i] != PROTO_TCP or (flags[i] & TH_ACK) == 0:
            continue
        if (c & 1) == data_dir[c >> 1]:
            continue
        k = (c >> 1) * 2 + (1 - (c & 1))
        a = ack_rel[i] + ack_shift[conn[i], direction[i]]
        if a > out[k]:
            out[k] = a
    return out


def _coverage(cd: np.ndarray, seq: np.ndarray, end: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """The union of the receiver's arrivals per direction: block starts (banded) and ends."""
    if not cd.size:
        return np.zeros(0, np.int64), np.zeros(0, np.int64)
    order = np.lexsort((seq, cd))
    cd, seq, end = cd[order], seq[order], end[order]
    starts = segment_starts(cd)
    reach = segmented_cummax_prev(end, starts)
    new_block = starts | (seq > reach)
    block = np.cumsum(new_block) - 1
    block_end = np.zeros(int(block[-1]) + 1, dtype=np.int64)
    np.maximum.at(block_end, block, end)
    return band(cd[new_block], seq[new_block]), block_end


def _fates(
    *,
    leave: Side,
    arrive: Side,
    found: Found,
    arrived_rows: np.ndarray,
    data_dir: np.ndarray,
    origin_ns: int,
    to_sender: Callable[[np.ndarray], np.ndarray],
    verdict: np.ndarray,
    duplicate: np.ndarray,
    n_conn: int,
) -> tuple[dict[str, np.ndarray], np.ndarray, np.ndarray]:
    """One direction's transmissions and their fates, from the capture that saw the data leave
    (`leave`) and the one that saw it arrive (`arrive`), both in the sender capture's terms,
    whose `n_conn` connections send data in `data_dir`: the transmissions' columns, and the fate
    of each row of the two packet tables. `found` pairs leave rows with arrive rows,
    `arrived_rows` marks the arrive rows it holds, and `verdict` and `duplicate` are the
    arriving host's judgement of each arrive row."""
    leave_fate = np.full(leave.rows, FATE_NONE, dtype=np.uint8)
    arrive_fate = np.full(arrive.rows, FATE_NONE, dtype=np.uint8)
    s_ts, r_ts = leave.ts_ns, arrive.ts_ns

    rows = _data_rows(leave, data_dir)
    rows = rows[np.argsort(s_ts[rows], kind="stable")]  # the transmissions, in time order
    arr = _data_rows(arrive, data_dir)  # the arrivals, in row order
    n_tx = rows.size

    # Arrival of each transmission: its first piece; all of its bytes must have arrived.
    is_tx = np.zeros(leave.rows, dtype=bool)
    is_tx[rows] = True
    is_arr = np.zeros(arrive.rows, dtype=bool)
    is_arr[arr] = True
    sel = np.flatnonzero(is_tx[found.s_row] & is_arr[found.r_row])
    del is_tx, is_arr
    p_s, p_r = found.s_row[sel], found.r_row[sel]
    del sel
    by_arrival = np.lexsort((r_ts[p_r], p_s))
    p_s, p_r = p_s[by_arrival], p_r[by_arrival]
    del by_arrival
    first = np.flatnonzero(segment_starts(p_s))
    tx_of = np.searchsorted(p_s[first], rows)  # each transmission's group of pairs, if any
    tx_of = np.minimum(tx_of, max(first.size - 1, 0))
    arrived = (p_s[first][tx_of] == rows) if first.size else np.zeros(n_tx, dtype=bool)
    s_len = leave.length[rows].astype(np.int64)
    if first.size:
        piece = np.minimum(leave.length[p_s], arrive.length[p_r]).astype(np.int64)
        got = np.add.reduceat(piece, first)[tx_of]
        del piece
        dropped = np.logical_or.reduceat(verdict[p_r] == RESENT_UNACKED, first)[tx_of]
        dup = np.logical_and.reduceat(duplicate[p_r], first)[tx_of]
        a_rows = np.where(arrived, p_r[first][tx_of], -1)
    else:
        got = np.zeros(n_tx, dtype=np.int64)
        dropped = dup = np.zeros(n_tx, dtype=bool)
        a_rows = np.full(n_tx, -1, dtype=np.int64)
    del tx_of, first
    whole = arrived & (got >= s_len)
    del got

    # Not (wholly) at the receiver's capture point: lost in the network, unless no arrival ever
    # carried these bytes and the receiver acknowledged them anyway (its capture missed them).
    cd = leave.cd[rows]
    seq = leave.seq(rows)
    end = seq + s_len
    a_seq = arrive.seq(arr)
    blk_key, blk_end = _coverage(arrive.cd[arr], a_seq, a_seq + arrive.length[arr])
    del a_seq
    pos = np.searchsorted(blk_key, band(cd, seq), side="right") - 1
    covered = (pos >= 0) & (
        (blk_key[np.maximum(pos, 0)] // BAND) == cd if blk_key.size else np.zeros(n_tx, bool)
    )
    covered &= blk_end[np.maximum(pos, 0)] >= end if blk_end.size else covered
    del pos, blk_key, blk_end
    max_ack = _max_ack(
        arrive.cd,
        arrive.proto,
        arrive.flags,
        arrive.ack_rel,
        arrive.conn,
        arrive.dir,
        arrive.ack_shift,
        data_dir.astype(np.int64),
        n_conn,
    )
    tcp_tx = leave.proto[rows] == PROTO_TCP
    gap = ~whole & ~covered & tcp_tx & (max_ack[cd] >= end)
    del covered, tcp_tx, max_ack

    # Reordering: an arrival after one of a segment the sender sent later.
    a_ts = r_ts[np.maximum(a_rows, 0)]
    in_order = np.lexsort((a_ts, cd))
    sel = in_order[arrived[in_order]]
    del in_order
    reordered = np.zeros(n_tx, dtype=bool)
    if sel.size:
        sent_before = segmented_cummax_prev(s_ts[rows[sel]], segment_starts(cd[sel]))
        reordered[sel] = s_ts[rows[sel]] < sent_before
    del sel

    fate = np.full(n_tx, _CODE["delivered"], dtype=np.uint8)
    fate[reordered] = _CODE["reordered"]
    fate[whole & dup] = _CODE["duplicate"]
    fate[whole & dropped] = _CODE["receiver_drop"]
    fate[~whole] = _CODE["network_drop"]
    fate[gap] = _CODE["receiver_capture_gap"]
    del reordered, whole, dup, dropped, gap
    leave_fate[rows] = fate
    arrive_fate[p_r] = leave_fate[p_s]
    del p_s, p_r

    # Arrivals the sender capture lacks.
    orphan = arr[~arrived_rows[arr]]
    del arr
    arrive_fate[orphan] = _CODE["sender_capture_gap"]

    o_seq = arrive.seq(orphan)
    o_cd = arrive.cd[orphan]
    o_len = arrive.length[orphan].astype(np.int64)
    r_sec = np.where(arrived, (a_ts - origin_ns) / 1e9, np.nan)
    o_sec = (r_ts[orphan] - origin_ns) / 1e9
    columns = {
        "conn": np.concatenate([cd >> 1, o_cd >> 1]).astype(np.int32),
        "dir": np.concatenate([cd & 1, o_cd & 1]).astype(np.uint8),
        "seq_rel": np.concatenate([seq, o_seq]).astype(np.int64),
        "end_rel": np.concatenate([end, o_seq + o_len]).astype(np.int64),
        "len": np.concatenate([s_len, o_len]),
        "sender_frame": np.concatenate(
            [leave.frame[rows].astype(np.int64), np.full(orphan.size, -1, dtype=np.int64)]
        ),
        "receiver_frame": np.concatenate(
            [
                np.where(arrived, arrive.frame[np.maximum(a_rows, 0)].astype(np.int64), -1),
                arrive.frame[orphan].astype(np.int64),
            ]
        ),
        "sender_t_s": np.concatenate(
            [(s_ts[rows] - origin_ns) / 1e9, np.full(orphan.size, np.nan)]
        ),
        "receiver_t_s": np.concatenate([to_sender(r_sec), to_sender(o_sec)]),
        "fate": np.concatenate([fate, np.full(orphan.size, _CODE["sender_capture_gap"])]),
    }
    return columns, leave_fate, arrive_fate


def _transmission_frame(columns: dict[str, np.ndarray]) -> pd.DataFrame:
    """The transmissions table (schema.TRANSMISSION_COLUMNS) around its columns, not a copy."""
    fate = columns.pop("fate")
    frame = pd.DataFrame(columns, copy=False)
    frame["fate"] = pd.Categorical.from_codes(fate.astype(np.int8), categories=list(FATES))
    return frame
