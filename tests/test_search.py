"""search_sorted against numpy's own np.searchsorted, which it stands in for."""

from __future__ import annotations

import numpy as np
import pytest

from tracekit.core import kernels
from tracekit.core.search import _walk, search_sorted

DTYPES = (np.float64, np.int64, np.uint32)


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("side", ["left", "right"])
@pytest.mark.parametrize("needles_sorted", [True, False])
def test_answers_are_numpys(dtype: type, side: str, needles_sorted: bool) -> None:
    rng = np.random.default_rng(7)
    for _ in range(200):
        # Few distinct values: runs of equal keys and equal needles, needles before the first
        # key and past the last.
        a = np.sort(rng.integers(0, 40, int(rng.integers(0, 300)))).astype(dtype)
        v = rng.integers(0, 50, int(rng.integers(64, 400))).astype(dtype)
        if needles_sorted:
            v = np.sort(v)
        expected = np.searchsorted(a, v, side=side)
        # The walk itself, not numpy behind it.
        assert np.array_equal(_walk(a, v, side == "right"), expected)
        assert np.array_equal(search_sorted(a, v, side), expected)


@pytest.mark.parametrize("side", ["left", "right"])
def test_nan_sorts_last_as_in_numpy(side: str) -> None:
    a = np.array([0.0, 1.0, 1.0, 2.0, np.nan, np.nan])
    v = np.array([-1.0, 1.0, np.nan, 1.0, 2.0, 5.0, np.nan] * 10)
    assert np.array_equal(search_sorted(a, v, side), np.searchsorted(a, v, side=side))


def test_long_jumps_between_needles() -> None:
    # A few needles far apart in a long array: the gallop's steps, not a walk of every key.
    a = np.arange(1_000_000, dtype=np.int64) * 3
    v = np.sort(np.random.default_rng(1).integers(-10, 3_000_010, 100)).astype(np.int64)
    for side in ("left", "right"):
        assert np.array_equal(search_sorted(a, v, side), np.searchsorted(a, v, side=side))


def test_an_unsorted_array_gets_numpys_answer() -> None:
    # A capture clock that stepped back: numpy's bisection decides, as it did before.
    a = np.array([0.0, 1.0, 2.0, 1.5, 3.0, 4.0] * 20)
    v = np.linspace(-1, 5, 100)
    assert _walk(a, v, False).size == 0
    assert np.array_equal(search_sorted(a, v), np.searchsorted(a, v))


def test_other_arguments_go_to_numpy() -> None:
    a = np.arange(10, dtype=np.int32)
    assert search_sorted(a, np.arange(100, dtype=np.int32)).tolist() == (
        np.searchsorted(a, np.arange(100, dtype=np.int32)).tolist()
    )
    assert search_sorted(np.arange(10.0), 3.5, "right") == 4
    with pytest.raises(ValueError, match="side"):
        search_sorted(np.arange(10.0), np.arange(100.0), "middle")


def test_the_walk_is_built_ahead_of_time_for_each_dtype() -> None:
    assert kernels.later_ahead_of_time(), "tracekit.core._aot stale: run `pip install -e .`"
    assert len(_walk.compiled) == len(DTYPES)
