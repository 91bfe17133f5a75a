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

from collections.abc import Callable, Collection
from dataclasses import dataclass, field, replace
from functools import cached_property
from typing import TYPE_CHECKING, TypeVar

import numpy as np
import numpy.typing as npt
import pandas as pd
import pyarrow as pa

from tracekit.connections.segments import (
    classify_data,
)
from tracekit.core.groups import segment_starts
from tracekit.schema import (
    PROTO_TCP,
    SERIES_ACK_COLUMNS,
    SERIES_FLIGHT_COLUMNS,
    SERIES_RTT_COLUMNS,
    SERIES_SACK_COLUMNS,
    SERIES_SEGMENT_COLUMNS,
    SERIES_TABLES,
    WRAP,
    Column,
    empty_frame,
    frame,
)
from tracekit.series.measures import resent, with_data
from tracekit.series.walk import Walk, by_connection, runs, timestamp_pairs

if TYPE_CHECKING:
    from tracekit.connections import Connections

T = TypeVar("T")


TABLES = tuple(SERIES_TABLES)
# The packet table's columns `build_series` reads (besides the reader's SACK table and the
# connections stage's segment kinds).
PACKET_COLUMNS_READ = frozenset(
    {"ts_ns", "frame", "conn", "dir", "proto", "tcp_flags", "seq_rel", "ack_rel"}
    | {"payload_bytes", "win_raw", "opts", "tsval", "tsecr"}
)
# Of those, the ones only the RTT table's timestamp samples read.
RTT_PACKET_COLUMNS = frozenset({"opts", "tsval", "tsecr"})


def packet_columns_read(tables: Collection[str] | None = None) -> frozenset[str]:
    """The packet columns `build_series` reads to make `tables` (None: every table)."""
    return PACKET_COLUMNS_READ if _with_rtt(tables) else PACKET_COLUMNS_READ - RTT_PACKET_COLUMNS


class Direction:
    """The series of one direction of one connection (views into `Series`' tables).

    Each table is sliced out of `Series` the first time it is asked for (`source`): a capture
    of thousands of short connections has most detectors look at one table of most directions,
    or none. The slices are views of `Series`' tables, to read, never to write. Tables given
    to the constructor are used as they are. `data` and `resent` are computed once and shared
    by every detector that asks. `peer_mss` is the MSS option the receiving side sent in its
    SYN (0: not seen): no segment of this direction carries more payload (RFC 9293 3.7.1).
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
        peer_mss: int = 0,
    ) -> None:
        self.conn = conn
        self.direction = direction
        self.peer_mss = peer_mss
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

    def forget(self, keep: Collection[str] = ()) -> None:
        """Let go of the measures `memo` holds (and `resent`, which they are made from) but
        those named in `keep`: on a big capture each is tens of megabytes, held for nothing
        once no detector still to run reads it. One asked for again is computed again."""
        for name in [name for name in self._memo if name not in keep]:
            del self._memo[name]
        if "resent" not in keep:
            vars(self).pop("resent", None)

    @cached_property
    def data(self) -> pd.DataFrame:
        """The segments that carry payload (probes and keepalives left out), same index."""
        return with_data(self.segments)

    @cached_property
    def resent(self) -> pd.DataFrame:
        """`resent(segments, sacks)`: which first copies were resent, and D-SACKed."""
        return resent(self.segments, self.sacks)


@dataclass(frozen=True)
class Series:
    """All series of a capture, one table each, with `conn` and `dir` columns.

    The tables and their columns, in order and of the dtypes the frames hold, are declared in
    tracekit/schema.py (SERIES_TABLES: segments, acks, sacks, rtt, flight; docs/tables.md).
    Every table is sorted by (conn, dir), in capture order within a direction.
    `window_known` says per (conn, dir) whether windows are true byte counts: False where the
    window scale is unknown (handshake not captured), so the raw window field is shown.
    `peer_mss` holds per connection (row) and direction (column) the MSS option its receiving
    side sent (0: none seen), `Direction.peer_mss`.
    """

    t0_ns: int
    segments: pd.DataFrame
    acks: pd.DataFrame
    sacks: pd.DataFrame
    rtt: pd.DataFrame
    flight: pd.DataFrame
    window_known: dict[tuple[int, int], bool] = field(default_factory=dict)
    peer_mss: np.ndarray = field(default_factory=lambda: np.zeros((0, 2), np.uint16), compare=False)
    # The connections `with_data` lists (sorted), None for all of them: a worker's share.
    only: np.ndarray | None = field(default=None, compare=False)

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

    @classmethod
    def empty(cls) -> Series:
        """The series of a capture without TCP: every declared table, none with a row."""
        return cls(
            t0_ns=0,
            segments=empty_frame(SERIES_SEGMENT_COLUMNS),
            acks=empty_frame(SERIES_ACK_COLUMNS),
            sacks=empty_frame(SERIES_SACK_COLUMNS),
            rtt=empty_frame(SERIES_RTT_COLUMNS),
            flight=empty_frame(SERIES_FLIGHT_COLUMNS),
        )

    def keeping(self, tables: Collection[str]) -> Series:
        """These series with only `tables` (of TABLES), the others emptied: for a view that
        draws those alone."""
        return replace(
            self,
            **{name: empty_frame(SERIES_TABLES[name]) for name in TABLES if name not in tables},
        )

    def share(self, conns: npt.ArrayLike) -> Series:
        """These series with `with_data` listing the directions of `conns` alone: a worker's
        share of the detectors' work (`tracekit.detectors.run_detectors`). The tables are the
        same objects, and where each direction's rows lie, as far as it was found already, is
        not found again."""
        shared = replace(self, only=np.unique(np.asarray(conns, dtype=np.int64)))
        shared._bounds.update(self._bounds)
        shared._data.update(self._data)
        return shared

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

        peer_mss = int(self.peer_mss[conn, direction]) if conn < len(self.peer_mss) else 0
        return Direction(conn, direction, source=pick, peer_mss=peer_mss)

    def forget(self, keep: Collection[str] = ()) -> None:
        """`Direction.forget` on every direction sliced so far."""
        for direction in self._directions.values():
            direction.forget(keep)

    def with_data(self) -> list[tuple[int, int]]:
        """(conn, dir) of every direction that carried payload, in order."""
        keys, _ = self.data_counts()
        return [(int(k) // 2, int(k) % 2) for k in keys]

    def data_counts(self) -> tuple[npt.NDArray[np.int64], npt.NDArray[np.int64]]:
        """The directions `with_data` lists, as keys 2 * conn + dir, and each one's segments
        with payload."""
        keys, sent = self._data_counts()
        keep = sent > 0
        if self.only is not None:
            keep &= np.isin(keys // 2, self.only)
        return keys[keep].astype(np.int64, copy=False), sent[keep].astype(np.int64, copy=False)

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
            # Each direction's rows less those without payload (probes, keepalives: few),
            # counted where they fall: a sum over a mask of every row would first cast the
            # whole mask to 8-byte integers.
            bare = np.flatnonzero(self.segments["len"].to_numpy() == 0)
            rows = np.diff(starts)
            sent = rows - (np.searchsorted(bare, starts[1:]) - np.searchsorted(bare, starts[:-1]))
            self._data["counts"] = (keys, sent)
        return self._data["counts"]

    def _slices(self, name: str, df: pd.DataFrame) -> tuple[np.ndarray, np.ndarray]:
        """The (conn, dir) keys of a table and where each one's rows start (and the end)."""
        # Every table is sorted by (conn, dir): a direction is one contiguous slice, found
        # once per table rather than once per look-up.
        if name not in self._bounds:
            self._bounds[name] = runs(df["conn"].to_numpy(), df["dir"].to_numpy())
        return self._bounds[name]


def _position(keys: np.ndarray, key: int) -> int:
    """Where `key` is in the sorted `keys`, or -1."""
    i = int(np.searchsorted(keys, key))
    return i if i < keys.size and keys[i] == key else -1


def build_series(
    conns: Connections,
    let_go: Callable[[], None] | None = None,
    tables: Collection[str] | None = None,
) -> Series:
    """Build every direction's series of every TCP connection in compiled passes.

    Each TCP packet is a data event on its own direction's timeline and, if it carries an ACK,
    an ACK event on the other's. The packets are grouped by connection (capture order kept);
    one pass walks each connection's packets once per direction, which writes the segments
    and ACK tables and pairs Karn's RTT samples, a second makes the flight table from those
    tables, and a third pairs the timestamp echoes. Memory is what costs on big captures, so
    no per-event column is made. `let_go` is called once the passes' per-packet working memory
    is freed, before the RTT and SACK tables are made (the command's `after_stage`: freed pages
    go back to the system rather than stay beside those tables' new ones).

    `walk_series(conns).finish(let_go)` is the same in two steps: between them, a caller that
    holds the only reference to `conns` lets go of the packet columns only the walk reads
    (sequence and ACK numbers, windows: 18 bytes a packet), so that they are freed before the
    flight table (16 bytes a data segment) is made rather than held beside it.

    `tables`, when given, names the tables a caller reads: the flight and RTT tables are made
    only if they are among them (the others are held anyway), and left empty otherwise.
    """
    return walk_series(conns, tables).finish(let_go, tables)


def walk_series(conns: Connections, tables: Collection[str] | None = None) -> SeriesWalk:
    """The first pass of `build_series`: the segments and ACK tables, and what the passes
    after it read. What it returns holds no reference to the packets' sequence, ACK and window
    columns, nor to the connections stage's segment kinds: only `finish`'s columns (the
    times, connections, directions, payload lengths, frame numbers and TCP timestamps). With
    `tables` (as `build_series` takes them) leaving out the RTT table, the packets need not
    hold the columns only it reads (`packet_columns_read`), and `finish` must be given the
    same `tables`."""
    pk = conns.packets
    tcp = pk.column("proto").to_numpy() == PROTO_TCP
    every = bool(tcp.all())
    rows_tcp = None if every else np.flatnonzero(tcp)  # None: every packet is TCP
    del tcp  # a byte per packet, held for nothing through the walk

    def col(name: str) -> np.ndarray:
        values = pk.column(name).to_numpy()
        return values if every else values[rows_tcp]

    t0 = conns.t0_ns
    ts = col("ts_ns")
    conn = col("conn")
    pdir = col("dir")
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

    rows, bounds, carries = by_connection(conn, pdir, payload)
    walked = Walk(rows, bounds, pdir, ts, t0, conn, seq, ack, payload, col("tcp_flags"))
    frames = col("frame")
    walked.run(col("win_raw"), shift, kind, frames, carries)
    sack = conns.capture.sack
    # Where each SACK block's packet is among the TCP packets (SACK only rides on TCP), and
    # the ACK number it came with: the only ACK numbers read after the walk.
    sack_at = sack.column("row").to_numpy().astype(np.int64)
    if rows_tcp is not None:
        sack_at = np.searchsorted(rows_tcp, sack_at)
    return SeriesWalk(
        walked=walked,
        rows_tcp=rows_tcp,
        table=table,
        sack=sack,
        sack_at=sack_at,
        sack_ack=ack[sack_at],
        t0=t0,
        ts=ts,
        conn=conn,
        pdir=pdir,
        payload=payload,
        frames=frames,
        tsopts=(col("opts"), col("tsval"), col("tsecr")) if _with_rtt(tables) else None,
    )


def _with_rtt(tables: Collection[str] | None) -> bool:
    return tables is None or "rtt" in tables


@dataclass
class SeriesWalk:
    """What `walk_series` made and read, for `finish`: views or copies of the packet columns
    read after the walk, none of those only the walk reads."""

    walked: Walk
    rows_tcp: np.ndarray | None
    table: pa.Table
    sack: pa.Table
    sack_at: np.ndarray
    sack_ack: np.ndarray
    t0: int
    ts: np.ndarray
    conn: np.ndarray
    pdir: np.ndarray
    payload: np.ndarray
    frames: np.ndarray
    # None: walked without the RTT table's columns (`walk_series`' tables).
    tsopts: tuple[np.ndarray, np.ndarray, np.ndarray] | None

    def finish(
        self, let_go: Callable[[], None] | None = None, tables: Collection[str] | None = None
    ) -> Series:
        """The flight, RTT and SACK tables, and the Series (`build_series`; the flight and RTT
        tables empty where `tables` leaves them out)."""
        if _with_rtt(tables) and self.tsopts is None:
            raise ValueError("an RTT table from a walk made without its packet columns")
        walked, rows_tcp, ts, t0 = self.walked, self.rows_tcp, self.ts, self.t0
        conn, pdir = self.conn, self.pdir
        del self.walked  # let go once the tables are made, not when this is
        with_rtt = _with_rtt(tables)
        # The RTT and SACK tables first: their inputs (the packets' grouping and the walk's
        # per-packet flags, 5 bytes a packet; the RTT pairs, 16 bytes a sample) and their
        # working memory are let go before the flight table's 16 bytes a data segment are made.
        rows, bounds, advance_known, seq_pairs = walked.hand_over_rtt()
        none = np.zeros(0, dtype=np.int64)
        ts_seg, ts_ack, n_ts = (
            timestamp_pairs(rows, bounds, pdir, advance_known, self.payload, *self.tsopts)
            if self.tsopts is not None and with_rtt
            else (none, none, 0)
        )
        del rows, bounds, advance_known
        ts_pairs = (ts_seg[:n_ts], ts_ack[:n_ts])
        del ts_seg, ts_ack

        def seconds(rows: np.ndarray) -> np.ndarray:
            return (ts[rows] - t0) / 1e9

        rtt = (
            _rtt(conn, pdir, seconds, seq_pairs, ts_pairs)
            if with_rtt
            else empty_frame(SERIES_RTT_COLUMNS)
        )
        del seq_pairs, ts_pairs
        sacks = _sacks(self, seconds)
        # The pages of what the RTT and SACK tables were made from go back before the flight
        # table's are written.
        if let_go is not None:
            let_go()
        with_flight = tables is None or "flight" in tables
        if with_flight:
            walked.flight()  # compares the walk's rows: before they are the packet table's
        else:
            walked.categorize()
        if rows_tcp is not None:  # the walk's rows are the TCP packets': the packet table's are
            for written in (walked.segments, walked.acks):
                written["row"] = rows_tcp[written["row"]].astype(np.uint32)
        segments = pd.DataFrame(walked.segments, copy=False)
        acks = pd.DataFrame(walked.acks, copy=False)
        flight = (
            pd.DataFrame(walked.flight_table, copy=False)
            if with_flight
            else empty_frame(SERIES_FLIGHT_COLUMNS)
        )
        del walked
        table = self.table
        # Known or absent scaling gives true windows; unknown leaves them raw (never guessed).
        ws_state = table.column("ws_state").to_pylist()
        scaled = {(c, d): state != "unknown" for c, state in enumerate(ws_state) for d in (0, 1)}
        # Direction a2b sends to b: b's MSS option bounds its segments, and a's bounds b2a's.
        peer_mss = np.stack(
            [table.column("mss_b").to_numpy(), table.column("mss_a").to_numpy()], axis=1
        ).astype(np.uint16)
        return Series(
            t0_ns=t0,
            segments=segments,
            acks=acks,
            sacks=sacks,
            rtt=rtt,
            flight=flight,
            window_known=scaled,
            peer_mss=peer_mss,
        )


def _rtt(
    conn: np.ndarray,
    pdir: np.ndarray,
    seconds: Callable[[np.ndarray], np.ndarray],
    seq_pairs: tuple[np.ndarray, np.ndarray],
    ts_pairs: tuple[np.ndarray, np.ndarray],
) -> pd.DataFrame:
    """RTT samples (packet index pairs: the segment's, then the ACK's) as one table sorted by
    (conn, dir, t_s) (`_sorted_frame`)."""
    sources = {c.name: c for c in SERIES_RTT_COLUMNS}["source"].categories
    rows, t_s, rtt_s, source = [], [], [], []
    for (seg_i, ack_i), name in ((seq_pairs, "seq"), (ts_pairs, "ts")):
        t_ack = seconds(ack_i)
        rtt = t_ack - seconds(seg_i)
        good = rtt >= 0
        rows.append(seg_i[good])
        t_s.append(t_ack[good])
        rtt_s.append(rtt[good])
        source.append(np.full(int(np.count_nonzero(good)), sources.index(name), dtype=np.int8))
        del t_ack, rtt, good
    seg_rows = np.concatenate(rows)
    del rows
    columns = {
        "conn": conn[seg_rows],
        "dir": pdir[seg_rows],
        "t_s": np.concatenate(t_s),
        "rtt_s": np.concatenate(rtt_s),
        "source": np.concatenate(source),
    }
    del seg_rows, t_s, rtt_s, source
    return _sorted_frame(SERIES_RTT_COLUMNS, columns, ("conn", "dir", "t_s"))


def _sorted_frame(
    declared: tuple[Column, ...], columns: dict[str, np.ndarray], keys: tuple[str, ...]
) -> pd.DataFrame:
    """The declared table of `columns`, its rows sorted by `keys` (the first sorts first) and
    in their given order within equal keys. One np.lexsort of the key columns, then each column
    taken in that order and the unsorted one let go: the order pandas' stable sort on the keys
    gives (it ranks each key, then lexsorts the ranks), without that sort's working memory (a
    rank table per key and a copy of every column at once: about four times the table, at the
    series stage's highest memory)."""
    order = np.lexsort(tuple(columns[key] for key in reversed(keys)))
    for name in columns:
        columns[name] = columns[name][order]
    return frame(declared, columns)


def _sacks(walk: SeriesWalk, seconds: Callable[[np.ndarray], np.ndarray]) -> pd.DataFrame:
    sack = walk.sack
    if sack.num_rows == 0:
        return empty_frame(SERIES_SACK_COLUMNS)
    row = sack.column("row").to_numpy().astype(np.int64)
    i = walk.sack_at
    c, d = walk.conn[i], 1 - walk.pdir[i]  # the blocks describe the other direction's data
    ack = walk.sack_ack
    isn = np.stack(
        [walk.table.column("isn_a").to_numpy(), walk.table.column("isn_b").to_numpy()], axis=1
    ).astype(np.int64)
    base = isn[c, d]
    left_raw = sack.column("left").to_numpy().astype(np.int64)
    right_raw = sack.column("right").to_numpy().astype(np.int64)
    # Place each edge on the 64-bit line next to the ACK number that carried it.
    delta = (left_raw - base) % WRAP
    left = delta + np.round((ack - delta) / WRAP).astype(np.int64) * WRAP
    right = left + (right_raw - left_raw) % WRAP
    # RFC 2883 4: a D-SACK is the first block, below the ACK number or inside the second block.
    first = segment_starts(row)
    nxt = np.minimum(np.arange(row.size) + 1, row.size - 1)
    second_same = (nxt != np.arange(row.size)) & (row[nxt] == row)
    inside_second = second_same & (left >= left[nxt]) & (right <= right[nxt])
    dsack = first & ((left < ack) | inside_second)
    del row, base, left_raw, right_raw, delta, first, nxt, second_same, inside_second
    columns = {
        "conn": c,
        "dir": d,
        "t_s": seconds(i),
        "left_rel": left,
        "right_rel": right,
        "dsack": dsack,
        "frame": walk.frames[i],
    }
    del c, d, left, right, dsack
    # Like every table of the series, sorted by (conn, dir), capture order within.
    return _sorted_frame(SERIES_SACK_COLUMNS, columns, ("conn", "dir"))
