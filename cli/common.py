"""Plumbing shared by the commands: loading captures with a progress bar and warnings."""

from __future__ import annotations

import sys
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import TYPE_CHECKING

import click

if TYPE_CHECKING:
    from tracekit.capture import Capture
    from tracekit.connections import Connections

# A capture smaller than this reads in well under a second: no bar.
_BAR_MIN_BYTES = 32 << 20


@contextmanager
def _progress(path: Path) -> Iterator[object]:
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
    with _progress(p) as progress:
        capture = read_capture(p, progress=progress)  # type: ignore[arg-type]
    for warning in capture.stats.warnings:
        click.echo(f"tracekit: warning: {p}: {warning}", err=True)
    if need_tcp:
        require_tcp(capture)
    return capture


def connections(path: str | Path, *, need_tcp: bool = True) -> Connections:
    """Read a capture and rebuild its connections."""
    from tracekit.connections import build_connections

    return build_connections(read(path, need_tcp=need_tcp))


capture_argument = click.argument(
    "capture", type=click.Path(dir_okay=False, path_type=Path), metavar="CAPTURE"
)
