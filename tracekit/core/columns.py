"""numpy arrays to Arrow columns and back, zero-copy where the layout allows, without pandas.

pyarrow's own `pa.array` and `to_numpy` import pandas on first use (0.6 s and 40 MB here), which
the commands that never need pandas (ingest, flows) should not pay. The tables these helpers
serve have no nulls: fixed-width numbers and booleans, and strings for the few text columns.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import pyarrow as pa


def to_arrow(values: np.ndarray | Sequence[object], type: pa.DataType) -> pa.Array:
    """An Arrow array of `type` holding `values` (no nulls), over their memory when it can."""
    if pa.types.is_string(type):
        encoded = [str(v).encode() for v in values]
        offsets = np.zeros(len(encoded) + 1, dtype=np.int32)
        np.cumsum([len(e) for e in encoded], out=offsets[1:])
        buffers = [None, pa.py_buffer(offsets), pa.py_buffer(b"".join(encoded))]
        return pa.Array.from_buffers(type, len(encoded), buffers)
    if pa.types.is_boolean(type):
        flags = np.asarray(values, dtype=np.bool_)
        bits = np.packbits(flags, bitorder="little")
        return pa.Array.from_buffers(type, flags.size, [None, pa.py_buffer(bits)])
    array = np.ascontiguousarray(values, dtype=type.to_pandas_dtype())
    return pa.Array.from_buffers(type, array.size, [None, pa.py_buffer(array)])


def to_numpy(column: pa.ChunkedArray | pa.Array) -> np.ndarray:
    """A fixed-width or boolean column (no nulls) as one numpy array: a read-only view of its
    memory when it is one chunk of numbers, a copy otherwise."""
    if isinstance(column, pa.ChunkedArray):
        chunks = [_chunk(c) for c in column.chunks]
        if len(chunks) == 1:
            return chunks[0]
        if not chunks:
            return np.empty(0, dtype=column.type.to_pandas_dtype())
        return np.concatenate(chunks)
    return _chunk(column)


def _chunk(array: pa.Array) -> np.ndarray:
    if array.null_count:
        raise ValueError("tracekit's tables have no nulls")
    data = array.buffers()[1]
    if pa.types.is_boolean(array.type):
        if data is None:
            return np.zeros(0, dtype=np.bool_)
        bits = np.frombuffer(data, dtype=np.uint8)
        flags = np.unpackbits(bits, bitorder="little", count=array.offset + len(array))
        return flags[array.offset :].astype(np.bool_)
    dtype = np.dtype(array.type.to_pandas_dtype())
    if data is None:
        return np.empty(0, dtype=dtype)
    values = np.frombuffer(data, dtype=dtype)
    return values[array.offset : array.offset + len(array)]


class ColumnBuffer:
    """Named numpy columns filled chunk by chunk, each one contiguous array.

    Room for `capacity` rows is reserved up front as address space only: pages never written
    cost no memory. A column that outgrows it is copied to twice the size, which touches every
    page again (slow on a virtual machine whose host backs memory page by page), so callers
    reserve what the input can hold.
    """

    def __init__(self, dtypes: dict[str, np.dtype], capacity: int) -> None:
        self.rows = 0
        try:
            self.arrays = {name: np.empty(capacity, dtype) for name, dtype in dtypes.items()}
        except MemoryError:  # a kernel that will not lend the address space: grow instead
            self.arrays = {name: np.empty(1 << 20, dtype) for name, dtype in dtypes.items()}

    def append(self, chunk: dict[str, np.ndarray]) -> None:
        """Add a chunk's rows: one array per column, all of one length."""
        count = next(iter(chunk.values())).size
        self.reserve(count)
        end = self.rows + count
        for name, values in chunk.items():
            self.arrays[name][self.rows : end] = values
        self.rows = end

    def reserve(self, count: int) -> None:
        """Make room for `count` more rows (for a caller that writes into `arrays` past `rows`
        and then moves `rows` on)."""
        end = self.rows + count
        for name, column in self.arrays.items():
            if end > column.size:
                grown = np.empty(max(end, 2 * column.size), dtype=column.dtype)
                grown[: self.rows] = column[: self.rows]
                self.arrays[name] = grown

    def column(self, name: str) -> np.ndarray:
        """The rows of one column so far (a view)."""
        return self.arrays[name][: self.rows]
