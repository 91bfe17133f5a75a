"""Writing stage outputs to Parquet, atomically (a killed run leaves no half-written file)."""

from __future__ import annotations

import base64
import contextlib
import json
import os
from pathlib import Path
from typing import Any

import pyarrow as pa

from tracekit.atomic import replacing, temporary_beside
from tracekit.connections import Connections

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
        _parquet_module().write_table(
            table,
            tmp,
            row_group_size=ROW_GROUP_ROWS,
            column_encoding=_encoding(delta_columns),
            **_WRITE_OPTIONS,  # type: ignore[arg-type]
        )


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
                **_WRITE_OPTIONS,  # type: ignore[arg-type]
            )
        except BaseException:
            self.tmp.unlink(missing_ok=True)
            raise
        # A second descriptor of the file, to start writing each row group back to disk while
        # the next is encoded (see _write_back); without it, slower at the end, not wrong.
        self._fd: int | None = None
        with contextlib.suppress(OSError):
            self._fd = os.open(self.tmp, os.O_RDONLY)
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
        # pyarrow rebuilds a file's Arrow schema, metadata included, from the ARROW:schema
        # entry written when the writer opened: that entry is replaced by the final schema's.
        final = self.schema.with_metadata(metadata)
        entries = {k.decode(): v.decode() for k, v in metadata.items()}
        entries["ARROW:schema"] = base64.b64encode(final.serialize().to_pybytes()).decode()
        try:
            self.writer.add_key_value_metadata(entries)
            self.writer.close()
            self._write_back()
            self._close_descriptor()
            self.tmp.replace(self.path)
        except BaseException:
            self.abort()
            raise

    def abort(self) -> None:
        """Close and remove the unfinished file."""
        with contextlib.suppress(Exception):
            self.writer.close()
        self._close_descriptor()
        self.tmp.unlink(missing_ok=True)


def connections_path(packets_path: Path) -> Path:
    """Where the connections table is written beside a packet table."""
    return packets_path.with_name(packets_path.stem + ".connections.parquet")


def packet_metadata(capture_path: Path, connections: pa.Table) -> dict[bytes, bytes]:
    """The packet file's metadata: the capture, and the connections table as JSON."""
    return {
        b"tracekit.capture": str(capture_path).encode(),
        b"tracekit.connections": json.dumps(connections.to_pylist()).encode(),
    }


def write_packet_table(conns: Connections, path: Path, packets: pa.Table | None = None) -> None:
    """Write the packet table (`packets`, or the connections') to `path`, connections beside it.

    The connections also ride in the packet file's metadata (`tracekit.connections`, JSON), so
    the one file says which address each `conn` is.
    """
    meta = packet_metadata(conns.capture.path, conns.table)
    packets = (conns.packets if packets is None else packets).replace_schema_metadata(meta)
    write_parquet_atomic(conns.table, connections_path(path))
    write_parquet_atomic(packets, path, delta_columns(packets.schema))


def delta_columns(packet_schema: pa.Schema) -> tuple[str, ...]:
    """The DELTA_COLUMNS a packet table of this schema has."""
    return tuple(name for name in DELTA_COLUMNS if name in packet_schema.names)
