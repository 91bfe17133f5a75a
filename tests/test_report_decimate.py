"""Decimation keeps every marked point and each time slice's extremes, within its budget."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tracekit.report.decimate import choose_among, decimate, keep_chosen


def test_short_series_comes_back_whole() -> None:
    x = np.array([0.0, 1.0, 2.0])
    assert decimate(x, x, 8).tolist() == [0, 1, 2]


def test_kept_points_survive_and_count_is_bounded() -> None:
    rng = np.random.default_rng(7)
    n = 200_000
    x = np.sort(rng.uniform(0, 50, n))
    y = rng.normal(size=n)
    keep = np.zeros(n, bool)
    marked = rng.choice(n, 300, replace=False)
    keep[marked] = True
    idx = decimate(x, y, 4_000, keep)
    assert set(marked.tolist()) <= set(idx.tolist())
    assert len(idx) <= 4_000 + 300
    assert np.all(np.diff(idx) > 0)  # sorted by x, no repeats


def test_bucket_extremes_survive() -> None:
    # 1000 points in 10 equal buckets of x; a spike up and a spike down planted in bucket 3.
    x = np.arange(1000, dtype=np.float64)
    y = np.zeros(1000)
    y[345], y[377] = 9.0, -9.0
    idx = decimate(x, y, 40)
    assert {345, 377} <= set(idx.tolist())
    # First and last point of every bucket (buckets are x // 100 here).
    for b in range(10):
        assert {b * 100, b * 100 + 99} <= set(idx.tolist())


def test_segment_tops_use_y_end() -> None:
    x = np.arange(1000, dtype=np.float64)
    y = np.arange(1000, dtype=np.float64)
    y_end = y + 1.0
    y_end[450] = 5_000.0  # one tall bar in the middle of bucket 4
    assert 450 in decimate(x, y, 40, y_end=y_end).tolist()


def test_unsorted_x_comes_back_in_x_order() -> None:
    x = np.array([5.0, 1.0, 3.0, 2.0, 4.0, 0.0] * 100) + np.repeat(np.arange(100) * 10.0, 6)
    rng = np.random.default_rng(3)
    perm = rng.permutation(len(x))
    xs = x[perm]
    idx = decimate(xs, xs * 2, 40)
    assert np.all(np.diff(xs[idx]) >= 0)
    assert len(idx) <= 40


def test_nan_values_are_not_extremes_but_do_not_break() -> None:
    x = np.arange(100, dtype=np.float64)
    y = np.full(100, np.nan)
    y[50] = 1.0
    idx = decimate(x, y, 8)
    assert 50 in idx.tolist()
    assert len(idx) <= 8


def test_target_below_one_bucket_is_refused() -> None:
    with pytest.raises(ValueError):
        decimate(np.arange(10.0), np.arange(10.0), 3)


@settings(max_examples=50, deadline=None)
@given(
    n=st.integers(1, 3_000),
    target=st.integers(4, 500),
    seed=st.integers(0, 2**16),
)
def test_properties(n: int, target: int, seed: int) -> None:
    rng = np.random.default_rng(seed)
    x = np.sort(rng.uniform(0, 10, n))
    y = rng.normal(size=n)
    keep = rng.random(n) < 0.01
    idx = decimate(x, y, target, keep)
    assert np.all(np.diff(idx) > 0)
    assert set(np.flatnonzero(keep).tolist()) <= set(idx.tolist())
    assert len(idx) <= target + keep.sum()
    assert int(np.argmax(y)) in idx.tolist() and int(np.argmin(y)) in idx.tolist()


@settings(max_examples=60, deadline=None)
@given(
    n=st.integers(5, 2_000),
    target=st.integers(4, 300),
    seed=st.integers(0, 2**16),
    with_end=st.booleans(),
)
def test_unsorted_x_chooses_what_a_stable_sort_first_would(
    n: int, target: int, seed: int, with_end: bool
) -> None:
    # Coarse values make ties in x and in y: the choice between equal points must follow a
    # stable sort's order too. (Up to `target` points all come back, in input order.)
    target = min(target, n - 1)
    rng = np.random.default_rng(seed)
    x = rng.integers(0, 50, n).astype(np.float64)
    y = rng.integers(0, 5, n).astype(np.float64)
    y_end = y + rng.integers(0, 3, n) if with_end else None
    keep = rng.random(n) < 0.02
    order = np.argsort(x, kind="stable")
    expected = order[
        decimate(x[order], y[order], target, keep[order], None if y_end is None else y_end[order])
    ]
    assert decimate(x, y, target, keep, y_end).tolist() == expected.tolist()


# No deadline: the first example may wait for the kernels to compile (a tree edited since its
# build runs them through numba).
@settings(deadline=None)
@given(
    n=st.integers(5, 2_000),
    target=st.integers(4, 300),
    seed=st.integers(0, 2**16),
    with_end=st.booleans(),
    share=st.floats(0.0, 1.0),
)
def test_masked_rows_and_positions_choose_what_those_rows_alone_would(
    n: int, target: int, seed: int, with_end: bool, share: float
) -> None:
    # A mask of rows (a trace's `rows`) decimates as the rows copied out would, and names them
    # by their place in the columns; in time order or not, ties in x and in y included.
    rng = np.random.default_rng(seed)
    x = rng.integers(0, 50, n).astype(np.float64)
    if rng.random() < 0.5:
        x = np.sort(x)
    y = rng.integers(0, 5, n).astype(np.float64)
    y_end = y + rng.integers(0, 3, n) if with_end else None
    keep = rng.random(n) < 0.02
    rows = rng.random(n) < share
    at = np.flatnonzero(rows)
    alone = decimate(x[rows], y[rows], target, keep[rows], None if y_end is None else y_end[rows])
    assert decimate(x, y, target, keep, y_end, rows).tolist() == at[alone].tolist()
    # The same rows as positions in x order, ties in row order (as decimate gives them): the
    # choice among them is decimate's of those points copied out in that order.
    at = at[np.argsort(x[at], kind="stable")]
    alone = decimate(x[at], y[at], target, keep[at], None if y_end is None else y_end[at])
    chosen = choose_among(x, y, target, at, keep, y_end)
    assert (at if chosen is None else at[chosen]).tolist() == at[alone].tolist()


def test_the_chosen_positions_move_to_the_front_of_their_own_array() -> None:
    at = np.array([3, 8, 9, 15, 20, 21], dtype=np.int64)
    chosen = np.array([True, False, True, False, False, True])
    kept = keep_chosen(at, chosen)
    assert kept.tolist() == [3, 9, 21]
    assert np.shares_memory(kept, at)  # no second array as long as the positions
    assert keep_chosen(at, None) is at
