"""Plumbing shared by the commands: loading captures with a progress bar and warnings, and the
rules every output path follows."""

from __future__ import annotations

import os
import re
import sys
from collections.abc import Callable, Collection, Iterable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import TYPE_CHECKING, Any

import click

from tracekit.core.atomic import temporary_beside
from tracekit.core.paths import printable, require_regular_file
from tracekit.errors import TracekitError

if TYPE_CHECKING:
    import pyarrow as pa

    from tracekit.analysis import Analysis, Selection
    from tracekit.capture import Capture
    from tracekit.connections import Connections
    from tracekit.pipeline import Early
    from tracekit.tunables import DetectorConfigs

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
        warn(f"{printable(path)}: {warning}")


def warn(line: str) -> None:
    """One warning line on stderr."""
    click.echo(f"tracekit: warning: {printable(line)}", err=True)


def connections_table(path: Path) -> pa.Table:
    """The connections table of a TCP capture, read in one pass that keeps no packet table."""
    from tracekit.connections.stream import connections_table as scan

    with progress(path) as update:
        capture, table = scan(path, progress=update)
    print_warnings(path, capture.stats.warnings)
    return table


def connections(path: str | Path, *, need_tcp: bool = True) -> Connections:
    """Read a capture and rebuild its connections."""
    from tracekit.connections import build_connections

    return build_connections(read(path, need_tcp=need_tcp))


def _regular_file(ctx: click.Context, param: click.Parameter, value: Path | None) -> Path | None:
    """A capture option's check, made before anything is read: a FIFO would block forever."""
    if value is not None:
        require_regular_file(value)
    return value


capture_argument = click.argument(
    "capture",
    type=click.Path(dir_okay=False, path_type=Path),
    metavar="CAPTURE",
    callback=_regular_file,
)


def receiver_option(help: str) -> Callable[[Callable[..., Any]], Callable[..., Any]]:
    """`--receiver CAPTURE`, checked as CAPTURE is."""
    return click.option(
        "--receiver",
        type=click.Path(dir_okay=False, path_type=Path),
        callback=_regular_file,
        help=help,
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


config_option = click.option(
    "--config",
    "config_file",
    type=click.Path(dir_okay=False, path_type=Path),
    callback=_regular_file,
    metavar="FILE",
    help="tracekit.toml (the file `check --policy` reads): its [detectors.KIND] tables tune the "
    "detectors (docs/findings.md, 'Tuning a detector').",
)


def detector_configs(config_file: Path | None) -> DetectorConfigs:
    """The detector settings of --config, as a detector's kind -> its Config.

    The file is validated whole, as `check` validates its policy, before any capture is read: a
    typo in it is bad input whichever command reads it.
    """
    if config_file is None:
        return {}
    from tracekit import detectors
    from tracekit.check.policy import load_policy

    known_kinds = {cls.kind for cls in detectors.all_detectors()}
    return load_policy(config_file, known_kinds).detector_configs


def analysis_options(command: Callable[..., Any]) -> Callable[..., Any]:
    """The options of every command that analyses a capture: receiver, NAT map, UDP numbering,
    the detectors' processes."""
    options = (
        receiver_option("The receiver's capture of the same transfer: the two are merged."),
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
        click.option(
            "-j",
            "--jobs",
            type=click.IntRange(min=0),
            default=0,
            metavar="N",
            help="Processes the detectors may use, each judging a share of the connections "
            "[default: one per core].",
        ),
    )
    for option in reversed(options):
        command = option(command)
    return command


def selection_options(command: Callable[..., Any]) -> Callable[..., Any]:
    """`--connection N`, `--from SECONDS`, `--to SECONDS`: the part of the capture analysed."""
    options = (
        click.option(
            "--connection",
            "conn",
            type=int,
            default=None,
            metavar="N",
            help="Only this connection (the # of `tracekit flows`) [default: all].",
        ),
        click.option(
            "--from",
            "from_s",
            type=float,
            default=None,
            metavar="SECONDS",
            help="Only packets at or after this time, in seconds since the capture's first "
            "packet (as tshark's frame.time_relative; the sender's with --receiver).",
        ),
        click.option(
            "--to",
            "to_s",
            type=float,
            default=None,
            metavar="SECONDS",
            help="Only packets at or before this time, in seconds since the first packet.",
        ),
    )
    for option in reversed(options):
        command = option(command)
    return command


def selection(conn: int | None, from_s: float | None, to_s: float | None) -> Selection:
    """The --connection, --from and --to options as a Selection; a bad value is a usage error
    (exit 2, one line naming the option)."""
    from tracekit.analysis import Selection

    try:
        return Selection(conn=conn, from_s=from_s, to_s=to_s)
    except ValueError as exc:
        raise click.UsageError(str(exc)) from None


def run_analysis(
    capture: Path,
    receiver: Path | None,
    maps: tuple[str, ...],
    udp_seq_offset: int,
    udp_seq_width: int,
    configs: DetectorConfigs | None = None,
    selection: Selection | None = None,
    receiver_series: bool | Collection[str] = True,
    merge_delay: bool = True,
    early: Early | None = None,
    jobs: int = 0,
) -> Analysis:
    """Read the captures and run the whole pipeline on them, with a bar and warnings;
    `configs` tune the detectors (`detector_configs`); `selection` limits it to one connection
    or a time window; `receiver_series` False skips the receiver's series, for a command that
    draws nothing of the receiver's capture, and names of series tables keep those alone;
    `merge_delay` False skips the merge's delay table, which only a view draws; `early` draws
    from tables no detector reads as soon as they are made (`analyze_files`); the detectors
    use up to `jobs` processes (0: one per core)."""
    from tracekit.cli.memory import give_back

    from tracekit.core.fork import usable_cores
    from tracekit.merge.udpstream import Layout
    from tracekit.pipeline import analyze_files

    return analyze_files(
        capture,
        receiver,
        configs=configs,
        addr_map=address_map(maps, receiver),
        udp_layout=Layout(offset_bytes=udp_seq_offset, width_bytes=udp_seq_width),
        on_warning=warn,
        progress=progress,
        selection=selection,
        receiver_series=receiver_series,
        merge_delay=merge_delay,
        early=early,
        after_stage=give_back,
        jobs=jobs or usable_cores(),
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


# --- outputs ------------------------------------------------------------------------------------
# Every command follows one rule for what it writes: no output may land on an input (the same
# path, a symlink to it, a hard link of it); missing folders above an output are made, as
# `mkdir -p` would; and an output that cannot be written (a read-only mount, a full disk, a file
# where a folder should be) is one line naming it, exit 2.


def _real(path: Path) -> Path:
    # os.path.realpath: Path.resolve raises on a symlink loop, where this only stops following.
    return Path(os.path.realpath(path))


def _file_ids(paths: Iterable[Path]) -> dict[Path, tuple[int, int] | None]:
    """Each path's real path, and its (device, inode) when it exists."""
    ids: dict[Path, tuple[int, int] | None] = {}
    for path in paths:
        try:
            st = path.stat()
            ids[_real(path)] = (st.st_dev, st.st_ino)
        except (OSError, ValueError):
            ids[_real(path)] = None
    return ids


def _overwrites(output: Path, inputs: dict[Path, tuple[int, int] | None]) -> bool:
    """Whether writing `output` would land on one of `inputs` (as _file_ids gives them)."""
    ((real, ident),) = _file_ids([output]).items()
    return real in inputs or (ident is not None and ident in inputs.values())


def _is_input(output: Path) -> TracekitError:
    return TracekitError(f"{printable(output)}: is an input file: write the output elsewhere")


def refuse_overwriting(
    inputs: Iterable[Path | None],
    files: Iterable[Path | None] = (),
    folder: Path | None = None,
    names: re.Pattern[str] | None = None,
) -> None:
    """Raise TracekitError when an output would be written over an input file.

    `files` are output files. `folder` is an output folder: with `names`, the command writes
    files of those names directly in it; without, it writes anywhere below it, so no input
    may lie under it at all.
    """
    ids = _file_ids(p for p in inputs if p is not None)
    outputs = [p for p in files if p is not None]
    for output in outputs:
        if _overwrites(output, ids):
            raise _is_input(output)
    if len({_real(p) for p in outputs}) < len(outputs):
        raise TracekitError(f"{printable(outputs[-1])}: named for two outputs")
    if folder is None:
        return
    real_folder = _real(folder)
    for real in ids:
        if names is None and real.is_relative_to(real_folder):
            raise TracekitError(
                f"{printable(folder)}: holds the input {printable(real)}: "
                "choose an output folder that holds no input"
            )
        if names is not None and real.parent == real_folder and names.fullmatch(real.name):
            raise _is_input(folder / real.name)
    if names is not None and folder.is_dir():
        # A hard link or a symlink of an input, under a name the command writes.
        for entry in folder.iterdir():
            if names.fullmatch(entry.name) and _overwrites(entry, ids):
                raise _is_input(entry)


def require_utf8_name(path: Path, record: str) -> None:
    """Refuse, before any work, an input whose name `record` (an output that keeps it as UTF-8
    text) could not hold."""
    try:
        str(path).encode()
    except UnicodeEncodeError:
        raise TracekitError(
            f"{printable(path)}: the file name is not UTF-8, which {record} must hold: "
            "rename the file"
        ) from None


def _cannot_write(output: Path, exc: OSError) -> TracekitError:
    """One line for an output that cannot be written: its name, and why."""
    problem = exc.strerror or str(exc)
    return TracekitError(f"{printable(output)}: cannot write: {problem}")


def _make_folder(folder: Path, output: Path) -> None:
    """Make `folder` and the missing ones above it, as `mkdir -p`."""
    for above in [*reversed(folder.parents), folder]:
        if above.exists() and not above.is_dir():
            raise TracekitError(
                f"{printable(output)}: cannot write: {printable(above)} is not a folder"
            )
    try:
        folder.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise _cannot_write(output, exc) from None


def prepare_output(path: Path, *, folder: bool = False) -> None:
    """Make the folders an output needs and check a file can be made there, before any work
    is done for it. `folder`: the output is a folder that files are written into."""
    where = path if folder else path.parent
    _make_folder(where, path)
    try:
        temporary_beside(where / "probe" if folder else path).unlink()
    except OSError as exc:
        raise _cannot_write(path, exc) from None


@contextmanager
def writing(path: Path) -> Iterator[None]:
    """The block writes `path` (a file or a folder of files): a failure to write there (a
    full disk, a read-only mount) is one line naming it."""
    try:
        yield
    except BrokenPipeError:
        raise
    except OSError as exc:
        raise _cannot_write(path, exc) from None
