"""Open a capture read-only and hand out its (decompressed) bytes in bounded chunks."""

from __future__ import annotations

import lzma
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
    """A capture's bytes, decompressed when they are compressed, read into a caller's buffer.

    The file is opened 'rb' and never written. A compressed file is fed to its decompressor in
    small steps, one member (gzip), stream (xz) or frame (zstd) after another, so a stream that
    ends before its end marker (a capture piped to gzip and killed) yields every byte up to the
    cut, with `cut_reason` set.
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
        self._raw_eof = False
        self.eof = False
        self.cut_reason: str | None = None

    def raw_position(self) -> int:
        """Bytes of the file on disk consumed so far (for progress)."""
        try:
            return min(self._raw.tell(), self.total_bytes)
        except (OSError, ValueError):
            return self.total_bytes

    def fill(self, buf: np.ndarray, start: int) -> int:
        """Read into buf[start:] until it is full or the stream ends; returns the new fill end."""
        view = memoryview(buf)
        end = start
        limit = buf.shape[0]
        while end < limit and not self.eof:
            if self.compression is None:
                got = self._read_raw(view[end:limit])
                if not got:
                    self.eof = True
                end += got
                continue
            if not self._pending:
                self._pending = self._decompress_step()
                continue
            take = min(len(self._pending), limit - end)
            view[end : end + take] = self._pending[:take]
            self._pending = self._pending[take:]
            end += take
        return end

    def _read_raw(self, into: memoryview) -> int:
        try:
            return self._raw.readinto(into)  # type: ignore[attr-defined, no-any-return]
        except OSError as exc:
            raise CaptureError(self.path, f"cannot read: {exc.strerror or exc}") from None

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
        """Close the file."""
        self._raw.close()

    def __enter__(self) -> ByteSource:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
