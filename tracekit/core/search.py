"""np.searchsorted for needles that arrive in order: one walk along the sorted array.

The detectors place millions of ACKs among millions of data segments, or times among bin edges,
and both come in time order. np.searchsorted takes a binary search per needle, each a chain of
cache misses over an array of tens of megabytes. Here each needle's search starts where the last
one ended and gallops forward (steps of 1, 2, 4, ... then a binary search within the last
step): a needle costs the logarithm of how far it moved, and the sorted array is read once,
front to back. A needle smaller than the one before is searched for in front of the last answer
alone, so any order of needles gives numpy's answer.

The sorted array must be sorted for either function to mean anything. np.searchsorted's answer on
an unsorted array depends on the order its bisection reads it in: such an array (a capture whose
clock stepped back) is handed to numpy, so that every answer is numpy's.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from tracekit.core.kernels import jit

# Needles below this many: numpy's binary searches cost no more than checking the array's order.
_FEW_NEEDLES = 64
# The dtypes the walk is compiled for ahead of time (tracekit.core.kernels.LATER_SPECS), with
# the sorted array and the needles of one dtype: the detectors' times, byte and frame numbers.
_DTYPES = (np.dtype(np.float64), np.dtype(np.int64), np.dtype(np.uint32))


def search_sorted(a: np.ndarray, v: Any, side: str = "left") -> Any:
    """np.searchsorted(a, v, side), the same answers, for a sorted 1-D `a`: faster where many
    needles `v` come in order (see the module's doc)."""
    if side not in ("left", "right"):
        raise ValueError(f"side must be 'left' or 'right', not {side!r}")
    if (
        isinstance(a, np.ndarray)
        and isinstance(v, np.ndarray)
        and a.ndim == 1
        and v.ndim == 1
        and v.size >= _FEW_NEEDLES
        and a.dtype == v.dtype
        and a.dtype in _DTYPES
    ):
        found = _walk(np.ascontiguousarray(a), np.ascontiguousarray(v), side == "right")
        if found.size == v.size:
            return found
    return np.searchsorted(a, v, side="right" if side == "right" else "left")


@jit
def _before(x: Any, y: Any) -> bool:  # pragma: no cover - compiled
    """x sorts before y in numpy's order, NaN last."""
    return x < y or (y != y and x == x)


@jit
def _walk(a: np.ndarray, v: np.ndarray, right: bool) -> np.ndarray:  # pragma: no cover - compiled
    """Each needle's place in `a`, searched from the last one's; an empty array when `a` is
    not sorted (then numpy answers)."""
    n = a.size
    for i in range(1, n):
        if _before(a[i], a[i - 1]):
            return np.zeros(0, dtype=np.int64)
    out = np.empty(v.size, dtype=np.int64)
    last = 0
    for i in range(v.size):
        x = v[i]
        if i > 0 and not _before(x, v[i - 1]):
            # Not before the last needle: its place is at or after the last one's. Gallop until
            # a place past x, then bisect the last step.
            lo = hi = last
            step = 1
            while hi < n and not (_before(x, a[hi]) if right else not _before(a[hi], x)):
                lo = hi + 1
                hi = lo + step
                step *= 2
            hi = min(hi, n)
        else:
            lo, hi = 0, last if i > 0 else n
        # The first place in [lo, hi] past x (hi is, or is n).
        while lo < hi:
            mid = (lo + hi) // 2
            if _before(x, a[mid]) if right else not _before(a[mid], x):
                hi = mid
            else:
                lo = mid + 1
        out[i] = last = lo
    return out
