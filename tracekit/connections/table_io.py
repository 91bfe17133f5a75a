"""Writing stage outputs to Parquet, atomically (a killed run leaves no half-written file).

A packet table and its connections side file are one unit: both carry the same random
`tracekit.pair` id in their schema metadata, both are written in full to temporaries first and
then renamed, connections first. A run killed between the two renames leaves new connections
beside older packets, and `read_connections` sees their ids differ.
"""

from __future__ import annotations

import base64
import contextlib
import fcntl
import glob
import os
import re
import secrets
import stat
import time
from pathlib import Path
from typing import Any

import pyarrow as pa

from tracekit.connections import Connections
from tracekit.core.atomic import replacing, temporary_beside
from tracekit.errors import TracekitError

# Packet columns that climb steadily (times, frame numbers, sequence numbers): stored as deltas
# (Parquet's DELTA_BINARY_PACKED, which DuckDB, polars and pandas read), they write faster and
# far smaller. The ACK numbers and TCP timestamps climb too, but in long runs of one value that
# LZ4 packs as well, at a third of the delta encoder's cost.
DELTA_COLUMNS = ("ts_ns", "frame", "seq_rel")


# LZ4 (LZ4_RAW, which DuckDB, polars and pandas read), not zstd: encoding a packet table is the
# one half of `tracekit ingest` that runs beside the reader, and LZ4 halves it (5 M packets:
# 0.32 s and 32 MB, against 0.60 s and 21 MB with zstd level 1 and six delta columns).
# Dictionary pages cost time and bytes on these high-cardinality numbers (1 M packets: 0.45 s
# and 10.7 MB with them, 0.15 s and 9.9 MB without).
_WRITE_OPTIONS = {"compression": "lz4", "use_dictionary": False}
# Rows per row group, streamed or written whole. A stream's last row group is encoded after
# the capture is read: 2**18 rows keep that tail short (5 M packets: 0.1 s less than pyarrow's
# 2**20) for 0.2% more bytes; DuckDB's own groups are smaller still (122,880 rows).
ROW_GROUP_ROWS = 1 << 18
# The packet table's footer metadata: a few short strings, whatever the capture holds (the
# connections live in the side file; in the footer they made it unreadable past some 250 k).
FORMAT_KEY, FORMAT_VERSION = b"tracekit.format", b"2"
CAPTURE_KEY = b"tracekit.capture"
PAIR_KEY = b"tracekit.pair"


def _encoding(delta_columns: tuple[str, ...]) -> dict[str, str] | None:
    return {name: "DELTA_BINARY_PACKED" for name in delta_columns} or None


def _parquet_module() -> Any:
    """pyarrow.parquet, imported when first needed rather than with this module: it brings
    pyarrow's filesystems and ssl (40 ms). `tracekit ingest` opens its ParquetStream on the
    thread that numbers the first chunk, so that import overlaps with the reading."""
    import pyarrow.parquet as pq

    return pq


def write_parquet_atomic(table: pa.Table, path: Path, delta_columns: tuple[str, ...] = ()) -> None:
    """Write a table to `path` through a temporary file in the same folder and a rename.

    `delta_columns` (integer columns of the table) are stored delta-encoded.
    """
    with replacing(path, parents=True) as tmp:
        _write_table(table, tmp, delta_columns)


def _write_table(table: pa.Table, path: Path, delta_columns: tuple[str, ...] = ()) -> None:
    _parquet_module().write_table(
        table,
        path,
        row_group_size=ROW_GROUP_ROWS,
        column_encoding=_encoding(delta_columns),
        **_WRITE_OPTIONS,
    )


def _hold(path: Path) -> int | None:
    """A descriptor of `path` holding an exclusive lock on it: the mark of a temporary being
    written, which remove_stale_temporaries leaves alone (None: the file cannot be opened)."""
    try:
        fd = os.open(path, os.O_RDONLY)
    except OSError:
        return None
    with contextlib.suppress(OSError):
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    return fd


class ParquetStream:
    """A Parquet file written row group by row group, then renamed into place (`commit`) or
    removed (`abort`); the same encoding as write_parquet_atomic. The schema's metadata, known
    only at the end (say, a summary of all rows), is given to `commit`."""

    def __init__(self, path: Path, schema: pa.Schema, delta_columns: tuple[str, ...] = ()) -> None:
        self.path, self.schema = path, schema
        self.tmp = temporary_beside(path, parents=True)
        try:
            self.writer = _parquet_module().ParquetWriter(
                self.tmp,
                schema,
                column_encoding=_encoding(delta_columns),
                **_WRITE_OPTIONS,
            )
        except BaseException:
            self.tmp.unlink(missing_ok=True)
            raise
        # A second descriptor of the file, to start writing each row group back to disk while
        # the next is encoded (see _write_back); without it, slower at the end, not wrong.
        # It also holds the lock that marks the temporary as being written (_hold).
        self._fd = _hold(self.tmp)
        self._written_back = 0

    def write(self, table: pa.Table) -> None:
        """Append rows (one row group per ROW_GROUP_ROWS of them)."""
        self.writer.write_table(table, row_group_size=ROW_GROUP_ROWS)
        self._write_back()

    def _write_back(self) -> None:
        """Start writing the bytes written since the last call back to disk, without waiting.

        Renaming a file over an existing one makes ext4 write back all that the new file still
        holds in memory, there and then (its auto_da_alloc safeguard): 50 ms for a 32 MB packet
        table at the end of an ingest, 9 ms when its row groups were sent on their way as they
        came. POSIX_FADV_DONTNEED on fresh pages starts their write-back and keeps them cached
        (it drops only pages already clean).
        """
        if self._fd is None or not hasattr(os, "posix_fadvise"):
            return
        with contextlib.suppress(OSError):
            size = os.fstat(self._fd).st_size
            if size > self._written_back:
                length = size - self._written_back
                os.posix_fadvise(self._fd, self._written_back, length, os.POSIX_FADV_DONTNEED)
                self._written_back = size

    def _close_descriptor(self) -> None:
        if self._fd is not None:
            os.close(self._fd)
            self._fd = None

    def commit(self, metadata: dict[bytes, bytes]) -> None:
        """Finish the file with `metadata` on its schema, and rename it into place."""
        self.finish(metadata)
        self.rename()

    def finish(self, metadata: dict[bytes, bytes]) -> None:
        """Finish the file with `metadata` on its schema, still under its temporary name."""
        # pyarrow rebuilds a file's Arrow schema, metadata included, from the ARROW:schema
        # entry written when the writer opened: that entry is replaced by the final schema's.
        final = self.schema.with_metadata(metadata)
        entries = {k.decode(): v.decode() for k, v in metadata.items()}
        entries["ARROW:schema"] = base64.b64encode(final.serialize().to_pybytes()).decode()
        try:
            self.writer.add_key_value_metadata(entries)
            self.writer.close()
            self._write_back()
        except BaseException:
            self.abort()
            raise

    def rename(self) -> None:
        """Rename the finished file into place."""
        try:
            self.tmp.replace(self.path)
        except BaseException:
            self.abort()
            raise
        self._close_descriptor()

    def abort(self) -> None:
        """Close and remove the unfinished file."""
        with contextlib.suppress(Exception):
            self.writer.close()
        self._close_descriptor()
        self.tmp.unlink(missing_ok=True)


def connections_path(packets_path: Path) -> Path:
    """Where the connections table is written beside a packet table."""
    return packets_path.with_name(packets_path.stem + ".connections.parquet")


def pair_metadata(capture_path: Path, pair: str) -> dict[bytes, bytes]:
    """The schema metadata of both files of a packet table: the format, the capture, the
    pair's id."""
    return {
        FORMAT_KEY: FORMAT_VERSION,
        CAPTURE_KEY: str(capture_path).encode(),
        PAIR_KEY: pair.encode(),
    }


def commit_pair(stream: ParquetStream, connections: pa.Table, capture_path: Path) -> None:
    """Finish the packet table written to `stream` and write `connections` beside it
    (connections_path), as one unit: see the module. Both temporaries are removed on error."""
    meta = pair_metadata(capture_path, secrets.token_hex(16))
    target = connections_path(stream.path)
    try:
        tmp = temporary_beside(target)
    except BaseException:
        stream.abort()
        raise
    fd = _hold(tmp)
    try:
        _write_table(connections.replace_schema_metadata(meta), tmp)
        stream.finish(meta)
        # Connections first: killed before the packets' rename, the older packet file beside
        # them has another pair id, which read_connections reports.
        tmp.replace(target)
        stream.rename()
    except BaseException:
        tmp.unlink(missing_ok=True)
        stream.abort()
        raise
    finally:
        if fd is not None:
            os.close(fd)


def write_packet_table(conns: Connections, path: Path, packets: pa.Table | None = None) -> None:
    """Write the packet table (`packets`, or the connections') to `path`, connections beside it,
    as one unit (commit_pair)."""
    remove_stale_temporaries(path)
    packets = conns.packets if packets is None else packets
    out_schema = packets.schema.remove_metadata()
    stream = ParquetStream(path, out_schema, delta_columns(out_schema))
    try:
        stream.write(packets.replace_schema_metadata(None))
    except BaseException:
        stream.abort()
        raise
    commit_pair(stream, conns.table, conns.capture.path)


def read_connections(packets_path: Path) -> pa.Table:
    """The connections table beside the packet table at `packets_path`, checked to be of the
    same write (their `tracekit.pair` ids match). A mismatch, or a file of an older format,
    is a TracekitError."""
    pq = _parquet_module()
    side = connections_path(packets_path)
    try:
        packets_meta = pq.read_schema(packets_path).metadata or {}
        table = pq.read_table(side)
    except (OSError, pa.ArrowException) as exc:
        raise TracekitError(f"{packets_path}: cannot read the packet table's pair: {exc}") from None
    side_meta = table.schema.metadata or {}
    if packets_meta.get(FORMAT_KEY) != FORMAT_VERSION or PAIR_KEY not in packets_meta:
        raise TracekitError(
            f"{packets_path}: not a packet table of this tracekit's format; ingest it again"
        )
    if side_meta.get(PAIR_KEY) != packets_meta[PAIR_KEY]:
        raise TracekitError(
            f"{side}: not the connections of {packets_path} (an ingest was interrupted between "
            "writing the two); ingest again"
        )
    return table


def remove_stale_temporaries(path: Path) -> None:
    """Remove the temporaries that writers of the packet table `path` and its connections file
    left behind when killed: only files named as tracekit.core.atomic names them, older than this
    call, and not being written (a writer holds a lock on its temporary)."""
    # A file made later than this is some running writer's, whatever its lock says.
    before = time.time_ns()
    for target in (path, connections_path(path)):
        pattern = re.compile(rf"\.{re.escape(target.name)}\.[0-9a-f]{{8}}\.tmp")
        for candidate in target.parent.glob(f".{glob.escape(target.name)}.*.tmp"):
            if not pattern.fullmatch(candidate.name):
                continue
            try:
                st = candidate.lstat()
            except OSError:
                continue
            if not stat.S_ISREG(st.st_mode) or st.st_mtime_ns >= before:
                continue
            try:
                fd = os.open(candidate, os.O_RDONLY | os.O_NOFOLLOW)
            except OSError:
                continue
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except OSError:
                continue  # held: a writer at work
            else:
                candidate.unlink(missing_ok=True)
            finally:
                os.close(fd)


def delta_columns(packet_schema: pa.Schema) -> tuple[str, ...]:
    """The DELTA_COLUMNS a packet table of this schema has."""
    return tuple(name for name in DELTA_COLUMNS if name in packet_schema.names)
