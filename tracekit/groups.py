"""Grouped array operations: a group is a run of equal keys in an array sorted by that key.

The stages keep packets sorted by (connection, direction) and compute per-group running sums,
maxima and first occurrences over whole columns, instead of looping over groups in Python.
"""

from __future__ import annotations

import numpy as np
from numba import njit

WRAP = np.int64(1 << 32)  # the TCP sequence space, RFC 9293 3.4


def segment_starts(keys: np.ndarray) -> np.ndarray:
    """Boolean mask: True where a sorted key column starts a new segment."""
    starts = np.ones(keys.size, dtype=bool)
    if keys.size > 1:
        starts[1:] = keys[1:] != keys[:-1]
    return starts


def segmented_cumsum(values: np.ndarray, starts: np.ndarray) -> np.ndarray:
    """Cumulative sum that restarts at every True of `starts` (values already in segment order)."""
    total = np.cumsum(values)
    if total.size == 0:
        return total
    before = total - values
    seg_id = np.cumsum(starts) - 1
    return total - before[np.flatnonzero(starts)][seg_id]


def segmented_cummax_prev(values: np.ndarray, starts: np.ndarray) -> np.ndarray:
    """Running maximum of the earlier values of the same segment (int64 min where none)."""
    return _cummax(values.astype(np.int64, copy=False), starts, False)


def segmented_cummax(values: np.ndarray, starts: np.ndarray) -> np.ndarray:
    """Running maximum that restarts at every True of `starts`, the current value included."""
    return _cummax(values.astype(np.int64, copy=False), starts, True)


@njit(cache=True)
def _cummax(
    values: np.ndarray, starts: np.ndarray, inclusive: bool
) -> np.ndarray:  # pragma: no cover - compiled
    # A running maximum is one pass; restarting it per segment has no numpy primitive.
    lowest = np.iinfo(np.int64).min
    out = np.empty(values.size, dtype=np.int64)
    run = lowest
    for i in range(values.size):
        if starts[i]:
            run = lowest
        if inclusive and values[i] > run:
            run = values[i]
        out[i] = run
        if not inclusive and values[i] > run:
            run = values[i]
    return out


def ffill_index(valid: np.ndarray, starts: np.ndarray) -> np.ndarray:
    """Per position, the last position at or before it in its group where `valid` holds, or -1."""
    pos = np.arange(valid.size)
    last = np.maximum.accumulate(np.where(valid, pos, -1)) if valid.size else pos
    group_start = np.maximum.accumulate(np.where(starts, pos, 0)) if valid.size else pos
    return np.where(last >= group_start, last, -1)
