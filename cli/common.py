"""Plumbing shared by the commands: loading captures with a progress bar and warnings."""

from __future__ import annotations

import sys
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import TYPE_CHECKING, Any

import click

if TYPE_CHECKING:
    import pyarrow as pa

    from tracekit.capture import Capture
    from tracekit.connections import Connections
    from tracekit.pipeline import Analysis

# A capture smaller than this reads in well under a second: no bar.
_BAR_MIN_BYTES = 32 << 20


@contextmanager
def progress(path: Path) -> Iterator[Any]:
    """A progress callback (bytes done, bytes in all) drawing a bar on a terminal, for big
    captures; None otherwise."""
    size = path.stat().st_size if path.is_file() else 0
    if not sys.stderr.isatty() or size < _BAR_MIN_BYTES:
        yield None
        return
    with click.progressbar(length=size, label=f"reading {path.name}", file=sys.stderr) as bar:
        done = [0]

        def update(bytes_done: int, bytes_total: int) -> None:
            bar.length = max(bytes_total, 1)
            bar.update(bytes_done - done[0])
            done[0] = bytes_done

        yield update


def read(path: str | Path, *, need_tcp: bool = True) -> Capture:
    """Read a capture, drawing a progress bar on a terminal and printing the reader's warnings."""
    from tracekit.capture import read_capture, require_tcp

    p = Path(path)
    with progress(p) as update:
        capture = read_capture(p, progress=update)
    print_warnings(p, capture.stats.warnings)
    if need_tcp:
        require_tcp(capture)
    return capture


def print_warnings(path: Path, warnings: tuple[str, ...]) -> None:
    """The reader's warnings (a cut tail, say), one line each on stderr."""
    for warning in warnings:
        click.echo(f"tracekit: warning: {path}: {warning}", err=True)


def connections_table(path: Path) -> pa.Table:
    """The connections table of a TCP capture, read in one pass that keeps no packet table."""
    from tracekit.ingest import connections_table as scan

    with progress(path) as update:
        capture, table = scan(path, progress=update)
    print_warnings(path, capture.stats.warnings)
    return table


def connections(path: str | Path, *, need_tcp: bool = True) -> Connections:
    """Read a capture and rebuild its connections."""
    from tracekit.connections import build_connections

    return build_connections(read(path, need_tcp=need_tcp))


capture_argument = click.argument(
    "capture", type=click.Path(dir_okay=False, path_type=Path), metavar="CAPTURE"
)


map_option = click.option(
    "--map",
    "maps",
    multiple=True,
    metavar="SENDER_ADDR=RECEIVER_ADDR",
    help="A sender-side address (or ip:port) as the receiver's capture shows it, "
    "behind NAT. Repeatable.",
)


def address_map(maps: tuple[str, ...], receiver: Path | None) -> dict[str, str]:
    """The --map rules, checked before any capture is read: they need a receiver capture."""
    if not maps:
        return {}
    if receiver is None:
        raise click.UsageError("--map applies to the receiver's capture: give --receiver too")
    from tracekit.merge import parse_map

    return parse_map(maps)


def analysis_options(command: Callable[..., Any]) -> Callable[..., Any]:
    """The options of every command that analyses a capture: receiver, NAT map, UDP numbering."""
    options = (
        click.option(
            "--receiver",
            type=click.Path(dir_okay=False, path_type=Path),
            help="The receiver's capture of the same transfer: the two are merged.",
        ),
        map_option,
        click.option(
            "--udp-seq-offset",
            type=click.IntRange(0, 7),
            default=0,
            show_default=True,
            help="Byte offset of the sequence number in numbered UDP datagrams.",
        ),
        click.option(
            "--udp-seq-width",
            type=click.IntRange(1, 8),
            default=4,
            show_default=True,
            help="Width in bytes of that big-endian number (UDPmon: 4).",
        ),
    )
    for option in reversed(options):
        command = option(command)
    return command


def run_analysis(
    capture: Path,
    receiver: Path | None,
    maps: tuple[str, ...],
    udp_seq_offset: int,
    udp_seq_width: int,
) -> Analysis:
    """Read the captures and run the whole pipeline on them."""
    from tracekit.pipeline import analyze
    from tracekit.udpstream import Layout

    addr_map = address_map(maps, receiver)
    return analyze(
        read(capture, need_tcp=False),
        read(receiver, need_tcp=False) if receiver else None,
        addr_map=addr_map,
        udp_layout=Layout(offset_bytes=udp_seq_offset, width_bytes=udp_seq_width),
    )


def require_merge(analysis: Analysis, capture: Path, receiver: Path | None) -> None:
    """Warn of --map rules that rewrote nothing; refuse a receiver capture that matched no
    connection: the receiver's side would silently be missing from everything shown."""
    from tracekit.merge import ReceiverMismatch

    if receiver is None or analysis.merge is None:
        return
    for rule in analysis.merge.unused_map_rules:
        click.echo(
            f"tracekit: warning: --map {rule}: rewrote no connection found in both captures",
            err=True,
        )
    if not analysis.merge.matched:
        raise ReceiverMismatch(capture, receiver)
