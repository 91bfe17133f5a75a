"""Connections -> per-direction series: segments, ACKs, SACK blocks, RTT samples, flight, rates.

A direction is named by the data it carries: series (conn, 0) is a's data and b's ACKs of it.
Every packet of a connection is on one timeline per direction, twice over: once as the data
side of its own direction, once (if it carries an ACK) as the ACK side of the other. The
packets are grouped by connection with a counting sort, and one compiled pass walks each
connection's packets once per direction, writing the tables' columns: on a big capture, memory
that is touched for the first time costs more than the arithmetic, so no per-event column is
made that no table keeps.

Times are seconds since the capture's first packet. Sequence numbers are the relative 64-bit
ones of the connections stage.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from functools import cached_property
from typing import TYPE_CHECKING, TypeVar

import numpy as np
import pandas as pd
from numba import njit, types
from numba.typed import Dict

from tracekit.groups import segment_starts
from tracekit.schema import OPT_TS, PROTO_TCP, TH_ACK, TH_FIN, TH_RST, TH_SYN, WRAP
from tracekit.segments import KIND_CODE, KINDS, NEW, PARTIAL, RETRANSMISSION, classify_data

if TYPE_CHECKING:
    from tracekit.connections import Connections

T = TypeVar("T")
_PROBE, _KEEPALIVE = KIND_CODE["window_probe"], KIND_CODE["keepalive"]  # for the compiled pass


TABLES = ("segments", "acks", "sacks", "rtt", "flight")


class Direction:
    """The series of one direction of one connection (views into `Series`' tables).

    Each table is sliced out of `Series` the first time it is asked for (`source`): a capture
    of thousands of short connections has most detectors look at one table of most directions,
    or none. The slices are views of `Series`' tables, to read, never to write. Tables given
    to the constructor are used as they are. `data` and `resent` are computed once and shared
    by every detector that asks.
    """

    def __init__(
        self,
        conn: int,
        direction: int,
        segments: pd.DataFrame | None = None,
        acks: pd.DataFrame | None = None,
        sacks: pd.DataFrame | None = None,
        rtt: pd.DataFrame | None = None,
        flight: pd.DataFrame | None = None,
        *,
        source: Callable[[str], pd.DataFrame] | None = None,
    ) -> None:
        self.conn = conn
        self.direction = direction
        given = {"segments": segments, "acks": acks, "sacks": sacks, "rtt": rtt, "flight": flight}
        self._tables = {name: table for name, table in given.items() if table is not None}
        if source is None and len(self._tables) < len(TABLES):
            raise TypeError("Direction needs every table, or a source to slice them from")
        self._source = source
        self._memo: dict[str, object] = {}

    def __repr__(self) -> str:
        return f"Direction(conn={self.conn}, direction={self.direction})"

    def table(self, name: str) -> pd.DataFrame:
        """One of TABLES, sliced on first use."""
        if name not in self._tables:
            assert self._source is not None
            self._tables[name] = self._source(name)
        return self._tables[name]

    @property
    def segments(self) -> pd.DataFrame:
        """Data segments and probes of this direction (Series.segments' columns)."""
        return self.table("segments")

    @property
    def acks(self) -> pd.DataFrame:
        """The other side's ACKs of this direction's data (Series.acks' columns)."""
        return self.table("acks")

    @property
    def sacks(self) -> pd.DataFrame:
        """SACK blocks on those ACKs (Series.sacks' columns)."""
        return self.table("sacks")

    @property
    def rtt(self) -> pd.DataFrame:
        """RTT samples of this direction's data (Series.rtt's columns)."""
        return self.table("rtt")

    @property
    def flight(self) -> pd.DataFrame:
        """Flight and advertised window at each data segment (Series.flight's columns)."""
        return self.table("flight")

    def memo(self, name: str, compute: Callable[[], T]) -> T:
        """compute(), once per direction: measurements that several detectors share."""
        if name not in self._memo:
            self._memo[name] = compute()
        return self._memo[name]  # type: ignore[return-value]

    @cached_property
    def data(self) -> pd.DataFrame:
        """The segments that carry payload (probes and keepalives left out), same index."""
        return _with_data(self.segments)

    @cached_property
    def resent(self) -> pd.DataFrame:
        """`resent(segments, sacks)`: which first copies were resent, and D-SACKed."""
        return resent(self.segments, self.sacks)


@dataclass(frozen=True)
class Series:
    """All series of a capture, one table each, with `conn` and `dir` columns.

    - `segments`: data segments and ACK-only probes: t_s, seq_rel, end_rel, len, kind, frame.
      kind is one of KINDS; a retransmission resends bytes sent before (Karn's rule excludes
      them and the segments they resend from RTT samples).
    - `acks`: the other side's ACKs of this direction's data: t_s, ack_rel, win_bytes,
      edge_rel (ack + scaled window: the right edge of the receive window), dupack,
      dupack_run (1, 2, 3... within a run of duplicates), advance, frame. For a direction
      that carries no payload, only the ACKs that change the ACK number or the window are kept
      (a one-way transfer's data segments all repeat the same ACK of the other direction).
    - `sacks`: SACK blocks (RFC 2018) on those ACKs: t_s, left_rel, right_rel, dsack (RFC 2883).
    - `rtt`: samples: t_s, rtt_s, source ("seq": first ACK covering a segment sent once;
      "ts": TSecr echo of an ACK that advanced the ACK line, RFC 7323 4.1).
    - `flight`: at each data segment sent: t_s, flight_bytes (highest byte sent minus the ACK
      line), rwnd_bytes (last advertised window, -1 before any).
    Every table is sorted by (conn, dir), in capture order within a direction.
    `window_known` says per (conn, dir) whether windows are true byte counts: False where the
    window scale is unknown (handshake not captured), so the raw window field is shown.
    """

    t0_ns: int
    segments: pd.DataFrame
    acks: pd.DataFrame
    sacks: pd.DataFrame
    rtt: pd.DataFrame
    flight: pd.DataFrame
    window_known: dict[tuple[int, int], bool] = field(default_factory=dict)

    _bounds: dict[str, tuple[np.ndarray, np.ndarray]] = field(
        default_factory=dict, init=False, repr=False, compare=False
    )

    _directions: dict[tuple[int, int], Direction] = field(
        default_factory=dict, init=False, repr=False, compare=False
    )

    # "counts": the segments table's (conn, dir) keys and each one's data segments.
    _data: dict[str, tuple[np.ndarray, np.ndarray]] = field(
        default_factory=dict, init=False, repr=False, compare=False
    )

    def of(self, conn: int, direction: int) -> Direction:
        """The series of one direction of one connection (the same object on every call)."""
        if (conn, direction) not in self._directions:
            self._directions[conn, direction] = self._direction(conn, direction)
        return self._directions[conn, direction]

    def _direction(self, conn: int, direction: int) -> Direction:
        target = 2 * conn + direction

        def pick(name: str) -> pd.DataFrame:
            df = getattr(self, name)
            keys, starts = self._slices(name, df)
            i = _position(keys, target)
            lo, hi = (starts[i], starts[i + 1]) if i >= 0 else (0, 0)
            # A view of the rows (copy-on-write), numbered from 0 like a table of its own.
            rows = df.iloc[lo:hi]
            rows.index = pd.RangeIndex(hi - lo)
            return rows

        return Direction(conn, direction, source=pick)

    def with_data(self) -> list[tuple[int, int]]:
        """(conn, dir) of every direction that carried payload, in order."""
        keys, sent = self._data_counts()
        return [(int(k) // 2, int(k) % 2) for k in keys[sent > 0]]

    def data_segments(self, conn: int, direction: int) -> int:
        """How many segments with payload one direction sent (rows of its `Direction.data`),
        without slicing its tables: detectors skip directions too short for them."""
        keys, sent = self._data_counts()
        i = _position(keys, 2 * conn + direction)
        return int(sent[i]) if i >= 0 else 0

    def rows(self, name: str, conn: int, direction: int) -> int:
        """How many rows one direction has in one of TABLES, without slicing it."""
        keys, starts = self._slices(name, getattr(self, name))
        i = _position(keys, 2 * conn + direction)
        return int(starts[i + 1] - starts[i]) if i >= 0 else 0

    def _data_counts(self) -> tuple[np.ndarray, np.ndarray]:
        """The segments table's (conn, dir) keys and each one's segments with payload."""
        if not self._data:
            keys, starts = self._slices("segments", self.segments)
            if keys.size == 0:
                sent = np.zeros(0, dtype=np.int64)
            else:
                sent = np.add.reduceat(self.segments["len"].to_numpy() > 0, starts[:-1])
            self._data["counts"] = (keys, sent)
        return self._data["counts"]

    def _slices(self, name: str, df: pd.DataFrame) -> tuple[np.ndarray, np.ndarray]:
        """The (conn, dir) keys of a table and where each one's rows start (and the end)."""
        # Every table is sorted by (conn, dir): a direction is one contiguous slice, found
        # once per table rather than once per look-up.
        if name not in self._bounds:
            self._bounds[name] = _runs(df["conn"].to_numpy(), df["dir"].to_numpy())
        return self._bounds[name]


def _position(keys: np.ndarray, key: int) -> int:
    """Where `key` is in the sorted `keys`, or -1."""
    i = int(np.searchsorted(keys, key))
    return i if i < keys.size and keys[i] == key else -1


@njit(cache=True)
def _runs(conn: np.ndarray, pdir: np.ndarray) -> tuple[np.ndarray, np.ndarray]:  # pragma: no cover
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


def build_series(conns: Connections) -> Series:
    """Build every direction's series of every TCP connection in two compiled passes.

    Each TCP packet is a data event on its own direction's timeline and, if it carries an ACK,
    an ACK event on the other's. The packets are grouped by connection (capture order kept);
    one pass walks each connection's packets once per direction, which writes the segments,
    ACK and flight tables and pairs Karn's RTT samples, and a second pairs the timestamp
    echoes. Memory is what costs on big captures, so no per-event column is made.
    """
    pk = conns.packets
    tcp = pk.column("proto").to_numpy() == PROTO_TCP
    every = bool(tcp.all())
    rows_tcp = None if every else np.flatnonzero(tcp)  # None: every packet is TCP

    def col(name: str) -> np.ndarray:
        values = pk.column(name).to_numpy()
        return values if every else values[rows_tcp]

    ts_ns = pk.column("ts_ns").to_numpy()
    t0 = int(ts_ns.min()) if ts_ns.size else 0
    ts = col("ts_ns")
    conn = col("conn")
    pdir = col("dir")
    flags = col("tcp_flags")
    seq = col("seq_rel")
    ack = col("ack_rel")
    payload = col("payload_bytes")
    kind = conns.data_kind
    if kind is None:
        kind, _ = classify_data(conn, pdir, seq, payload, col("proto"))
    elif not every:
        kind = kind[rows_tcp]

    # Scaled windows: the shift a side announced applies to the windows it sends, never to a
    # SYN's own window (RFC 7323 2.2); unknown shifts leave the raw window (window_scaled).
    table = conns.table
    ws = np.stack(
        [table.column("ws_a").to_numpy(), table.column("ws_b").to_numpy()], axis=1
    ).astype(np.int64)
    shift = np.where(ws > 0, ws, 0).reshape(-1) if ws.size else np.zeros(2, np.int64)
    ws_state = table.column("ws_state").to_pylist()

    rows, bounds, carries = _by_connection(conn, pdir, payload)
    walked = _Walk(rows, bounds, pdir, ts, t0, conn, seq, ack, payload, flags)
    walked.run(col("win_raw"), shift, kind, col("frame"), carries)
    segments = pd.DataFrame(walked.segments, copy=False)
    acks = pd.DataFrame(walked.acks, copy=False)
    flight = pd.DataFrame(walked.flight, copy=False)
    ts_seg, ts_ack, n_ts = _ts_pairs(
        rows, bounds, pdir, walked.advance_known, payload, col("opts"), col("tsval"), col("tsecr")
    )
    del rows
    ts_pairs = (ts_seg[:n_ts], ts_ack[:n_ts])

    def seconds(rows: np.ndarray) -> np.ndarray:
        return (ts[rows] - t0) / 1e9

    rtt = _rtt(conn, pdir, seconds, walked.rtt_pairs, ts_pairs)
    sacks = _sacks(conns, rows_tcp, seconds, conn, pdir, ack)
    # Known or absent scaling gives true windows; unknown leaves them raw (never guessed).
    scaled = {(c, d): state != "unknown" for c, state in enumerate(ws_state) for d in (0, 1)}
    return Series(
        t0_ns=t0,
        segments=segments,
        acks=acks,
        sacks=sacks,
        rtt=rtt,
        flight=flight,
        window_known=scaled,
    )


@njit(cache=True)
def _by_connection(
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


class _Walk:
    """The tables' columns, written by one compiled pass along the timelines (_walk_pass).

    Each column is allocated for the most rows it can get; pages never written cost no
    memory, and the tables keep views of the rows written.
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
        self.timelines = (rows, bounds, pdir)
        self.packets = (ts, np.int64(t0), conn, seq, ack, pay, flags)
        n, e = seq.size, np.empty
        self.segments: dict[str, np.ndarray] = {
            "conn": e(n, np.int32),
            "dir": e(n, np.uint8),
            "t_s": e(n, np.float64),
            "seq_rel": e(n, np.int64),
            "end_rel": e(n, np.int64),
            "len": e(n, np.uint32),
            "kind": e(n, np.int8),
            "frame": e(n, np.uint32),
        }
        self.acks: dict[str, np.ndarray] = {
            "conn": e(n, np.int32),
            "dir": e(n, np.uint8),
            "t_s": e(n, np.float64),
            "ack_rel": e(n, np.int64),
            "win_bytes": e(n, np.int64),
            "edge_rel": e(n, np.int64),
            "dupack": e(n, np.bool_),
            "dupack_run": e(n, np.int32),
            "advance": e(n, np.bool_),
            "frame": e(n, np.uint32),
        }
        # The flight table's rows are the segments that carry data: conn, dir and t_s come
        # from the segments table once it is written.
        self.flight: dict[str, np.ndarray] = {
            "flight_bytes": e(n, np.int64),
            "rwnd_bytes": e(n, np.int64),
        }
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
            tuple(self.flight.values()),
            self.advance_known,
            *self.rtt_pairs,
        )
        n_seg, n_ack, n_flight, n_rtt = counts
        for table, rows in ((self.segments, n_seg), (self.acks, n_ack), (self.flight, n_flight)):
            for name in table:
                table[name] = table[name][:rows]
        # Most captures' segments all carry data: then the flight table shares their columns.
        has_data = self.segments["len"] > 0
        shared = {
            name: column if n_flight == n_seg else column[has_data]
            for name, column in self.segments.items()
            if name in ("conn", "dir", "t_s")
        }
        self.flight = {**shared, **self.flight}
        self.segments["kind"] = pd.Categorical.from_codes(
            self.segments["kind"], categories=list(KINDS)
        )
        self.rtt_pairs = (self.rtt_pairs[0][:n_rtt], self.rtt_pairs[1][:n_rtt])


@njit(cache=True)
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
    flight_out: tuple,
    advance_known: np.ndarray,
    rtt_seg: np.ndarray,
    rtt_ack: np.ndarray,
) -> tuple[int, int, int, int]:  # pragma: no cover - compiled
    s_conn, s_dir, s_t, s_seq, s_end, s_len, s_kind, s_frame = seg_out
    a_conn, a_dir, a_t, a_ack, a_win, a_edge, a_dup, a_run, a_adv, a_frame = ack_out
    f_bytes, f_rwnd = flight_out
    # Karn's rule: fresh (new) segments of the timeline waiting for the ACK line to pass their
    # end, in sending order (their ends ascend), and whether a resend overlapped them first.
    pending = np.empty(seq.size, dtype=np.int64)
    tainted = np.zeros(seq.size, dtype=np.bool_)
    n_seg = n_ack = n_flight = n_rtt = 0
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
                                pending[tail] = p
                                tainted[tail] = False
                                tail += 1
                    seg_end = end
                    if f & TH_SYN:
                        seg_end += 1
                    if f & TH_FIN:
                        seg_end += 1
                    if seg_end > nxt:
                        nxt = seg_end
                    if length > 0:
                        f_bytes[n_flight] = max(nxt - max(una, 0), 0)
                        f_rwnd[n_flight] = lw
                        n_flight += 1
    return n_seg, n_ack, n_flight, n_rtt


@njit(cache=True)
def _ts_pairs(
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


def _rtt(
    conn: np.ndarray,
    pdir: np.ndarray,
    seconds: Callable[[np.ndarray], np.ndarray],
    seq_pairs: tuple[np.ndarray, np.ndarray],
    ts_pairs: tuple[np.ndarray, np.ndarray],
) -> pd.DataFrame:
    """RTT samples (packet index pairs: the segment's, then the ACK's) as one sorted table."""
    frames = []
    for (seg_i, ack_i), source in ((seq_pairs, "seq"), (ts_pairs, "ts")):
        t_ack = seconds(ack_i)
        rtt = t_ack - seconds(seg_i)
        good = rtt >= 0
        frames.append(
            pd.DataFrame(
                {
                    "conn": conn[seg_i[good]].astype(np.int32),
                    "dir": pdir[seg_i[good]].astype(np.uint8),
                    "t_s": t_ack[good],
                    "rtt_s": rtt[good],
                    "source": pd.Categorical.from_codes(
                        np.full(int(good.sum()), source == "ts", dtype=np.int8),
                        categories=["seq", "ts"],
                    ),
                },
                copy=False,
            )
        )
    return pd.concat(frames, ignore_index=True).sort_values(
        ["conn", "dir", "t_s"], ignore_index=True
    )


def _sacks(
    conns: Connections,
    rows_tcp: np.ndarray | None,
    seconds: Callable[[np.ndarray], np.ndarray],
    conn: np.ndarray,
    pdir: np.ndarray,
    ack: np.ndarray,
) -> pd.DataFrame:
    sack = conns.capture.sack
    empty = pd.DataFrame(
        {
            "conn": np.zeros(0, np.int32),
            "dir": np.zeros(0, np.uint8),
            "t_s": np.zeros(0),
            "left_rel": np.zeros(0, np.int64),
            "right_rel": np.zeros(0, np.int64),
            "dsack": np.zeros(0, bool),
        }
    )
    if sack.num_rows == 0:
        return empty
    row = sack.column("row").to_numpy().astype(np.int64)
    # Position among the tcp packets (SACK only rides on TCP).
    i = row if rows_tcp is None else np.searchsorted(rows_tcp, row)
    c, d = conn[i], 1 - pdir[i]  # the blocks describe the other direction's data
    isn = np.stack(
        [conns.table.column("isn_a").to_numpy(), conns.table.column("isn_b").to_numpy()], axis=1
    ).astype(np.int64)
    base = isn[c, d]
    left_raw = sack.column("left").to_numpy().astype(np.int64)
    right_raw = sack.column("right").to_numpy().astype(np.int64)
    # Place each edge on the 64-bit line next to the ACK number that carried it.
    delta = (left_raw - base) % WRAP
    left = delta + np.round((ack[i] - delta) / WRAP).astype(np.int64) * WRAP
    right = left + (right_raw - left_raw) % WRAP
    # RFC 2883 4: a D-SACK is the first block, below the ACK number or inside the second block.
    first = segment_starts(row)
    nxt = np.minimum(np.arange(row.size) + 1, row.size - 1)
    second_same = (nxt != np.arange(row.size)) & (row[nxt] == row)
    inside_second = second_same & (left >= left[nxt]) & (right <= right[nxt])
    dsack = first & ((left < ack[i]) | inside_second)
    blocks = pd.DataFrame(
        {
            "conn": c.astype(np.int32),
            "dir": d.astype(np.uint8),
            "t_s": seconds(i),
            "left_rel": left,
            "right_rel": right,
            "dsack": dsack,
        }
    )
    # Like every table of the series, sorted by (conn, dir), capture order within.
    return blocks.sort_values(["conn", "dir"], kind="stable", ignore_index=True)


def _with_data(segments: pd.DataFrame) -> pd.DataFrame:
    """The rows of a segments table that carry payload: the table itself when all do."""
    has_data = segments["len"].to_numpy() > 0
    return segments if has_data.all() else segments[has_data]


def kind_mask(segments: pd.DataFrame, *kinds: str) -> np.ndarray:
    """Which rows of a segments table are of one of `kinds` (by the category codes: turning
    the kind column into strings costs more than the rest of a detector on a big capture)."""
    column = segments["kind"]
    if not isinstance(column.dtype, pd.CategoricalDtype):  # a table made by hand
        return column.isin(kinds).to_numpy()
    codes = column.cat.codes.to_numpy()
    categories = list(column.cat.categories)
    mask = np.zeros(codes.size, dtype=bool)
    for kind in kinds:
        if kind in categories:
            mask |= codes == categories.index(kind)
    return mask


def rate(segments: pd.DataFrame, acks: pd.DataFrame, window_s: float) -> pd.DataFrame:
    """Throughput of one direction over time, averaged over windows of `window_s` seconds.

    sent_bps counts every data byte sent (retransmissions included); acked_bps counts the
    advance of the ACK line (goodput as the receiver confirmed it).

    Windows are laid from the first packet on, as np.histogram's equal-width bins would be,
    but only those that hold a packet and their two neighbours are rows: a window without a
    packet carries exactly zero bytes, so one empty row on each side of a gap draws the same
    line as every empty window in it. The rows are then at most three per packet, whatever
    the span: an idle keep-alive connection captured for a day, or one ACK whose clock
    stepped by years, would otherwise ask for a row per RTT of the whole span.
    """
    if window_s <= 0:
        raise ValueError("window_s must be positive")
    seg_t = segments["t_s"].to_numpy()
    ack_t = acks["t_s"].to_numpy()
    if seg_t.size + ack_t.size == 0:
        return pd.DataFrame({"t_s": [], "sent_bps": [], "acked_bps": []})
    lo = float(min(seg_t.min(initial=np.inf), ack_t.min(initial=np.inf)))
    hi = float(max(seg_t.max(initial=-np.inf), ack_t.max(initial=-np.inf)))
    # The last window as np.histogram's edges `lo + window_s * arange(ceil(span / w) + 2)` end.
    last = int(np.ceil((hi - lo) / window_s))
    seg_bin = _bin_of(seg_t, lo, window_s, last)
    ack_bin = _bin_of(ack_t, lo, window_s, last)
    held = np.unique(np.concatenate([seg_bin, ack_bin]))
    shown = np.unique(np.concatenate([held - 1, held, held + 1]))
    shown = shown[(shown >= 0) & (shown <= last)]
    sent = np.bincount(
        np.searchsorted(shown, seg_bin),
        weights=segments["len"].to_numpy().astype(np.float64),
        minlength=shown.size,
    )
    line = acks["ack_rel"].to_numpy()
    gain = np.diff(np.maximum.accumulate(line), prepend=line[0] if line.size else 0)
    acked = np.bincount(
        np.searchsorted(shown, ack_bin), weights=gain.astype(np.float64), minlength=shown.size
    )
    return pd.DataFrame(
        {
            "t_s": lo + window_s * shown + window_s / 2,
            "sent_bps": sent * 8 / window_s,
            "acked_bps": acked * 8 / window_s,
        }
    )


@njit(cache=True)
def _bin_of(t: np.ndarray, lo: float, width: float, last: int) -> np.ndarray:  # pragma: no cover
    """The window of each time, windows [lo + width * i, lo + width * (i + 1)) for i in
    0..last, each edge computed as np.histogram's would be (so a time on an edge falls where
    it places it), without an array of edges."""
    out = np.empty(t.size, dtype=np.int64)
    for k in range(t.size):
        x = t[k]
        i = min(max(np.int64((x - lo) / width), np.int64(0)), np.int64(last))
        while i > 0 and x < lo + width * i:
            i -= 1
        while i < last and x >= lo + width * (i + 1):
            i += 1
        out[k] = i
    return out


def trains(segments: pd.DataFrame, gap_s: float, min_packets: int = 2) -> pd.DataFrame:
    """Packet trains of one direction: runs of data segments with no idle gap over `gap_s`.

    rate_bps is the instantaneous rate inside the train (the Antony paper's fig. 6: 512
    packets in about 4 ms is about 1 Gbit/s): the bytes before the last packet over the time
    from first to last departure.
    """
    seg = _with_data(segments)
    t = seg["t_s"].to_numpy()
    size = seg["len"].to_numpy()
    if t.size == 0:
        return pd.DataFrame(
            {"start_s": [], "end_s": [], "packets": [], "bytes": [], "rate_bps": []}
        )
    first, last, total = _trains(t, size, gap_s, min_packets)
    packets = last - first + 1
    span = t[last] - t[first]
    with np.errstate(divide="ignore", invalid="ignore"):
        rate_bps = np.where(span > 0, (total - size[last]) * 8 / span, np.nan)
    out = pd.DataFrame(
        {
            "start_s": t[first],
            "end_s": t[last],
            "packets": packets,
            "bytes": total,
            "rate_bps": rate_bps,
        }
    )
    return out


@njit(cache=True)
def _trains(
    t: np.ndarray, size: np.ndarray, gap_s: float, min_packets: int
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:  # pragma: no cover - compiled
    # Each train of min_packets or more: its first and last segment and its bytes, in one pass
    # (a shorter train's row is taken by the next).
    first = np.empty(t.size, dtype=np.int64)
    last = np.empty(t.size, dtype=np.int64)
    total = np.empty(t.size, dtype=np.int64)
    n = 0
    for i in range(t.size + 1):
        if i == t.size or i == 0 or t[i] - t[i - 1] > gap_s:
            if n:
                last[n - 1] = i - 1
                if i - first[n - 1] < min_packets:
                    n -= 1
            if i == t.size:
                break
            first[n] = i
            total[n] = 0
            n += 1
        total[n - 1] += size[i]
    return first[:n].copy(), last[:n].copy(), total[:n].copy()


@njit(cache=True)
def _round_starts(
    t: np.ndarray, sent_high: np.ndarray, ack_t: np.ndarray, line: np.ndarray, first_mark: int
) -> tuple[np.ndarray, np.ndarray]:  # pragma: no cover - compiled
    # Each round after the first starts at an ACK later than the one before (k grows by one
    # at least), so there are at most ack_t.size + 1 rounds. Not t.size + 1: a capture that
    # missed data segments holds ACKs above every byte it saw, and each of them starts a round.
    starts = np.empty(ack_t.size + 1, dtype=np.float64)
    marks = np.empty(ack_t.size + 1, dtype=np.int64)
    starts[0] = t[0]
    marks[0] = first_mark
    n = 1
    k = -1  # index of the ACK that started the current round (-1: round 0)
    while True:
        k = max(np.searchsorted(line, marks[n - 1], side="right"), k + 1)
        if k >= ack_t.size:
            break
        start = ack_t[k]
        before = np.searchsorted(t, start, side="left")
        if before >= t.size:
            break  # nothing is sent after this ACK: the transfer is over
        starts[n] = start
        marks[n] = sent_high[before - 1] if before > 0 else marks[n - 1]
        n += 1
    return starts[:n].copy(), marks[:n].copy()


def rounds(segments: pd.DataFrame, acks: pd.DataFrame) -> pd.DataFrame:
    """Round trips of one direction as its sender saw them, the way Linux counts them.

    Round 0 starts with the first data segment. Round r + 1 starts at the first ACK beyond
    every byte sent before round r started, as HyStart marks its rounds (tcp_cubic.c: a new
    round when `after(ack, end_seq)`, `end_seq = snd_nxt` at the round's start): round r's ACKs
    are those of round r - 1's data, and they clock out its segments, so in slow start a round
    is one flight, about twice the one before. Columns: round, start_s, end_s (the next round's
    start; the last data segment for the last round), mark_rel (snd_nxt at the round's start:
    the first ACK beyond it ends the round), packets and bytes (data segments sent in the round,
    retransmissions included). A compiled loop over rounds, two searches each.
    """
    data = _with_data(segments)
    t = data["t_s"].to_numpy()
    empty = pd.DataFrame(
        {
            "round": np.zeros(0, np.int64),
            "start_s": np.zeros(0),
            "end_s": np.zeros(0),
            "mark_rel": np.zeros(0, np.int64),
            "packets": np.zeros(0, np.int64),
            "bytes": np.zeros(0, np.int64),
        }
    )
    if t.size == 0:
        return empty
    sent_high = np.maximum.accumulate(data["end_rel"].to_numpy())
    ack_t = acks["t_s"].to_numpy()
    line = np.maximum.accumulate(acks["ack_rel"].to_numpy()) if ack_t.size else ack_t
    start_s, marks = _round_starts(
        t, sent_high, ack_t, line.astype(np.int64), int(data["seq_rel"].iloc[0])
    )
    packets, sent = _round_totals(start_s, t, data["len"].to_numpy())
    n = start_s.size
    return pd.DataFrame(
        {
            "round": np.arange(n),
            "start_s": start_s,
            "end_s": np.r_[start_s[1:], t[-1]],
            "mark_rel": marks,
            "packets": packets,
            "bytes": sent,
        }
    )


@njit(cache=True)
def _round_totals(
    start_s: np.ndarray, t: np.ndarray, size: np.ndarray
) -> tuple[np.ndarray, np.ndarray]:  # pragma: no cover - compiled
    """Segments and bytes sent in each round: the last round started at or before each one."""
    packets = np.zeros(start_s.size, dtype=np.int64)
    sent = np.zeros(start_s.size, dtype=np.int64)
    for k in range(t.size):
        # Clamped: a segment stamped before the first (a capture clock stepping back) is round 0.
        r = max(np.searchsorted(start_s, t[k], side="right") - 1, 0)
        packets[r] += 1
        sent[r] += size[k]
    return packets, sent


def _covered(left: np.ndarray, right: np.ndarray, lo: np.ndarray, hi: np.ndarray) -> np.ndarray:
    """Whether [lo, hi) overlaps any of the ranges [left, right)."""
    if left.size == 0:
        return np.zeros(lo.size, dtype=bool)
    order = np.argsort(left, kind="stable")
    left, right = left[order], np.maximum.accumulate(right[order])
    # Merge overlapping ranges: a range starts a new block past the reach of all before it.
    new_block = np.r_[True, left[1:] > right[:-1]]
    block_left = left[new_block]
    block_right = np.r_[right[np.flatnonzero(new_block)[1:] - 1], right[-1]]
    return _overlaps(block_left, block_right, lo, hi)


@njit(cache=True)
def _overlaps(
    block_left: np.ndarray, block_right: np.ndarray, lo: np.ndarray, hi: np.ndarray
) -> np.ndarray:  # pragma: no cover - compiled
    # The last block starting below hi is the only one that can reach past lo.
    out = np.zeros(lo.size, dtype=np.bool_)
    for i in range(lo.size):
        j = np.searchsorted(block_left, hi[i]) - 1
        out[i] = j >= 0 and block_right[j] > lo[i]
    return out


def resent(segments: pd.DataFrame, sacks: pd.DataFrame) -> pd.DataFrame:
    """Which segments of one direction the sender had to send again, and which needlessly.

    Aligned with `segments`: `resent` is True where a later retransmission (full or partial)
    covers some of a first copy's bytes (False on the retransmissions themselves); `dsacked`
    where a D-SACK block (RFC 2883) reports some of a segment's bytes received twice, so the
    first copy arrived and the resend was spurious. A first copy that was resent and not
    D-SACKed was lost (or so delayed that the sender gave up on it).
    """
    is_again = kind_mask(segments, "retransmission", "partial_retransmission")
    again = segments[is_again]
    lo = segments["seq_rel"].to_numpy()
    hi = segments["end_rel"].to_numpy()
    dsack = sacks[sacks["dsack"].to_numpy(dtype=bool)] if len(sacks) else sacks
    return pd.DataFrame(
        {
            "resent": _covered(again["seq_rel"].to_numpy(), again["end_rel"].to_numpy(), lo, hi)
            & (hi > lo)
            & ~is_again,
            "dsacked": _covered(
                dsack["left_rel"].to_numpy(np.int64), dsack["right_rel"].to_numpy(np.int64), lo, hi
            )
            & (hi > lo),
        },
        index=segments.index,
    )
