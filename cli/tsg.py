"""`tracekit tsg CAPTURE [--connection N] --export DIR`: every series, for plotting elsewhere."""

from __future__ import annotations

import re
from pathlib import Path

import click
from tracekit.cli import common

from tracekit.paths import printable
from tracekit.pipeline import vantage
from tracekit.series_export import DEFAULT_MAX_CONNECTIONS, SERIES, export_series

# The names export_series writes (conn<N>_<a2b|b2a>_<series>.<fmt>), and the temporary files
# beside them (tracekit.atomic), whatever the format: no input may go by one of them.
EXPORTED_NAME = re.compile(
    rf"\.?conn\d+_(?:a2b|b2a)_(?:{'|'.join(SERIES)})\.(?:csv|parquet)(?:\.[0-9a-f]+\.tmp)?"
)


@click.command()
@common.capture_argument
@click.option(
    "--connection",
    "conn",
    type=click.IntRange(min=0),
    default=None,
    help="Only this connection (the # of `tracekit flows`) [default: all].",
)
@click.option(
    "--export",
    "out_dir",
    required=True,
    type=click.Path(file_okay=False, path_type=Path),
    help="Folder to write the series into (created if missing).",
)
@click.option(
    "--format",
    "fmt",
    type=click.Choice(["csv", "parquet"]),
    default="csv",
    show_default=True,
    help="File format of each series.",
)
@click.option(
    "--max-connections",
    "limit",
    type=click.IntRange(min=0),
    default=DEFAULT_MAX_CONNECTIONS,
    show_default=True,
    help="Without --connection, export only this many connections, the busiest (payload "
    "bytes) first; 0: all.",
)
def tsg(capture: Path, conn: int | None, out_dir: Path, fmt: str, limit: int) -> None:
    """Export the time-sequence graph series of CAPTURE: one file per series and direction.

    Files are named conn<N>_<a2b|b2a>_<series>.<fmt>, series being segments, acks, sacks, rtt
    and flight (columns in docs/commands/tsg.md); times are seconds since the first packet.
    """
    common.refuse_overwriting([capture], folder=out_dir, names=EXPORTED_NAME)
    common.prepare_output(out_dir, folder=True)
    view = vantage(common.read(capture))
    with common.writing(out_dir):
        export = export_series(view, out_dir, conn=conn, fmt=fmt, max_connections=limit or None)
    click.echo(f"{printable(out_dir)}: {len(export.written)} files", err=True)
    if export.omitted:
        click.echo(
            f"tracekit: {printable(capture)}: exported the {export.connections} busiest of "
            f"{export.connections + export.omitted} connections with data; --max-connections 0 "
            "exports all, --connection N one",
            err=True,
        )
