"""One pass over a capture, as a stream: `tracekit ingest` (without a receiver) and `flows`.

The results are what `build_connections(read_capture(path))` gives, made as a stream: the
reader hands over chunks of packets and, on a second thread, the connections rule
(`ConnectionState`) adds their connection columns. `ingest_capture` writes the packet table as
`write_packet_table` would, a third thread encoding each chunk as a row group;
`connections_table` keeps only what the connections table needs. The compiled loops and
pyarrow's encoder release the GIL, so the three share the cores. Memory is a few chunks, the
connections' state and the data segments that start below their direction's highest byte (16
bytes each: resent or out of order), not the packet table (about 60 bytes a packet).

When an ISN the stream already used changes with a later chunk (a capture that starts with
one side's ACKs and meets that side's first segment only much later), the stream is dropped
and the capture is read again the ordinary way, so the output never depends on the road taken.
"""

from __future__ import annotations

import queue
import threading
from collections.abc import Callable
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa

from tracekit.capture import Capture, read_capture, require_tcp
from tracekit.capture.reader import (
    no_tcp_error,
    read_chunks,
)
from tracekit.connections import BaseChanged, ConnectionState, build_connections, packet_schema
from tracekit.connections.segments import resent_of, track_data
from tracekit.connections.table_io import (
    ROW_GROUP_ROWS,
    ParquetStream,
    commit_pair,
    delta_columns,
    remove_stale_temporaries,
    write_packet_table,
)
from tracekit.core.columns import ColumnBuffer, to_arrow
from tracekit.errors import CaptureError

# What _DataSegments keeps: the segments below their direction's highest byte, and the holes.
_BELOW_DTYPES = {"group": np.dtype(np.int64), "seq": np.dtype(np.int64)}
_HOLE_DTYPES = {"group": np.dtype(np.int64), "lo": np.dtype(np.int64), "hi": np.dtype(np.int64)}
# Room reserved up front for each (address space only until written; a chunk reserves its own).
_KEPT_ROWS = 1 << 16
# Records per chunk of the stream: one row group each. Every chunk costs each of the three
# threads some Python and a hand-over; 5 M packets took 0.57-0.69 s in chunks of 2**18, against
# 0.73-0.76 s in the reader's own 2**16 (which suits read_capture's one thread best).
STREAM_RECORDS_PER_CALL = ROW_GROUP_ROWS
# Chunks in each of the two other threads, waiting or in work, at most (each about 18 MB by
# then). When the capture is in the page cache the reader outruns the encoder, and the stages
# are full.
_QUEUE_CHUNKS = 3


@dataclass(frozen=True)
class IngestResult:
    """What `ingest_capture` wrote."""

    packets: int
    connections: int
    warnings: tuple[str, ...]
    streamed: bool  # False: an ISN changed after use, and the capture was read a second time


def ingest_capture(
    path: Path,
    output: Path,
    *,
    progress: Callable[[int, int], None] | None = None,
    records_per_call: int = STREAM_RECORDS_PER_CALL,
) -> IngestResult:
    """Write the packet table of the capture at `path` to `output` (Parquet), and its
    connections table beside it (`tracekit.connections.table_io.connections_path`), as one unit
    (`tracekit.connections.table_io.commit_pair`).

    Raises CaptureError as read_capture does; `output` is then left as it was.
    """
    out_schema = packet_schema()
    # Made at the first chunk, so that a file that is no capture leaves no trace at `output`.
    writers: list[_Writer] = []

    def writer() -> _Writer:
        if not writers:
            remove_stale_temporaries(output)
            writers.append(_Writer(ParquetStream(output, out_schema, delta_columns(out_schema))))
        return writers[0]

    def write(columns: dict[str, np.ndarray]) -> None:
        arrays = [to_arrow(columns[f.name], f.type) for f in out_schema]
        writer().put(pa.Table.from_arrays(arrays, schema=out_schema))

    try:
        scan = _scan(path, write, progress, records_per_call)
        if scan.state.rows == 0:
            # Nothing to write: as flows and analyze say of such a file, it is no input here.
            frames = scan.capture.stats.frames
            raise CaptureError(path, f"no TCP or UDP packets in {frames} frames")
        writer().end()  # the last row group is encoded while the connections table is made
        table = scan.table()
        writers[0].finish()
        commit_pair(writers[0].stream, table, scan.capture.path)
    except BaseException as exc:
        for w in writers:
            w.abort()
        if isinstance(exc, BaseChanged):
            return _ingest_whole(path, output, progress)
        raise
    warnings = scan.capture.stats.warnings
    return IngestResult(scan.state.rows, table.num_rows, warnings, streamed=True)


def connections_table(
    path: Path,
    *,
    progress: Callable[[int, int], None] | None = None,
    records_per_call: int = STREAM_RECORDS_PER_CALL,
) -> tuple[Capture, pa.Table]:
    """The capture (its flows and statistics; no packet rows) and its connections table, read
    in one pass that keeps no packet table. Raises CaptureError as read_capture does, and for
    a capture without TCP."""
    try:
        scan = _scan(path, None, progress, records_per_call)
    except BaseChanged:
        conns = build_connections(read_capture(path, progress=progress))
        require_tcp(conns.capture)
        return replace(conns.capture, packets=conns.capture.packets.slice(0, 0)), conns.table
    if scan.tcp_packets == 0:
        raise no_tcp_error(scan.capture)
    return scan.capture, scan.table()


@dataclass
class _Scan:
    capture: Capture
    state: ConnectionState
    segments: _DataSegments
    tcp_packets: int

    def table(self) -> pa.Table:
        return self.state.table(self.capture.flows, self.segments.resent())


def _scan(
    path: Path,
    on_chunk: Callable[[dict[str, np.ndarray]], None] | None,
    progress: Callable[[int, int], None] | None,
    records_per_call: int,
) -> _Scan:
    """Read the capture as a stream through ConnectionState; `on_chunk` gets each chunk's
    packet columns with the connection columns added. Raises BaseChanged (see the module).

    The reader (this thread) walks and decodes the next chunk while a second thread numbers
    the connections of the last one and hands it to `on_chunk`: the compiled loops of both
    release the GIL, so the two run on two cores.
    """
    state = ConnectionState()
    segments = _DataSegments()
    tcp = [0]

    def number(item: tuple[dict[str, np.ndarray], int]) -> None:
        chunk, n_flows = item
        columns = chunk | state.add(chunk, n_flows)
        tcp[0] += segments.add(columns, state.n_conn)
        if on_chunk is not None:
            on_chunk(columns)

    numbering = _Stage(number, "tracekit-connections", _QUEUE_CHUNKS)
    try:
        capture = read_chunks(
            path,
            lambda chunk, n_flows: numbering.put((chunk, n_flows)),
            progress=progress,
            records_per_call=records_per_call,
        )
        numbering.finish()
    except BaseException:
        numbering.abort()
        raise
    return _Scan(capture, state, segments, tcp[0])


class _DataSegments:
    """What the connections table's resent counts need of a stream, kept chunk by chunk
    (`track_data`): each direction's highest byte so far, the segments that start below it and
    the holes the sequence jumped over. A clean transfer keeps next to nothing; `resent` then
    counts as classify_data would over every data segment."""

    def __init__(self) -> None:
        self.high = np.full(0, -1, dtype=np.int64)
        self.below = ColumnBuffer(_BELOW_DTYPES, _KEPT_ROWS)
        self.holes = ColumnBuffer(_HOLE_DTYPES, _KEPT_ROWS)

    def add(self, chunk: dict[str, np.ndarray], n_conn: int) -> int:
        """Take in a chunk's packet columns, whose connections are numbered below `n_conn`;
        returns its TCP packet count."""
        if 2 * n_conn > self.high.size:
            grown = np.full(max(2 * n_conn, 2 * self.high.size), -1, dtype=np.int64)
            grown[: self.high.size] = self.high
            self.high = grown
        n = chunk["proto"].size
        self.below.reserve(n)
        self.holes.reserve(n)
        below, holes = self.below.arrays, self.holes.arrays
        n_below, n_holes, tcp = track_data(
            chunk["conn"],
            chunk["dir"],
            chunk["proto"],
            chunk["seq_rel"],
            chunk["payload_bytes"],
            self.high,
            below["group"],
            below["seq"],
            holes["group"],
            holes["lo"],
            holes["hi"],
            self.below.rows,
            self.holes.rows,
        )
        if n_below < 0:
            raise RuntimeError("a data segment's connection lies past the connections numbered")
        self.below.rows, self.holes.rows = n_below, n_holes
        return int(tcp)

    def resent(self) -> np.ndarray:
        """Resent segments per direction (2 conn + dir)."""
        group = self.holes.column("group")
        order = np.argsort(group, kind="stable")
        start = np.zeros(self.high.size + 1, dtype=np.int64)
        np.cumsum(np.bincount(group, minlength=self.high.size), out=start[1:])
        return resent_of(
            self.below.column("group"),
            self.below.column("seq"),
            start,
            self.holes.column("lo")[order],
            self.holes.column("hi")[order],
        )


def _ingest_whole(
    path: Path, output: Path, progress: Callable[[int, int], None] | None
) -> IngestResult:
    conns = build_connections(read_capture(path, progress=progress))
    write_packet_table(conns, output)
    return IngestResult(
        conns.packets.num_rows,
        conns.table.num_rows,
        conns.capture.stats.warnings,
        streamed=False,
    )


class _Stage:
    """A thread that does `work` on each item put, in order, beside the thread that puts them.

    At most `depth` items are in the stage, waiting or in work: `put` waits for room, `end`
    never waits (the end of a stream is no reason to stall its producer behind a full queue).
    An error in `work` stops the work; it is raised to the putting thread by its next `put`
    (or by `finish`), and the thread takes what is still put until `end`, so that the other
    side never waits for room that would not come.
    """

    def __init__(self, work: Callable[[Any], None], name: str, depth: int) -> None:
        self.work = work
        self.queue: queue.SimpleQueue[Any] = queue.SimpleQueue()
        self.room = threading.Semaphore(depth)
        self.error: BaseException | None = None
        self.ended = False
        self.stopped = False  # abort: drop what is still queued
        self.thread = threading.Thread(target=self._run, name=name, daemon=True)
        self.thread.start()

    def put(self, item: Any) -> None:
        if self.error is not None:
            raise self.error
        self.room.acquire()
        self.queue.put(item)

    def end(self) -> None:
        """Say that no more items come (the thread does what it has, then `at_end`, and stops)."""
        if not self.ended:
            self.ended = True
            self.queue.put(_END)

    def finish(self) -> None:
        """Wait for the work to be done; raise what the thread met."""
        self.end()
        self.thread.join()
        if self.error is not None:
            raise self.error

    def abort(self) -> None:
        """Stop the thread, dropping what waits, and wait for it."""
        self.stopped = True
        self.end()
        self.thread.join()

    def at_end(self) -> None:
        """Work after the last item (none here)."""

    def _run(self) -> None:
        ended = False
        try:
            while (item := self.queue.get()) is not _END:
                try:
                    if not self.stopped:
                        self.work(item)
                finally:
                    self.room.release()
            ended = True
            if not self.stopped:
                self.at_end()
        except BaseException as exc:  # handed to the putting thread by put and finish
            self.error = exc
            # Take what is still put, up to the end, unless the end is already taken (an error
            # in at_end): waiting for a second one would hang the stream.
            while not ended and self.queue.get() is not _END:
                self.room.release()


_END = object()


class _Writer(_Stage):
    """A thread that groups chunk tables into row groups and writes them: pyarrow encodes
    without the GIL, so this overlaps with reading and numbering the next chunks. It does no
    other work, which would hold the GIL against the other threads."""

    def __init__(self, stream: ParquetStream) -> None:
        self.stream = stream
        self.pending: list[pa.Table] = []
        self.rows = 0
        super().__init__(self._add, "tracekit-parquet", _QUEUE_CHUNKS)

    def _add(self, table: pa.Table) -> None:
        self.pending.append(table)
        self.rows += table.num_rows
        if self.rows >= ROW_GROUP_ROWS:
            self._flush(self.rows - self.rows % ROW_GROUP_ROWS)

    def at_end(self) -> None:
        if self.rows:
            self._flush(self.rows)

    def _flush(self, cut: int) -> None:
        whole = pa.concat_tables(self.pending)
        self.stream.write(whole.slice(0, cut))
        self.pending = [whole.slice(cut)] if cut < self.rows else []
        self.rows -= cut

    def abort(self) -> None:
        """Stop the thread and remove the unfinished file."""
        super().abort()
        self.stream.abort()
