"""Thin millions of points to what a plot can show, never dropping a point marked to keep.

The method is M4 (Jugel et al., "M4: a visualization-oriented time series data aggregation",
VLDB 2014): split the x range into equal buckets and keep, per bucket, the first, last, lowest
and highest point. Drawn at one bucket per pixel column, the lines match those of every point.
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np

from tracekit.core.kernels import jit

# M4 keeps four points per bucket.
POINTS_PER_BUCKET = 4


def decimate(
    x: np.ndarray,
    y: np.ndarray,
    target: int,
    keep: np.ndarray | None = None,
    y_end: np.ndarray | None = None,
    rows: np.ndarray | None = None,
) -> np.ndarray:
    """Indices of the points to draw, in order of x (ties in input order).

    Contract: when there are at most target points every index comes back. Otherwise x's range
    is cut into at least target // 4 equal buckets and each bucket keeps its first and last
    point in x order, its point of lowest y and its point of highest y_end (y when y_end is
    None), plus every point where `keep` is True; so at most target + keep.sum() indices, with
    no repeats. Buckets are made finer (never coarser) while that fills less than half the
    target. NaN y values are ignored when finding extremes.

    `rows`, a mask as long as x, makes the points the rows it marks (`Trace.rows`): the same
    choice as of the columns' marked rows alone, given as positions in the columns, with no
    copy of them.
    """
    n = len(x) if rows is None else int(np.count_nonzero(rows))
    if target < POINTS_PER_BUCKET:
        raise ValueError(f"target must be at least {POINTS_PER_BUCKET} points, not {target}")
    if n <= target:
        return np.arange(n, dtype=np.int64) if rows is None else np.flatnonzero(rows)
    # The kernels read a mask of no rows as every row.
    mask = _EVERY if rows is None else rows
    # Capture clocks step back now and then, so x is often sorted but for a few points. The
    # buckets are then found point by point in input order, with ties broken as a stable sort
    # would: no sorted copies of millions of points, only the chosen few are sorted.
    in_order = never_back(x, rows)
    tops = y if y_end is None else y_end
    selected = _finest(lambda buckets: _m4(x, y, tops, buckets, in_order, mask), n, target)
    if keep is not None:
        selected |= keep if rows is None else keep & rows
    chosen = np.flatnonzero(selected)
    return chosen if in_order else chosen[np.argsort(x[chosen], kind="stable")]


def choose_among(
    x: np.ndarray,
    y: np.ndarray,
    target: int,
    at: np.ndarray,
    keep: np.ndarray | None = None,
    y_end: np.ndarray | None = None,
) -> np.ndarray | None:
    """decimate's choice among the points at positions `at`, as a mask over `at` (None: every
    one of them), read through the positions with no copy of their columns.

    `at` must be in x order, ties in row order, as decimate returns its indices: the choice is
    then decimate's of those rows alone. Thinning again what decimate chose costs the chosen
    points, not every point: a trace halved a dozen times is read once whole.
    """
    n = len(at)
    if target < POINTS_PER_BUCKET:
        raise ValueError(f"target must be at least {POINTS_PER_BUCKET} points, not {target}")
    if n <= target:
        return None
    tops = y if y_end is None else y_end
    selected = _finest(lambda buckets: _m4_at(x, y, tops, buckets, at), n, target)
    if keep is not None:
        selected |= keep[at]
    return selected


def keep_chosen(at: np.ndarray, chosen: np.ndarray | None) -> np.ndarray:
    """The positions `at` that the mask `chosen` (over `at`; None: all) marks, in their order,
    moved to the front of `at` itself: its first rows, as a view. The rows after them are
    overwritten; no array as long as `at` is made."""
    return at if chosen is None else at[: _compact(at, chosen)]


def _finest(m4: Callable[[int], np.ndarray], n: int, target: int) -> np.ndarray:
    """M4's mask of n points at target // 4 buckets (`m4(buckets)`), or at finer buckets where
    that fills less than half the target."""
    n_buckets = target // POINTS_PER_BUCKET
    selected = m4(n_buckets)
    # A monotone series gives two points a bucket (its first is its lowest, its last its
    # highest), and clustered times leave buckets empty: use the budget with finer buckets.
    for _ in range(3):
        finer = n_buckets * max(2, target // max(int(selected.sum()), 1))
        if 2 * selected.sum() > target or finer > n:
            break
        candidate = m4(finer)
        if candidate.sum() > target:
            break
        selected, n_buckets = candidate, finer
    return selected


def never_back(x: np.ndarray, rows: np.ndarray | None = None) -> bool:
    """Whether x (at the rows the mask `rows` marks, or all of it) never steps back, with no
    copy of the marked rows; a NaN is out of order, as np.all(x[1:] >= x[:-1]) finds it."""
    return bool(np.all(x[1:] >= x[:-1])) if rows is None else bool(_in_order(x, rows))


# The kernels' mask of every row: none given.
_EVERY = np.zeros(0, dtype=np.bool_)


@jit
def _in_order(x: np.ndarray, rows: np.ndarray) -> bool:  # pragma: no cover - compiled
    """Whether x at the rows `rows` marks never steps back; a NaN is out of order, as
    np.all(x[1:] >= x[:-1]) finds it."""
    seen = False
    before = 0.0
    for i in range(x.size):
        if rows[i]:
            if seen and not x[i] >= before:
                return False
            before = x[i]
            seen = True
    return True


def _m4(
    x: np.ndarray,
    lows: np.ndarray,
    tops: np.ndarray,
    n_buckets: int,
    in_order: bool,
    rows: np.ndarray,
) -> np.ndarray:
    """Mask of each bucket's first, last, lowest and highest point (in x order), of the rows
    `rows` marks (every row for an empty mask). Without a mask the pass in x order tests no
    row: it runs over every point of millions, and is a third faster so."""
    if not in_order:
        return _m4_any_order(x, lows, tops, n_buckets, rows)
    if rows.size == 0:
        return _m4_pass(x, lows, tops, n_buckets)
    return _m4_pass_rows(x, lows, tops, n_buckets, rows)


@jit
def _m4_pass_rows(
    xs: np.ndarray, lows: np.ndarray, tops: np.ndarray, n_buckets: int, rows: np.ndarray
) -> np.ndarray:  # pragma: no cover - compiled
    # xs is sorted at the marked rows, so each bucket is one contiguous run of them: one pass,
    # no per-point temporaries. It is `_m4_pass` over the marked rows alone; that one is kept
    # apart, testing no row, as it runs over every point of most traces a third faster.
    n = xs.size
    selected = np.zeros(n, dtype=np.bool_)
    first, last = 0, n - 1
    while not rows[first]:
        first += 1
    while not rows[last]:
        last -= 1
    x0 = xs[first]
    span = float(xs[last]) - float(x0)
    scale = n_buckets / span if span > 0 else 0.0
    current: int | np.int64 = -1
    low_at = top_at = -1
    before = -1
    low = top = 0.0
    for i in range(first, last + 1):
        if not rows[i]:
            continue
        bucket = min(np.int64((xs[i] - x0) * scale), np.int64(n_buckets - 1)) if span > 0 else 0
        if bucket != current:
            if current >= 0:
                selected[before] = True
                if low_at >= 0:
                    selected[low_at] = True
                if top_at >= 0:
                    selected[top_at] = True
            selected[i] = True
            current = bucket
            low_at = top_at = -1
        v = lows[i]
        if v == v and (low_at < 0 or v < low):  # NaN is never a bucket's extreme
            low_at, low = i, v
        v = tops[i]
        if v == v and (top_at < 0 or v > top):
            top_at, top = i, v
        before = i
    selected[last] = True
    if low_at >= 0:
        selected[low_at] = True
    if top_at >= 0:
        selected[top_at] = True
    return selected


@jit
def _m4_any_order(
    x: np.ndarray, lows: np.ndarray, tops: np.ndarray, n_buckets: int, rows: np.ndarray
) -> np.ndarray:  # pragma: no cover - compiled
    """_m4_pass's choice for x in any order: each point is compared with its bucket's best.

    "First in x order" is the least (x, index), as a stable sort would order them; the same
    order breaks ties between equal extremes, so the points chosen are the sorted pass's.
    """
    n = x.size
    every = rows.size == 0
    if every:
        x0, x1 = x.min(), x.max()
    else:
        # The marked rows' extremes, a NaN among them taken as min and max take it.
        seen = False
        x0 = x1 = x[0]
        for i in range(n):
            if rows[i]:
                if x[i] != x[i]:
                    x0 = x1 = x[i]
                    break
                if not seen or x[i] < x0:
                    x0 = x[i]
                if not seen or x[i] > x1:
                    x1 = x[i]
                seen = True
    span = float(x1) - float(x0)
    scale = n_buckets / span if span > 0 else 0.0
    first = np.full(n_buckets, -1, dtype=np.int64)
    last = np.full(n_buckets, -1, dtype=np.int64)
    low_at = np.full(n_buckets, -1, dtype=np.int64)
    top_at = np.full(n_buckets, -1, dtype=np.int64)
    for i in range(n):
        if not every and not rows[i]:
            continue
        b = min(np.int64((x[i] - x0) * scale), np.int64(n_buckets - 1)) if span > 0 else 0
        j = first[b]
        if j < 0 or x[i] < x[j]:
            first[b] = i
        j = last[b]
        if j < 0 or x[i] >= x[j]:
            last[b] = i
        v = lows[i]
        if v == v:  # NaN is never a bucket's extreme
            j = low_at[b]
            if j < 0 or v < lows[j] or (v == lows[j] and x[i] < x[j]):
                low_at[b] = i
        v = tops[i]
        if v == v:
            j = top_at[b]
            if j < 0 or v > tops[j] or (v == tops[j] and x[i] < x[j]):
                top_at[b] = i
    selected = np.zeros(n, dtype=np.bool_)
    for b in range(n_buckets):
        for j in (first[b], last[b], low_at[b], top_at[b]):
            if j >= 0:
                selected[j] = True
    return selected


@jit
def _m4_pass(
    xs: np.ndarray, lows: np.ndarray, tops: np.ndarray, n_buckets: int
) -> np.ndarray:  # pragma: no cover - compiled
    # xs is sorted, so each bucket is one contiguous run: one pass, no per-point temporaries.
    n = xs.size
    selected = np.zeros(n, dtype=np.bool_)
    x0 = xs[0]
    span = float(xs[n - 1]) - float(x0)
    scale = n_buckets / span if span > 0 else 0.0
    current: int | np.int64 = -1
    low_at = top_at = -1
    low = top = 0.0
    for i in range(n):
        bucket = min(np.int64((xs[i] - x0) * scale), np.int64(n_buckets - 1)) if span > 0 else 0
        if bucket != current:
            if current >= 0:
                selected[i - 1] = True
                if low_at >= 0:
                    selected[low_at] = True
                if top_at >= 0:
                    selected[top_at] = True
            selected[i] = True
            current = bucket
            low_at = top_at = -1
        v = lows[i]
        if v == v and (low_at < 0 or v < low):  # NaN is never a bucket's extreme
            low_at, low = i, v
        v = tops[i]
        if v == v and (top_at < 0 or v > top):
            top_at, top = i, v
    selected[n - 1] = True
    if low_at >= 0:
        selected[low_at] = True
    if top_at >= 0:
        selected[top_at] = True
    return selected


@jit
def _m4_at(
    xs: np.ndarray, lows: np.ndarray, tops: np.ndarray, n_buckets: int, at: np.ndarray
) -> np.ndarray:  # pragma: no cover - compiled
    # `_m4_pass` over the points at positions `at`, which are in x order: a mask over `at`.
    # Kept apart from `_m4_pass`, as `_m4_pass_rows` is: reading a position per point would
    # slow the pass over every point of most traces.
    n = at.size
    selected = np.zeros(n, dtype=np.bool_)
    x0 = xs[at[0]]
    span = float(xs[at[n - 1]]) - float(x0)
    scale = n_buckets / span if span > 0 else 0.0
    current: int | np.int64 = -1
    low_at = top_at = -1
    low = top = 0.0
    for i in range(n):
        j = at[i]
        bucket = min(np.int64((xs[j] - x0) * scale), np.int64(n_buckets - 1)) if span > 0 else 0
        if bucket != current:
            if current >= 0:
                selected[i - 1] = True
                if low_at >= 0:
                    selected[low_at] = True
                if top_at >= 0:
                    selected[top_at] = True
            selected[i] = True
            current = bucket
            low_at = top_at = -1
        v = lows[j]
        if v == v and (low_at < 0 or v < low):  # NaN is never a bucket's extreme
            low_at, low = i, v
        v = tops[j]
        if v == v and (top_at < 0 or v > top):
            top_at, top = i, v
    selected[n - 1] = True
    if low_at >= 0:
        selected[low_at] = True
    if top_at >= 0:
        selected[top_at] = True
    return selected


@jit
def _compact(at: np.ndarray, chosen: np.ndarray) -> int:  # pragma: no cover - compiled
    """Move the positions `chosen` marks to the front of `at`, in order; returns their count."""
    kept = 0
    for i in range(at.size):
        if chosen[i]:
            at[kept] = at[i]
            kept += 1
    return kept
