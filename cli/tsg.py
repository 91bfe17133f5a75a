"""`tracekit tsg CAPTURE [--connection N] --export DIR`: every series, for plotting elsewhere."""

from __future__ import annotations

from pathlib import Path

import click

from cli import common
from tracekit.pipeline import vantage
from tracekit.series_export import export_series


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
def tsg(capture: Path, conn: int | None, out_dir: Path, fmt: str) -> None:
    """Export the time-sequence graph series of CAPTURE: one file per series and direction.

    Files are named conn<N>_<a2b|b2a>_<series>.<fmt>, series being segments, acks, sacks, rtt
    and flight (columns in docs/commands/tsg.md); times are seconds since the first packet.
    """
    written = export_series(vantage(common.read(capture)), out_dir, conn=conn, fmt=fmt)
    click.echo(f"{out_dir}: {len(written)} files", err=True)
