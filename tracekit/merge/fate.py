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

import numpy as np

from tracekit.core.kernels import jit

# Verdicts of the receiver's scan, per arrival.
ACKED = 0  # a later ACK or SACK block of the receiver covers it: the host kept it
RESENT_UNACKED = 1  # the same bytes arrived again before any ACK covered them: the host dropped it
NEVER_ACKED = 2  # the capture ends before either: no verdict


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
def _scan(
    rows: np.ndarray,
    group: np.ndarray,
    is_data: np.ndarray,
    left: np.ndarray,
    length: np.ndarray,
    ack: np.ndarray,
    sack_start: np.ndarray,
    sack_left: np.ndarray,
    sack_right: np.ndarray,
) -> tuple[np.ndarray, np.ndarray]:  # pragma: no cover - numba
    """For each data event, the verdict of the ACKs after it, and whether it came in already
    acknowledged (a duplicate). Event i is row rows[i] of the columns (group, is_data, left,
    length, ack), the events sorted by (group, capture order); ACK event j owns SACK blocks
    sack_start[j]:sack_start[j + 1]."""
    n = rows.size
    verdict = np.full(n, -1, dtype=np.int8)
    duplicate = np.zeros(n, dtype=np.bool_)
    # Per event, the next ACK event of its group (n: none), and the lowest left edge of the
    # group's data events after it. A data event that no later one starts at or below can
    # never be re-sent, so its scan visits the ACK events alone: a capture of one direction
    # (a tap on one side, no ACKs), whose scan would otherwise run to the end for every
    # arrival, stays linear.
    next_ack = np.full(n, n, dtype=np.int64)
    least_left_after = np.full(n, np.iinfo(np.int64).max, dtype=np.int64)
    following_ack = n
    least = np.iinfo(np.int64).max
    for i in range(n - 1, -1, -1):
        if i == n - 1 or group[rows[i]] != group[rows[i + 1]]:
            following_ack = n
            least = np.iinfo(np.int64).max
        next_ack[i] = following_ack
        least_left_after[i] = least
        if is_data[rows[i]]:
            least = min(least, np.int64(left[rows[i]]))
        else:
            following_ack = i
    acked_so_far = np.int64(-(1 << 62))
    for i in range(n):
        r = rows[i]
        if i == 0 or group[r] != group[rows[i - 1]]:
            acked_so_far = np.int64(-(1 << 62))
        if not is_data[r]:
            if ack[r] > acked_so_far:
                acked_so_far = np.int64(ack[r])
            continue
        s = np.int64(left[r])
        e = s + np.int64(length[r])
        duplicate[i] = e <= acked_so_far
        v = NEVER_ACKED
        # How far from s later copies have re-sent this arrival's bytes, in order: a sender
        # that resends a super-segment (TSO, GRO at the receiver) resends it in pieces.
        resent_to = s
        # Nothing later starts at or below s: no copy can re-send these bytes, and only ACKs
        # can decide.
        acks_only = least_left_after[i] > s
        j = next_ack[i] if acks_only else i + 1
        while j < n and group[rows[j]] == group[r]:
            q = rows[j]
            if is_data[q]:
                if left[q] <= resent_to and left[q] + np.int64(length[q]) > resent_to:
                    resent_to = left[q] + np.int64(length[q])
                if resent_to >= e:
                    # Re-sent whole before any ACK covered it: dropped, unless the ACK that
                    # answers the last copy reports it a duplicate (a D-SACK, RFC 2883): the
                    # host had kept the first copy and only held its ACK back.
                    v = RESENT_UNACKED
                    k = j + 1
                    while k < n and group[rows[k]] == group[r] and is_data[rows[k]]:
                        k += 1
                    if (
                        k < n
                        and group[rows[k]] == group[r]
                        and _dsack_overlaps(
                            k, ack[rows[k]], s, e, sack_start, sack_left, sack_right
                        )
                    ):
                        v = ACKED
                    break
            else:
                if ack[q] >= e:
                    v = ACKED
                    break
                covered = False
                for k in range(sack_start[j], sack_start[j + 1]):
                    if sack_left[k] <= s and sack_right[k] >= e:
                        covered = True
                        break
                if covered:
                    v = ACKED
                    break
            j = next_ack[j] if acks_only else j + 1
        verdict[i] = v
    return verdict, duplicate


def sack_starts(sack_owner: np.ndarray, events: int) -> np.ndarray:
    """Where each event's SACK blocks start (and, last, where the blocks end), from each block's
    owner event (sorted ascending)."""
    counts = np.bincount(sack_owner.astype(np.int64), minlength=events)
    sack_start = np.zeros(events + 1, dtype=np.int64)
    np.cumsum(counts, out=sack_start[1:])
    return sack_start


def scan_rows(
    rows: np.ndarray,
    group: np.ndarray,
    is_data: np.ndarray,
    left: np.ndarray,
    length: np.ndarray,
    ack: np.ndarray,
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
        sack_starts(sack_owner, rows.size),
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
) -> tuple[np.ndarray, np.ndarray]:
    """Per event of the receiver's capture (sorted by group, then capture order): the verdict
    (ACKED, RESENT_UNACKED, NEVER_ACKED; -1 for ACK events) and whether a data arrival was
    already acknowledged when it came (a duplicate).

    Data events carry their byte range [left, right); ACK events the receiver's cumulative ACK
    in `ack`. SACK blocks belong to the ACK event at index `sack_owner` (sorted ascending).
    """
    left = left.astype(np.int64)
    return scan_rows(
        np.arange(group.size, dtype=np.int64),
        group.astype(np.int64),
        is_data.astype(np.bool_),
        left,
        right.astype(np.int64) - left,
        ack.astype(np.int64),
        sack_owner,
        sack_left,
        sack_right,
    )
