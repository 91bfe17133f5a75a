"""Open a capture read-only and hand out its (decompressed) bytes in bounded chunks."""

from __future__ import annotations

import contextlib
import lzma
import mmap
import os
import zlib
from pathlib import Path
from typing import Any, BinaryIO

import numpy as np
import zstandard

from tracekit.errors import CaptureError

# Compression is told by magic bytes, never by the file name.
GZIP_MAGIC = b"\x1f\x8b"  # RFC 1952 2.3.1
XZ_MAGIC = b"\xfd7zXZ\x00"  # xz file format 2.1.1.1
ZSTD_MAGIC = b"\x28\xb5\x2f\xfd"  # RFC 8878 3.1.1

# Compressed bytes fed to a decompressor at a time: bounds what one step can expand to.
_READ_STEP = 1 << 18
# Bytes of capture in view at once: a mapped window of the file, or a buffer of decompressed
# bytes; at least twice the largest block the walk accepts, so any whole block fits in one.
# Each new window is an mmap and a munmap, which wait for the other threads' page faults and
# interrupt their cores to flush the old mappings: 5 M packets spent 40-100 ms blocked in
# them with 16 MB windows, 15 ms with 64 MB. The mapped pages are the page cache's, not new
# memory; the buffer of a compressed capture is new memory, and stays at 16 MB.
WINDOW_BYTES = 64 * 1024 * 1024
BUFFER_BYTES = 16 * 1024 * 1024
# Windows of an uncompressed file asked of the disk ahead of the walk (see ByteSource).
_READ_AHEAD_WINDOWS = 2


def detect_compression(head: bytes) -> str | None:
    """'gzip', 'xz', 'zstd' or None, from a file's first bytes."""
    if head.startswith(GZIP_MAGIC):
        return "gzip"
    if head.startswith(XZ_MAGIC):
        return "xz"
    if head.startswith(ZSTD_MAGIC):
        return "zstd"
    return None


def _decompressor(compression: str) -> Any:
    """A fresh decompressor for one gzip member, xz stream or zstd frame."""
    if compression == "gzip":
        return zlib.decompressobj(wbits=31)  # 16 + 15: gzip wrapper, 32 KiB window
    if compression == "xz":
        return lzma.LZMADecompressor(format=lzma.FORMAT_XZ)
    return zstandard.ZstdDecompressor().decompressobj()


class ByteSource:
    """A capture's bytes, one bounded window at a time: `buf[:n]` holds bytes `base` onwards.

    The file is opened 'rb' and never written. An uncompressed file is mapped read-only
    (PROT_READ) window by window, never whole, and walked in place without a copy. A compressed
    file is fed to its decompressor in small steps, one member (gzip), stream (xz) or frame (zstd)
    after another, into a buffer; a stream that ends before its end marker (a capture piped to
    gzip and killed) yields every byte up to the cut, with `cut_reason` set.
    """

    def __init__(self, path: Path) -> None:
        self.path = path
        try:
            self._raw: BinaryIO = path.open("rb")
        except FileNotFoundError:
            raise CaptureError(path, "no such file") from None
        except IsADirectoryError:
            raise CaptureError(path, "is a directory, not a capture file") from None
        except OSError as exc:
            raise CaptureError(path, f"cannot open: {exc.strerror or exc}") from None
        try:
            self.total_bytes = os.fstat(self._raw.fileno()).st_size
            head = self._raw.read(8)
            self._raw.seek(0)
        except OSError as exc:
            self._raw.close()
            raise CaptureError(path, f"cannot read: {exc.strerror or exc}") from None
        if not head:
            self._raw.close()
            raise CaptureError(path, "empty file")
        self.compression = detect_compression(head)
        self._decomp: Any = _decompressor(self.compression) if self.compression else None
        self._pending = b""
        self._map: mmap.mmap | None = None
        self.eof = False
        self.cut_reason: str | None = None
        self.base = 0
        self.n = 0
        if self.compression is None:
            self.buf = np.empty(0, np.uint8)
            self._map_at(0)
        else:
            self.buf = np.empty(BUFFER_BYTES, np.uint8)
            self.n = self.fill(self.buf, 0)

    def advance(self, pos: int) -> int:
        """Move the window so it starts with the byte now at buf[pos]; returns its new index.

        The window then holds more bytes after it, unless the capture has ended (`eof`).
        """
        offset = self.base + pos
        if self.compression is None:
            aligned = offset - offset % mmap.ALLOCATIONGRANULARITY
            self._map_at(aligned)
            return offset - aligned
        rest = self.n - pos
        self.buf[:rest] = self.buf[pos : self.n]
        self.base = offset
        self.n = self.fill(self.buf, rest)
        return 0

    def _map_at(self, offset: int) -> None:
        length = min(WINDOW_BYTES, self.total_bytes - offset)
        old = self._map
        self.buf = np.empty(0, np.uint8)  # release the old window's buffer before unmapping it
        if old is not None:
            with contextlib.suppress(BufferError):  # a view still held elsewhere: GC unmaps it
                old.close()
        # MAP_POPULATE maps the window's pages in one go instead of faulting them one by one.
        flags = mmap.MAP_SHARED | getattr(mmap, "MAP_POPULATE", 0)
        try:
            self._map = mmap.mmap(
                self._raw.fileno(), length, flags=flags, prot=mmap.PROT_READ, offset=offset
            )
        except (OSError, ValueError) as exc:
            raise CaptureError(self.path, f"cannot map: {exc}") from None
        self._read_ahead(offset + length)
        self.buf = np.frombuffer(self._map, np.uint8)
        self.base = offset
        self.n = length
        self.eof = offset + length >= self.total_bytes

    def _read_ahead(self, offset: int) -> None:
        """Ask the kernel to start reading the next windows from disk now, while this one is
        walked: a window whose pages are not in the page cache would otherwise be read when it
        is mapped, with the walk waiting. (A no-op for pages already cached.)"""
        if offset < self.total_bytes and hasattr(os, "posix_fadvise"):
            with contextlib.suppress(OSError):
                ahead = _READ_AHEAD_WINDOWS * WINDOW_BYTES
                os.posix_fadvise(self._raw.fileno(), offset, ahead, os.POSIX_FADV_WILLNEED)

    def raw_position(self) -> int:
        """Bytes of the file on disk consumed so far (for progress)."""
        if self.compression is None:
            return self.base + self.n
        try:
            return min(self._raw.tell(), self.total_bytes)
        except (OSError, ValueError):
            return self.total_bytes

    def fill(self, buf: np.ndarray, start: int) -> int:
        """Decompress into buf[start:] until it is full or the stream ends; the new fill end."""
        view = buf.data
        end = start
        limit = buf.shape[0]
        while end < limit and not self.eof:
            if not self._pending:
                self._pending = self._decompress_step()
                continue
            take = min(len(self._pending), limit - end)
            view[end : end + take] = self._pending[:take]
            self._pending = self._pending[take:]
            end += take
        return end

    def _decompress_step(self) -> bytes:
        """Decompress the next step of input; sets eof (and maybe cut_reason) at the end."""
        if self._decomp.eof:
            rest = self._decomp.unused_data
            if not rest:
                rest = self._raw.read(_READ_STEP)
            if not rest:
                self.eof = True
                return b""
            # Another gzip member, xz stream or zstd frame follows.
            self._decomp = _decompressor(self.compression or "")
            return self._decompress(rest)
        data = self._raw.read(_READ_STEP)
        if not data:
            self.eof = True
            self.cut_reason = f"{self.compression} stream ends before its end marker"
            return b""
        return self._decompress(data)

    def _decompress(self, data: bytes) -> bytes:
        try:
            return bytes(self._decomp.decompress(data))
        except (OSError, lzma.LZMAError, zlib.error, zstandard.ZstdError) as exc:
            raise CaptureError(self.path, f"corrupt {self.compression} data: {exc}") from None

    def close(self) -> None:
        """Unmap the window and close the file."""
        self.buf = np.empty(0, np.uint8)
        if self._map is not None:
            with contextlib.suppress(BufferError):
                self._map.close()
        self._raw.close()

    def __enter__(self) -> ByteSource:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
