"""Grouped running maxima against a plain per-element reference."""

from __future__ import annotations

import numpy as np

from tracekit.core import groups

LOWEST = np.iinfo(np.int64).min


def _reference(values: np.ndarray, starts: np.ndarray) -> list[int]:
    prev = []
    seen: list[int] = []
    for v, s in zip(values.tolist(), starts.tolist(), strict=True):
        if s:
            seen = []
        prev.append(max(seen) if seen else LOWEST)
        seen.append(v)
    return prev


def test_grouped_scans_match_the_reference() -> None:
    rng = np.random.default_rng(7)
    for _ in range(300):
        n = int(rng.integers(0, 40))
        values = rng.integers(-(2**40), 2**40, n)
        starts = groups.segment_starts(np.sort(rng.integers(0, 6, n)))
        assert groups.segmented_cummax_prev(values, starts).tolist() == _reference(values, starts)
