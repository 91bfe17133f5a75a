"""Which data segments are new, resent or out of order: one rule for connections and series.

A segment resends bytes when it starts below the highest byte its direction already carried,
unless those bytes fall in a hole the sequence jumped over: the first copy to fill a hole was
never seen before at this capture point (reordered, or dropped before it, as at a receiver or
behind a sender's own qdisc), so it is out of order. tcptrace counts the same way ("rexmt data
pkts" against "outoforder pkts").
"""

from __future__ import annotations

from typing import Any

import numpy as np

from tracekit.core.band import BAND
from tracekit.core.kernels import bind
from tracekit.schema import PROTO_TCP, SEGMENT_KINDS

# numba's typed.Dict and types, which _classify uses: put here by `bind` when numba compiles it.
Dict: Any = None
types: Any = None

# Segment classes, in the order the report's legend lists them (declared with the series tables).
KINDS = SEGMENT_KINDS
KIND_CODE = {k: i for i, k in enumerate(KINDS)}
NEW, RETRANSMISSION, PARTIAL, OUT_OF_ORDER = 0, 1, 2, 3  # KIND_CODE, for the compiled scan


def classify_data(
    conn: np.ndarray, pdir: np.ndarray, seq: np.ndarray, pay: np.ndarray, proto: np.ndarray
) -> tuple[np.ndarray, np.ndarray]:
    """Kind codes of data segments (-1 elsewhere), and resent segments per (conn, dir) group.

    Elements are grouped by (conn, dir) (group 2 conn + dir), in capture order within a group
    (groups may interleave); data segments are TCP (`proto`) with payload. Returns the kind
    codes and, per group, how many segments were resent (whole or partly).
    """
    if conn.size == 0:
        return np.zeros(0, dtype=np.int8), np.zeros(0, dtype=np.int64)
    return _classify(conn, pdir, seq, pay, proto, 2 * int(conn.max()) + 2)


def track_data(
    conn: np.ndarray,
    pdir: np.ndarray,
    proto: np.ndarray,
    seq: np.ndarray,
    pay: np.ndarray,
    high: np.ndarray,
    below_group: np.ndarray,
    below_seq: np.ndarray,
    hole_group: np.ndarray,
    hole_lo: np.ndarray,
    hole_hi: np.ndarray,
    n_below: int,
    n_holes: int,
) -> tuple[int, int, int]:  # pragma: no cover - compiled
    """classify_data's pass over a stream, one chunk at a time, keeping only what the resent
    counts still need once the stream is read (`resent_of`): the segments that start below
    their group's highest byte so far, and the holes the sequence jumped over.

    `high` is each group's highest byte so far (-1 before its first segment), carried from
    chunk to chunk. The `below_` and `hole_` arrays need room for the whole chunk from rows
    `n_below` and `n_holes`. Returns the rows after each and the chunk's TCP packet count, or
    -1 rows if a segment's group lies past `high` (nothing is written for it or after it).
    """
    nb = np.uint64(n_below)
    nh = np.uint64(n_holes)
    tcp = 0
    for i in range(conn.size):
        if proto[i] != PROTO_TCP:
            continue
        tcp += 1
        if pay[i] == 0:
            continue
        g = _group(conn[i], pdir[i])
        if g >= np.uint64(high.size):
            return np.int64(-1), np.int64(-1), tcp  # type: ignore[return-value]
        hb = high[g]
        s = np.int64(seq[i])
        end = s + np.int64(pay[i])
        if s >= hb:
            if hb >= 0 and s > hb:
                hole_group[nh] = np.int64(g)
                hole_lo[nh] = hb
                hole_hi[nh] = s
                nh += np.uint64(1)
        else:
            below_group[nb] = np.int64(g)
            below_seq[nb] = s
            nb += np.uint64(1)
        if end > hb:
            high[g] = end
    # Compiled, the int64s reach Python as ints; mypy reads the uncompiled body.
    return np.int64(nb), np.int64(nh), tcp  # type: ignore[return-value]


def resent_of(
    below_group: np.ndarray,
    below_seq: np.ndarray,
    hole_start: np.ndarray,
    hole_lo: np.ndarray,
    hole_hi: np.ndarray,
) -> np.ndarray:  # pragma: no cover - compiled
    """Resent segments per group, as classify_data counts them, from what `track_data` kept:
    the segments below their group's high, in capture order, and each group's holes, group g's
    in rows hole_start[g] to hole_start[g + 1] in the order they came (so sorted and disjoint).
    A hole opens above the high, so a later hole never holds an earlier segment: a segment's
    hole is the same whenever it is looked up."""
    n_groups = hole_start.size - 1
    resent = np.zeros(n_groups, dtype=np.int64)
    in_holes = 0
    for i in range(below_group.size):
        g = np.uint64(below_group[i])
        if _in_hole(hole_lo, hole_hi, hole_start[g], hole_start[g + np.uint64(1)], below_seq[i]):
            in_holes += 1
    # The (group, offset) keys already filled inside a hole, in an open-addressed set with
    # room for twice the segments that fall in one (each adds at most a key): probes stay
    # short, and its size comes from that count, not from the capture's claims.
    bits = 1
    while (1 << bits) < 2 * in_holes:
        bits += 1
    keys = np.empty(1 << bits, dtype=np.int64)
    used = np.zeros(1 << bits, dtype=np.bool_)
    for i in range(below_group.size):
        g = np.uint64(below_group[i])
        s = below_seq[i]
        # The first copy to fill a hole is out of order, not resent.
        if not (
            _in_hole(hole_lo, hole_hi, hole_start[g], hole_start[g + np.uint64(1)], s)
            and _first_time(keys, used, bits, np.int64(g) * BAND + s)
        ):
            resent[g] += 1
    return resent


def _first_time(keys: Any, used: Any, bits: Any, key: Any) -> Any:
    """Add `key` to the open-addressed set (`keys` where `used`, 2**bits slots, never full);
    whether it was not there before. Fibonacci hashing: the key times 2**64 over the golden
    ratio, its top bits, spreads keys that differ in any bit."""
    mask = np.uint64((1 << bits) - 1)
    h = (np.uint64(key) * np.uint64(0x9E3779B97F4A7C15)) >> np.uint64(64 - bits)
    while used[h]:
        if keys[h] == key:
            return False
        h = (h + np.uint64(1)) & mask
    used[h] = True
    keys[h] = key
    return True


def _in_hole(hole_lo: Any, hole_hi: Any, first: Any, end: Any, s: Any) -> Any:
    """Whether offset `s` lies in one of the holes in rows `first` to `end`, which are sorted
    and disjoint: the last hole that starts at or below `s` (a binary search) holds it or none
    does."""
    lo, hi = first, end
    while lo < hi:
        mid = (lo + hi) // 2
        if hole_lo[mid] <= s:
            lo = mid + 1
        else:
            hi = mid
    return lo > first and s < hole_hi[lo - 1]


def _group(conn: Any, pdir: Any) -> Any:
    """The (conn, dir) group's index, unsigned: numba checks a signed index for a negative value
    at every access (see tracekit.capture.decode._at), and a group is indexed about ten times a
    segment."""
    return np.uint64(2 * np.int64(conn) + pdir)


def _count_holes(
    conn: np.ndarray,
    pdir: np.ndarray,
    seq: np.ndarray,
    pay: np.ndarray,
    proto: np.ndarray,
    n_groups: int,
) -> np.ndarray:  # pragma: no cover - compiled
    """Per group, how many holes _classify will record: segments that start above the high."""
    high = np.full(n_groups, -1, dtype=np.int64)
    holes = np.zeros(n_groups, dtype=np.int64)
    for i in range(conn.size):
        if proto[i] != PROTO_TCP or pay[i] == 0:
            continue
        g = _group(conn[i], pdir[i])
        s = np.int64(seq[i])
        end = s + np.int64(pay[i])
        if high[g] >= 0 and s > high[g]:
            holes[g] += 1
        if end > high[g]:
            high[g] = end
    return holes


def _classify(
    conn: np.ndarray,
    pdir: np.ndarray,
    seq: np.ndarray,
    pay: np.ndarray,
    proto: np.ndarray,
    n_groups: int,
) -> tuple[np.ndarray, np.ndarray]:  # pragma: no cover - compiled
    n = conn.size
    kind = np.full(n, -1, dtype=np.int8)
    resent = np.zeros(n_groups, dtype=np.int64)
    high = np.full(n_groups, -1, dtype=np.int64)
    # Holes [lo, hi) the sequence jumped over, each group's in a slice of its own. The high
    # only climbs, so a group's holes arrive sorted and disjoint: a resent segment finds its
    # hole by binary search. The slices are sized by a counting pass: arrays grown (rebound)
    # inside the loop would make numba reload them on every packet, 20 times slower.
    counts = _count_holes(conn, pdir, seq, pay, proto, n_groups)
    start = np.zeros(n_groups + 1, dtype=np.int64)
    start[1:] = np.cumsum(counts)
    used = np.zeros(n_groups, dtype=np.int64)
    hole_lo = np.empty(start[n_groups], dtype=np.int64)
    hole_hi = np.empty(start[n_groups], dtype=np.int64)
    # Offsets already filled inside a hole, per group: the first copy is out of order.
    filled = Dict.empty(key_type=types.int64, value_type=types.boolean)
    for i in range(n):
        if proto[i] != PROTO_TCP or pay[i] == 0:
            continue
        g = _group(conn[i], pdir[i])
        hb = high[g]
        s = np.int64(seq[i])
        end = s + np.int64(pay[i])
        if s >= hb:
            kind[i] = NEW
            if hb >= 0 and s > hb:
                h = np.uint64(start[g] + used[g])
                hole_lo[h] = hb
                hole_hi[h] = s
                used[g] += 1
        else:
            kind[i] = PARTIAL if end > hb else RETRANSMISSION
            if _in_hole(hole_lo, hole_hi, start[g], start[g] + used[g], s):
                k = np.int64(g) * BAND + s
                if k not in filled:
                    filled[k] = True
                    kind[i] = OUT_OF_ORDER
            if kind[i] != OUT_OF_ORDER:
                resent[g] += 1
        if end > hb:
            high[g] = end
    return kind, resent


bind(
    globals(),
    ("_classify", "track_data", "resent_of"),
    helpers=("_group", "_in_hole", "_first_time", "_count_holes"),
    numba_names={"Dict": "typed.Dict", "types": "types"},
)
