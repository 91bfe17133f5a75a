"""Writing a vantage's series to files, one per (connection, direction, series)."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pandas as pd

from tracekit import schema
from tracekit.analysis import Analysis, Vantage
from tracekit.core.atomic import replacing
from tracekit.errors import TracekitError
from tracekit.series import Direction

SERIES = tuple(schema.SERIES_TABLES)  # one file per series and direction
MERGED = ("transmissions", "delay")  # with a receiver capture, one file each per direction
FORMATS = ("csv", "parquet", "xplot")
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
    # The (connection, direction) pairs exported, in the sender capture's numbering.
    directions: tuple[tuple[int, int], ...] = ()


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
    if fmt not in FORMATS:
        raise TracekitError(f"unknown series format {fmt!r}: csv, parquet or xplot")
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
    directions = []
    for c in chosen:
        for d, name in enumerate(_DIRS):
            series = view.series.of(c, d)
            if series.segments.empty:
                continue
            directions.append((c, d))
            written += _write_direction(series, out_dir / f"conn{c}_{name}", fmt)
    return Export(written, len(chosen), len(with_data) - len(chosen), tuple(directions))


def _write_direction(series: Direction, stem: Path, fmt: str) -> list[Path]:
    """One direction's series: five tables, or one xplot time-sequence graph."""
    if fmt == "xplot":
        path = stem.with_name(f"{stem.name}_tsg.xpl")
        with replacing(path) as tmp:
            tmp.write_text(xplot_tsg(series, stem.name.replace("_", " ")))
        return [path]
    written = []
    for kind in SERIES:
        path = stem.with_name(f"{stem.name}_{kind}.{fmt}")
        table = series.table(kind)
        unexported = [c for c in schema.SERIES_UNEXPORTED if c in table.columns]
        _write_atomic(table.drop(columns=unexported), path, fmt)
        written.append(path)
    return written


def export_receiver(
    analysis: Analysis, out_dir: Path, directions: tuple[tuple[int, int], ...], *, fmt: str = "csv"
) -> list[Path]:
    """The receiver capture's series and the merge's tables of the given (connection,
    direction) pairs of the sender's capture (`Export.directions`), named in the sender's
    numbering: `receiver_conn<N>_<dir>_<series>` and `merge_conn<N>_<dir>_<table>`.

    The receiver's series keep its own clock and sequence origin; the merge's tables are on
    the sender's (schema.TRANSMISSION_COLUMNS, DELAY_COLUMNS). xplot writes the receiver's
    time-sequence graphs only: the merge's tables are no graph of tcptrace's."""
    if analysis.receiver is None or analysis.merge is None:
        raise TracekitError("exporting the receiver's series needs a receiver capture")
    merge = analysis.merge
    pairs = merge.connections.pairs
    written: list[Path] = []
    for c, d in directions:
        hit = pairs[pairs["conn_s"] == c]
        if hit.empty:
            continue  # a connection only the sender's capture holds
        # flip: the receiver's capture calls a what the sender's calls b.
        rd = 1 - d if bool(hit["flip"].iloc[0]) else d
        series = analysis.receiver.series.of(int(hit["conn_r"].iloc[0]), rd)
        if not series.segments.empty:
            written += _write_direction(series, out_dir / f"receiver_conn{c}_{_DIRS[d]}", fmt)
        if fmt == "xplot":
            continue
        delay = merge.delay
        tables = {
            "transmissions": merge.transmissions_of(c, d),
            "delay": delay[(delay["conn"] == c) & (delay["dir"] == d)],
        }
        for kind in MERGED:
            path = out_dir / f"merge_conn{c}_{_DIRS[d]}_{kind}.{fmt}"
            _write_atomic(tables[kind].drop(columns=["conn", "dir"]), path, fmt)
            written.append(path)
    return written


# --- xplot ---------------------------------------------------------------------------------------
# The text format tcptrace -S writes and xplot and jPlot read: a header of the axes' types, the
# title and axis labels, then one drawing command a line (a colour name alone sets the colour of
# the commands after it), ended by `go`. The marks and colours are tcptrace's, so a TSG reads the
# same in xplot as tcptrace's: each segment a vertical line with an arrow head at each end (white,
# red when resent), the ACK line green and the window edge yellow as steps, SACK blocks purple
# lines with ticks at their ends, a duplicate ACK a tick on the ACK line, a window probe a
# diamond.


def _fmt_t(t: np.ndarray) -> np.ndarray:
    return np.char.mod("%.6f", np.asarray(t, np.float64))


def _fmt_y(y: np.ndarray) -> np.ndarray:
    return np.char.mod("%d", np.asarray(y, np.int64))


def _cmd(*parts: np.ndarray | str) -> np.ndarray:
    """Lines of one command, one per row: its words joined by spaces, column by column."""
    out = np.asarray(parts[0], dtype=object)
    for part in parts[1:]:
        out = out + " " + np.asarray(part, dtype=object)
    return np.asarray(out, dtype=object)


def _interleave(*columns: np.ndarray) -> list[str]:
    """Row i of every column, then row i+1: the lines that draw one mark stay together."""
    if not columns or not len(columns[0]):
        return []
    return np.stack(columns, axis=1).ravel().tolist()


def _segment_lines(seg: pd.DataFrame) -> list[str]:
    t, lo, hi = _fmt_t(seg["t_s"]), _fmt_y(seg["seq_rel"]), _fmt_y(seg["end_rel"])
    return _interleave(_cmd("darrow", t, lo), _cmd("uarrow", t, hi), _cmd("line", t, lo, t, hi))


def _step_lines(t_s: np.ndarray, y: np.ndarray) -> list[str]:
    """A step line: from each point, across to the next one's time, then up (or down) to it."""
    if len(t_s) < 2:
        return []
    t, v = _fmt_t(t_s), _fmt_y(y)
    return _interleave(
        _cmd("line", t[:-1], v[:-1], t[1:], v[:-1]), _cmd("line", t[1:], v[:-1], t[1:], v[1:])
    )


def xplot_tsg(d: Direction, title: str) -> str:
    """The time-sequence graph of one direction in tcptrace's xplot format (tcptrace -S -zxy:
    time and sequence numbers relative)."""
    data = d.data
    kinds = data["kind"].astype(str)
    resent = kinds.str.contains("retransmission").to_numpy()
    acks = d.acks.sort_values("t_s", kind="stable")
    sacks = d.sacks[~d.sacks["dsack"]]
    probes = d.segments[d.segments["kind"].astype(str) == "window_probe"]
    dup = acks[acks["dupack"]]
    lines = [
        "dtime signed",
        "title",
        f"{title} (time sequence graph)",
        "xlabel",
        "relative time",
        "ylabel",
        "sequence offset",
        "white",
        *_segment_lines(data[~resent]),
        "red",
        *_segment_lines(data[resent]),
        "green",
        *_step_lines(acks["t_s"].to_numpy(), acks["ack_rel"].to_numpy()),
        *_cmd("dtick", _fmt_t(dup["t_s"]), _fmt_y(dup["ack_rel"])).tolist(),
        "yellow",
        *_step_lines(acks["t_s"].to_numpy(), acks["edge_rel"].to_numpy()),
        "purple",
    ]
    t, lo, hi = _fmt_t(sacks["t_s"]), _fmt_y(sacks["left_rel"]), _fmt_y(sacks["right_rel"])
    lines += _interleave(_cmd("line", t, lo, t, hi), _cmd("htick", t, lo), _cmd("htick", t, hi))
    lines += ["orange", *_cmd("diamond", _fmt_t(probes["t_s"]), _fmt_y(probes["seq_rel"]))]
    lines.append("go")
    return "\n".join(str(line) for line in lines) + "\n"
