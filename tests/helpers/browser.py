"""Headless Chromium for the report's browser tests: the driver (tracekit.report.chromium,
which `tracekit report --png` uses too) and a PNG decoder to look at its screenshots."""

from __future__ import annotations

import struct
import zlib

# The driver is production code (tracekit report --png); the tests share it.
from tracekit.report.chromium import (
    CHROMIUM,
    FLAGS,
    Browser,
    Page,
    PageResult,
    chromium_available,
)

__all__ = ["CHROMIUM", "FLAGS", "Browser", "Page", "PageResult", "chromium_available", "png_pixels"]


def png_pixels(png: bytes) -> tuple[int, int, bytes]:
    """Decode an 8-bit RGB or RGBA, non-interlaced PNG (what Chromium writes) to raw RGB rows."""
    if png[:8] != b"\x89PNG\r\n\x1a\n":
        raise ValueError("not a PNG")
    pos, idat = 8, b""
    width = height = channels = 0
    while pos < len(png):
        (length,) = struct.unpack(">I", png[pos : pos + 4])
        kind = png[pos + 4 : pos + 8]
        body = png[pos + 8 : pos + 8 + length]
        if kind == b"IHDR":
            width, height, depth, color, _, _, interlace = struct.unpack(">IIBBBBB", body)
            if depth != 8 or color not in (2, 6) or interlace:
                raise ValueError(f"unsupported PNG: depth {depth}, color type {color}")
            channels = 3 if color == 2 else 4
        elif kind == b"IDAT":
            idat += body
        pos += 12 + length
    raw = zlib.decompress(idat)
    stride = width * channels
    rows = bytearray()
    prev = bytearray(stride)
    for r in range(height):
        start = r * (stride + 1)
        kind = raw[start]
        line = bytearray(raw[start + 1 : start + 1 + stride])
        _unfilter(kind, line, prev, channels)
        rows += line
        prev = line
    if channels == 4:
        rgb = bytearray()
        for i in range(0, len(rows), 4):
            rgb += rows[i : i + 3]
        rows = rgb
    return width, height, bytes(rows)


def _unfilter(kind: int, line: bytearray, prev: bytearray, bpp: int) -> None:
    # PNG filter types 0-4, PNG spec section 9.
    if kind == 0:
        return
    for i in range(len(line)):
        left = line[i - bpp] if i >= bpp else 0
        up = prev[i]
        if kind == 1:
            line[i] = (line[i] + left) & 0xFF
        elif kind == 2:
            line[i] = (line[i] + up) & 0xFF
        elif kind == 3:
            line[i] = (line[i] + (left + up) // 2) & 0xFF
        elif kind == 4:
            up_left = prev[i - bpp] if i >= bpp else 0
            p = left + up - up_left
            pa, pb, pc = abs(p - left), abs(p - up), abs(p - up_left)
            pred = left if pa <= pb and pa <= pc else (up if pb <= pc else up_left)
            line[i] = (line[i] + pred) & 0xFF
        else:
            raise ValueError(f"bad PNG filter {kind}")
