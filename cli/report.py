"""`tracekit report CAPTURE [--receiver CAPTURE] -o report.html`: one self-contained page;
`--png DIR` / `--svg DIR`: its plots as images."""

from __future__ import annotations

from pathlib import Path

import click
from tracekit.cli import common
from tracekit.cli.memory import give_back

from tracekit.analysis import Selection
from tracekit.core import preload
from tracekit.core.paths import printable
from tracekit.detectors import all_detectors
from tracekit.errors import TracekitError
from tracekit.findings import Severity
from tracekit.report import chromium
from tracekit.report.build import RECEIVER_TABLES, ReportConfig, build_report
from tracekit.report.early import EarlyPlots
from tracekit.report.figures import IMAGE_NAME, export
from tracekit.report.html import write
from tracekit.tunables import DetectorConfigs


@click.command()
@common.capture_argument
@common.analysis_options
@common.config_option
@common.selection_options
@click.option(
    "-o",
    "--output",
    type=click.Path(dir_okay=False, path_type=Path),
    help="HTML file to write (replaced atomically; missing folders are made).",
)
@click.option(
    "--png",
    "png_dir",
    type=click.Path(file_okay=False, path_type=Path),
    help="Folder to write each drawn plot into as a PNG (1000x600, 2x scale), drawn in "
    "headless Chromium; files are named conn<N>_<a2b|b2a>_<kind>.png.",
)
@click.option(
    "--svg",
    "svg_dir",
    type=click.Path(file_okay=False, path_type=Path),
    help="Folder to write each drawn plot into as an SVG (1000x600), as --png names them.",
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
    "--min-severity",
    type=click.Choice([s.value for s in Severity]),
    default=Severity.INFO.value,
    show_default=True,
    help="List and shade findings at or above this severity; a note counts the others (the "
    "verdicts read every finding).",
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
    jobs: int,
    config_file: Path | None,
    conn: int | None,
    from_s: float | None,
    to_s: float | None,
    output: Path | None,
    png_dir: Path | None,
    svg_dir: Path | None,
    rate_window: float | None,
    max_connections: int,
    min_severity: str,
    max_listed: int,
) -> None:
    """Write an HTML report of CAPTURE that opens offline: TSGs, rates, RTT, window, findings.

    With --png or --svg, also (or, without -o, only) each drawn plot as an image.
    """
    if output is None and png_dir is None and svg_dir is None:
        raise click.UsageError("give -o FILE, --png DIR or --svg DIR")
    folders = {fmt: d for fmt, d in (("png", png_dir), ("svg", svg_dir)) if d is not None}
    if folders and not chromium.chromium_available():
        raise TracekitError(
            f"{chromium.CHROMIUM}: not found: --png and --svg draw the plots in headless Chromium; "
            "install it (Debian: apt-get install chromium)"
        )
    selection = common.selection(conn, from_s, to_s)
    config = ReportConfig(
        rate_window_s=rate_window,
        max_connections=max_connections,
        max_listed_connections=max(max_listed, max_connections),
        min_severity=Severity(min_severity),
    )
    configs = common.detector_configs(config_file)
    inputs_read = [capture, receiver, config_file]
    common.refuse_overwriting(inputs_read, [output])
    for folder in folders.values():
        common.refuse_overwriting(inputs_read, folder=folder, names=IMAGE_NAME)
    if output is not None:
        common.prepare_output(output)
    for folder in folders.values():
        common.prepare_output(folder, folder=True)
    # numba and the later stages' compiled functions load while the capture is read, those of
    # the detectors too (found when the package is scanned, as the analysis would), and the
    # merge's only with a receiver's capture to merge.
    all_detectors()
    loading = preload.start(skip=() if receiver is not None else ("tracekit.merge",))
    try:
        _report(
            capture,
            receiver,
            maps,
            udp_seq_offset,
            udp_seq_width,
            configs,
            selection,
            config,
            output,
            folders,
            jobs,
        )
    finally:
        if loading is not None:
            loading.join()


def _report(
    capture: Path,
    receiver: Path | None,
    maps: tuple[str, ...],
    udp_seq_offset: int,
    udp_seq_width: int,
    configs: DetectorConfigs,
    selection: Selection,
    config: ReportConfig,
    output: Path | None,
    folders: dict[str, Path],
    jobs: int,
) -> None:
    """Analyse the captures and write the page, the images, or both."""
    # The page's plots of the receiver's series and of the merge's delay table are encoded as
    # soon as those are made, and the tables let go before the sender's series are built (a
    # big pair's receiver series are as big as the sender's). Images are drawn from plots, and
    # a selection's connections are known only once the analysis is done: those keep them.
    early = (
        EarlyPlots(config, after_plot=give_back) if not folders and selection.everything else None
    )
    # Of the receiver's series, only what its TSG draws is kept.
    analysis = common.run_analysis(
        capture,
        receiver,
        maps,
        udp_seq_offset,
        udp_seq_width,
        configs=configs,
        selection=selection,
        receiver_series=RECEIVER_TABLES,
        early=early,
        jobs=jobs,
    )
    common.require_merge(analysis, capture, receiver)
    # As the page names them: a file name may hold bytes no UTF-8 page can.
    inputs = tuple(printable(p) for p in (capture, receiver) if p is not None)
    # The page draws from the series, the merge and the tables, never the packets: on a big
    # capture those are tens of megabytes the plots' arrays can reuse.
    analysis = analysis.without_packets()
    # The page's plots are built as they are encoded, one at a time, so that not every plot's
    # arrays are held at once; the images are drawn from plots built beforehand.
    built = build_report(analysis, inputs, config, deferred=not folders, early=early)
    findings = len(analysis.findings)
    # What the page needs is in `built` (with the analysis, for plots still to be built).
    del analysis
    give_back()
    if output is not None:
        with common.writing(output):
            path = write(built, output, after_plot=give_back)
        click.echo(f"{printable(path)}: {findings} findings", err=True)
    if folders:
        # One browser draws both formats; a failure to write names the first folder.
        with common.writing(next(iter(folders.values()))):
            written = export(built, folders)
        for fmt, folder in folders.items():
            count = sum(1 for w in written if w.suffix == f".{fmt}")
            click.echo(f"{printable(folder)}: {count} {fmt} images", err=True)
