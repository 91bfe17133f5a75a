"""The wiring of the stages: capture -> connections -> series -> merge -> detectors -> findings.

The values it returns are in `tracekit.analysis`."""

from __future__ import annotations

import gc
import threading
from collections.abc import Callable, Collection, Mapping
from contextlib import AbstractContextManager, nullcontext
from dataclasses import replace
from pathlib import Path
from typing import Protocol, cast

import numpy as np
import pandas as pd

from tracekit import units
from tracekit.analysis import Analysis, Selection, Vantage
from tracekit.capture import Capture, read_capture
from tracekit.connections import Connections, build_connections
from tracekit.core.memory import available_bytes
from tracekit.core.paths import printable, require_regular_file
from tracekit.detectors import run_detectors
from tracekit.detectors.base import PACKET_COLUMN_NAMES, AnalysisContext
from tracekit.errors import CaptureError, TracekitError
from tracekit.findings import Finding
from tracekit.merge import Merge, merge
from tracekit.merge.stage import PACKET_COLUMNS_READ as MERGE_COLUMNS
from tracekit.merge.udpstream import Layout, has_udp_stream, udp_streams
from tracekit.schema import DELAY_COLUMNS, PROTO_TCP, empty_frame
from tracekit.series import Series, build_series
from tracekit.series.stage import PACKET_COLUMNS_READ as SERIES_COLUMNS
from tracekit.series.stage import packet_columns_read, walk_series

# The sender's packet columns an Analysis keeps: the detectors' and the frame number.
KEPT_PACKET_COLUMNS = PACKET_COLUMN_NAMES | {"frame"}

# A reader progress callback: (bytes done, bytes in all).
Progress = Callable[[int, int], None]


def vantage(
    capture: Capture,
    udp_layout: Layout | None = None,
    selection: Selection | None = None,
    *,
    series: bool = True,
) -> Vantage:
    """Connections and series of one capture, which must hold TCP or a numbered UDP stream.

    With a `selection`, the series are built of its packets only (`select`). With `series`
    False they are not built at all (`Series.empty`, at the capture's time origin)."""
    # Handed over, not lent (`connections`).
    handed = [capture]
    del capture
    conns = connections(handed.pop(), udp_layout, selection)
    return Vantage(connections=conns, series=build_series(conns) if series else no_series(conns))


def connections(
    capture: Capture, udp_layout: Layout | None = None, selection: Selection | None = None
) -> Connections:
    """The connections of one capture, which must hold TCP or a numbered UDP stream, and fit
    (`require_room`); with a `selection`, only its packets (`select`)."""
    # Handed over, not lent: with no reference left here, build_connections frees the reader's
    # columns it replaces as it goes (when the caller let the capture go too, as analyze does).
    handed = [capture]
    del capture
    conns = build_connections(handed.pop())
    if selection is not None and not selection.everything:
        conns = select(conns, selection)
    proto = conns.packets.column("proto").to_numpy()
    if not (proto == PROTO_TCP).any() and not has_udp_stream(conns, udp_layout):
        raise CaptureError(
            conns.capture.path,
            f"no TCP packets and no numbered UDP stream in {conns.capture.stats.frames} frames "
            "(a stream numbered elsewhere: --udp-seq-offset, --udp-seq-width)",
        )
    require_room(conns, tcp_packets=int(np.count_nonzero(proto == PROTO_TCP)))
    return conns


class Early(Protocol):
    """A view that draws from tables no detector reads, given them as soon as they are made
    (`analyze`), so that they need not be held to the end: `tracekit.report.early`."""

    def after_merge(
        self, sender: Connections, receiver: Connections, merged: Merge, delay: list[pd.DataFrame]
    ) -> bool:
        """Shown the merge, and handed its delay table (the one item of `delay`; the merge
        holds it no more): True when it took it (popped it, and may have changed it), False
        when it left it there for the merge to keep."""

    def after_receiver(self, sender: Connections, receiver: Vantage, merged: Merge) -> bool:
        """Shown the receiver's series (its packets gone); True when they may go."""


def no_series(conns: Connections) -> Series:
    """Series with no rows, at the capture's time origin: for a view no output draws."""
    return replace(Series.empty(), t0_ns=conns.t0_ns)


# What the series, the merge and the detectors take per TCP packet of a capture, beyond the
# packet table the reader already holds: more than the slope bench/scale.py measures for one
# capture's analyze (101 bytes a packet, the table included), so a capture that would just fit
# may be refused; half of it let the kernel kill the million-packet capture of
# tests/test_memory.py under its 230 MiB limit while it was read, before the check spoke. Other
# packets (UDP, a numbered stream's datagrams) cost less and are not counted.
ANALYSIS_BYTES_PER_PACKET = 128


def require_room(conns: Connections, tcp_packets: int, room: int | None = None) -> None:
    """Refuse, in one line and before the series are built, a capture whose analysis cannot
    fit in the memory this process can still take (`core.memory.available_bytes`, or `room`),
    rather than leave it to the kernel's out-of-memory killer."""
    if room is None:
        room = available_bytes()
    _refuse_unless_room(conns.capture.path, tcp_packets, room)


def _refuse_unless_room(
    path: Path, tcp_packets: int, room: int | None, so_far: bool = False
) -> None:
    need = tcp_packets * ANALYSIS_BYTES_PER_PACKET
    if room is None or need <= room:
        return
    packets = (
        f"first {tcp_packets:,} TCP packets already" if so_far else f"{tcp_packets:,} TCP packets"
    )
    raise CaptureError(
        path,
        f"its {packets} need at least {units.size(need)} more memory to analyse, "
        f"and {units.size(room)} is left (the machine's available memory or this "
        "process's memory limit): analyse one connection or a time window (--connection, "
        "--from/--to) or split the capture (editcap -c)",
    )


def detector_jobs(jobs: int, packets: int, room: int | None = None) -> int:
    """How many of `jobs` processes the detectors may use: each one past the first works on
    its own share of the connections, and may take up to that share of what the analysis
    takes per packet (ANALYSIS_BYTES_PER_PACKET) beside this process; as many as the memory
    left (`core.memory.available_bytes`, or `room`) has room for, and at least one."""
    if jobs <= 1:
        return 1
    if room is None:
        room = available_bytes()
    if room is None:
        return jobs
    share = packets * ANALYSIS_BYTES_PER_PACKET / jobs
    return max(1, min(jobs, 1 + int(room // share) if share > 0 else jobs))


def select(conns: Connections, selection: Selection) -> Connections:
    """The packets of one connection and of a time window, before the series and detectors.

    Connections are numbered on the whole capture first (the numbers `tracekit flows` shows),
    and keep their relative sequence numbers and segment kinds; only then are packets left
    out. A connection number the capture does not have is bad input.
    """
    if selection.conn is not None and not 0 <= selection.conn < conns.table.num_rows:
        have = conns.table.num_rows
        raise TracekitError(
            f"--connection {selection.conn}: no connection {selection.conn} in "
            f"{printable(conns.capture.path)}, which has "
            + (f"connections 0 to {have - 1}" if have else "none")
            + " (tracekit flows lists them)"
        )
    pk = conns.packets
    keep = np.ones(pk.num_rows, dtype=bool)
    if selection.conn is not None:
        keep &= pk.column("conn").to_numpy() == selection.conn
    if selection.from_s is not None or selection.to_s is not None:
        # In integer nanoseconds, as the times are stored: both ends included.
        t = pk.column("ts_ns").to_numpy() - conns.t0_ns
        if selection.from_s is not None:
            keep &= t >= int(np.ceil(selection.from_s * 1e9))
        if selection.to_s is not None:
            keep &= t <= int(np.floor(selection.to_s * 1e9))
    return conns.select(keep)


def analyze(
    sender: Capture,
    receiver: Capture | None = None,
    *,
    configs: Mapping[str, object] | None = None,
    addr_map: Mapping[str, str] | None = None,
    udp_layout: Layout | None = None,
    selection: Selection | None = None,
    receiver_series: bool | Collection[str] = True,
    merge_delay: bool = True,
    early: Early | None = None,
    after_stage: Callable[[], None] | None = None,
    jobs: int = 1,
) -> Analysis:
    """Run every stage and every detector on the sender capture (and the receiver's, if any).

    A `selection` (one connection, a time window) keeps only those packets of the sender's
    capture before the series are built; the receiver's capture is taken whole, and the merge
    matches what the sender's selection kept (the others' fate is never asked for).

    With a receiver capture, the two are merged (`tracekit.merge`; `addr_map` maps NAT'd
    sender addresses to what the receiver saw) before the detectors run. `udp_layout` says
    where numbered UDP datagrams carry their number (default: first 4 bytes, big-endian).
    The merge and the detectors read the receiver's packets, never its series: only views of
    the receiver's capture (the report's receiver TSG, exports, the notebook API) do. With
    `receiver_series` False they are not built, and `Analysis.receiver` holds empty ones; on a
    big pair that is the memory of a second copy of the data segments. Given as names of series
    tables (`tracekit.series.TABLES`), only those are kept (the others empty), for a view
    that draws those alone. With `merge_delay` False the merge's delay table is not made: no
    detector reads it, only views of the merge draw it (`tracekit.merge.merge`). `early` is
    shown the merge and then the receiver's series as soon as each is made, and says whether
    the delay table and the receiver's series may go then (`Analysis.merge` and
    `Analysis.receiver` hold them empty): a view that has drawn what it needs of them.
    `after_stage` is called after each stage, and between the series' walk and its last tables,
    once working memory is let go (a command returns it to the system there: `cli/memory.py`).
    The detectors work on up to `jobs` cores (`tracekit.detectors.run_detectors`), as many
    as the memory left has room for (`detector_jobs`).
    """
    done = after_stage or _nothing
    # Each capture is handed on and dropped here, so its replaced columns can be freed.
    # mypy does not narrow a list's items: the casts say what the order and the test ensure.
    captures = [receiver, sender]
    del sender, receiver
    selection = selection or Selection()
    pair = captures[0] is not None
    # Each capture keeps the packet columns the stages still to run read: the others go as
    # soon as its connections are built, before the next capture is read.
    merged_columns = MERGE_COLUMNS if pair else frozenset()
    snd_conns = connections(cast(Capture, captures.pop()), udp_layout, selection).keeping(
        SERIES_COLUMNS | PACKET_COLUMN_NAMES | merged_columns
    )
    done()
    # Of the receiver's series, only the tables asked for are made, and of its packets only
    # the columns those and the merge read are kept: the RTT table's own columns (options and
    # echoed timestamps, 5 bytes a packet) go before the merge's working memory is added.
    wanted = None if isinstance(receiver_series, bool) else receiver_series
    rcv_conns = (
        connections(cast(Capture, captures.pop()), udp_layout).keeping(
            merged_columns | (packet_columns_read(wanted) if receiver_series else frozenset())
        )
        if pair
        else None
    )
    done()
    # The merge reads the connections and packets, never the series: run first, its working
    # memory and the series are never held at once.
    merged = (
        merge(snd_conns, rcv_conns, addr_map, delay=merge_delay) if rcv_conns is not None else None
    )
    if early is not None:
        done()  # the merge's working memory, before the early draws beside what it made
    if early is not None and merged is not None and rcv_conns is not None:
        # Handed over, so that the early may let go of the table's columns as it draws them.
        handed = [merged.delay]
        merged = replace(merged, delay=empty_frame(DELAY_COLUMNS))
        if not early.after_merge(snd_conns, rcv_conns, merged, handed):
            merged = replace(merged, delay=handed.pop())
        del handed
    done()
    streams = tuple(udp_streams(snd_conns, rcv_conns, udp_layout, dict(addr_map or {})))
    # The merge and the UDP streams are done with the columns only they read (IP IDs).
    snd_conns = snd_conns.keeping(SERIES_COLUMNS | PACKET_COLUMN_NAMES)
    rcv = None
    if rcv_conns is not None:
        # Only the tables asked for: the flight table (16 bytes a data segment, and its
        # working memory) and the RTT samples are not made where the report's receiver TSG is
        # all that reads them, nor the packet columns only those read kept.
        rcv_conns = rcv_conns.keeping(
            packet_columns_read(wanted) if receiver_series else frozenset()
        )
        # The merge and the UDP streams have read the receiver's packets: only its connections
        # table and series are read from here on (the report's receiver TSG). Its packets go
        # once the series' walk has read them, before the series' last tables are made (the
        # walk keeps the columns those read) and before the sender's series are built.
        rcv_walk = walk_series(rcv_conns, wanted) if receiver_series else None
        rcv_conns = rcv_conns.without_packets()
        rcv_series = rcv_walk.finish(done, wanted) if rcv_walk else no_series(rcv_conns)
        del rcv_walk
        if wanted is not None:
            rcv_series = rcv_series.keeping(wanted)
        rcv = Vantage(connections=rcv_conns, series=rcv_series)
        del rcv_series
    del rcv_conns
    done()
    # Shown once the receiver's packets are gone: they are as big as its series.
    if early is not None and rcv is not None and merged is not None:
        if early.after_receiver(snd_conns, rcv, merged):
            rcv = Vantage(connections=rcv.connections, series=no_series(rcv.connections))
            # A series and the directions sliced from it refer to each other (a direction
            # slices its tables on first use): collected now, not when the interpreter next
            # looks for cycles, the receiver's are freed before the sender's are built.
            gc.collect()
        done()
    walk = walk_series(snd_conns)
    # The series' walk, the merge and the UDP streams have read the packets: from here on only
    # the columns the detectors read (and the CI metrics, a subset) are kept, and each packet's
    # frame number, which a reader of the analysis joins on (tshark's frame.number). The others
    # are freed before the series' last tables are made.
    snd_conns = snd_conns.keeping(KEPT_PACKET_COLUMNS, side_tables=False)
    done()
    snd_series = walk.finish(done)
    del walk
    snd = Vantage(connections=snd_conns, series=snd_series)
    del snd_conns, snd_series
    done()
    ctx = AnalysisContext(
        connections=snd.connections.frame(),
        packets=snd.connections.packets,
        series=snd.series,
        merge=merged,
        udp=streams,
    )
    jobs = detector_jobs(jobs, snd.connections.packets.num_rows)
    findings = run_detectors(ctx, configs=configs, after_each=after_stage, jobs=jobs)
    done()
    if not selection.everything:
        # The receiver's capture is whole: what the merge found in it alone (ACKs lost before
        # the window, say) may lie outside the selection.
        findings = [f for f in findings if _inside(f, selection)]
    return Analysis(
        sender=snd,
        findings=findings,
        receiver=rcv,
        merge=merged,
        udp=streams,
        selection=selection,
    )


def _nothing() -> None:
    """No step between stages."""


def _inside(finding: Finding, selection: Selection) -> bool:
    """Whether a finding is about the selected connection and overlaps the window."""
    if selection.conn is not None and finding.conn != selection.conn:
        return False
    if selection.from_s is not None and finding.end_s < selection.from_s:
        return False
    return selection.to_s is None or finding.start_s <= selection.to_s


def analyze_files(
    sender: str | Path,
    receiver: str | Path | None = None,
    *,
    configs: Mapping[str, object] | None = None,
    addr_map: Mapping[str, str] | None = None,
    udp_layout: Layout | None = None,
    on_warning: Callable[[str], None] | None = None,
    progress: Callable[[Path], AbstractContextManager[Progress | None]] | None = None,
    selection: Selection | None = None,
    receiver_series: bool | Collection[str] = True,
    merge_delay: bool = True,
    early: Early | None = None,
    after_stage: Callable[[], None] | None = None,
    jobs: int = 1,
) -> Analysis:
    """Read the captures and run `analyze`: the one way from files to an Analysis, for the
    commands, check, batch and the tests alike.

    Both paths are checked to be regular files before either is read (a FIFO would block). A
    pair is read on two threads at once (`_read_captures`). Each reader warning (a cut tail,
    say) goes to `on_warning` as one line that names its file, the sender's first;
    `progress(path)` may give a callback for the reader's progress (a terminal's bar);
    `selection` limits the analysis to one connection or a time window,
    `receiver_series` False leaves the receiver's series unbuilt (names of tables: only those
    are kept), `merge_delay` False leaves the merge's delay table unmade, `early` draws from
    tables no detector reads as soon as they are made, `after_stage` is called after each
    stage, and the detectors work on up to `jobs` cores (`analyze`).
    """
    paths = [Path(p) for p in (sender, receiver) if p is not None]
    for path in paths:
        require_regular_file(path)
    # Handed over as they are read, as `analyze` asks: no reference stays here. Each read
    # stops, in one line, once its TCP packets so far already need more memory than is left
    # (`require_room`); with a selection, only the selected packets count, known later.
    whole = selection is None or selection.everything
    read = _read_captures(paths, on_warning, progress or _no_progress, whole)
    return analyze(
        read.pop(0),
        read.pop() if read else None,
        configs=configs,
        addr_map=addr_map,
        udp_layout=udp_layout,
        selection=selection,
        receiver_series=receiver_series,
        merge_delay=merge_delay,
        early=early,
        after_stage=after_stage,
        jobs=jobs,
    )


def _no_progress(_path: Path) -> AbstractContextManager[Progress | None]:
    return nullcontext()


def _read_captures(
    paths: list[Path],
    on_warning: Callable[[str], None] | None,
    progress: Callable[[Path], AbstractContextManager[Progress | None]],
    check_room: bool,
) -> list[Capture]:
    """The captures at `paths` (one, or a sender's and a receiver's), in that order; then the
    warnings of each, in that order.

    A pair is read on two threads at once: the reader's compiled walk and decoder release the
    GIL, so the two reads share the cores. Not when the sender's read draws a progress bar (a
    terminal): two bars would write over each other's line, so the receiver's capture is read
    after it, and its bar drawn then. Either way the sender's error is the one raised when
    both reads fail, as when the receiver's capture was read only after the sender's.
    """
    receiver: Capture | BaseException | None = None
    with progress(paths[0]) as update:
        if len(paths) == 2 and update is None:
            sender, receiver = _read_pair(paths[0], paths[1], progress, check_room)
        else:
            sender = _read(paths[0], update, check_room)
    _tell_warnings(paths[0], sender, on_warning)
    if len(paths) == 1:
        return [sender]
    if receiver is None:
        with progress(paths[1]) as update:
            receiver = _read(paths[1], update, check_room)
    if isinstance(receiver, BaseException):
        raise receiver
    _tell_warnings(paths[1], receiver, on_warning)
    return [sender, receiver]


class _Stopped(Exception):
    """The other capture's read failed: this one stops at its next chunk."""


def _read_pair(
    sender: Path,
    receiver: Path,
    progress: Callable[[Path], AbstractContextManager[Progress | None]],
    check_room: bool,
) -> tuple[Capture, Capture | BaseException]:
    """The two captures, the receiver's read on a second thread while this one reads the
    sender's; the receiver's error in its place (raised once the sender's warnings are told).
    Each read has its own reader state: they share no buffer."""
    stop = threading.Event()
    got: list[Capture] = []
    failed: list[BaseException] = []

    def read_receiver(update: Progress | None) -> None:
        try:
            got.append(_read(receiver, update, check_room, stop))
        except BaseException as exc:  # raised on the calling thread, after the sender's read
            failed.append(exc)

    with progress(receiver) as update:
        thread = threading.Thread(
            target=read_receiver, args=(update,), name="tracekit-read-receiver", daemon=True
        )
        thread.start()
        try:
            sent = _read(sender, None, check_room)
        except BaseException:
            stop.set()
            raise
        finally:
            thread.join()
    return sent, failed[0] if failed else got[0]


def _read(
    path: Path,
    update: Progress | None,
    check_room: bool,
    stop: threading.Event | None = None,
) -> Capture:
    """The capture at `path`. With `check_room`, the read stops, in one line, once its TCP
    packets so far already need more memory than is left (`require_room`); once `stop` is set,
    at its next chunk (`_Stopped`)."""

    def after_chunk(tcp_packets: int) -> None:
        if stop is not None and stop.is_set():
            raise _Stopped
        if check_room:
            _refuse_unless_room(path, tcp_packets, available_bytes(), so_far=True)

    watched = check_room or stop is not None
    return read_capture(path, progress=update, tcp_read=after_chunk if watched else None)


def _tell_warnings(path: Path, capture: Capture, on_warning: Callable[[str], None] | None) -> None:
    if on_warning is not None:
        for warning in capture.stats.warnings:
            on_warning(f"{printable(path)}: {warning}")
