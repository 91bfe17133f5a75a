"""Writing a vantage's series to files, one per (connection, direction, series)."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pandas as pd

from tracekit.atomic import replacing
from tracekit.errors import TracekitError
from tracekit.pipeline import Vantage

SERIES = ("segments", "acks", "sacks", "rtt", "flight")
_DIRS = ("a2b", "b2a")
# Connections exported when none is named: five files per direction each, so a load test's
# capture of 20,000 connections would make 100,000 files (148 s); the busiest hundred are
# the ones worth plotting.
DEFAULT_MAX_CONNECTIONS = 100


@dataclass(frozen=True)
class Export:
    """What export_series wrote, and how many connections with data the limit left out."""

    written: list[Path]
    connections: int  # exported
    omitted: int


def _write_atomic(df: pd.DataFrame, path: Path, fmt: str) -> None:
    with replacing(path) as tmp:
        if fmt == "csv":
            df.to_csv(tmp, index=False)
        else:
            df.to_parquet(tmp, index=False)


def export_series(
    view: Vantage,
    out_dir: Path,
    *,
    conn: int | None = None,
    fmt: str = "csv",
    max_connections: int | None = DEFAULT_MAX_CONNECTIONS,
) -> Export:
    """Write every series of every direction that has data, of connection `conn` or else of
    the `max_connections` busiest connections (payload bytes both ways; None: all)."""
    if fmt not in ("csv", "parquet"):
        raise TracekitError(f"unknown series format {fmt!r}: csv or parquet")
    if max_connections is not None and max_connections < 1:
        raise TracekitError(f"the connection limit must be 1 or more, got {max_connections}")
    table = view.connections.table
    n_conn = table.num_rows
    if conn is not None and not 0 <= conn < n_conn:
        raise TracekitError(f"no connection {conn}: the capture has {n_conn} (0 to {n_conn - 1})")
    if conn is not None:
        ranked: list[int] = [conn]
    else:
        volume = table["bytes_a2b"].to_numpy() + table["bytes_b2a"].to_numpy()
        ranked = np.argsort(-volume, kind="stable").tolist()
    with_data = [
        c for c in ranked if any(not view.series.of(c, d).segments.empty for d in range(2))
    ]
    chosen = sorted(with_data if max_connections is None else with_data[:max_connections])
    out_dir.mkdir(parents=True, exist_ok=True)
    written = []
    for c in chosen:
        for d, name in enumerate(_DIRS):
            series = view.series.of(c, d)
            if series.segments.empty:
                continue
            for kind in SERIES:
                path = out_dir / f"conn{c}_{name}_{kind}.{fmt}"
                _write_atomic(getattr(series, kind).drop(columns=["conn", "dir"]), path, fmt)
                written.append(path)
    return Export(written, len(chosen), len(with_data) - len(chosen))
