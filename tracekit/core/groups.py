"""Grouped array operations: a group is a run of equal keys in an array sorted by that key.

The merge keeps packets sorted by (connection, direction) and computes per-group running maxima
over whole columns, instead of looping over groups in Python.
"""

from __future__ import annotations

import numpy as np

from tracekit.core.kernels import jit


def segment_starts(keys: np.ndarray) -> np.ndarray:
    """Boolean mask: True where a sorted key column starts a new segment."""
    starts = np.ones(keys.size, dtype=bool)
    if keys.size > 1:
        starts[1:] = keys[1:] != keys[:-1]
    return starts


def segmented_cummax_prev(values: np.ndarray, starts: np.ndarray) -> np.ndarray:
    """Running maximum of the earlier values of the same segment (int64 min where none)."""
    return _cummax_prev(values.astype(np.int64, copy=False), starts)


@jit
def _cummax_prev(values: np.ndarray, starts: np.ndarray) -> np.ndarray:  # pragma: no cover
    # A running maximum is one pass; restarting it per segment has no numpy primitive.
    lowest = np.iinfo(np.int64).min
    out = np.empty(values.size, dtype=np.int64)
    run = lowest
    for i in range(values.size):
        if starts[i]:
            run = lowest
        out[i] = run
        if values[i] > run:
            run = values[i]
    return out


# A group's rows: ascending positions, or a slice where they are one run with no gap.
Rows = np.ndarray | slice


def as_slice(rows: Rows) -> slice | None:
    """Ascending row positions (a group's, in table order) as a slice when they are one run
    with no gap, else None: a slice takes a view of a table's rows, positions a copy."""
    if isinstance(rows, slice):
        return rows
    if rows.size and int(rows[-1]) - int(rows[0]) + 1 == rows.size:
        return slice(int(rows[0]), int(rows[-1]) + 1)
    return None


def row_count(rows: Rows) -> int:
    """How many rows a group has."""
    return rows.stop - rows.start if isinstance(rows, slice) else int(rows.size)


def kept_rows(rows: Rows, keep: np.ndarray) -> np.ndarray:
    """The positions among a group's rows that `keep` (one flag per row of the table) keeps."""
    if isinstance(rows, slice):
        return np.flatnonzero(keep[rows]) + rows.start
    return rows[keep[rows]]
