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
    s: int,
    e: int,
    ack: np.ndarray,
    sack_start: np.ndarray,
    sack_left: np.ndarray,
    sack_right: np.ndarray,
) -> bool:  # pragma: no cover - numba
    """Whether ACK event j reports a duplicate of bytes in [s, e): its first SACK block is a
    D-SACK (RFC 2883 4: below the cumulative ACK, or inside the second block)."""
    first, stop = sack_start[j], sack_start[j + 1]
    if stop <= first:
        return False
    lo, hi = sack_left[first], sack_right[first]
    dsack = lo < ack[j] or (
        stop > first + 1 and sack_left[first + 1] <= lo and sack_right[first + 1] >= hi
    )
    return bool(dsack and lo < e and hi > s)


@jit
def _scan(
    group: np.ndarray,
    is_data: np.ndarray,
    left: np.ndarray,
    right: np.ndarray,
    ack: np.ndarray,
    sack_start: np.ndarray,
    sack_left: np.ndarray,
    sack_right: np.ndarray,
) -> tuple[np.ndarray, np.ndarray]:  # pragma: no cover - numba
    """For each data event, the verdict of the ACKs after it, and whether it came in already
    acknowledged (a duplicate). Events are sorted by (group, capture order); ACK event j owns
    SACK blocks sack_start[j]:sack_start[j + 1]."""
    n = group.size
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
        if i == n - 1 or group[i] != group[i + 1]:
            following_ack = n
            least = np.iinfo(np.int64).max
        next_ack[i] = following_ack
        least_left_after[i] = least
        if is_data[i]:
            least = min(least, left[i])
        else:
            following_ack = i
    acked_so_far = np.int64(-(1 << 62))
    for i in range(n):
        if i == 0 or group[i] != group[i - 1]:
            acked_so_far = np.int64(-(1 << 62))
        if not is_data[i]:
            if ack[i] > acked_so_far:
                acked_so_far = ack[i]
            continue
        s = left[i]
        e = right[i]
        duplicate[i] = e <= acked_so_far
        v = NEVER_ACKED
        # How far from s later copies have re-sent this arrival's bytes, in order: a sender
        # that resends a super-segment (TSO, GRO at the receiver) resends it in pieces.
        resent_to = s
        # Nothing later starts at or below s: no copy can re-send these bytes, and only ACKs
        # can decide.
        acks_only = least_left_after[i] > s
        j = next_ack[i] if acks_only else i + 1
        while j < n and group[j] == group[i]:
            if is_data[j]:
                if left[j] <= resent_to and right[j] > resent_to:
                    resent_to = right[j]
                if resent_to >= e:
                    # Re-sent whole before any ACK covered it: dropped, unless the ACK that
                    # answers the last copy reports it a duplicate (a D-SACK, RFC 2883): the
                    # host had kept the first copy and only held its ACK back.
                    v = RESENT_UNACKED
                    k = j + 1
                    while k < n and group[k] == group[i] and is_data[k]:
                        k += 1
                    if (
                        k < n
                        and group[k] == group[i]
                        and _dsack_overlaps(k, s, e, ack, sack_start, sack_left, sack_right)
                    ):
                        v = ACKED
                    break
            else:
                if ack[j] >= e:
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
    counts = np.bincount(sack_owner.astype(np.int64), minlength=group.size)
    sack_start = np.zeros(group.size + 1, dtype=np.int64)
    np.cumsum(counts, out=sack_start[1:])
    return _scan(
        group.astype(np.int64),
        is_data.astype(np.bool_),
        left.astype(np.int64),
        right.astype(np.int64),
        ack.astype(np.int64),
        sack_start,
        sack_left.astype(np.int64),
        sack_right.astype(np.int64),
    )
