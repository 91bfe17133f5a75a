"""What became of each data transmission, judged from both ends of the path.

At the receiver's capture point a segment has either arrived or not. If it arrived, the
receiver's own ACKs (cumulative, RFC 9293 3.4, and SACK blocks, RFC 2018) say whether its host
kept it: a segment that is neither acknowledged nor selectively acknowledged before the sender's
next copies of the same bytes arrive (whole, or in pieces as a resent super-segment is), and
that the receiver does not then report as a duplicate (a D-SACK, RFC 2883), died in the
receiving host, after the capture point (the "receiver drop" that only two captures can tell
from a network drop).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

import numpy as np
import pandas as pd

from tracekit.core.band import BAND
from tracekit.core.kernels import jit
from tracekit.merge.match import Found, Side, isn
from tracekit.schema import FATE_NONE, FATES, PROTO_TCP, TH_ACK, WRAP

if TYPE_CHECKING:
    from tracekit.connections import Connections

_CODE = {name: np.uint8(i) for i, name in enumerate(FATES)}

# Verdicts of the receiver's scan, per arrival.
ACKED = 0  # a later ACK or SACK block of the receiver covers it: the host kept it
RESENT_UNACKED = 1  # the same bytes arrived again before any ACK covered them: the host dropped it
NEVER_ACKED = 2  # the capture ends before either: no verdict
# The same bytes arrived again before the host's ACKs showed it had taken anything that arrived
# after this arrival: its ACKs trail its capture point by more than the sender waited to resend,
# and whether it kept this copy they cannot tell.
UNTOLD = 3

# How far past an arrival the receiver's answer to it is looked for, in its connection's events
# (data and ACKs), where no copy can come or its copy has come: a host's ACKs trail its capture
# point by at most the arrivals it has not yet taken, which Linux bounds by the socket's buffers
# (tcp_add_backlog: the receive plus the send buffer, 6 + 4 MB at most by default, about 7,000
# full segments and their ACKs). Past that the ACKs cannot tell.
# It is also how far the arrival's copy is looked for: a sender resends a hole within about one
# flight of its first copy (RFC 6675's recovery, or an RTO with the flight still unacknowledged),
# and a flight is bounded by the receive window, which the same default buffers hold to about
# 4,300 full segments and their ACKs. An arrival whose copy could still come past the bound is
# one the scan cannot tell (UNTOLD, said as such). The bound keeps the scan linear on a hostile
# capture whose ACKs never cover anything and whose copies all come at its end.
LOOKAHEAD_EVENTS = 16_384


@jit
def _dsack_overlaps(
    j: int,
    ack_j: int,
    s: int,
    e: int,
    sack_start: np.ndarray,
    sack_left: np.ndarray,
    sack_right: np.ndarray,
) -> bool:  # pragma: no cover - numba
    """Whether ACK event j (cumulative ACK ack_j) reports a duplicate of bytes in [s, e): its
    first SACK block is a D-SACK (RFC 2883 4: below the cumulative ACK, or inside the second
    block)."""
    first, stop = sack_start[j], sack_start[j + 1]
    if stop <= first:
        return False
    lo, hi = sack_left[first], sack_right[first]
    dsack = lo < ack_j or (
        stop > first + 1 and sack_left[first + 1] <= lo and sack_right[first + 1] >= hi
    )
    return bool(dsack and lo < e and hi > s)


@jit
def _covers(
    j: int,
    ack_j: int,
    s: int,
    e: int,
    sack_start: np.ndarray,
    sack_left: np.ndarray,
    sack_right: np.ndarray,
) -> bool:  # pragma: no cover - numba
    """Whether ACK event j (cumulative ACK ack_j) acknowledges all of [s, e), cumulatively or
    in one SACK block."""
    if ack_j >= e:
        return True
    for k in range(sack_start[j], sack_start[j + 1]):
        if sack_left[k] <= s and sack_right[k] >= e:
            return True
    return False


@jit
def _duplicates_reported(
    i: int,
    j: int,
    reach: int,
    s: int,
    e: int,
    rows: np.ndarray,
    group: np.ndarray,
    is_data: np.ndarray,
    left: np.ndarray,
    length: np.ndarray,
    ack: np.ndarray,
    sack_start: np.ndarray,
    sack_left: np.ndarray,
    sack_right: np.ndarray,
) -> bool:  # pragma: no cover - numba
    """Whether the host reported as many duplicates of [s, e) (D-SACK blocks, RFC 2883) as
    copies of it arrived after data event i, before it showed it had taken the first new data
    after the first copy (event j): then none of the arrivals from event i on was lost.

    A host that keeps one of several arrivals of the same bytes and finds the others already
    held reports each of those with a D-SACK, so had it dropped event i, it reports one
    duplicate fewer than the copies that came after. A host may take an arrival a little out
    of capture order, and answer it late: the D-SACK of a copy then comes after the ACK that
    the copy filled, so the count runs until the host has taken data that arrived after the
    copy (`reach`: the highest byte the arrivals before event i reached). A host that sets
    a D-SACK for two duplicates before it sends one ACK reports one (Linux keeps the last):
    the count can fall short, never over."""
    g = group[rows[i]]
    reach = max(reach, e)
    copies = 0
    reported = 0
    ys = np.int64(-1)
    ye = np.int64(-1)
    for k in range(i + 1, min(rows.size, j + LOOKAHEAD_EVENTS)):
        q = rows[k]
        if group[q] != g:
            break
        if is_data[q]:
            qs = np.int64(left[q])
            qe = qs + np.int64(length[q])
            if qs < e and qe > s:
                copies += 1
            elif k > j and ye < 0 and qs >= reach:
                ys, ye = qs, qe
            reach = max(reach, int(qe))
            continue
        if _dsack_overlaps(k, ack[q], s, e, sack_start, sack_left, sack_right):
            reported += 1
            if reported >= copies:
                return True
        if ye >= 0 and _covers(k, ack[q], ys, ye, sack_start, sack_left, sack_right):
            break
    return False


@jit
def _host_order(
    i: int,
    j: int,
    k0: int,
    reach: int,
    overtaken: bool,
    s: int,
    e: int,
    rows: np.ndarray,
    group: np.ndarray,
    is_data: np.ndarray,
    left: np.ndarray,
    length: np.ndarray,
    ack: np.ndarray,
    win: np.ndarray,
    sack_start: np.ndarray,
    sack_left: np.ndarray,
    sack_right: np.ndarray,
) -> int:  # pragma: no cover - numba
    """What the host did with data event i, [s, e), whose copy (event j) arrived before any
    ACK covered it, as the order of its ACKs tells: ACKED, RESENT_UNACKED, or UNTOLD where
    they cannot tell. `k0` is the last ACK event before event i (-1: none), `reach` the
    highest byte the arrivals before it reached, and `overtaken` whether a segment the sender
    sent after it reached the capture point first.

    A host takes its arrivals in the order they reached its capture point (one queue from the
    tap to TCP) and acknowledges out-of-order data at once, with a SACK block (RFC 2018 4) or,
    without SACK, a duplicate ACK (RFC 5681 4.2). Its ACKs can trail the tap by tens of
    segments when its CPU cannot keep up, and the sender then resends before they catch up.
    The order of the ACKs still tells, given new data x that arrived between the two copies
    (past every earlier arrival: a copy of older bytes may be acknowledged for an arrival
    before event i). Had the host dropped event i, it took x without it: an ACK of x that does
    not cover [s, e) comes first. Had it kept event i, an ACK of [s, e) comes before any of
    x, or with it where the receiver's SACK blocks are in the capture (x's arrival would
    have shown apart), or without them where x starts at e (an ACK of [s, e) and not of x).

    Without the SACK blocks, a second ACK of s tells where event i reached past every earlier
    arrival: nothing before it could make the host acknowledge s twice, so it
    took an arrival after event i while it lacked [s, e). The second must be a duplicate ACK
    (RFC 5681 2): no data, and the window of the ACK before it. A window update that an
    application's read sends repeats the ACK number as well, while event i may still wait in
    the host's backlog. Anything else cannot tell which of the two copies the host kept.

    An arrival that segments sent after it overtook came by a path beside theirs (a receive
    queue per CPU, a link of a bundle): past the capture point the host may take it after
    them as well, so the order of its ACKs cannot say it dropped event i."""
    g = group[rows[i]]
    highest = e >= reach
    reach = max(reach, e)
    xs = np.int64(-1)
    xe = np.int64(-1)
    for k in range(i + 1, j):
        q = rows[k]
        if is_data[q]:
            qs = np.int64(left[q])
            qe = qs + np.int64(length[q])
            known = k0 >= 0 and _covers(
                k0, ack[rows[k0]], qs, qe, sack_start, sack_left, sack_right
            )
            if xe < 0 and qs >= reach and not known:
                xs, xe = qs, qe
            reach = max(reach, int(qe))
    acks_of_s = 1 if k0 >= 0 and ack[rows[k0]] == s else 0
    last_win = np.int64(win[rows[k0]]) if k0 >= 0 else np.int64(-1)
    sacked = False
    for k in range(i + 1, min(rows.size, j + LOOKAHEAD_EVENTS)):
        q = rows[k]
        if group[q] != g:
            break
        if is_data[q]:
            continue
        has_sack = sack_start[k + 1] > sack_start[k]
        sacked |= has_sack
        first = _covers(k, ack[q], s, e, sack_start, sack_left, sack_right)
        if highest and not first and ack[q] == s and not has_sack:
            if acks_of_s == 0 or (length[q] == 0 and np.int64(win[q]) == last_win):
                acks_of_s += 1
            if acks_of_s >= 2:
                return UNTOLD if overtaken else RESENT_UNACKED
        last_win = np.int64(win[q])
        if xe < 0:
            if first:
                return UNTOLD
            continue
        new = _covers(k, ack[q], xs, xe, sack_start, sack_left, sack_right)
        if first:
            return ACKED if sacked or (not new and xs == e) else UNTOLD
        if new:
            return UNTOLD if overtaken else RESENT_UNACKED
    return UNTOLD


@jit
def _scan(
    rows: np.ndarray,
    group: np.ndarray,
    is_data: np.ndarray,
    left: np.ndarray,
    length: np.ndarray,
    ack: np.ndarray,
    win: np.ndarray,
    overtaken: np.ndarray,
    sack_start: np.ndarray,
    sack_left: np.ndarray,
    sack_right: np.ndarray,
) -> tuple[np.ndarray, np.ndarray]:  # pragma: no cover - numba
    """For each data event, the verdict of the ACKs after it, and whether it came in already
    acknowledged (a duplicate). Event i is row rows[i] of the columns (group, is_data, left,
    length, ack, win, overtaken), the events sorted by (group, capture order); ACK event j owns SACK
    blocks sack_start[j]:sack_start[j + 1]."""
    n = rows.size
    verdict = np.full(n, -1, dtype=np.int8)
    duplicate = np.zeros(n, dtype=np.bool_)
    # Per event, the next ACK event of its group (n: none), and the lowest left edge of the
    # group's data events after it. A data event that no later one starts at or below can
    # never be re-sent, so its scan visits the ACK events alone: a capture of one direction
    # (a tap on one side, no ACKs), whose scan would otherwise run to the end for every
    # arrival, stays linear.
    # And whether an ACK event after it carries SACK blocks: without one no duplicate can be
    # reported (a D-SACK), and that count is not looked for.
    next_ack = np.full(n, n, dtype=np.int64)
    least_left_after = np.full(n, np.iinfo(np.int64).max, dtype=np.int64)
    sack_after = np.zeros(n, dtype=np.bool_)
    following_ack = n
    least = np.iinfo(np.int64).max
    sacks_later = False
    for i in range(n - 1, -1, -1):
        if i == n - 1 or group[rows[i]] != group[rows[i + 1]]:
            following_ack = n
            least = np.iinfo(np.int64).max
            sacks_later = False
        next_ack[i] = following_ack
        least_left_after[i] = least
        sack_after[i] = sacks_later
        if is_data[rows[i]]:
            if left[rows[i]] < least:
                least = left[rows[i]]
        else:
            following_ack = i
            sacks_later |= sack_start[i + 1] > sack_start[i]
    acked_so_far = np.int64(-(1 << 62))
    last_ack = -1  # the group's last ACK event so far
    reach = np.int64(-(1 << 62))  # the highest byte the group's arrivals so far reached
    for i in range(n):
        r = rows[i]
        if i == 0 or group[r] != group[rows[i - 1]]:
            acked_so_far = np.int64(-(1 << 62))
            last_ack = -1
            reach = np.int64(-(1 << 62))
        if not is_data[r]:
            if ack[r] > acked_so_far:
                acked_so_far = np.int64(ack[r])
            last_ack = i
            continue
        s = np.int64(left[r])
        e = s + np.int64(length[r])
        duplicate[i] = e <= acked_so_far
        reach_before = reach
        reach = max(reach, e)
        v = NEVER_ACKED
        # How far from s later copies have re-sent this arrival's bytes, in order: a sender
        # that resends a super-segment (TSO, GRO at the receiver) resends it in pieces.
        resent_to = s
        # Nothing later starts at or below s: no copy can re-send these bytes, and only ACKs
        # can decide.
        acks_only = least_left_after[i] > s
        j = next_ack[i] if acks_only else i + 1
        stop = min(n, i + LOOKAHEAD_EVENTS)
        while j < stop and group[rows[j]] == group[r]:
            q = rows[j]
            if is_data[q]:
                if left[q] <= resent_to and left[q] + np.int64(length[q]) > resent_to:
                    resent_to = left[q] + np.int64(length[q])
                if resent_to >= e:
                    # Re-sent whole before any ACK covered it: kept if the host reports
                    # every copy a duplicate (a D-SACK, RFC 2883: it had kept the first and
                    # only held its ACK back); else the order of its ACKs tells, or not.
                    if sack_after[i] and _duplicates_reported(
                        i,
                        j,
                        reach_before,
                        s,
                        e,
                        rows,
                        group,
                        is_data,
                        left,
                        length,
                        ack,
                        sack_start,
                        sack_left,
                        sack_right,
                    ):
                        v = ACKED
                    else:
                        v = _host_order(
                            i,
                            j,
                            last_ack,
                            reach_before,
                            overtaken[r],
                            s,
                            e,
                            rows,
                            group,
                            is_data,
                            left,
                            length,
                            ack,
                            win,
                            sack_start,
                            sack_left,
                            sack_right,
                        )
                    break
            elif _covers(j, ack[q], s, e, sack_start, sack_left, sack_right):
                v = ACKED
                break
            j = next_ack[j] if acks_only else j + 1
        cut = j == stop and stop < n and group[rows[j]] == group[r]
        if v == NEVER_ACKED and cut and not acks_only:
            # The bound cut the scan short where a copy could still come: no verdict, said so.
            v = UNTOLD
        verdict[i] = v
    return verdict, duplicate


def _sack_starts(sack_owner: np.ndarray, events: int) -> np.ndarray:
    """Where each event's SACK blocks start (and, last, where the blocks end), from each block's
    owner event (sorted ascending)."""
    counts = np.bincount(sack_owner.astype(np.int64), minlength=events)
    sack_start = np.zeros(events + 1, dtype=np.int64)
    np.cumsum(counts, out=sack_start[1:])
    return sack_start


def _scan_rows(
    rows: np.ndarray,
    group: np.ndarray,
    is_data: np.ndarray,
    left: np.ndarray,
    length: np.ndarray,
    ack: np.ndarray,
    win: np.ndarray,
    overtaken: np.ndarray,
    sack_owner: np.ndarray,
    sack_left: np.ndarray,
    sack_right: np.ndarray,
) -> tuple[np.ndarray, np.ndarray]:
    """`receiver_verdicts` of the events at `rows` of whole columns, which are read in place:
    per event, the verdict and the duplicate flag."""
    return _scan(
        rows,
        group,
        is_data,
        left,
        length,
        ack,
        win,
        overtaken,
        _sack_starts(sack_owner, rows.size),
        sack_left.astype(np.int64, copy=False),
        sack_right.astype(np.int64, copy=False),
    )


def receiver_verdicts(
    group: np.ndarray,
    is_data: np.ndarray,
    left: np.ndarray,
    right: np.ndarray,
    ack: np.ndarray,
    sack_owner: np.ndarray,
    sack_left: np.ndarray,
    sack_right: np.ndarray,
    overtaken: np.ndarray | None = None,
    window: np.ndarray | None = None,
) -> tuple[np.ndarray, np.ndarray]:
    """Per event of the receiver's capture (sorted by group, then capture order): the verdict
    (ACKED, RESENT_UNACKED, NEVER_ACKED, UNTOLD; -1 for ACK events) and whether a data arrival
    was already acknowledged when it came (a duplicate).

    Data events carry their byte range [left, right); ACK events the receiver's cumulative ACK
    in `ack`. SACK blocks belong to the ACK event at index `sack_owner` (sorted ascending).
    `overtaken` marks the data events that a segment sent after them reached first (None:
    none). `window` is each event's window field, which tells a duplicate ACK from a window
    update (None: every ACK's window the same).
    """
    left = left.astype(np.int64)
    return _scan_rows(
        np.arange(group.size, dtype=np.int64),
        group.astype(np.int64),
        is_data.astype(np.bool_),
        left,
        right.astype(np.int64) - left,
        ack.astype(np.int64),
        np.zeros(group.size, dtype=np.int64) if window is None else window.astype(np.int64),
        np.zeros(group.size, dtype=np.bool_) if overtaken is None else overtaken.astype(np.bool_),
        sack_owner,
        sack_left,
        sack_right,
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


@jit
def _overtaken_rows(
    n_arrive: int, s_row: np.ndarray, r_row: np.ndarray, s_ts: np.ndarray, r_cd: np.ndarray
) -> np.ndarray:  # pragma: no cover - numba
    """Per row of the arriving capture, whether a packet its connection's direction sent after
    it (by the leaving capture's times of the pairs (s_row, r_row)) arrived before it."""
    sent = np.full(n_arrive, np.iinfo(np.int64).max, dtype=np.int64)
    for k in range(s_row.size):
        r = r_row[k]
        if 0 <= r < n_arrive and 0 <= s_row[k] < s_ts.size and s_ts[s_row[k]] < sent[r]:
            sent[r] = s_ts[s_row[k]]
    n_cd = 0
    for r in range(n_arrive):
        n_cd = max(n_cd, r_cd[r] + 1)
    latest = np.full(n_cd, np.iinfo(np.int64).min, dtype=np.int64)
    out = np.zeros(n_arrive, dtype=np.bool_)
    for r in range(n_arrive):
        c = r_cd[r]
        if c < 0 or sent[r] == np.iinfo(np.int64).max:
            continue
        out[r] = latest[c] > sent[r]
        latest[c] = max(latest[c], sent[r])
    return out


def overtaken_rows(leave: Side, arrive: Side, found: Found) -> np.ndarray:
    """Per row of the arriving capture, whether a segment of its direction that the sender sent
    after it reached the arriving capture point first (reordering on the way)."""
    return _overtaken_rows(
        arrive.rows, found.s_row, found.r_row, leave.ts_ns, arrive.cd.astype(np.int64, copy=False)
    )


def receiver_scan(
    receiver: Connections,
    pairs: pd.DataFrame,
    data_dir_s: np.ndarray,
    overtaken: np.ndarray | None = None,
) -> tuple[np.ndarray, np.ndarray]:
    """Per receiver packet row: the ACK verdict (-1 where not a data arrival) and duplicate flag.
    `overtaken`: per receiver row, whether a segment sent after it arrived first (None: none).

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
    bases = isn(receiver.table)
    base = bases[conn[s_row], data_dir_r[conn[s_row]]]
    left_raw = sack.column("left").to_numpy().astype(np.int64)[keep]
    right_raw = sack.column("right").to_numpy().astype(np.int64)[keep]
    delta = (left_raw - base) % WRAP
    left = delta + np.round((ack[s_row] - delta) / WRAP).astype(np.int64) * WRAP
    right = left + (right_raw - left_raw) % WRAP
    by_owner = np.argsort(owner, kind="stable")

    v, dup = _scan_rows(
        order,
        conn,
        is_data,
        seq,
        pk.column("payload_bytes").to_numpy(),
        ack,
        pk.column("win_raw").to_numpy(),
        np.zeros(n, dtype=np.bool_) if overtaken is None else overtaken,
        owner[by_owner],
        left[by_owner],
        right[by_owner],
    )
    verdict[order] = v
    duplicate[order] = dup & is_data[order]
    return verdict, duplicate


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


def data_rows(s: Side, data_dir: np.ndarray) -> np.ndarray:
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


@jit
def _first_arrivals(
    rows: np.ndarray,
    s_row: np.ndarray,
    r_row: np.ndarray,
    arr: np.ndarray,
    n_leave: int,
    n_arrive: int,
    s_len: np.ndarray,
    r_len: np.ndarray,
    r_ts: np.ndarray,
    verdict: np.ndarray,
    duplicate: np.ndarray,
) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:  # pragma: no cover - numba
    """Per transmission (leave row rows[t]), from the pairs (s_row, r_row) of a transmission
    with an arrival (an `arr` row): its first arrival's row (the earliest, the first pair of
    equal times; -1: none), whether all its bytes arrived, what its host did with its pieces
    (2: dropped one, RESENT_UNACKED; 1: its ACKs cannot tell of one, UNTOLD; 0: neither) and
    whether every piece came in a duplicate."""
    n_tx = rows.size
    tx_of = np.full(n_leave, -1, dtype=np.int64)
    for t in range(n_tx):
        tx_of[rows[t]] = t
    arrival = np.zeros(n_arrive, dtype=np.bool_)
    for k in range(arr.size):
        arrival[arr[k]] = True
    first = np.full(n_tx, -1, dtype=np.int64)
    first_ts = np.zeros(n_tx, dtype=np.int64)
    got = np.zeros(n_tx, dtype=np.int64)
    dropped = np.zeros(n_tx, dtype=np.uint8)
    dup = np.ones(n_tx, dtype=np.bool_)
    for k in range(s_row.size):
        s = s_row[k]
        r = r_row[k]
        t = tx_of[s]
        if t < 0 or not arrival[r]:
            continue
        if first[t] < 0 or r_ts[r] < first_ts[t]:
            first[t] = r
            first_ts[t] = r_ts[r]
        got[t] += min(np.int64(s_len[s]), np.int64(r_len[r]))
        if verdict[r] == RESENT_UNACKED:
            dropped[t] = 2
        elif verdict[r] == UNTOLD and dropped[t] == 0:
            dropped[t] = 1
        if not duplicate[r]:
            dup[t] = False
    whole = np.empty(n_tx, dtype=np.bool_)
    for t in range(n_tx):
        whole[t] = first[t] >= 0 and got[t] >= np.int64(s_len[rows[t]])
    return first, whole, dropped, dup


@jit
def _blocks(
    rows: np.ndarray,
    cd: np.ndarray,
    seq_rel: np.ndarray,
    conn: np.ndarray,
    direction: np.ndarray,
    seq_shift: np.ndarray,
    length: np.ndarray,
) -> tuple[np.ndarray, np.ndarray]:  # pragma: no cover - numba
    """The union of the byte ranges of `rows` (sorted by cd, then sequence number) per cd:
    each block's start as band(cd, seq) and its end (0 at least). Counted first: sized
    exactly."""
    lowest = np.iinfo(np.int64).min
    n = 0
    reach = lowest
    for k in range(rows.size):
        i = rows[k]
        s = seq_rel[i] + seq_shift[conn[i], direction[i]]
        if k == 0 or cd[i] != cd[rows[k - 1]]:
            reach = lowest
        if k == 0 or cd[i] != cd[rows[k - 1]] or s > reach:
            n += 1
        reach = max(reach, s + np.int64(length[i]))
    key = np.empty(n, dtype=np.int64)
    end = np.empty(n, dtype=np.int64)
    b = -1
    reach = lowest
    for k in range(rows.size):
        i = rows[k]
        s = seq_rel[i] + seq_shift[conn[i], direction[i]]
        e = s + np.int64(length[i])
        if k == 0 or cd[i] != cd[rows[k - 1]]:
            reach = lowest
        if k == 0 or cd[i] != cd[rows[k - 1]] or s > reach:
            b += 1
            key[b] = cd[i] * BAND + s
            end[b] = max(e, 0)
        elif e > end[b]:
            end[b] = e
        reach = max(reach, e)
    return key, end


@jit
def _gaps(
    rows: np.ndarray,
    whole: np.ndarray,
    cd: np.ndarray,
    proto: np.ndarray,
    seq_rel: np.ndarray,
    conn: np.ndarray,
    direction: np.ndarray,
    seq_shift: np.ndarray,
    length: np.ndarray,
    blk_key: np.ndarray,
    blk_end: np.ndarray,
    max_ack: np.ndarray,
) -> np.ndarray:  # pragma: no cover - numba
    """Per transmission not wholly arrived: whether no arrival carried its bytes (no block of
    the arrivals' union holds them) and the receiver acknowledged them anyway."""
    gap = np.zeros(rows.size, dtype=np.bool_)
    for t in range(rows.size):
        i = rows[t]
        if whole[t] or proto[i] != PROTO_TCP:
            continue
        c = cd[i]
        s = seq_rel[i] + seq_shift[conn[i], direction[i]]
        e = s + np.int64(length[i])
        if max_ack[c] < e:
            continue
        # The last block starting at or before s (np.searchsorted, side "right", minus one).
        lo = 0
        hi = blk_key.size
        key = c * BAND + s
        while lo < hi:
            mid = (lo + hi) // 2
            if blk_key[mid] <= key:
                lo = mid + 1
            else:
                hi = mid
        p = lo - 1
        covered = p >= 0 and blk_key[p] // BAND == c and blk_end[p] >= e
        gap[t] = not covered
    return gap


@jit
def _reordered(
    first: np.ndarray, rows: np.ndarray, cd: np.ndarray, sent_ns: np.ndarray, got_ns: np.ndarray
) -> np.ndarray:  # pragma: no cover - numba
    """Per transmission (`rows`, in departure order; `first`, its first arrival's row, -1 for
    none): whether it arrived after one its connection's direction sent later, that is, some
    transmission of the same cd that left strictly later arrived strictly earlier.

    One pass from the last departure back, with no sort by arrival: per cd, the earliest
    arrival among the transmissions that left later than the one at hand (those that left at
    the same instant are gathered first, and count only once an earlier departure comes).
    """
    n = rows.size
    out = np.zeros(n, dtype=np.bool_)
    top = 0
    for t in range(n):
        top = max(top, cd[rows[t]])
    never = np.iinfo(np.int64).max
    earliest = np.full(top + 1, never, dtype=np.int64)  # of later departures
    instant = np.full(top + 1, never, dtype=np.int64)  # the departure time being gathered
    gathered = np.full(top + 1, never, dtype=np.int64)  # earliest arrival of those
    for t in range(n - 1, -1, -1):
        i = rows[t]
        c = cd[i]
        if sent_ns[i] < instant[c]:
            earliest[c] = min(earliest[c], gathered[c])
            instant[c] = sent_ns[i]
            gathered[c] = never
        if first[t] >= 0:
            got = got_ns[first[t]]
            out[t] = earliest[c] < got
            gathered[c] = min(gathered[c], got)
    return out


@jit
def _in_time_order(rows: np.ndarray, ts_ns: np.ndarray) -> bool:  # pragma: no cover - numba
    """Whether ts_ns at `rows` never steps back (a stable sort by it would keep rows as is)."""
    ordered = True
    for k in range(1, rows.size):
        if ts_ns[rows[k]] < ts_ns[rows[k - 1]]:
            ordered = False
            break
    return ordered


@jit
def _arrival_fates(
    s_row: np.ndarray,
    r_row: np.ndarray,
    leave_fate: np.ndarray,
    arrive_fate: np.ndarray,
    is_tx: np.ndarray,
    arr: np.ndarray,
) -> None:  # pragma: no cover - numba
    """Each arrival of a transmission takes its fate; an arrival that holds several
    transmissions (GRO), the fate of the last one sent by row."""
    arrival = np.zeros(arrive_fate.size, dtype=np.bool_)
    for k in range(arr.size):
        arrival[arr[k]] = True
    winner = np.full(arrive_fate.size, -1, dtype=np.int64)
    for k in range(s_row.size):
        s = s_row[k]
        r = r_row[k]
        if is_tx[s] and arrival[r] and s > winner[r]:
            winner[r] = s
    for k in range(r_row.size):
        r = r_row[k]
        if winner[r] >= 0:
            arrive_fate[r] = leave_fate[winner[r]]


@jit
def _departures(
    rows: np.ndarray,
    conn: np.ndarray,
    direction: np.ndarray,
    to_conn: np.ndarray,
    flip: np.ndarray,
    seq_rel: np.ndarray,
    seq_shift: np.ndarray,
    length: np.ndarray,
    frame: np.ndarray,
    ts_ns: np.ndarray,
    origin_ns: int,
    out_conn: np.ndarray,
    out_dir: np.ndarray,
    out_seq: np.ndarray,
    out_end: np.ndarray,
    out_len: np.ndarray,
    out_frame: np.ndarray,
    out_t: np.ndarray,
) -> None:  # pragma: no cover - numba
    """The columns of the packets `rows` (of connections found in both captures): the sender
    capture's connection and direction (`to_conn`, `flip`: as `Side.cd` is made), byte range
    in its terms, frame and time (s since origin_ns)."""
    for k in range(rows.size):
        i = rows[k]
        c = conn[i]
        out_conn[k] = to_conn[c]
        out_dir[k] = direction[i] ^ flip[c]
        s = seq_rel[i] + seq_shift[c, direction[i]]
        ln = np.int64(length[i])
        out_seq[k] = s
        out_end[k] = s + ln
        out_len[k] = ln
        out_frame[k] = frame[i]
        out_t[k] = (ts_ns[i] - origin_ns) / 1e9


@jit
def _first_arrival_columns(
    first: np.ndarray,
    frame: np.ndarray,
    ts_ns: np.ndarray,
    origin_ns: int,
    out_frame: np.ndarray,
    out_t: np.ndarray,
) -> None:  # pragma: no cover
    """Frame and time (s since origin_ns, the arriving capture's clock) of each transmission's
    first arrival, where it has one."""
    for t in range(first.size):
        r = first[t]
        if r >= 0:
            out_frame[t] = frame[r]
            out_t[t] = (ts_ns[r] - origin_ns) / 1e9


@dataclass
class Judged:
    """One direction's transmissions, judged (`judge_transmissions`), and the arrivals the
    capture that saw the data leave lacks: what their rows of the transmissions table are
    written from (`transmission_columns`).

    - `rows`: each transmission's row in the leaving capture, in time order.
    - `first`: its first arrival's row in the arriving capture (-1: none); None once written.
    - `fate`: its fate code (index in schema.FATES).
    - `orphans`: the arriving capture's rows of data the leaving capture lacks, in row order.
    """

    rows: np.ndarray
    first: np.ndarray | None
    fate: np.ndarray
    orphans: np.ndarray

    @property
    def size(self) -> int:
        """Its rows of the transmissions table."""
        return int(self.rows.size + self.orphans.size)


def judge_transmissions(
    *,
    leave: Side,
    arrive: Side,
    found: Found,
    arrived_rows: np.ndarray,
    data_dir: np.ndarray,
    verdict: np.ndarray,
    duplicate: np.ndarray,
    n_conn: int,
) -> tuple[Judged, np.ndarray, np.ndarray]:
    """One direction's transmissions and their fates, from the capture that saw the data leave
    (`leave`) and the one that saw it arrive (`arrive`), both in the sender capture's terms,
    whose `n_conn` connections send data in `data_dir`; and the fate of each row of the two
    packet tables. `found` pairs leave rows with arrive rows, `arrived_rows` marks the arrive
    rows it holds, and `verdict` and `duplicate` are the arriving host's judgement of each
    arrive row.
    """
    leave_fate = np.full(leave.rows, FATE_NONE, dtype=np.uint8)
    arrive_fate = np.full(arrive.rows, FATE_NONE, dtype=np.uint8)
    data_dir = data_dir.astype(np.int64)
    rows = data_rows(leave, data_dir)
    # The transmissions, in time order: as captured already, but where the clock stepped back.
    if not _in_time_order(rows, leave.ts_ns):
        rows = rows[np.argsort(leave.ts_ns[rows], kind="stable")]
    arr = data_rows(arrive, data_dir)  # the arrivals, in row order
    n_tx = rows.size

    # Arrival of each transmission: its first piece; all of its bytes must have arrived.
    first, whole, dropped, dup = _first_arrivals(
        rows,
        found.s_row,
        found.r_row,
        arr,
        leave.rows,
        arrive.rows,
        leave.length,
        arrive.length,
        arrive.ts_ns,
        verdict,
        duplicate,
    )
    arrived = first >= 0

    # Not (wholly) at the receiver's capture point: lost in the network, unless no arrival ever
    # carried these bytes and the receiver acknowledged them anyway (its capture missed them).
    a_cd = arrive.cd[arr]
    a_seq = arrive.seq(arr)
    order = np.lexsort((a_seq, a_cd))
    del a_cd, a_seq
    by_seq = arr[order]
    del order
    blk_key, blk_end = _blocks(
        by_seq, arrive.cd, arrive.seq_rel, arrive.conn, arrive.dir, arrive.seq_shift, arrive.length
    )
    del by_seq
    max_ack = _max_ack(
        arrive.cd,
        arrive.proto,
        arrive.flags,
        arrive.ack_rel,
        arrive.conn,
        arrive.dir,
        arrive.ack_shift,
        data_dir,
        n_conn,
    )
    gap = _gaps(
        rows,
        whole,
        leave.cd,
        leave.proto,
        leave.seq_rel,
        leave.conn,
        leave.dir,
        leave.seq_shift,
        leave.length,
        blk_key,
        blk_end,
        max_ack,
    )
    del blk_key, blk_end, max_ack

    # Reordering: an arrival after one of a segment the sender sent later.
    reordered = _reordered(first, rows, leave.cd, leave.ts_ns, arrive.ts_ns)
    del arrived

    fate = np.full(n_tx, _CODE["delivered"], dtype=np.uint8)
    fate[reordered] = _CODE["reordered"]
    fate[whole & dup] = _CODE["duplicate"]
    fate[whole & (dropped == 1)] = _CODE["receiver_untold"]
    fate[whole & (dropped == 2)] = _CODE["receiver_drop"]
    fate[~whole] = _CODE["network_drop"]
    fate[gap] = _CODE["receiver_capture_gap"]
    del reordered, whole, dup, dropped, gap
    leave_fate[rows] = fate
    _arrival_fates(found.s_row, found.r_row, leave_fate, arrive_fate, leave_fate != FATE_NONE, arr)

    # Arrivals the sender capture lacks.
    orphans = arr[~arrived_rows[arr]]
    del arr
    arrive_fate[orphans] = _CODE["sender_capture_gap"]
    return Judged(rows=rows, first=first, fate=fate, orphans=orphans), leave_fate, arrive_fate


def transmission_columns(
    parts: list[tuple[Judged, Side, Side]], origin_ns: int
) -> dict[str, np.ndarray]:
    """The transmissions table's columns (schema.TRANSMISSION_COLUMNS, `fate` as codes) of
    judged directions, each (judged, the capture that saw its data leave, the one that saw it
    arrive), one after another: each one's transmissions, then its orphan arrivals. Times are
    s since origin_ns on the clock of the capture that stamped them: the caller puts them on
    the sender's.

    Each part's first arrivals go as soon as their columns are written, before the other
    columns are made; the parts are handed over (the list is emptied).
    """
    n = sum(judged.size for judged, _, _ in parts)
    at = np.cumsum([0, *(judged.size for judged, _, _ in parts)])
    # Frames are numbered from 1, as Wireshark numbers them: 0 is "not in that capture", as the
    # series' frame columns say it, in 4 bytes (a capture's frames are counted in 4 bytes).
    receiver_frame = np.zeros(n, dtype=np.uint32)
    receiver_t_s = np.full(n, np.nan)
    for (judged, _, arrive), lo in zip(parts, at, strict=False):
        first = judged.first
        judged.first = None
        if first is not None:
            hi = lo + first.size
            _first_arrival_columns(
                first,
                arrive.frame,
                arrive.ts_ns,
                origin_ns,
                receiver_frame[lo:hi],
                receiver_t_s[lo:hi],
            )
        del first
    columns: dict[str, np.ndarray] = {
        "conn": np.empty(n, dtype=np.int32),
        "dir": np.empty(n, dtype=np.uint8),
        "seq_rel": np.empty(n, dtype=np.int64),
        "end_rel": np.empty(n, dtype=np.int64),
        # A segment's payload, as the series' `len`: 4 bytes (a TSO or GRO super-segment passes
        # 65,535 bytes; nothing a length field holds passes 4 GB).
        "len": np.empty(n, dtype=np.uint32),
        "sender_frame": np.zeros(n, dtype=np.uint32),
        "receiver_frame": receiver_frame,
        "sender_t_s": np.full(n, np.nan),
        "receiver_t_s": receiver_t_s,
        "fate": np.full(n, _CODE["sender_capture_gap"], dtype=np.uint8),
    }
    del receiver_frame, receiver_t_s
    ids = ("conn", "dir", "seq_rel", "end_rel", "len")
    while parts:
        judged, leave, arrive = parts.pop(0)
        lo = int(at[0])
        at = at[1:]
        # The transmissions' own columns, then the orphan arrivals' (after them).
        for rows, side, times in (
            (judged.rows, leave, ("sender_frame", "sender_t_s")),
            (judged.orphans, arrive, ("receiver_frame", "receiver_t_s")),
        ):
            hi = lo + rows.size
            _departures(
                rows,
                side.conn,
                side.dir,
                side.to_conn,
                side.flip,
                side.seq_rel,
                side.seq_shift,
                side.length,
                side.frame,
                side.ts_ns,
                origin_ns,
                *(columns[name][lo:hi] for name in (*ids, *times)),
            )
            if side is leave:
                columns["fate"][lo:hi] = judged.fate
            lo = hi
        del judged, leave, arrive
    return columns
