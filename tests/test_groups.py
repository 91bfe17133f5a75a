"""Grouped running sums and maxima against a plain per-element reference."""

from __future__ import annotations

import numpy as np

from tracekit import groups

LOWEST = np.iinfo(np.int64).min


def _reference(values: np.ndarray, starts: np.ndarray) -> tuple[list[int], list[int], list[int]]:
    prev, inclusive, total = [], [], []
    seen: list[int] = []
    for v, s in zip(values.tolist(), starts.tolist(), strict=True):
        if s:
            seen = []
        prev.append(max(seen) if seen else LOWEST)
        seen.append(v)
        inclusive.append(max(seen))
        total.append(sum(seen))
    return prev, inclusive, total


def test_grouped_scans_match_the_reference() -> None:
    rng = np.random.default_rng(7)
    for _ in range(300):
        n = int(rng.integers(0, 40))
        values = rng.integers(-(2**40), 2**40, n)
        starts = groups.segment_starts(np.sort(rng.integers(0, 6, n)))
        prev, inclusive, total = _reference(values, starts)
        assert groups.segmented_cummax_prev(values, starts).tolist() == prev
        assert groups.segmented_cummax(values, starts).tolist() == inclusive
        assert groups.segmented_cumsum(values, starts).tolist() == total


def test_forward_fill_stays_inside_its_group() -> None:
    valid = np.array([False, True, False, False, True, False])
    starts = np.array([True, False, False, True, False, False])
    assert groups.ffill_index(valid, starts).tolist() == [-1, 1, 1, -1, 4, 4]
