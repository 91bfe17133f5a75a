"""The series stage's compiled walk: packets grouped by connection with a counting sort
(`by_connection`), then one pass along each connection's timeline per direction (`Walk`) that
writes the segments, ACK and flight tables' columns, and the timestamp pairs of RTT samples
(`timestamp_pairs`).
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pandas as pd

from tracekit.connections.segments import (
    KIND_CODE,
    NEW,
    PARTIAL,
    RETRANSMISSION,
)
from tracekit.core.kernels import jit
from tracekit.schema import (
    OPT_TS,
    SERIES_ACK_COLUMNS,
    SERIES_FLIGHT_COLUMNS,
    SERIES_SEGMENT_COLUMNS,
    TH_ACK,
    TH_FIN,
    TH_RST,
    TH_SYN,
    Column,
)

# numba's typed.Dict and types, which timestamp_pairs uses: put here when numba compiles it.
Dict: Any = None
types: Any = None


@jit
def runs(conn: np.ndarray, pdir: np.ndarray) -> tuple[np.ndarray, np.ndarray]:  # pragma: no cover
    """The (conn, dir) key of each run of equal keys, and where the runs start (then the end)."""
    keys = np.empty(conn.size, dtype=np.int64)
    starts = np.empty(conn.size + 1, dtype=np.int64)
    n = 0
    for i in range(conn.size):
        key = 2 * np.int64(conn[i]) + pdir[i]
        if n == 0 or key != keys[n - 1]:
            keys[n] = key
            starts[n] = i
            n += 1
    starts[n] = conn.size
    return keys[:n].copy(), starts[: n + 1].copy()


@jit
def by_connection(
    conn: np.ndarray, pdir: np.ndarray, pay: np.ndarray
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:  # pragma: no cover - compiled
    """Packet rows grouped by connection, in capture order within each (a stable counting sort).

    Connection c's packets are rows[bounds[c]:bounds[c + 1]]; `carries` says per timeline
    (2 conn + dir) whether it carries payload. A timeline's events are its connection's
    packets: those of its own direction as data, those of the other that carry an ACK as ACKs.
    """
    n = conn.size
    top: int | np.int64 = 0
    for i in range(n):
        top = max(top, np.int64(conn[i]) + 1)
    bounds = np.zeros(top + 1, dtype=np.int64)
    carries = np.zeros(2 * top + 2, dtype=np.bool_)
    for i in range(n):
        bounds[conn[i] + 1] += 1
        if pay[i] > 0:
            carries[2 * np.int64(conn[i]) + pdir[i]] = True
    for c in range(top):
        bounds[c + 1] += bounds[c]
    fill = bounds[:-1].copy()
    rows = np.empty(n, dtype=np.int32)  # packet rows: the reader numbers frames in 32 bits
    for i in range(n):
        c = conn[i]
        rows[fill[c]] = i
        fill[c] += 1
    return rows, bounds, carries


_PROBE, _KEEPALIVE = KIND_CODE["window_probe"], KIND_CODE["keepalive"]  # for the compiled pass
# Entries passed at the front of Karn's queue before it is moved down: a few pages, so that
# a short queue never moves.
_COMPACT_ROWS = 4096


# The flight table's rows are the segments that carry data: these columns come from the
# segments table once it is written; the pass writes the others.
_FLIGHT_FROM_SEGMENTS = ("conn", "dir", "t_s")


def _allocate(columns: tuple[Column, ...], n: int) -> dict[str, np.ndarray]:
    """Room for n rows of each declared column, of its declared dtype (a category's: its codes)."""
    return {c.name: np.empty(n, c.dtype) for c in columns}


class Walk:
    """The tables' columns, written by one compiled pass along the timelines (_walk_pass).

    Each column is allocated, as tracekit.schema declares it, for the most rows it can get;
    pages never written cost no memory, and the tables keep views of the rows written.
    """

    def __init__(
        self,
        rows: np.ndarray,
        bounds: np.ndarray,
        pdir: np.ndarray,
        ts: np.ndarray,
        t0: int,
        conn: np.ndarray,
        seq: np.ndarray,
        ack: np.ndarray,
        pay: np.ndarray,
        flags: np.ndarray,
    ) -> None:
        self.timelines: tuple[np.ndarray, ...] = (rows, bounds, pdir)
        self.packets: tuple[Any, ...] = (ts, np.int64(t0), conn, seq, ack, pay, flags)
        n, e = seq.size, np.empty
        # _walk_pass unpacks the columns in their declared order.
        self.segments = _allocate(SERIES_SEGMENT_COLUMNS, n)
        self.acks = _allocate(SERIES_ACK_COLUMNS, n)
        # Per timeline, the data events that raised the highest sequence number sent past
        # what a kept segment's end says (a SYN's or FIN's sequence number, a pure ACK's):
        # (timeline, row, new highest), for the flight's pass (`flight`).
        self.raised: tuple[np.ndarray, ...] = (e(n, np.int64), e(n, np.int64), e(n, np.int64))
        # Per packet: an ACK that raised a line already set (for the timestamp samples).
        self.advance_known = np.zeros(n, dtype=np.bool_)
        self.rtt_pairs = (e(n, np.int64), e(n, np.int64))

    def run(
        self,
        win_raw: np.ndarray,
        shift: np.ndarray,
        kind: np.ndarray,
        frame: np.ndarray,
        carries: np.ndarray,
    ) -> None:
        """Fill the columns, then trim each table to the rows written."""
        # One unpacking: mypy matches a second `*tuple` right after another to every parameter.
        counts = _walk_pass(
            *(self.timelines + self.packets),
            win_raw,
            shift,
            kind,
            frame,
            carries,
            tuple(self.segments.values()),
            tuple(self.acks.values()),
            self.raised,
            self.advance_known,
            *self.rtt_pairs,
        )
        n_seg, n_ack, n_raised, n_rtt = counts
        for table, rows in ((self.segments, n_seg), (self.acks, n_ack)):
            for name in table:
                table[name] = table[name][:rows]
        self.raised = tuple(column[:n_raised] for column in self.raised)
        self.rtt_pairs = (self.rtt_pairs[0][:n_rtt], self.rtt_pairs[1][:n_rtt])
        # The walk's packet columns are read: a caller that lets go of the packets' sequence,
        # ACK and window columns after it frees them before the flight's are made.
        self.timelines = self.timelines[:2]
        self.packets = ()

    def hand_over_rtt(
        self,
    ) -> tuple[np.ndarray, np.ndarray, np.ndarray, tuple[np.ndarray, np.ndarray]]:
        """What the RTT table is made from, given up by the walk: the packets' grouping (rows
        and bounds, as `by_connection` gives them), the ACKs that raised a line already set,
        and the (segment, ACK) rows of the sequence-number RTT samples."""
        rows, bounds = self.timelines
        handed = (rows, bounds, self.advance_known, self.rtt_pairs)
        self.timelines = ()
        self.advance_known = np.zeros(0, dtype=np.bool_)
        self.rtt_pairs = (np.zeros(0, np.int64), np.zeros(0, np.int64))
        return handed

    def flight(self) -> None:
        """The flight table, from the segments and ACK tables (and the raised ends): made
        after the walk, once the packet columns only the walk reads can be let go."""
        has_data = self.segments["len"] > 0
        n_seg = has_data.size
        n_flight = int(np.count_nonzero(has_data))
        written = _allocate(
            tuple(c for c in SERIES_FLIGHT_COLUMNS if c.name not in _FLIGHT_FROM_SEGMENTS),
            n_flight,
        )
        seg, ack = self.segments, self.acks
        _flight_pass(
            seg["conn"],
            seg["dir"],
            seg["end_rel"],
            seg["len"],
            seg["row"],
            ack["conn"],
            ack["dir"],
            ack["ack_rel"],
            ack["win_bytes"],
            ack["row"],
            *self.raised,
            *written.values(),
        )
        self.raised = ()
        # Most captures' segments all carry data: then the flight table shares their columns.
        shared = {
            name: seg[name] if n_flight == n_seg else seg[name][has_data]
            for name in _FLIGHT_FROM_SEGMENTS
        }
        del has_data
        columns = {**shared, **written}
        self.flight_table = {c.name: columns[c.name] for c in SERIES_FLIGHT_COLUMNS}
        self.categorize()

    def categorize(self) -> None:
        """The segments' category columns (their kind) from the walk's codes: once the flight
        table, which reads the codes, is made, or where none is."""
        for c in SERIES_SEGMENT_COLUMNS:
            if c.categories:
                self.segments[c.name] = pd.Categorical.from_codes(
                    self.segments[c.name], categories=list(c.categories)
                )


@jit
def _walk_pass(
    rows: np.ndarray,
    bounds: np.ndarray,
    pdir: np.ndarray,
    ts: np.ndarray,
    t0: np.int64,
    conn: np.ndarray,
    seq: np.ndarray,
    ack: np.ndarray,
    pay: np.ndarray,
    flags: np.ndarray,
    win_raw: np.ndarray,
    shift: np.ndarray,
    kind: np.ndarray,
    frame: np.ndarray,
    carries: np.ndarray,
    seg_out: tuple,
    ack_out: tuple,
    raised_out: tuple,
    advance_known: np.ndarray,
    rtt_seg: np.ndarray,
    rtt_ack: np.ndarray,
) -> tuple[int, int, int, int]:  # pragma: no cover - compiled
    # In the order tracekit.schema declares the series tables' columns.
    s_conn, s_dir, s_t, s_seq, s_end, s_len, s_kind, s_frame, s_row = seg_out
    a_conn, a_dir, a_t, a_ack, a_win, a_edge, a_dup, a_run, a_adv, a_frame, a_row = ack_out
    r_line, r_row, r_end = raised_out
    # Karn's rule: fresh (new) segments of the timeline waiting for the ACK line to pass their
    # end, in sending order (their ends ascend), and whether a resend overlapped them first.
    pending = np.empty(seq.size, dtype=np.int64)
    # Each entry is written when its segment joins the queue: no page is touched before.
    tainted = np.empty(seq.size, dtype=np.bool_)
    n_seg = n_ack = n_raised = n_rtt = 0
    # Both later hold an ACK's window, an np.int64.
    lw: int | np.int64
    prev_win: int | np.int64
    nxt = una = lw = le = -1
    prev_ack = prev_win = -1
    have_prev = False
    run = 0
    head = tail = 0
    waiting_next = -1  # a fresh segment already below the line: only the next event may date it
    for c in range(bounds.size - 1):
        for d in range(2):
            line = 2 * c + d
            started = False
            for r in range(bounds[c], bounds[c + 1]):
                p = rows[r]
                if pdir[p] == d:
                    is_ack = False
                elif flags[p] & TH_ACK:
                    is_ack = True
                else:
                    continue
                if not started:
                    nxt = una = lw = le = -1
                    have_prev = False
                    run = 0
                    head = tail = 0
                    first = True
                    waiting_next = -1
                    started = True
                else:
                    first = False
                f = flags[p]
                t = (ts[p] - t0) / 1e9
                if is_ack:
                    a = ack[p]
                    w = np.int64(win_raw[p])
                    if (f & TH_SYN) == 0:
                        w <<= shift[line ^ 1]  # the shift the ACK's sender announced
                    # RFC 5681 2: a duplicate ACK carries no data, no SYN/FIN/RST, the same ACK
                    # number and window as the one before, while data is outstanding. Runs of
                    # duplicates restart at every other ACK: the third in a row triggers fast
                    # retransmit (3.2).
                    is_dup = (
                        have_prev
                        and pay[p] == 0
                        and (f & (TH_SYN | TH_FIN | TH_RST)) == 0
                        and a == prev_ack
                        and w == prev_win
                        and nxt > a
                    )
                    run = run + 1 if is_dup else 0
                    # On a timeline that carries no payload (the ACKs riding on a one-way transfer's
                    # data), an ACK that repeats the one before moves neither line: it is not kept.
                    if carries[line] or not have_prev or a != prev_ack or w != prev_win:
                        a_conn[n_ack] = conn[p]
                        a_dir[n_ack] = d
                        a_t[n_ack] = t
                        a_ack[n_ack] = a
                        a_win[n_ack] = w
                        a_edge[n_ack] = a + w
                        a_dup[n_ack] = is_dup
                        a_run[n_ack] = run
                        a_adv[n_ack] = first or not have_prev or a > una
                        a_frame[n_ack] = frame[p]
                        a_row[n_ack] = p
                        n_ack += 1
                    advance_known[p] = (not first) and una >= 0 and a > una
                    if waiting_next >= 0:
                        q = waiting_next
                        waiting_next = -1
                        if a == seq[q] + pay[q]:
                            rtt_seg[n_rtt] = q
                            rtt_ack[n_rtt] = p
                            n_rtt += 1
                    if a > una:
                        una = a
                        # The line passed these segments' ends: this ACK dates the one it
                        # names exactly.
                        while head < tail:
                            q = pending[head]
                            end = seq[q] + pay[q]
                            if end > una:
                                break
                            if end == a and not tainted[head]:
                                rtt_seg[n_rtt] = q
                                rtt_ack[n_rtt] = p
                                n_rtt += 1
                            head += 1
                    lw = w
                    le = a + w
                    prev_ack = a
                    prev_win = w
                    have_prev = True
                else:
                    waiting_next = -1
                    s = seq[p]
                    length = np.int64(pay[p])
                    end = s + length
                    k = kind[p] if length > 0 else -1
                    if length > 0:
                        # A data probe goes past a zero window (the window before it).
                        if lw == 0 and s >= le:
                            k = _PROBE
                    elif (f & (TH_SYN | TH_FIN | TH_RST)) == 0 and una > 0 and s == una - 1:
                        # Linux probes a zero window with an ACK-only segment one byte below the ACK
                        # line (tcp_xmit_probe_skb); the same segment with the window open is a
                        # keepalive.
                        k = _PROBE if lw == 0 else _KEEPALIVE
                    if k >= 0:
                        s_conn[n_seg] = conn[p]
                        s_dir[n_seg] = d
                        s_t[n_seg] = t
                        s_seq[n_seg] = s
                        s_end[n_seg] = end
                        s_len[n_seg] = length
                        s_kind[n_seg] = k
                        s_frame[n_seg] = frame[p]
                        s_row[n_seg] = p
                        n_seg += 1
                    if length > 0:
                        if k in (RETRANSMISSION, PARTIAL):
                            # A resend: fresh segments it overlaps get no sample (Karn).
                            j = head
                            while j < tail:
                                q = pending[j]
                                if seq[q] >= end:
                                    break
                                if seq[q] + pay[q] > s:
                                    tainted[j] = True
                                j += 1
                        elif k == NEW:
                            if una >= end:
                                waiting_next = p
                            else:
                                if head >= _COMPACT_ROWS and 2 * head >= tail:
                                    # Segments the line has passed leave the queue's front:
                                    # the queue keeps only what is in flight, never one
                                    # entry per segment of a long transfer. Each entry moves
                                    # at most once per as many entries passed.
                                    live = tail - head
                                    pending[:live] = pending[head:tail]
                                    tainted[:live] = tainted[head:tail]
                                    head, tail = 0, live
                                pending[tail] = p
                                tainted[tail] = False
                                tail += 1
                    seg_end = end
                    if f & TH_SYN:
                        seg_end += 1
                    if f & TH_FIN:
                        seg_end += 1
                    if seg_end > nxt:
                        # The flight's pass sees the kept segments' ends: any other raise of
                        # the line, on a timeline with flight rows, is written for it.
                        if carries[line] and (k < 0 or seg_end != end):
                            r_line[n_raised] = line
                            r_row[n_raised] = p
                            r_end[n_raised] = seg_end
                            n_raised += 1
                        nxt = seg_end
    return n_seg, n_ack, n_raised, n_rtt


@jit
def _flight_pass(
    s_conn: np.ndarray,
    s_dir: np.ndarray,
    s_end: np.ndarray,
    s_len: np.ndarray,
    s_row: np.ndarray,
    a_conn: np.ndarray,
    a_dir: np.ndarray,
    a_ack: np.ndarray,
    a_win: np.ndarray,
    a_row: np.ndarray,
    r_line: np.ndarray,
    r_row: np.ndarray,
    r_end: np.ndarray,
    f_bytes: np.ndarray,
    f_rwnd: np.ndarray,
) -> int:  # pragma: no cover - compiled
    """The flight and the advertised window at each segment that carries data: the highest
    sequence number sent so far less the ACK line, and the window of the last ACK, along each
    timeline in capture order. The walk's tables hold every event that moves them on a
    timeline that carries data: each ACK, each segment's end, and the other raises of the
    highest sequence number (`r_*`); all three are sorted by timeline, then packet row."""
    # Each later holds a sequence number or a window, an np.int64.
    nxt: int | np.int64
    una: int | np.int64
    lw: int | np.int64
    nxt = una = lw = line = -1
    j = k = n = 0
    for i in range(s_conn.size):
        at = 2 * np.int64(s_conn[i]) + s_dir[i]
        row = np.int64(s_row[i])
        if at != line:
            nxt = una = lw = -1
            line = at
        # The ACKs before this segment on its timeline (those of earlier timelines are passed).
        while j < a_conn.size:
            a_line = 2 * np.int64(a_conn[j]) + a_dir[j]
            if a_line > at or (a_line == at and np.int64(a_row[j]) > row):
                break
            if a_line == at:
                if a_ack[j] > una:
                    una = a_ack[j]
                lw = a_win[j]
            j += 1
        while k < r_line.size:
            if r_line[k] > at or (r_line[k] == at and r_row[k] > row):
                break
            if r_line[k] == at and r_end[k] > nxt:
                nxt = r_end[k]
            k += 1
        if s_end[i] > nxt:
            nxt = s_end[i]
        if s_len[i] > 0:
            f_bytes[n] = max(nxt - max(una, 0), 0)
            f_rwnd[n] = lw
            n += 1
    return n


@jit(numba_names={"Dict": "typed.Dict", "types": "types"})
def timestamp_pairs(
    rows: np.ndarray,
    bounds: np.ndarray,
    pdir: np.ndarray,
    advance_known: np.ndarray,
    pay: np.ndarray,
    opts: np.ndarray,
    tsval: np.ndarray,
    tsecr: np.ndarray,
) -> tuple[np.ndarray, np.ndarray, int]:  # pragma: no cover - compiled
    """Timestamp-echo RTT samples: (segment packet, ACK packet) row pairs and their count.

    An ACK that advances the line echoes the TSval of the segment that caused it; the first
    data segment of the timeline to carry that TSval dates the sample.
    """
    n = pay.size
    seg = np.empty(n, dtype=np.int64)
    ack = np.empty(n, dtype=np.int64)
    count = 0
    for c in range(bounds.size - 1):
        lo, hi = bounds[c], bounds[c + 1]
        for d in range(2):
            # The first data segment of this timeline with each TSval (TSvals repeat in runs).
            first = Dict.empty(key_type=types.int64, value_type=types.int64)
            last = np.int64(-1)
            for r in range(lo, hi):
                p = rows[r]
                if pdir[p] != d or pay[p] == 0 or (opts[p] & OPT_TS) == 0:
                    continue
                v = np.int64(tsval[p])
                if v != last:
                    last = v
                    if v not in first:
                        first[v] = p
            if len(first):
                # advance_known is set only on ACKs: packets of the other direction.
                for r in range(lo, hi):
                    p = rows[r]
                    if pdir[p] != d and advance_known[p] and (opts[p] & OPT_TS) != 0:
                        j = first.get(np.int64(tsecr[p]), -1)
                        if j >= 0:
                            seg[count] = j
                            ack[count] = p
                            count += 1
    return seg, ack, count
