"""IPComp (RFC 3173) packets inflated, their rows replaced by the packets they carry.

The compiled decoder marks an IPComp packet `compressed` and says where its IPComp header lies
(see `decode_records`). Such packets are rare, so this pass runs over their rows only: each
DEFLATE payload (RFC 2394) is inflated with zlib under a bound, put behind an IP header of the
packet's own addresses, and read again by the same decoder, with the read's flow table, as a
raw IP packet. A payload that cannot be inflated stays `compressed`.
"""

from __future__ import annotations

import struct
import zlib

import numpy as np

from tracekit.capture.decode import (
    LINK_RAW,
    SKIP_COMPRESSED,
    SKIP_FRAGMENT_INCOMPLETE,
    SKIP_IP_FRAGMENT,
    Columns,
    FlowTable,
    FragmentTable,
    decode_chunk,
)

# The IPComp header (RFC 3173 2.1): next header, flags, a 2-byte Compression Parameter Index.
IPCOMP_HEADER_BYTES = 4
# CPIs (RFC 3173 3.3): 0-63 name a transform (IANA: 2 is DEFLATE; 1 OUI, 3 LZS, 4 LZJH);
# 256 and above are negotiated between the two nodes (IKE), so the capture does not say
# which algorithm they stand for: DEFLATE is tried, as Wireshark tries it. 64-255 are reserved.
CPI_DEFLATE = 2
CPI_NEGOTIATED = 256
# The largest payload an inflated packet can hold: RFC 3173 2 compresses an IP datagram's
# payload, and the datagram it rebuilds cannot pass IP's length fields, 65,535 bytes of IPv4
# total length (its 20-byte header included) or of IPv6 payload length. More is a zip bomb,
# and inflating stops one byte past the bound.
MAX_INFLATED = {4: 65_535 - 20, 6: 65_535}
# RFC 1951 raw DEFLATE, no zlib header (RFC 2394 2); a 32 KiB window reads any smaller one.
RAW_DEFLATE_WBITS = -15
# The IP header put in front of an inflated payload: its TTL (any value; nothing reads it).
HOP_LIMIT = 64


def inflatable(cols: Columns, rows: int) -> np.ndarray:
    """The rows the decoder left `compressed` with their IPComp header's place."""
    return np.flatnonzero((cols.reason[:rows] == SKIP_COMPRESSED) & (cols.seq[:rows] != 0))


def inflate(payload: bytes, limit: int) -> bytes | None:
    """The DEFLATE stream `payload` inflated, or None: not DEFLATE, cut short, with bytes after
    its end, or inflating past `limit` bytes."""
    stream = zlib.decompressobj(RAW_DEFLATE_WBITS)
    try:
        out = stream.decompress(payload, limit + 1)
    except zlib.error:
        return None
    if len(out) > limit or not stream.eof or stream.unused_data or stream.unconsumed_tail:
        return None
    return out


def _packet(version: int, ident: int, words: np.ndarray, following: int, payload: bytes) -> bytes:
    """An IP header of the packet's addresses (`words`: the source's and the destination's
    128 bits as 32-bit words, an IPv4 address in the first of its four) whose next header is
    the IPComp header's, then the inflated payload."""
    if version == 4:
        src = struct.pack("!I", int(words[0]))
        dst = struct.pack("!I", int(words[4]))
        total = 20 + len(payload)
        header = struct.pack(
            "!BBHHHBBH4s4s", 0x45, 0, total, ident, 0, HOP_LIMIT, following, 0, src, dst
        )
    else:
        src = struct.pack("!4I", *(int(w) for w in words[:4]))
        dst = struct.pack("!4I", *(int(w) for w in words[4:]))
        header = struct.pack("!IHBB16s16s", 6 << 28, len(payload), following, HOP_LIMIT, src, dst)
    return header + payload


def inflate_rows(
    buf: np.ndarray,
    rec_off: np.ndarray,
    rec_caplen: np.ndarray,
    rec_ts: np.ndarray,
    cols: Columns,
    rows: int,
    flows: FlowTable,
) -> int:
    """Replace each inflatable IPComp row of `cols` by the rows of the packet it carries,
    decoded with `flows`; returns the rows now in `cols`.

    The payload is read only where the record captured all of it. The packet inflated is read
    once: IPComp inside it stays `compressed` (compressing a compressed payload again gains
    nothing, so no sender nests them, and a crafted chain gets no more of the reader's time
    than one), and a fragment inside it is not put together with others' (each inflated packet
    stands alone), but counted as `fragment_incomplete`."""
    candidates = inflatable(cols, rows)
    if candidates.size == 0:
        return rows
    packets: list[bytes] = []
    owners: list[int] = []
    for row in candidates.tolist():
        record = int(cols.record[row])
        start = int(rec_off[record]) + int(cols.seq[row])
        length = int(cols.payload_bytes[row])
        end = int(rec_off[record]) + int(rec_caplen[record])
        if length <= IPCOMP_HEADER_BYTES or start + length > end:
            continue
        header = bytes(buf[start : start + IPCOMP_HEADER_BYTES])
        following, _flags, cpi = struct.unpack("!BBH", header)
        if cpi != CPI_DEFLATE and cpi < CPI_NEGOTIATED:
            continue
        version = int(cols.ip_version[row])
        body = buf[start + IPCOMP_HEADER_BYTES : start + length].tobytes()
        payload = inflate(body, MAX_INFLATED[version])
        if payload is None:
            continue
        packets.append(_packet(version, int(cols.ip_id[row]), cols.sack[row], following, payload))
        owners.append(row)
    if not packets:
        return rows

    count = len(packets)
    lengths = np.array([len(p) for p in packets], np.int64)
    inner_buf = np.frombuffer(b"".join(packets), np.uint8)
    inner_off = np.concatenate(([0], np.cumsum(lengths)[:-1])).astype(np.int64)
    inner_len = lengths.astype(np.uint32)
    owner = np.array(owners, np.int64)
    inner_ts = np.ascontiguousarray(rec_ts[cols.record[owner]], np.int64)
    inner = Columns.empty(count)
    inner_rows = decode_chunk(
        inner_buf,
        inner_off,
        inner_len,
        inner_len.copy(),
        np.zeros(count, np.uint8),
        count,
        np.full(1, LINK_RAW, np.int64),
        inner_ts,
        inner,
        flows,
        FragmentTable(),
    )
    reason = inner.reason[:inner_rows]
    reason[reason == SKIP_IP_FRAGMENT] = SKIP_FRAGMENT_INCOMPLETE
    carried = np.bincount(inner.record[:inner_rows], minlength=count)  # rows per packet, >= 1
    inner.record[:inner_rows] = cols.record[owner[inner.record[:inner_rows]]]

    # Each outer row in order, or in its place the rows of the packet it carried (an A-MSDU in
    # a tunnel inside gives several), which the decoder wrote in the packets' order: indices
    # into the outer rows followed by the inner ones.
    width = np.ones(rows, np.int64)
    width[owner] = carried
    order = np.repeat(np.arange(rows, dtype=np.int64), width)
    order[np.isin(order, owner)] = rows + np.arange(inner_rows, dtype=np.int64)
    for name, values in vars(cols).items():
        stacked = np.concatenate((values[:rows], getattr(inner, name)[:inner_rows]))
        setattr(cols, name, stacked[order])
    return int(order.size)
