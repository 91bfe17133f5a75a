"""The merge stage: the `Merge` value and `merge`, which joins the two captures (see __init__)."""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np
import numpy.typing as npt
import pandas as pd
import pyarrow as pa

from tracekit.connections import data_direction
from tracekit.core.groups import Rows, as_slice
from tracekit.core.kernels import jit
from tracekit.errors import CaptureError, TracekitError
from tracekit.merge.clock import ClockFit, fit_clocks
from tracekit.merge.fate import (
    Judged,
    data_rows,
    judge_transmissions,
    overtaken_rows,
    receiver_scan,
    transmission_columns,
)
from tracekit.merge.match import (
    BYTES,
    ConnectionMatch,
    Found,
    Side,
    isn,
    map_endpoint,
    match_connections,
    match_packets,
    receiver_side,
    side,
)
from tracekit.schema import (
    COMPETING_COLUMNS,
    DELAY_COLUMNS,
    FATE_NONE,
    FATES,
    PROTO_TCP,
    REVERSE_ACK_COLUMNS,
    TH_ACK,
    TH_FIN,
    TH_RST,
    TH_SYN,
    empty_frame,
)

if TYPE_CHECKING:
    from tracekit.connections import Connections

# A Side's cd once the merge no longer reads it.
_NO_CD = np.zeros(0, dtype=np.int64)

# The packet table's columns `merge` and `udp_streams` read, of either capture (besides the
# reader's SACK and UDP side tables).
PACKET_COLUMNS_READ = frozenset(
    {"ts_ns", "frame", "conn", "dir", "proto", "tcp_flags", "seq_rel", "ack_rel"}
    | {"payload_bytes", "win_raw", "ip_id", "tsval"}
)


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
    # A run of rows with no gap (a capture's one busy direction is most of the table) is held
    # as a slice: positions would take 8 bytes a row.
    transmission_rows: Mapping[tuple[int, int], Rows] = dataclasses.field(default_factory=dict)
    reverse_ack_rows: Mapping[tuple[int, int], Rows] = dataclasses.field(default_factory=dict)

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

    def transmission_groups(self) -> Mapping[tuple[int, int], Rows]:
        """Row positions of the transmissions per (conn, dir), in table order (grouped here
        for a Merge made without its grouping)."""
        return self.transmission_rows or _rows_by_direction(self.transmissions)

    def transmissions_of(self, conn: int, direction: int) -> pd.DataFrame:
        """The transmissions of one connection's direction."""
        return _of(self.transmissions, self.transmission_rows, conn, direction)

    def reverse_acks_of(self, conn: int, direction: int) -> pd.DataFrame:
        """The receiver's pure ACKs of one connection's direction (`reverse_acks`)."""
        return _of(self.reverse_acks, self.reverse_ack_rows, conn, direction)

    def sender_packets(self, packets: pa.Table) -> pa.Table:
        """The sender's packet table with the fate column (schema.FATE_PACKET_COLUMNS)."""
        return packets.append_column("fate", pa.array(self.sender_fate, type=pa.uint8()))


def _data_dir(table: pa.Table) -> np.ndarray:
    return data_direction(
        table.column("bytes_a2b").to_numpy(), table.column("bytes_b2a").to_numpy()
    )


def merge(
    sender: Connections,
    receiver: Connections,
    addr_map: Mapping[str, str] | None = None,
    *,
    delay: bool = True,
) -> Merge:
    """Merge the sender's and the receiver's captures of the same transfer(s).

    With `delay` False the delay table is not made (`Merge.delay` has no rows): only views of
    the merge draw it (the report's delay plot, exports, the notebook API), and on a big pair it
    is 29 bytes a data packet held beside everything else.

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
        isn(sender.table),
        isn(receiver.table),
        receiver.table.column("proto").to_numpy() == PROTO_TCP,
    )
    found = match_packets(snd, rcv)
    # Which receiver rows the sender's capture holds too: arrivals and ACKs that came back.
    r_found = np.zeros(n_r, dtype=bool)
    r_found[found.r_row] = True

    # Each direction's transmissions are judged while the pairs are held; their columns are
    # written last, once the pairs, the clock's samples and the packets' cd have gone: the
    # columns, the delay table and the two packet tables are then the most the merge holds.
    verdict, duplicate = receiver_scan(receiver, pairs, data_dir_s, overtaken_rows(snd, rcv, found))
    forward, sender_fate, receiver_fate = judge_transmissions(
        leave=snd,
        arrive=rcv,
        found=found,
        arrived_rows=r_found,
        data_dir=data_dir_s,
        verdict=verdict,
        duplicate=duplicate,
        n_conn=sender.table.num_rows,
    )
    del verdict, duplicate
    returning = _returning_judgement(
        sender=sender,
        receiver=receiver,
        snd=snd,
        rcv=rcv,
        found=found,
        pairs=pairs,
        data_dir_s=data_dir_s,
    )
    back = None
    if returning is not None:
        back, fate_at_receiver, fate_at_sender = returning
        # Each packet is data one way or the other: the two judgements touch other rows.
        sender_fate = np.where(sender_fate == FATE_NONE, fate_at_sender, sender_fate)
        receiver_fate = np.where(receiver_fate == FATE_NONE, fate_at_receiver, receiver_fate)
        del fate_at_receiver, fate_at_sender
    del returning

    timing = _timing(
        found.s_row,
        found.r_row,
        found.how,
        snd.cd,
        data_dir_s.astype(np.int64),
        snd.ts_ns,
        rcv.ts_ns,
        origin_ns,
    )
    del found
    t_s, t_r, f_cd, back_s, back_r = timing
    del timing
    clock = fit_clocks(t_s, t_r - t_s, back_s, back_s - back_r) if t_s.size else None
    del back_s, back_r
    to_sender = clock.to_sender_s if clock else (lambda x: np.asarray(x, dtype=np.float64))
    if delay:
        # The one-way delay, in the arrival times' place.
        owd = np.subtract(_in_place(t_r, to_sender), t_s, out=t_r)
        del t_r
        handed = [f_cd, t_s, owd]
        del f_cd, t_s, owd
        delays = _delay(handed, clock)
    else:
        del f_cd, t_s, t_r
        delays = empty_frame(DELAY_COLUMNS)

    span_s = (int(snd.ts_ns.max()) - origin_ns) / 1e9 if n_s else 0.0
    reverse = _reverse_acks(rcv, r_found, origin_ns, data_dir_s, to_sender, clock, span_s)
    del r_found
    competing, competing_names = _competing(receiver, cm, data_dir_s, origin_ns, to_sender)

    # The transmissions' columns are written from the packet columns: the cd go first.
    snd, rcv = (dataclasses.replace(s, cd=_NO_CD) for s in (snd, rcv))
    n_forward = forward.size
    parts = [(forward, snd, rcv)] + ([(back, rcv, snd)] if back is not None else [])
    del forward, back, snd, rcv
    columns = transmission_columns(parts, origin_ns)
    # Arrivals of the data were stamped by the receiver's clock, and so were departures of the
    # data carried back: on the sender's, as every time is.
    _in_place(columns["receiver_t_s"][:n_forward], to_sender)
    _in_place(columns["sender_t_s"][n_forward:], to_sender)
    transmissions = _transmission_frame(columns)
    del columns
    return Merge(
        connections=cm,
        clock=clock,
        transmissions=transmissions,
        delay=delays,
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
    grouped: Mapping[tuple[int, int], Rows],
    conn: int,
    direction: int,
) -> pd.DataFrame:
    """One direction's rows of a table, from its grouping (or by a scan, for a Merge made
    without one)."""
    if not grouped and not table.empty:
        return table[(table["conn"] == conn) & (table["dir"] == direction)]
    rows = grouped.get((conn, direction), np.zeros(0, dtype=np.int64))
    # One run of rows (a capture's one busy direction is most of the table) is taken as a view.
    run = as_slice(rows)
    return table.iloc[run] if run is not None else table.iloc[rows]


@jit
def _group_rows(
    conn: np.ndarray, direction: np.ndarray
) -> tuple[np.ndarray, np.ndarray]:  # pragma: no cover
    """Row positions sorted by (conn, dir), each key's in table order, and where each key
    (conn * 2 + dir) starts in them: a counting sort, sized by the largest connection."""
    n_keys = 2
    for i in range(conn.size):
        n_keys = max(n_keys, 2 * int(conn[i]) + 2)
    starts = np.zeros(n_keys + 1, dtype=np.int64)
    for i in range(conn.size):
        starts[2 * np.int64(conn[i]) + direction[i] + 1] += 1
    for k in range(n_keys):
        starts[k + 1] += starts[k]
    fill = starts[:-1].copy()
    order = np.empty(conn.size, dtype=np.int64)
    for i in range(conn.size):
        k = 2 * np.int64(conn[i]) + direction[i]
        order[fill[k]] = i
        fill[k] += 1
    return order, starts


def _rows_by_direction(table: pd.DataFrame) -> dict[tuple[int, int], Rows]:
    """Row positions per (conn, dir), in table order: a slice where they are one run, else a
    copy of its own (the whole table's order is let go)."""
    if table.empty:
        return {}
    order, starts = _group_rows(table["conn"].to_numpy(), table["dir"].to_numpy())
    grouped: dict[tuple[int, int], Rows] = {}
    for k in np.flatnonzero(np.diff(starts)):
        rows = order[starts[k] : starts[k + 1]]
        run = as_slice(rows)
        grouped[(int(k) // 2, int(k) % 2)] = run if run is not None else rows.copy()
    return grouped


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
    keep = _toward(pk.column("conn").to_numpy(), pk.column("dir").to_numpy(), toward)
    conn = pk.column("conn").to_numpy()[keep].astype(np.int64)
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


@jit
def _toward(
    conn: np.ndarray, direction: np.ndarray, toward: np.ndarray
) -> np.ndarray:  # pragma: no cover - numba
    """Rows whose connection's direction toward a receiving host (`toward`, -1: none) they
    go in, in row order."""
    keep = np.zeros(conn.size, dtype=np.bool_)
    for i in range(conn.size):
        c = conn[i]
        keep[i] = 0 <= c < toward.size and toward[c] == direction[i]
    return np.flatnonzero(keep)


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


@jit
def _timing(
    s_row: np.ndarray,
    r_row: np.ndarray,
    how: np.ndarray,
    s_cd: np.ndarray,
    data_dir: np.ndarray,
    s_ts: np.ndarray,
    r_ts: np.ndarray,
    origin_ns: int,
) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray, np.ndarray]:  # pragma: no cover
    """The pairs' times, s since origin_ns, in their order, of the pairs found packet by packet
    (GRO holds merged segments back: no timing): of the data direction's, the sender's stamp,
    the receiver's and the cd; of the other's (ACKs), the sender's stamp and the receiver's.
    Counted first: sized exactly."""
    n_fwd = 0
    n_rev = 0
    for k in range(s_row.size):
        if how[k] != BYTES:
            c = s_cd[s_row[k]]
            if (c & 1) == data_dir[c >> 1]:
                n_fwd += 1
            else:
                n_rev += 1
    t_s = np.empty(n_fwd, dtype=np.float64)
    t_r = np.empty(n_fwd, dtype=np.float64)
    cd = np.empty(n_fwd, dtype=np.int64)
    back_s = np.empty(n_rev, dtype=np.float64)
    back_r = np.empty(n_rev, dtype=np.float64)
    f = 0
    r = 0
    for k in range(s_row.size):
        if how[k] != BYTES:
            c = s_cd[s_row[k]]
            if (c & 1) == data_dir[c >> 1]:
                t_s[f] = (s_ts[s_row[k]] - origin_ns) / 1e9
                t_r[f] = (r_ts[r_row[k]] - origin_ns) / 1e9
                cd[f] = c
                f += 1
            else:
                back_s[r] = (s_ts[s_row[k]] - origin_ns) / 1e9
                back_r[r] = (r_ts[r_row[k]] - origin_ns) / 1e9
                r += 1
    return t_s, t_r, cd, back_s, back_r


@jit
def _conn_dir(
    cd: np.ndarray, order: np.ndarray
) -> tuple[np.ndarray, np.ndarray]:  # pragma: no cover
    """The connection and direction of each cd, in `order`."""
    conn = np.empty(order.size, dtype=np.int32)
    direction = np.empty(order.size, dtype=np.uint8)
    for k in range(order.size):
        conn[k] = cd[order[k]] >> 1
        direction[k] = cd[order[k]] & 1
    return conn, direction


def _delay(handed: list[np.ndarray], clock: ClockFit | None) -> pd.DataFrame:
    """The delay table (schema.DELAY_COLUMNS) from the data's pairs, handed over as [cd, sender
    time, one-way delay] so each goes once its sorted copy is made."""
    cd, t, owd = handed
    handed.clear()
    order = np.argsort(t, kind="stable")
    t = t[order]
    owd = owd[order]
    conn, direction = _conn_dir(cd, order)
    del cd, order
    # After the skew is removed the floor is flat within each path phase: the minimal delay,
    # propagation and serialization; what is above it waited in a queue.
    queue = owd - (clock.floor_fwd_s(t) if clock else 0.0)
    np.maximum(queue, 0.0, out=queue)
    return pd.DataFrame(
        {"conn": conn, "dir": direction, "t_s": t, "owd_s": owd, "queue_s": queue}, copy=False
    )


def _in_place(values: np.ndarray, fn: Callable[[np.ndarray], np.ndarray]) -> np.ndarray:
    """`values` replaced by fn(values), a piece at a time: fn's temporaries stay small."""
    step = 1 << 16
    for lo in range(0, values.size, step):
        values[lo : lo + step] = fn(values[lo : lo + step])
    return values


def _returning_judgement(
    *,
    sender: Connections,
    receiver: Connections,
    snd: Side,
    rcv: Side,
    found: Found,
    pairs: pd.DataFrame,
    data_dir_s: np.ndarray,
) -> tuple[Judged, np.ndarray, np.ndarray] | None:
    """The data connections carried back, from the receiver's host to the sender's, judged
    (None when no connection carried any), and the fate of each row of the receiver's and of
    the sender's packet tables.

    The same judgement as the data's own direction, with the captures' roles swapped: the
    receiver's capture saw this data leave, the sender's saw it arrive, and the sender's host
    acknowledged it. The rows are in the sender's terms (its connection, direction and sequence
    base), and their columns keep their roles: `sender_*` is where the data left (the
    receiver's capture here), `receiver_*` where it arrived.
    """
    back = (1 - data_dir_s).astype(np.int64)
    if pairs.empty or not (data_rows(snd, back).size or data_rows(rcv, back).size):
        return None
    # The data's receiver is the sender capture's host: its ACKs and SACK blocks tell what its
    # TCP took in. _receiver_scan reads a capture in its own terms, so the pairs swap sides and
    # the direction judged is given per receiver-capture connection.
    swapped = pairs.rename(columns={"conn_s": "conn_r", "conn_r": "conn_s"})
    back_r = np.zeros(receiver.table.num_rows, dtype=np.int64)
    back_r[pairs["conn_r"].to_numpy()] = back[pairs["conn_s"].to_numpy()] ^ pairs["flip"].to_numpy()
    verdict, duplicate = receiver_scan(
        sender, swapped, back_r, overtaken_rows(rcv, snd, found.swapped())
    )
    s_found = np.zeros(snd.rows, dtype=bool)
    s_found[found.s_row] = True
    return judge_transmissions(
        leave=rcv,
        arrive=snd,
        found=found.swapped(),
        arrived_rows=s_found,
        data_dir=back,
        verdict=verdict,
        duplicate=duplicate,
        n_conn=sender.table.num_rows,
    )


def fate_is(transmissions: pd.DataFrame, *fates: str) -> npt.NDArray[np.bool_]:
    """Per transmission, whether its fate is one of `fates`: one look-up per row in a table
    of the fates' codes, where the column is the merge's categorical (pandas' isin hashes
    every row's category, seconds on tens of millions of rows); a table made otherwise is
    asked as it is."""
    fate = transmissions["fate"]
    if isinstance(fate.dtype, pd.CategoricalDtype):
        categories = list(fate.cat.categories)
        # One slot past the categories for code -1, a missing value: no fate.
        wanted = np.zeros(len(categories) + 1, dtype=bool)
        for name in fates:
            if name in categories:
                wanted[categories.index(name)] = True
        return wanted[fate.cat.codes.to_numpy()]
    return fate.isin(list(fates)).to_numpy(dtype=bool)


def _transmission_frame(columns: dict[str, np.ndarray]) -> pd.DataFrame:
    """The transmissions table (schema.TRANSMISSION_COLUMNS) around its columns, not a copy."""
    fate = columns.pop("fate")
    frame = pd.DataFrame(columns, copy=False)
    frame["fate"] = pd.Categorical.from_codes(fate.astype(np.int8), categories=list(FATES))
    return frame
