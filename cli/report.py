"""`tracekit report CAPTURE [--receiver CAPTURE] -o report.html`: one self-contained page."""

from __future__ import annotations

from pathlib import Path

import click
from tracekit.cli import common

from tracekit.core.paths import printable
from tracekit.report.build import ReportConfig, build_report
from tracekit.report.html import write


@click.command()
@common.capture_argument
@common.analysis_options
@common.config_option
@common.selection_options
@click.option(
    "-o",
    "--output",
    required=True,
    type=click.Path(dir_okay=False, path_type=Path),
    help="HTML file to write (replaced atomically; missing folders are made).",
)
@click.option(
    "--rate-window",
    type=click.FloatRange(min=0, min_open=True),
    default=None,
    metavar="SECONDS",
    help="Throughput averaging window [default: one RTT, the median sample].",
)
@click.option(
    "--max-connections",
    type=click.IntRange(min=1),
    default=20,
    show_default=True,
    help="Connections drawn in full, the busiest first.",
)
@click.option(
    "--max-listed",
    type=click.IntRange(min=1),
    default=1000,
    show_default=True,
    help="Connections listed in the overview: those with findings, then the busiest.",
)
def report(
    capture: Path,
    receiver: Path | None,
    maps: tuple[str, ...],
    udp_seq_offset: int,
    udp_seq_width: int,
    config_file: Path | None,
    conn: int | None,
    from_s: float | None,
    to_s: float | None,
    output: Path,
    rate_window: float | None,
    max_connections: int,
    max_listed: int,
) -> None:
    """Write an HTML report of CAPTURE that opens offline: TSGs, rates, RTT, window, findings."""
    selection = common.selection(conn, from_s, to_s)
    config = ReportConfig(
        rate_window_s=rate_window,
        max_connections=max_connections,
        max_listed_connections=max(max_listed, max_connections),
    )
    configs = common.detector_configs(config_file)
    common.refuse_overwriting([capture, receiver, config_file], [output])
    common.prepare_output(output)
    analysis = common.run_analysis(
        capture, receiver, maps, udp_seq_offset, udp_seq_width, configs=configs, selection=selection
    )
    common.require_merge(analysis, capture, receiver)
    # As the page names them: a file name may hold bytes no UTF-8 page can.
    inputs = tuple(printable(p) for p in (capture, receiver) if p is not None)
    with common.writing(output):
        path = write(build_report(analysis, inputs, config), output)
    click.echo(f"{printable(path)}: {len(analysis.findings)} findings", err=True)
