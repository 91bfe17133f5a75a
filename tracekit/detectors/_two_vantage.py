"""Helpers of the detectors that read the merge of two captures (tracekit.merge)."""

from __future__ import annotations

from abc import abstractmethod
from collections.abc import Iterator
from dataclasses import dataclass
from typing import ClassVar

import numpy as np
import pandas as pd

from tracekit.core.groups import kept_rows, row_count
from tracekit.detectors.base import AnalysisContext, Detector
from tracekit.findings import DIRECTIONS, Finding
from tracekit.merge import Merge, fate_is


def rows_where(merge: Merge, keep: np.ndarray) -> Iterator[tuple[int, int, np.ndarray, int]]:
    """Per (conn, dir) in order, the positions in `merge.transmissions` of its rows that `keep`
    (one flag per row) keeps, where it keeps any, and how many rows the direction has. Read
    from the merge's grouping of the rows by direction: no copy of the whole table is made."""
    for (conn, direction), rows in sorted(merge.transmission_groups().items()):
        hit = kept_rows(rows, keep)
        if hit.size:
            yield conn, direction, hit, row_count(rows)


def by_connection(merge: Merge, fate: str) -> Iterator[tuple[int, int, pd.DataFrame, int]]:
    """Per (conn, dir) with transmissions of this fate: conn, dir, those rows, all its rows."""
    tx = merge.transmissions
    if tx.empty:
        return
    is_fate = fate_is(tx, fate)
    if not is_fate.any():
        return
    for conn, direction, hit, total in rows_where(merge, is_fate):
        yield conn, direction, tx.iloc[hit], total


def times(rows: pd.DataFrame) -> np.ndarray:
    """Sender times of the rows (where the sender capture lacks one, the arrival time)."""
    t = rows["sender_t_s"].to_numpy(dtype=np.float64)
    return np.where(np.isnan(t), rows["receiver_t_s"].to_numpy(dtype=np.float64), t)


class FateDetector(Detector):
    """A detector that reports the transmissions of one fate (tracekit.merge), per direction.

    A subclass names the fate (its `kind`) and says, in `summary_text`, `explanation` and
    `advice`, what that fate means and what to change.
    """

    explanation: ClassVar[str]
    advice: ClassVar[str]
    # The evidence's names: the count, the bytes, the ratio to the direction's transmissions
    # and the times; None for the count and the bytes: `<kind>s_packets`, `<kind>_bytes`.
    packets_key: ClassVar[str | None] = None
    bytes_key: ClassVar[str | None] = None
    ratio_key: ClassVar[str] = "drop_ratio"
    times_key: ClassVar[str] = "drop_times_s"

    @dataclass(frozen=True)
    class Config:
        # With two captures each one is a fact, not a sample: one is enough to report.
        min_drops_packets: int = 1

    config: Config

    @abstractmethod
    def summary_text(self, count: int, total: int) -> str:
        """The finding's one-line summary."""

    def detect(self, ctx: AnalysisContext) -> Iterator[Finding]:
        if ctx.merge is None:
            return
        for conn, direction, rows, total in by_connection(ctx.merge, self.kind):
            if len(rows) < self.config.min_drops_packets:
                continue
            t = np.sort(times(rows))
            count = len(rows)
            yield self.finding(
                conn=conn,
                direction=DIRECTIONS[direction],
                start_s=float(t[0]),
                end_s=float(t[-1]),
                evidence={
                    self.packets_key or f"{self.kind}s_packets": count,
                    self.bytes_key or f"{self.kind}_bytes": int(rows["len"].sum()),
                    "transmissions_packets": total,
                    self.ratio_key: count / total,
                    self.times_key: t,
                },
                summary=self.summary_text(count, total),
                explanation=self.explanation,
                advice=self.advice,
            )
