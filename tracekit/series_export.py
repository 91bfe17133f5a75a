"""Writing a vantage's series to files, one per (connection, direction, series)."""

from __future__ import annotations

from pathlib import Path

import pandas as pd

from tracekit.atomic import replacing
from tracekit.errors import TracekitError
from tracekit.pipeline import Vantage

SERIES = ("segments", "acks", "sacks", "rtt", "flight")
_DIRS = ("a2b", "b2a")


def _write_atomic(df: pd.DataFrame, path: Path, fmt: str) -> None:
    with replacing(path) as tmp:
        if fmt == "csv":
            df.to_csv(tmp, index=False)
        else:
            df.to_parquet(tmp, index=False)


def export_series(
    view: Vantage, out_dir: Path, *, conn: int | None = None, fmt: str = "csv"
) -> list[Path]:
    """Write every series of every direction that has data; return the paths written."""
    if fmt not in ("csv", "parquet"):
        raise TracekitError(f"unknown series format {fmt!r}: csv or parquet")
    n_conn = view.connections.table.num_rows
    if conn is not None and not 0 <= conn < n_conn:
        raise TracekitError(f"no connection {conn}: the capture has {n_conn} (0 to {n_conn - 1})")
    out_dir.mkdir(parents=True, exist_ok=True)
    written = []
    for c in range(n_conn) if conn is None else (conn,):
        for d, name in enumerate(_DIRS):
            series = view.series.of(c, d)
            if series.segments.empty:
                continue
            for kind in SERIES:
                path = out_dir / f"conn{c}_{name}_{kind}.{fmt}"
                _write_atomic(getattr(series, kind).drop(columns=["conn", "dir"]), path, fmt)
                written.append(path)
    return written
