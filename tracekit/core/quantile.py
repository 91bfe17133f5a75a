"""A percentile of values that arrive a block at a time, exactly as np.percentile gives it, while
holding only the values on the near side of it: a tail quantile of a per-segment column costs
a hundredth or a twentieth of the column (and half as much again, gathered before each cut
back to it), not a copy of it, and a few passes over the values however many blocks they
come in.

np.percentile's default method ("linear", np.quantile's too) sorts the n values, takes the
virtual index v = (n - 1) q (q a fraction), and interpolates between the values at floor(v)
and the one after it (numpy's _lerp, which takes the far end's side past the middle to stay
exact there). Those two values are among the floor(v) + 2 smallest, and among the
n - floor(v) largest: of those two sets, the smaller one is all that is kept.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator

import numpy as np


def percentile_in_blocks(blocks: Callable[[], Iterable[np.ndarray]], q: float) -> float | None:
    """np.percentile(np.concatenate(list(blocks())), q) as a float, or None when there are no
    values; NaN when a value is NaN, as numpy gives it. `blocks` is called twice: once to count
    the values, once to select them (each call yields the same blocks)."""
    # As np.percentile turns its q into np.quantile's.
    return quantile_in_blocks(blocks, np.true_divide(q, 100))


def quantile_in_blocks(blocks: Callable[[], Iterable[np.ndarray]], q: float) -> float | None:
    """np.quantile(np.concatenate(list(blocks())), q) as a float: `percentile_in_blocks`
    with q a fraction."""
    n = 0
    nan = False
    for block in blocks():
        n += int(block.size)
        nan = nan or bool(np.isnan(block).any())
    if n == 0:
        return None
    if nan:
        return float("nan")
    v = (n - 1) * np.float64(q)
    i = int(np.floor(v))
    # Keep the order statistics from the near end up to i + 1 (or from i to the far end): the
    # `room` smallest values, of the values themselves or of their negations (the far end's
    # largest are its negations' smallest; a negation is exact).
    low = i + 2 <= n - i
    room = min(i + 2, n) if low else n - i
    sign = 1.0 if low else -1.0
    # Values gather in one buffer, room and half as much again, and are cut back to the room
    # smallest when a block would overflow it: each cut partitions at most the buffer and
    # frees at least half a room, so the work is a few passes over the values, however many
    # blocks they come in (a cut per block would partition the room once per block).
    buf = np.empty(min(room + max(room // 2, 1), n), dtype=np.float64)
    fill = 0
    edge = None  # after a cut, the room-th smallest: only a smaller value can enter
    for block in blocks():
        values = np.multiply(block, sign, dtype=np.float64)
        if edge is not None:
            values = values[values < edge]
        if values.size == 0:
            continue
        if fill + values.size > buf.size and fill > room:
            edge = _cut(buf, fill, room)
            fill = room
            values = values[values < edge]
        if fill + values.size > buf.size:
            grown = np.empty(fill + values.size, dtype=np.float64)
            grown[:fill] = buf[:fill]
            buf = grown
        buf[fill : fill + values.size] = values
        fill += values.size
    if fill > room:
        _cut(buf, fill, room)
        fill = room
    kept = np.sort(buf[:fill] * sign)
    first = 0 if low else i  # which order statistic kept[0] is
    lo, hi = kept[i - first], kept[min(i + 1, n - 1) - first]
    gamma = v - np.floor(v)
    diff = hi - lo
    return float(hi - diff * (1 - gamma) if gamma >= 0.5 else lo + diff * gamma)


def _cut(buf: np.ndarray, fill: int, room: int) -> float:
    """Moves the `room` smallest of buf[:fill] to its front, in place, and returns the largest
    of them (the room-th smallest)."""
    head = buf[:fill]
    head.partition(room - 1)
    return float(head[room - 1])


# Values taken at once: a few megabytes of a column, however long it is.
BLOCK_ROWS = 1 << 18


def percentile(values: np.ndarray, q: float, empty: float = 0.0) -> float:
    """np.percentile(values, q) as a float (`empty` when there are none), holding no copy of
    `values`: only the side of the percentile nearer its end (`percentile_in_blocks`)."""

    def blocks() -> Iterator[np.ndarray]:
        for at in range(0, values.size, BLOCK_ROWS):
            yield values[at : at + BLOCK_ROWS]

    got = percentile_in_blocks(blocks, q)
    return empty if got is None else got
