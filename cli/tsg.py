"""`tracekit tsg CAPTURE [--connection N] --export DIR`: every series, for plotting elsewhere."""

from __future__ import annotations

import re
from pathlib import Path

import click
from tracekit.cli import common

from tracekit.core.paths import printable
from tracekit.errors import TracekitError
from tracekit.export import (
    DEFAULT_MAX_CONNECTIONS,
    FORMATS,
    MERGED,
    SERIES,
    export_receiver,
    export_series,
)
from tracekit.pipeline import vantage
from tracekit.report import chromium
from tracekit.report.build import ReportConfig, build_report
from tracekit.report.figures import IMAGE_NAME
from tracekit.report.figures import export as export_figures

# The names export_series and export_receiver write ([receiver_|merge_]conn<N>_<a2b|b2a>_
# <series>.<fmt>, or _tsg.xpl), and the temporary files beside them (tracekit.core.atomic),
# whatever the format: no input may go by one of them.
EXPORTED_NAME = re.compile(
    r"\.?(?:receiver_|merge_)?conn\d+_(?:a2b|b2a)_"
    rf"(?:(?:{'|'.join(SERIES + MERGED)})\.(?:csv|parquet)|tsg\.xpl)(?:\.[0-9a-f]+\.tmp)?"
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
    "--from",
    "from_s",
    type=float,
    default=None,
    metavar="SECONDS",
    help="Only packets at or after this time, in seconds since the capture's first packet.",
)
@click.option(
    "--to",
    "to_s",
    type=float,
    default=None,
    metavar="SECONDS",
    help="Only packets at or before this time, in seconds since the first packet.",
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
    type=click.Choice(FORMATS),
    default="csv",
    show_default=True,
    help="File format of each series; xplot: one time-sequence graph per direction, as "
    "tcptrace -S writes it.",
)
@click.option(
    "--plot",
    "plot_fmt",
    type=click.Choice(("png", "svg")),
    default=None,
    help="Also draw each exported direction's time-sequence graph (and, with --receiver, the "
    "receiver's) as the report draws it, into the same folder as conn<N>_<a2b|b2a>_tsg.<fmt>: "
    "1000x600, PNG at twice that, rendered in headless Chromium, on the --from/--to window.",
)
@common.receiver_option(
    "The receiver's capture of the same transfer: its series, and the merge's transmissions "
    "and delay, are written too."
)
@common.map_option
@click.option(
    "--max-connections",
    "limit",
    type=click.IntRange(min=0),
    default=DEFAULT_MAX_CONNECTIONS,
    show_default=True,
    help="Without --connection, export only this many connections, the busiest (payload "
    "bytes) first; 0: all.",
)
def tsg(
    capture: Path,
    conn: int | None,
    from_s: float | None,
    to_s: float | None,
    out_dir: Path,
    fmt: str,
    plot_fmt: str | None,
    receiver: Path | None,
    maps: tuple[str, ...],
    limit: int,
) -> None:
    """Export the time-sequence graph series of CAPTURE: one file per series and direction.

    Files are named conn<N>_<a2b|b2a>_<series>.<fmt>, series being segments, acks, sacks, rtt
    and flight (columns in docs/commands/tsg.md); times are seconds since the first packet,
    with --from and --to too.
    """
    selection = common.selection(conn, from_s, to_s)
    if plot_fmt is not None and not chromium.chromium_available():
        raise TracekitError(
            f"{chromium.CHROMIUM}: not found: --plot draws the graphs in headless Chromium; "
            "install it (Debian: apt-get install chromium)"
        )
    common.refuse_overwriting([capture, receiver], folder=out_dir, names=EXPORTED_NAME)
    if plot_fmt is not None:
        common.refuse_overwriting([capture, receiver], folder=out_dir, names=IMAGE_NAME)
    common.prepare_output(out_dir, folder=True)
    analysis = None
    if receiver is not None or plot_fmt is not None:
        # The plots are the report's: they need the analysis the report draws from.
        analysis = common.run_analysis(capture, receiver, maps, 0, 4, selection=selection)
        common.require_merge(analysis, capture, receiver)
        view = analysis.sender
    else:
        common.address_map(maps, receiver)  # --map without --receiver: a usage error
        view = vantage(common.read(capture), selection=selection)
    with common.writing(out_dir):
        export = export_series(view, out_dir, conn=conn, fmt=fmt, max_connections=limit or None)
        if analysis is not None and receiver is not None:
            export.written.extend(export_receiver(analysis, out_dir, export.directions, fmt=fmt))
        if analysis is not None and plot_fmt is not None:
            # The report's own graphs of the connections exported, on the --from/--to window.
            drawn = max(limit or analysis.sender.connections.table.num_rows, 1)
            config = ReportConfig(max_connections=drawn, max_listed_connections=max(drawn, 1000))
            built = build_report(analysis, (printable(capture),), config)
            export.written.extend(
                export_figures(built, {plot_fmt: out_dir}, kinds=("tsg", "tsg_receiver"))
            )
    click.echo(f"{printable(out_dir)}: {len(export.written)} files", err=True)
    if export.omitted:
        click.echo(
            f"tracekit: {printable(capture)}: exported the {export.connections} busiest of "
            f"{export.connections + export.omitted} connections with data; --max-connections 0 "
            "exports all, --connection N one",
            err=True,
        )
