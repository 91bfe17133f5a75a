"""Grouped array operations: a group is a run of equal keys in an array sorted by that key.

The stages keep packets sorted by (connection, direction) and compute per-group running sums,
maxima and first occurrences over whole columns, instead of looping over groups in Python.
"""

from __future__ import annotations

import numpy as np

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
    lowest = np.iinfo(np.int64).min
    out = np.full(values.size, lowest, dtype=np.int64)
    if values.size < 2:
        return out
    # Lift each segment above all earlier ones, so one global running max respects segments.
    seg_id = np.cumsum(starts) - 1
    seg_min = np.minimum.reduceat(values, np.flatnonzero(starts))
    norm = values - seg_min[seg_id]
    span = np.int64(norm.max()) + 1
    run = np.maximum.accumulate(norm + seg_id * span)
    same = np.flatnonzero(~starts)
    out[same] = run[same - 1] - seg_id[same] * span + seg_min[seg_id[same]]
    return out


def segmented_cummax(values: np.ndarray, starts: np.ndarray) -> np.ndarray:
    """Running maximum that restarts at every True of `starts`, the current value included."""
    if values.size == 0:
        return values.astype(np.int64)
    prev = segmented_cummax_prev(values, starts)
    return np.maximum(prev, values)


def ffill_index(valid: np.ndarray, starts: np.ndarray) -> np.ndarray:
    """Per position, the last position at or before it in its group where `valid` holds, or -1."""
    pos = np.arange(valid.size)
    last = np.maximum.accumulate(np.where(valid, pos, -1)) if valid.size else pos
    group_start = np.maximum.accumulate(np.where(starts, pos, 0)) if valid.size else pos
    return np.where(last >= group_start, last, -1)
