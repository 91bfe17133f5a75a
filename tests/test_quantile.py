"""percentile_in_blocks: np.percentile's value, bit for bit, from values given a block at a time."""

from __future__ import annotations

import tracemalloc

import numpy as np
import pytest

from tracekit.core import quantile
from tracekit.core.quantile import percentile_in_blocks, quantile_in_blocks


def _split(values: np.ndarray, size: int) -> list[np.ndarray]:
    return [values[at : at + size] for at in range(0, values.size, size)]


@pytest.mark.parametrize("q", [0, 1, 5, 37.5, 50, 95, 99, 100])
@pytest.mark.parametrize("n", [1, 2, 3, 10, 101, 4099])
def test_the_percentile_is_numpys(q: float, n: int) -> None:
    rng = np.random.default_rng(n * 1000 + int(q * 10))
    # Ties (a few distinct values, as segment sizes and serialisation times give) and spread.
    values = np.where(rng.random(n) < 0.5, rng.choice([1.5, 3.0, 7.25], n), rng.normal(0, 1e3, n))
    for size in (1, 7, 64, n):
        got = percentile_in_blocks(lambda size=size: _split(values, size), q)
        assert got == float(np.percentile(values, q)), (size, got)


def test_no_values_is_none_and_a_nan_is_nan() -> None:
    assert percentile_in_blocks(lambda: [np.zeros(0), np.zeros(0)], 50) is None
    got = percentile_in_blocks(lambda: [np.array([1.0, np.nan]), np.array([2.0])], 5)
    assert got is not None and np.isnan(got)
    assert np.isnan(np.percentile([1.0, np.nan, 2.0], 5))


def test_it_holds_only_the_near_tail() -> None:
    # What is allocated while the 95th percentile of 200 blocks is found is a fraction of the
    # column: the twentieth beyond it, half as much again, and a block or two.
    values = [np.random.default_rng(i).random(1000) for i in range(200)]
    whole = np.concatenate(values)
    tracemalloc.start()
    try:
        got = percentile_in_blocks(lambda: values, 95)
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert got == float(np.percentile(whole, 95))
    assert peak <= whole.nbytes // 4


def test_its_work_is_a_few_passes_over_the_values(monkeypatch: pytest.MonkeyPatch) -> None:
    # The worst order for a 95th percentile: rising, so that every block passes the edge of
    # the largest twentieth kept so far. Each cut partitions the values gathered since the
    # last; all the cuts together partition at most three times the values, however small the
    # blocks (a cut per block would partition the kept twentieth two hundred times).
    values = np.arange(200_000, dtype=np.float64)
    sizes: list[int] = []
    real = quantile._cut

    def counting(buf: np.ndarray, fill: int, room: int) -> float:
        sizes.append(fill)
        return real(buf, fill, room)

    monkeypatch.setattr(quantile, "_cut", counting)
    got = percentile_in_blocks(lambda: _split(values, 1000), 95)
    assert got == float(np.percentile(values, 95))
    assert 0 < sum(sizes) <= 3 * values.size


@pytest.mark.parametrize("q", [0.0, 0.1, 0.5, 0.9, 0.99, 1.0])
def test_the_quantile_is_numpys(q: float) -> None:
    rng = np.random.default_rng(int(q * 100))
    values = np.where(rng.random(777) < 0.3, 2.5, rng.exponential(1e6, 777))
    got = quantile_in_blocks(lambda: _split(values, 50), q)
    assert got == float(np.quantile(values, q))
