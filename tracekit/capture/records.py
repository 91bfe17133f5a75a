"""Walk the records of classic pcap and the blocks of pcapng inside a byte buffer (numba kernels).

Formats: classic pcap as libpcap writes it (https://www.tcpdump.org/manpages/pcap-savefile.5.html,
draft-ietf-opsawg-pcap) and pcapng (draft-ietf-opsawg-pcapng). The walk is sequential by nature:
each record's length says where the next one starts. A kernel stops, and says why, when it needs
more bytes, meets a block the Python side handles (pcapng section and interface headers), fills its
output arrays, or finds a corrupt record.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from tracekit.core.kernels import bind

# A packet's captured bytes can never exceed this: libpcap's largest snaplen (MAXIMUM_SNAPLEN).
MAX_CAPLEN = 262144
# A non-packet pcapng block (name resolution, decryption secrets) larger than this is corrupt.
MAX_BLOCK = 8 * 1024 * 1024

PCAP_RECORD_HEADER = 16

# Why a walk stopped.
WALK_FULL = 0  # the output arrays are full
WALK_NEED_MORE = 1  # the next record runs past the bytes in the buffer
WALK_META = 2  # a pcapng section header or interface description block starts here
WALK_CAPLEN_LIMIT = 3  # captured length over MAX_CAPLEN
WALK_BLOCK_LENGTH = 6  # pcapng block length not a multiple of 4, too small or too large
WALK_BLOCK_TRAILER = 7  # pcapng block's trailing length differs from its leading one
WALK_BAD_IFACE = 8  # pcapng packet on an interface no IDB declared
WALK_CAPLEN_BLOCK = 9  # pcapng packet data runs past its block

BLOCK_SHB = 0x0A0D0D0A
BLOCK_IDB = 0x00000001
BLOCK_OPB = 0x00000002  # obsolete Packet Block, still read by Wireshark
BLOCK_SPB = 0x00000003
BLOCK_EPB = 0x00000006

# pcapng timestamp resolution kinds (if_tsresol's top bit, pcapng 4.2).
TSRES_POW10 = 0
TSRES_POW2 = 1


def _at(b: np.ndarray, p: Any) -> Any:
    """b[p] for a p known to be in range, without numba's check for a negative index (see
    tracekit.capture.decode._at)."""
    return b[np.uint64(p)]


def _rd32(b: np.ndarray, p: Any, big: bool) -> Any:
    if big:
        return (
            (np.int64(_at(b, p)) << 24)
            | (np.int64(_at(b, p + 1)) << 16)
            | (np.int64(_at(b, p + 2)) << 8)
            | np.int64(_at(b, p + 3))
        )
    return (
        np.int64(_at(b, p))
        | (np.int64(_at(b, p + 1)) << 8)
        | (np.int64(_at(b, p + 2)) << 16)
        | (np.int64(_at(b, p + 3)) << 24)
    )


def _rd16(b: np.ndarray, p: Any, big: bool) -> Any:
    if big:
        return (np.int64(_at(b, p)) << 8) | np.int64(_at(b, p + 1))
    return np.int64(_at(b, p)) | (np.int64(_at(b, p + 1)) << 8)


def walk_pcap(
    buf: np.ndarray,
    n: int,
    pos: int,
    big: bool,
    nanos: bool,
    out_off: np.ndarray,
    out_caplen: np.ndarray,
    out_origlen: np.ndarray,
    out_ts: np.ndarray,
) -> tuple[int, int, int]:
    """Walk classic pcap records from `pos`; returns (records found, stop position, WALK_*).

    A record longer than the file's snapshot length is read whole, as libpcap (up to its
    MAXIMUM_SNAPLEN) and Wireshark read it: the reader counts such records in a warning.
    """
    cap = out_off.shape[0]
    k = 0
    frac_ns = 1 if nanos else 1000
    while k < cap:
        if pos + PCAP_RECORD_HEADER > n:
            return k, pos, WALK_NEED_MORE
        caplen = _rd32(buf, pos + 8, big)
        origlen = _rd32(buf, pos + 12, big)
        if caplen > MAX_CAPLEN:
            return k, pos, WALK_CAPLEN_LIMIT
        # A captured length over the original one is read as captured (the reader counts it).
        if pos + PCAP_RECORD_HEADER + caplen > n:
            return k, pos, WALK_NEED_MORE
        out_ts[k] = _rd32(buf, pos, big) * 1_000_000_000 + _rd32(buf, pos + 4, big) * frac_ns
        out_off[k] = pos + PCAP_RECORD_HEADER
        out_caplen[k] = caplen
        out_origlen[k] = origlen
        k += 1
        pos += PCAP_RECORD_HEADER + caplen
    return k, pos, WALK_FULL


# A pcapng timestamp that does not fit the packet table's int64 nanoseconds (before 1677-09-21
# or after 2262-04-11, or with an if_tsoffset as far out) is written as this; the reader skips
# such a record (reason "bad_timestamp"), as no time of the table's can stand for it.
BAD_TS = np.iinfo(np.int64).min
# Seconds either part of a timestamp may hold before the sum is checked: far past the int64
# nanosecond range (9.2e9 s), and small enough that their sum cannot overflow int64 seconds.
_PART_LIMIT_S = 1 << 40
_MAX_S = 9_223_372_036  # int64 nanoseconds end at 9,223,372,036.854775807 s
_MAX_S_NS = 854_775_807
_MIN_S = -9_223_372_036  # the whole second before it (1677) is rejected too: no capture holds it


def _ts_ns(hi: Any, lo: Any, kind: Any, exp: Any, offset_s: Any) -> Any:
    """A pcapng timestamp, the unsigned 64-bit count hi * 2**32 + lo of units of 10**-exp or
    2**-exp seconds, plus the interface's if_tsoffset seconds, as Unix nanoseconds; BAD_TS
    when that does not fit int64 (the count alone can reach 2**64 - 1, if_tsoffset 2**63 - 1).
    """
    raw = (np.uint64(hi) << np.uint64(32)) | np.uint64(lo)
    seconds = np.uint64(0)
    frac_ns = np.int64(0)
    if kind == TSRES_POW10:
        if exp <= 9:
            unit = np.uint64(10**exp)
            seconds = raw // unit
            frac_ns = np.int64(raw % unit) * np.int64(10 ** (9 - exp))
        elif exp <= 18:  # 10**18 is the largest power of ten in int64
            unit = np.uint64(10**exp)
            seconds = raw // unit
            frac_ns = np.int64((raw % unit) // np.uint64(10 ** (exp - 9)))
        elif exp <= 27:  # under 2**64 units of 10**-19 s or finer: under 2 s in all
            frac_ns = np.int64(raw // np.uint64(10 ** (exp - 9)))
        # Finer units than 10**-27 s: every count is under a nanosecond.
    elif exp <= 30:
        seconds = raw >> np.uint64(exp)
        part = np.int64(raw & ((np.uint64(1) << np.uint64(exp)) - np.uint64(1)))
        frac_ns = (part * 1_000_000_000) >> exp
    elif exp < 64:
        seconds = raw >> np.uint64(exp)
        part_u64 = raw & ((np.uint64(1) << np.uint64(exp)) - np.uint64(1))
        frac_ns = np.int64(np.float64(part_u64) / 2.0**exp * 1e9)
    else:
        frac_ns = np.int64(np.float64(raw) / 2.0**exp * 1e9)
    if seconds > np.uint64(_PART_LIMIT_S) or abs(offset_s) > _PART_LIMIT_S:
        return BAD_TS
    total_s = np.int64(seconds) + offset_s
    if total_s < _MIN_S or total_s > _MAX_S or (total_s == _MAX_S and frac_ns > _MAX_S_NS):
        return BAD_TS
    return total_s * 1_000_000_000 + frac_ns


# The interface table the pcapng walk shares with the reader: a row per interface of the read,
# (number in its section, link type, snaplen, time resolution kind, its exponent, if_tsoffset
# seconds); sections that repeat an earlier one's interfaces share its rows.
IFACE_LOCAL, IFACE_LINK, IFACE_SNAPLEN, IFACE_TS_KIND, IFACE_TS_EXP, IFACE_TS_OFFSET = range(6)
MAX_IFACES = 256  # per section, and in the table: the packet table's iface is one byte
# The walk's state, kept by the reader between calls.
STATE_SECTION_IFACES = 0  # interfaces the current section has declared
STATE_LAST_TS = 1  # the last packet's time, for an SPB (it has none)
STATE_TABLE_ROWS = 2  # rows of the interface table in use
STATE_SIZE = 3

PCAPNG_BOM = 0x1A2B3C4D
OPT_ENDOFOPT = 0
IF_TSRESOL = 9  # pcapng 4.2: one byte, 10**-n or (top bit set) 2**-n seconds
IF_TSOFFSET = 14  # pcapng 4.2: signed seconds to add to every timestamp


def _interface_row(
    buf: np.ndarray, pos: Any, blen: Any, big: bool, local: Any, table: np.ndarray, rows: Any
) -> Any:
    """The table row of the IDB at pos (read as the reader reads it), or -1 when it has none."""
    linktype = _rd16(buf, pos + 8, big)
    snaplen = _rd32(buf, pos + 12, big)
    kind = TSRES_POW10  # microseconds unless if_tsresol says otherwise
    exp = 6
    offset_s = np.int64(0)
    at = pos + 16
    end = pos + blen - 4
    while at + 4 <= end:
        code = _rd16(buf, at, big)
        length = _rd16(buf, at + 2, big)
        if code == OPT_ENDOFOPT or at + 4 + length > pos + blen:
            break
        if code == IF_TSRESOL and length >= 1:
            value = _at(buf, at + 4)
            kind = TSRES_POW2 if value & 0x80 else TSRES_POW10
            exp = value & 0x7F
        elif code == IF_TSOFFSET and length >= 8:
            first = np.uint64(_rd32(buf, at + 4, big))
            second = np.uint64(_rd32(buf, at + 8, big))
            if big:
                offset_s = np.int64((first << np.uint64(32)) | second)
            else:
                offset_s = np.int64((second << np.uint64(32)) | first)
        at += 4 + (length + 3) // 4 * 4
    for row in range(rows):
        if (
            table[row, IFACE_LOCAL] == local
            and table[row, IFACE_LINK] == linktype
            and table[row, IFACE_SNAPLEN] == snaplen
            and table[row, IFACE_TS_KIND] == kind
            and table[row, IFACE_TS_EXP] == exp
            and table[row, IFACE_TS_OFFSET] == offset_s
        ):
            return row
    return -1


def walk_pcapng(
    buf: np.ndarray,
    n: int,
    pos: int,
    big: bool,
    state: np.ndarray,
    section: np.ndarray,
    table: np.ndarray,
    out_off: np.ndarray,
    out_caplen: np.ndarray,
    out_origlen: np.ndarray,
    out_ts: np.ndarray,
    out_iface: np.ndarray,
) -> tuple[int, int, int]:
    """Walk pcapng blocks from `pos`; returns (packets, stop position, WALK_*).

    `section` maps the current section's interface numbers to rows of `table`; `out_iface`
    holds rows. A section header in the same byte order, and an interface block the table
    already holds, are taken here, so a file with a section per packet walks as fast as one
    section. Any other, and any such block that is malformed, stops the walk with WALK_META:
    the reader parses it and says what is wrong. As in walk_pcap, a packet longer than its
    interface's snapshot length is read whole.
    """
    cap = out_off.shape[0]
    k = 0
    last_ts = state[STATE_LAST_TS]
    status = WALK_FULL
    while k < cap:
        if pos + 12 > n:
            status = WALK_NEED_MORE
            break
        btype = _rd32(buf, pos, big)
        blen = _rd32(buf, pos + 4, big)
        n_iface = state[STATE_SECTION_IFACES]
        if btype in (BLOCK_SHB, BLOCK_IDB):
            status = WALK_META  # unless taken here
            minimum = 28 if btype == BLOCK_SHB else 20
            if blen < minimum or blen % 4 != 0 or blen > MAX_BLOCK:
                break  # malformed: the reader says how
            if pos + blen > n:
                status = WALK_NEED_MORE
                break
            if _rd32(buf, pos + blen - 4, big) != blen:
                break
            if btype == BLOCK_SHB:
                if _rd32(buf, pos + 8, big) != PCAPNG_BOM or _rd16(buf, pos + 12, big) != 1:
                    break  # another byte order, another version, or a bad magic
                state[STATE_SECTION_IFACES] = 0
            else:
                if n_iface >= MAX_IFACES:
                    break
                row = _interface_row(buf, pos, blen, big, n_iface, table, state[STATE_TABLE_ROWS])
                if row < 0:
                    break  # an interface not met before: the reader adds its row
                section[n_iface] = row
                state[STATE_SECTION_IFACES] = n_iface + 1
            status = WALK_FULL
            pos += blen
            continue
        if blen < 12 or blen % 4 != 0 or blen > MAX_BLOCK:
            status = WALK_BLOCK_LENGTH
            break
        if btype in (BLOCK_EPB, BLOCK_OPB):
            if blen < 32:
                status = WALK_BLOCK_LENGTH
                break
            if pos + 28 > n:
                status = WALK_NEED_MORE
                break
            iface = _rd32(buf, pos + 8, big) if btype == BLOCK_EPB else _rd16(buf, pos + 8, big)
            if iface >= n_iface:
                status = WALK_BAD_IFACE
                break
            caplen = _rd32(buf, pos + 20, big)
            origlen = _rd32(buf, pos + 24, big)
            if caplen > MAX_CAPLEN:
                status = WALK_CAPLEN_LIMIT
                break
            if 28 + caplen + 4 > blen:
                status = WALK_CAPLEN_BLOCK
                break
            if pos + blen > n:
                status = WALK_NEED_MORE
                break
            if _rd32(buf, pos + blen - 4, big) != blen:
                status = WALK_BLOCK_TRAILER
                break
            row = section[iface]
            ts = _ts_ns(
                _rd32(buf, pos + 12, big),
                _rd32(buf, pos + 16, big),
                table[row, IFACE_TS_KIND],
                table[row, IFACE_TS_EXP],
                table[row, IFACE_TS_OFFSET],
            )
            if ts != BAD_TS:  # an SPB after it takes the last time that was one
                last_ts = ts
            out_ts[k] = ts
            out_off[k] = pos + 28
            out_caplen[k] = caplen
            out_origlen[k] = origlen
            out_iface[k] = row
            k += 1
        elif btype == BLOCK_SPB:
            if blen < 16:
                status = WALK_BLOCK_LENGTH
                break
            if n_iface == 0:
                status = WALK_BAD_IFACE
                break
            if pos + blen > n:
                status = WALK_NEED_MORE
                break
            if _rd32(buf, pos + blen - 4, big) != blen:
                status = WALK_BLOCK_TRAILER
                break
            origlen = _rd32(buf, pos + 8, big)
            # The SPB has no captured-length field: the data is the original packet cut to the
            # first interface's snaplen, and never more than the block holds (pcapng 4.4).
            caplen = min(origlen, blen - 16)
            if caplen > MAX_CAPLEN:
                status = WALK_CAPLEN_LIMIT
                break
            row = section[0]
            if table[row, IFACE_SNAPLEN] > 0:
                caplen = min(caplen, table[row, IFACE_SNAPLEN])
            # No timestamp either: keep the previous packet's, so time never runs backwards.
            out_ts[k] = last_ts
            out_off[k] = pos + 12
            out_caplen[k] = caplen
            out_origlen[k] = origlen
            out_iface[k] = row
            k += 1
        else:
            if pos + blen > n:
                status = WALK_NEED_MORE
                break
            if _rd32(buf, pos + blen - 4, big) != blen:
                status = WALK_BLOCK_TRAILER
                break
        pos += blen
    state[STATE_LAST_TS] = last_ts
    return k, pos, status


bind(
    globals(),
    ("walk_pcap", "walk_pcapng"),
    helpers=("_at", "_rd32", "_rd16", "_ts_ns", "_interface_row"),
)
