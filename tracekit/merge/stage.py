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
from tracekit.errors import CaptureError, TracekitError
from tracekit.merge.clock import ClockFit, fit_clocks
from tracekit.merge.fate import RESENT_UNACKED, receiver_verdicts
from tracekit.merge.match import (
    ConnectionMatch,
    map_endpoint,
    match_connections,
    match_packets,
    packet_frame,
    receiver_in_sender_terms,
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

    snd = packet_frame(sender.packets, sender.capture.udp)
    rcv_raw = packet_frame(receiver.packets, receiver.capture.udp)
    matched_s = np.zeros(sender.table.num_rows, dtype=bool)
    matched_s[pairs["conn_s"].to_numpy()] = True
    snd = snd[matched_s[snd["conn"].to_numpy()]] if n_s else snd
    rcv = receiver_in_sender_terms(rcv_raw, pairs, _isn(sender.table), _isn(receiver.table))
    found = match_packets(snd, rcv)

    s_ts = sender.packets.column("ts_ns").to_numpy()
    r_ts = receiver.packets.column("ts_ns").to_numpy()
    s_row, r_row = found["s_row"].to_numpy(), found["r_row"].to_numpy()
    s_conn = sender.packets.column("conn").to_numpy().astype(np.int64)
    s_dir = sender.packets.column("dir").to_numpy().astype(np.int64)
    forward = s_dir[s_row] == data_dir_s[s_conn[s_row]]
    timed = (found["how"] != "bytes").to_numpy()  # GRO holds merged segments back: no timing
    t_s = (s_ts[s_row] - origin_ns) / 1e9
    t_r = (r_ts[r_row] - origin_ns) / 1e9
    f, r = timed & forward, timed & ~forward
    clock = fit_clocks(t_s[f], t_r[f] - t_s[f], t_s[r], t_s[r] - t_r[r]) if f.any() else None
    to_sender = clock.to_sender_s if clock else (lambda x: np.asarray(x, dtype=np.float64))

    verdict, duplicate = _receiver_scan(receiver, pairs, data_dir_s)
    transmissions, sender_fate, receiver_fate = _fates(
        sender=sender,
        receiver=receiver,
        snd=snd,
        rcv=rcv,
        found=found,
        data_dir_s=data_dir_s,
        origin_ns=origin_ns,
        to_sender=to_sender,
        verdict=verdict,
        duplicate=duplicate,
        n_conn=sender.table.num_rows,
    )
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
    if returning is not None:
        back, fate_at_receiver, fate_at_sender = returning
        transmissions = pd.concat([transmissions, back], ignore_index=True)
        # Each packet is data one way or the other: the two judgements touch other rows.
        sender_fate = np.where(sender_fate == FATE_NONE, fate_at_sender, sender_fate)
        receiver_fate = np.where(receiver_fate == FATE_NONE, fate_at_receiver, receiver_fate)
    delay = _delay(s_conn[s_row[f]], s_dir[s_row[f]], t_s[f], to_sender(t_r[f]) - t_s[f], clock)
    span_s = (int(s_ts.max()) - origin_ns) / 1e9 if n_s else 0.0
    reverse = _reverse_acks(rcv, r_row, r_ts, origin_ns, data_dir_s, to_sender, clock, span_s)
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
    rcv: pd.DataFrame,
    matched_rows: np.ndarray,
    r_ts: np.ndarray,
    origin_ns: int,
    data_dir_s: np.ndarray,
    to_sender: Callable[[np.ndarray], np.ndarray],
    clock: ClockFit | None,
    span_s: float,
) -> pd.DataFrame:
    """The receiver's pure ACKs (schema.REVERSE_ACK_COLUMNS), each found or not at the sender.

    Only ACKs that left after the sender's capture began and would have reached it before it
    ended count (sent on the sender's clock, plus the way back's minimal delay): one sent
    outside that span says nothing about the path.
    """
    c = rcv["conn"].to_numpy()
    flags = rcv["flags"].to_numpy()
    pure = (
        rcv["tcp"].to_numpy()
        & (rcv["dir"].to_numpy() != data_dir_s[c])
        & (rcv["len"].to_numpy() == 0)
        & ((flags & TH_ACK) != 0)
        & ((flags & (TH_SYN | TH_FIN | TH_RST)) == 0)
    )
    rows = rcv["row"].to_numpy()[pure]
    t = to_sender((r_ts[rows] - origin_ns) / 1e9)
    back = clock.min_delay_rev_s if clock is not None and clock.min_delay_rev_s else 0.0
    inside = (t >= 0) & (t + back <= span_s)
    return pd.DataFrame(
        {
            "conn": c[pure][inside].astype(np.int32),
            "dir": (data_dir_s[c[pure]][inside]).astype(np.uint8),
            "t_s": t[inside],
            "arrived": np.isin(rows[inside], matched_rows),
        }
    )


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


def _receiver_scan(
    receiver: Connections, pairs: pd.DataFrame, data_dir_s: np.ndarray
) -> tuple[np.ndarray, np.ndarray]:
    """Per receiver packet row: the ACK verdict (-1 where not a data arrival) and duplicate flag."""
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
    conn = pk.column("conn").to_numpy().astype(np.int64)
    d = pk.column("dir").to_numpy().astype(np.int64)
    tcp = pk.column("proto").to_numpy() == PROTO_TCP
    length = pk.column("payload_bytes").to_numpy().astype(np.int64)
    flags = pk.column("tcp_flags").to_numpy()
    seq = pk.column("seq_rel").to_numpy()
    ack = pk.column("ack_rel").to_numpy()
    judged = tcp & (data_dir_r[conn] >= 0)
    is_data = judged & (d == data_dir_r[conn]) & (length > 0)
    is_ack = judged & (d != data_dir_r[conn]) & ((flags & TH_ACK) != 0)
    rows = np.flatnonzero(is_data | is_ack)  # capture order
    order = rows[np.argsort(conn[rows], kind="stable")]
    event_of_row = np.full(n, -1, dtype=np.int64)
    event_of_row[order] = np.arange(order.size)

    # SACK blocks the receiver sent, relative to the data direction's ISN, placed next to the
    # ACK number that carried them (as tracekit.series does).
    sack = receiver.capture.sack
    s_row = sack.column("row").to_numpy().astype(np.int64)
    owner = event_of_row[s_row] if s_row.size else s_row
    keep = owner >= 0
    if keep.any():
        keep &= is_ack[s_row]
    owner, s_row = owner[keep], s_row[keep]
    isn = _isn(receiver.table)
    base = isn[conn[s_row], data_dir_r[conn[s_row]]]
    left_raw = sack.column("left").to_numpy().astype(np.int64)[keep]
    right_raw = sack.column("right").to_numpy().astype(np.int64)[keep]
    delta = (left_raw - base) % WRAP
    left = delta + np.round((ack[s_row] - delta) / WRAP).astype(np.int64) * WRAP
    right = left + (right_raw - left_raw) % WRAP
    by_owner = np.argsort(owner, kind="stable")

    v, dup = receiver_verdicts(
        conn[order],
        is_data[order],
        seq[order],
        seq[order] + length[order],
        ack[order],
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
    snd: pd.DataFrame,
    rcv: pd.DataFrame,
    found: pd.DataFrame,
    pairs: pd.DataFrame,
    data_dir_s: np.ndarray,
    origin_ns: int,
    to_sender: Callable[[np.ndarray], np.ndarray],
) -> tuple[pd.DataFrame, np.ndarray, np.ndarray] | None:
    """The fates of the data connections carried back, from the receiver's host to the
    sender's (None when no connection carried any): the transmissions' rows, and the fate of
    each row of the receiver's and of the sender's packet tables.

    The same judgement as the data's own direction, with the captures' roles swapped: the
    receiver's capture saw this data leave, the sender's saw it arrive, and the sender's host
    acknowledged it. The rows are in the sender's terms (its connection, direction and sequence
    base) and on its clock, and their columns keep their roles: `sender_*` is where the data
    left (the receiver's capture here), `receiver_*` where it arrived.
    """
    back = (1 - data_dir_s).astype(np.int64)

    def carried(frame: pd.DataFrame) -> np.ndarray:
        conn = frame["conn"].to_numpy()
        return np.asarray(
            frame["tcp"].to_numpy()
            & (frame["len"].to_numpy() > 0)
            & (frame["dir"].to_numpy() == back[conn])
        )

    if pairs.empty or not (carried(snd).any() or carried(rcv).any()):
        return None
    # The data's receiver is the sender capture's host: its ACKs and SACK blocks tell what its
    # TCP took in. _receiver_scan reads a capture in its own terms, so the pairs swap sides and
    # the direction judged is given per receiver-capture connection.
    swapped = pairs.rename(columns={"conn_s": "conn_r", "conn_r": "conn_s"})
    back_r = np.zeros(receiver.table.num_rows, dtype=np.int64)
    back_r[pairs["conn_r"].to_numpy()] = back[pairs["conn_s"].to_numpy()] ^ pairs["flip"].to_numpy()
    verdict, duplicate = _receiver_scan(sender, swapped, back_r)
    table, fate_at_receiver, fate_at_sender = _fates(
        sender=receiver,
        receiver=sender,
        snd=rcv,
        rcv=snd,
        found=found.rename(columns={"s_row": "r_row", "r_row": "s_row"}),
        data_dir_s=back,
        origin_ns=origin_ns,
        to_sender=lambda seconds: np.asarray(seconds, dtype=np.float64),
        verdict=verdict,
        duplicate=duplicate,
        n_conn=sender.table.num_rows,
    )
    # Departures were stamped by the receiver's clock: on the sender's, as every time is.
    table["sender_t_s"] = to_sender(table["sender_t_s"].to_numpy(dtype=np.float64))
    return table, fate_at_receiver, fate_at_sender


def _coverage(rcv_data: pd.DataFrame) -> tuple[np.ndarray, np.ndarray]:
    """The union of the receiver's arrivals per direction: block starts (banded) and ends."""
    if rcv_data.empty:
        return np.zeros(0, np.int64), np.zeros(0, np.int64)
    cd = rcv_data["cd"].to_numpy()
    seq = rcv_data["seq"].to_numpy()
    end = seq + rcv_data["len"].to_numpy()
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
    sender: Connections,
    receiver: Connections,
    snd: pd.DataFrame,
    rcv: pd.DataFrame,
    found: pd.DataFrame,
    data_dir_s: np.ndarray,
    origin_ns: int,
    to_sender: object,
    verdict: np.ndarray,
    duplicate: np.ndarray,
    n_conn: int,
) -> tuple[pd.DataFrame, np.ndarray, np.ndarray]:
    """One direction's transmissions and their fates, from the capture that saw the data leave
    (`sender`, `snd`) and the one that saw it arrive (`receiver`, `rcv`, in the first's terms);
    `n_conn` is how many connections those terms number."""
    n_s, n_r = sender.packets.num_rows, receiver.packets.num_rows
    sender_fate = np.full(n_s, FATE_NONE, dtype=np.uint8)
    receiver_fate = np.full(n_r, FATE_NONE, dtype=np.uint8)
    s_ts = sender.packets.column("ts_ns").to_numpy()
    r_ts = receiver.packets.column("ts_ns").to_numpy()
    s_frame = sender.packets.column("frame").to_numpy().astype(np.int64)
    r_frame = receiver.packets.column("frame").to_numpy().astype(np.int64)

    tx = snd[(snd["len"] > 0).to_numpy() & (snd["dir"] == data_dir_s[snd["conn"]]).to_numpy()]
    tx = tx.sort_values("ts_ns", kind="stable")
    arr = rcv[(rcv["len"] > 0).to_numpy() & (rcv["dir"] == data_dir_s[rcv["conn"]]).to_numpy()]
    arr = arr.assign(cd=arr["conn"] * 2 + arr["dir"])

    # Arrival of each transmission: its first piece; all of its bytes must have arrived.
    p = found[found["s_row"].isin(tx["row"]) & found["r_row"].isin(arr["row"])].copy()
    s_len = np.zeros(n_s, dtype=np.int64)
    s_len[tx["row"].to_numpy()] = tx["len"].to_numpy()
    r_len = np.zeros(n_r, dtype=np.int64)
    r_len[arr["row"].to_numpy()] = arr["len"].to_numpy()
    p["bytes"] = np.minimum(s_len[p["s_row"].to_numpy()], r_len[p["r_row"].to_numpy()])
    p["r_ts"] = r_ts[p["r_row"].to_numpy()]
    p["dropped"] = verdict[p["r_row"].to_numpy()] == RESENT_UNACKED
    p["dup"] = duplicate[p["r_row"].to_numpy()]
    p = p.sort_values(["s_row", "r_ts"], kind="stable")
    per = p.groupby("s_row", sort=False).agg(
        r_row=("r_row", "first"),
        bytes=("bytes", "sum"),
        dropped=("dropped", "any"),
        dup=("dup", "all"),
    )

    rows = tx["row"].to_numpy()
    n_tx = rows.size
    first_r = np.full(n_s, -1, dtype=np.int64)
    first_r[per.index.to_numpy()] = per["r_row"].to_numpy()
    got = np.zeros(n_s, dtype=np.int64)
    got[per.index.to_numpy()] = per["bytes"].to_numpy()
    dropped = np.zeros(n_s, dtype=bool)
    dropped[per.index.to_numpy()] = per["dropped"].to_numpy()
    dup = np.zeros(n_s, dtype=bool)
    dup[per.index.to_numpy()] = per["dup"].to_numpy()
    arrived = first_r[rows] >= 0
    whole = arrived & (got[rows] >= s_len[rows])

    # Not (wholly) at the receiver's capture point: lost in the network, unless no arrival ever
    # carried these bytes and the receiver acknowledged them anyway (its capture missed them).
    cd = (tx["conn"] * 2 + tx["dir"]).to_numpy()
    seq = tx["seq"].to_numpy()
    end = seq + tx["len"].to_numpy()
    blk_key, blk_end = _coverage(arr)
    pos = np.searchsorted(blk_key, band(cd, seq), side="right") - 1
    covered = (pos >= 0) & (
        (blk_key[np.maximum(pos, 0)] // BAND) == cd if blk_key.size else np.zeros(n_tx, bool)
    )
    covered &= blk_end[np.maximum(pos, 0)] >= end if blk_end.size else covered
    rack = rcv[(rcv["tcp"]).to_numpy() & (rcv["dir"] != data_dir_s[rcv["conn"]]).to_numpy()]
    rack = rack[(rack["flags"].to_numpy() & TH_ACK) != 0]
    max_ack = np.full(2 * n_conn + 2, -1, dtype=np.int64)
    np.maximum.at(
        max_ack, (rack["conn"] * 2 + (1 - rack["dir"])).to_numpy(), rack["ack"].to_numpy()
    )
    tcp_tx = tx["tcp"].to_numpy()
    gap = ~whole & ~covered & tcp_tx & (max_ack[cd] >= end)

    # Reordering: an arrival after one of a segment the sender sent later.
    a_rows = first_r[rows]
    in_order = np.lexsort((r_ts[np.maximum(a_rows, 0)], cd))
    sel = in_order[arrived[in_order]]
    reordered = np.zeros(n_tx, dtype=bool)
    if sel.size:
        sent_before = segmented_cummax_prev(s_ts[rows[sel]], segment_starts(cd[sel]))
        reordered[sel] = s_ts[rows[sel]] < sent_before

    fate = np.full(n_tx, _CODE["delivered"], dtype=np.uint8)
    fate[reordered] = _CODE["reordered"]
    fate[whole & dup[rows]] = _CODE["duplicate"]
    fate[whole & dropped[rows]] = _CODE["receiver_drop"]
    fate[~whole] = _CODE["network_drop"]
    fate[gap] = _CODE["receiver_capture_gap"]
    sender_fate[rows] = fate
    matched_pairs = p[p["s_row"].isin(rows)]
    receiver_fate[matched_pairs["r_row"].to_numpy()] = sender_fate[
        matched_pairs["s_row"].to_numpy()
    ]

    # Arrivals the sender capture lacks.
    orphan = arr[~arr["row"].isin(found["r_row"])]
    receiver_fate[orphan["row"].to_numpy()] = _CODE["sender_capture_gap"]

    to_s = to_sender  # a callable: receiver-clock seconds -> sender-clock seconds
    r_sec = np.where(arrived, (r_ts[np.maximum(a_rows, 0)] - origin_ns) / 1e9, np.nan)
    o_sec = (r_ts[orphan["row"].to_numpy()] - origin_ns) / 1e9
    table = pd.DataFrame(
        {
            "conn": np.concatenate([tx["conn"], orphan["conn"]]).astype(np.int32),
            "dir": np.concatenate([tx["dir"], orphan["dir"]]).astype(np.uint8),
            "seq_rel": np.concatenate([seq, orphan["seq"]]).astype(np.int64),
            "end_rel": np.concatenate([end, orphan["seq"] + orphan["len"]]).astype(np.int64),
            "len": np.concatenate([tx["len"], orphan["len"]]).astype(np.int64),
            "sender_frame": np.concatenate(
                [s_frame[rows], np.full(len(orphan), -1, dtype=np.int64)]
            ),
            "receiver_frame": np.concatenate(
                [np.where(arrived, r_frame[np.maximum(a_rows, 0)], -1), r_frame[orphan["row"]]]
            ),
            "sender_t_s": np.concatenate(
                [(s_ts[rows] - origin_ns) / 1e9, np.full(len(orphan), np.nan)]
            ),
            "receiver_t_s": np.concatenate([to_s(r_sec), to_s(o_sec)]),  # type: ignore[operator]
            "fate": pd.Categorical.from_codes(
                np.concatenate([fate, np.full(len(orphan), _CODE["sender_capture_gap"])]).astype(
                    np.int64
                ),
                categories=list(FATES),
            ),
        }
    )
    return table, sender_fate, receiver_fate
