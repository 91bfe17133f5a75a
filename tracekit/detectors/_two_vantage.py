"""Helpers of the detectors that read the merge of two captures (tracekit.merge)."""

from __future__ import annotations

from collections.abc import Iterator

import numpy as np
import pandas as pd

DIRECTION_NAMES = ("a2b", "b2a")


def by_connection(tx: pd.DataFrame, fate: str) -> Iterator[tuple[int, int, pd.DataFrame, int]]:
    """Per (conn, dir) with transmissions of this fate: conn, dir, those rows, all its rows."""
    hit = tx[tx["fate"] == fate]
    if hit.empty:
        return
    totals = tx.groupby(["conn", "dir"], observed=True).size()
    for (conn, direction), rows in hit.groupby(["conn", "dir"], observed=True):
        yield int(conn), int(direction), rows, int(totals.loc[(conn, direction)])


def times(rows: pd.DataFrame) -> np.ndarray:
    """Sender times of the rows (where the sender capture lacks one, the arrival time)."""
    t = rows["sender_t_s"].to_numpy(dtype=np.float64)
    return np.where(np.isnan(t), rows["receiver_t_s"].to_numpy(dtype=np.float64), t)
