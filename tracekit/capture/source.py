"""Open a capture read-only and hand out its (decompressed) bytes in bounded chunks."""

from __future__ import annotations

import contextlib
import lzma
import mmap
import os
import zlib
from pathlib import Path
from typing import Any, BinaryIO, cast

import numpy as np
import zstandard

from tracekit.errors import CaptureError

# Compression is told by magic bytes, never by the file name.
GZIP_MAGIC = b"\x1f\x8b"  # RFC 1952 2.3.1
XZ_MAGIC = b"\xfd7zXZ\x00"  # xz file format 2.1.1.1
ZSTD_MAGIC = b"\x28\xb5\x2f\xfd"  # RFC 8878 3.1.1

# Compressed bytes read from the file at a time.
_READ_STEP = 1 << 18
# Decompressed bytes one gzip or xz step may produce: their decompressors return a new bytes
# object that is then copied into the buffer, and a small one stays in the CPU caches.
_OUT_STEP = 1 << 20
# History a decompressor may keep: libzstd refuses frames whose window is larger
# (ZSTD_WINDOWLOG_LIMIT_DEFAULT, 2**27), and an xz dictionary gets the same bound (xz -9 uses
# 64 MiB), since a hostile header could otherwise make the decoder hold gigabytes.
HISTORY_LIMIT = 1 << 27
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


class _StepDecoder:
    """gzip members (RFC 1952 2.2) or xz streams (xz file format 2.2), one after another.

    Each step asks its decompressor for at most `max_length` bytes: zlib keeps the input it did
    not reach in `unconsumed_tail`, liblzma keeps it inside (`needs_input` is False until it has
    given out all it can).
    """

    def __init__(self, raw: BinaryIO, compression: str) -> None:
        self._raw = raw
        self._name = compression
        self._gzip = compression == "gzip"
        self._decomp: Any = self._new()
        self._hungry = True  # the decompressor has given out all it can from its input
        self.cut_reason: str | None = None

    def _new(self) -> Any:
        if self._gzip:
            return zlib.decompressobj(wbits=31)  # 16 + 15: gzip wrapper, 32 KiB window
        return lzma.LZMADecompressor(format=lzma.FORMAT_XZ, memlimit=HISTORY_LIMIT + (1 << 20))

    def readinto(self, view: memoryview) -> int:
        """Decompress into view (at most `_OUT_STEP` bytes); 0 only at the end of the file."""
        want = min(len(view), _OUT_STEP)
        while True:
            if self._decomp.eof:
                data = self._decomp.unused_data or self._raw.read(_READ_STEP)
                if not data:
                    return 0
                self._decomp = self._new()
            elif self._hungry:
                data = self._raw.read(_READ_STEP)
                if not data:
                    self.cut_reason = f"{self._name} stream ends before its end marker"
                    return 0
            else:
                data = self._decomp.unconsumed_tail if self._gzip else b""
            out = self._decomp.decompress(data, want)
            if self._gzip:
                # zlib stops short of max_length only once its input is used up.
                self._hungry = len(out) < want and not self._decomp.unconsumed_tail
            else:
                self._hungry = self._decomp.needs_input
            if out:
                view[: len(out)] = out
                return len(out)


# Frame magic numbers, RFC 8878 3.1.1 and 3.1.2 (a skippable frame's low 4 bits are free).
_ZSTD_FRAME = 0xFD2FB528
_ZSTD_SKIPPABLE = 0x184D2A50
# The field a _ZstdFrames is reading.
_MAGIC, _DESCRIPTOR, _HEADER_REST, _BLOCK, _CHECKSUM, _SKIP_SIZE = range(6)


class _ZstdFrames:
    """The compressed bytes of a zstd file as its stream reader reads them, their frame and block
    headers followed (RFC 8878 3.1) to tell a file that ends between frames from one cut inside a
    frame: the stream reader ends quietly in both.

    Only headers are looked at (a few per 128 KiB block); block contents are skipped.
    """

    def __init__(self, raw: BinaryIO) -> None:
        self._raw = raw
        self._field = _MAGIC
        self._want = 4  # bytes of the field
        self._part = b""  # of which read so far
        self._skip = 0  # bytes of block content or skippable frame still to pass
        self._checksum = False
        self._lost = False  # a header libzstd will refuse itself

    def read(self, size: int) -> bytes:
        data = self._raw.read(size)
        self._follow(data)
        return data

    @property
    def between_frames(self) -> bool:
        return self._lost or (self._field == _MAGIC and not self._part and not self._skip)

    def _follow(self, data: bytes) -> None:
        pos, size = 0, len(data)
        while not self._lost:
            if self._skip:
                take = min(self._skip, size - pos)
                self._skip -= take
                pos += take
                if self._skip:
                    return
            need = self._want - len(self._part)
            if size - pos < need:
                self._part += data[pos:]
                return
            value = int.from_bytes(self._part + data[pos : pos + need], "little")
            self._part = b""
            pos += need
            self._read_field(value)

    def _read_field(self, value: int) -> None:
        field = self._field
        if field == _MAGIC:
            if value == _ZSTD_FRAME:
                self._next(_DESCRIPTOR, 1)
            elif value & ~0xF == _ZSTD_SKIPPABLE:
                self._next(_SKIP_SIZE, 4)
            else:
                self._lost = True
        elif field == _DESCRIPTOR:
            # RFC 8878 3.1.1.1.1: Frame_Content_Size_Flag (bits 7-6), Single_Segment_Flag (5),
            # Content_Checksum_Flag (2), Dictionary_ID_Flag (1-0); then the window descriptor
            # (absent in a single segment), the dictionary ID and the content size.
            single = value >> 5 & 1
            self._checksum = bool(value >> 2 & 1)
            rest = 1 - single + (0, 1, 2, 4)[value & 3] + (single, 2, 4, 8)[value >> 6]
            self._next(_HEADER_REST, rest) if rest else self._next(_BLOCK, 3)
        elif field == _HEADER_REST:
            self._next(_BLOCK, 3)
        elif field == _BLOCK:
            # RFC 8878 3.1.1.2: Last_Block (bit 0), Block_Type (bits 2-1), Block_Size (23-3);
            # an RLE block's content is its one byte, type 3 is reserved.
            kind = value >> 1 & 3
            if kind == 3:
                self._lost = True
                return
            self._skip = 1 if kind == 1 else value >> 3
            if not value & 1:
                self._next(_BLOCK, 3)
            else:
                self._next(_CHECKSUM if self._checksum else _MAGIC, 4)
        elif field == _CHECKSUM:
            self._next(_MAGIC, 4)
        else:  # a skippable frame's Frame_Size (RFC 8878 3.1.2)
            self._skip = value
            self._next(_MAGIC, 4)

    def _next(self, field: int, size: int) -> None:
        self._field = field
        self._want = size


class _ZstdDecoder:
    """zstd frames (RFC 8878 3.1), one after another, through libzstd's stream reader, which
    decompresses straight into the caller's buffer and never past its end."""

    def __init__(self, raw: BinaryIO) -> None:
        self._frames = _ZstdFrames(raw)
        decompressor = zstandard.ZstdDecompressor(max_window_size=HISTORY_LIMIT)
        # The stream reader takes any object with read(size) as its source.
        source = cast(BinaryIO, self._frames)
        self._reader = decompressor.stream_reader(
            source, read_size=_READ_STEP, read_across_frames=True
        )
        self.cut_reason: str | None = None

    def readinto(self, view: memoryview) -> int:
        """Decompress into view; 0 only at the end of the file."""
        got = self._reader.readinto(view)
        if not got and not self._frames.between_frames:
            # A compressed block decodes only whole (its sequences are read backwards from
            # its end, RFC 8878 3.1.1.3.2.1); a raw block is given out up to the cut.
            self.cut_reason = "zstd stream ends before its end marker"
        return got


def _decoder(raw: BinaryIO, compression: str) -> _StepDecoder | _ZstdDecoder:
    return _ZstdDecoder(raw) if compression == "zstd" else _StepDecoder(raw, compression)


class ByteSource:
    """A capture's bytes, one bounded window at a time: `buf[:n]` holds bytes `base` onwards.

    The file is opened 'rb' and never written. An uncompressed file is mapped read-only
    (PROT_READ) window by window, never whole, and walked in place without a copy. A compressed
    file is decompressed one member (gzip), stream (xz) or frame (zstd) after another into a
    buffer, in steps that never produce more than its free part holds; a stream that ends
    before its end marker (a capture piped to gzip and killed) yields every byte up to the cut,
    with `cut_reason` set.
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
        self._decoder = _decoder(self._raw, self.compression) if self.compression else None
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
            try:
                self.n = self.fill(self.buf, 0)
            except CaptureError:
                self._raw.close()
                raise
            if self.n == 0 and self.cut_reason:
                # Nothing to read up to: a zstd file cut inside its first compressed block
                # (libzstd decodes a compressed block only whole), or one cut in its header.
                self._raw.close()
                raise CaptureError(path, f"{self.compression} stream cut off before its first byte")

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
        """Decompress into buf[start:] until it is full or the stream ends; the new fill end.

        No step writes past the end of buf, so a few KB that decompress to gigabytes take no
        more memory than any other capture, and the work is linear in the bytes decompressed.
        """
        assert self._decoder is not None
        view = buf.data
        end = start
        limit = buf.shape[0]
        while end < limit and not self.eof:
            try:
                got = self._decoder.readinto(view[end:limit])
            except (OSError, EOFError, lzma.LZMAError, zlib.error, zstandard.ZstdError) as exc:
                raise CaptureError(self.path, self._corrupt(exc)) from None
            if not got:
                self.eof = True
                self.cut_reason = self._decoder.cut_reason
            end += got
        return end

    def _corrupt(self, exc: Exception) -> str:
        text = str(exc)
        if "Memory usage limit" in text or "too much memory" in text:
            history = "dictionary" if self.compression == "xz" else "window"
            limit = HISTORY_LIMIT >> 20
            return f"{self.compression} data needs a {history} over the {limit} MiB allowed"
        return f"corrupt {self.compression} data: {text}"

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
