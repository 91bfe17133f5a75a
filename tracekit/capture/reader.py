"""read_capture: a pcap or pcapng file (maybe compressed) to the packet, flow, SACK and UDP tables.

Where a cut tail ends and corruption begins:
- a cut tail (a capture whose writer was killed) is a last record whose header is plausible
  (captured length at most 256 KiB and at most the original length) but whose data runs past the
  end of the file, or a partial record header at the very end, or a compressed stream without
  its end marker. Everything before it is read; `stats.truncated_tail` is set and
  `stats.warnings` says where the cut is.
- corruption raises CaptureError: a captured length over 256 KiB or over the original length; a
  pcapng block length that is not a multiple of 4, too small, or whose copy at the block's end
  differs; a packet on an undeclared interface; and a first record that already runs past the end
  of the file (nothing in the file is a capture then).
- neither: a record longer than the snapshot length is read whole, as libpcap and Wireshark read
  records up to 256 KiB whatever the snapshot length says, and counted in one warning. A pcapng
  interface of a link type tracekit does not read costs only its own packets (skipped as
  "unknown_link_type", with a warning); only a file none of whose packets could be read for
  that (or, without packets, whose every interface is such) raises CaptureError, as does a
  classic pcap of such a link type.
"""

from __future__ import annotations

import ipaddress
import struct
from collections.abc import Callable
from pathlib import Path

import numpy as np
import pyarrow as pa

from tracekit import schema
from tracekit.capture.decode import (
    IPV4_FRAGMENT_TIMEOUT_NS,
    IPV6_FRAGMENT_TIMEOUT_NS,
    KEPT,
    KNOWN_LINK_TYPES,
    MAX_DATAGRAMS,
    S_DATAGRAMS_EVICTED,
    S_DATAGRAMS_TIMED_OUT,
    S_EVICTED,
    S_TIMED_OUT,
    SKIP_BAD_TIMESTAMP,
    SKIP_FRAGMENT_EVICTED,
    SKIP_FRAGMENT_INCOMPLETE,
    SKIP_FRAGMENT_TIMEOUT,
    SKIP_IP_FRAGMENT,
    SKIP_REASONS,
    SKIP_UNKNOWN_LINK_TYPE,
    Columns,
    FlowTable,
    FragmentTable,
    decode_chunk,
)
from tracekit.capture.ipcomp import inflate_rows
from tracekit.capture.model import Capture, ReadStats
from tracekit.capture.records import (
    BAD_TS,
    BLOCK_SHB,
    IF_TSOFFSET,
    IF_TSRESOL,
    IFACE_LINK,
    IFACE_LOCAL,
    IFACE_SNAPLEN,
    MAX_BLOCK,
    MAX_CAPLEN,
    MAX_IFACES,
    OPT_ENDOFOPT,
    STATE_SECTION_IFACES,
    STATE_SIZE,
    STATE_TABLE_ROWS,
    TSRES_POW2,
    TSRES_POW10,
    WALK_BAD_IFACE,
    WALK_BLOCK_LENGTH,
    WALK_BLOCK_TRAILER,
    WALK_CAPLEN_BLOCK,
    WALK_CAPLEN_LIMIT,
    WALK_FULL,
    WALK_META,
    WALK_NEED_MORE,
    walk_pcap,
    walk_pcapng,
)
from tracekit.capture.source import ByteSource
from tracekit.core.columns import ColumnBuffer, to_arrow, to_numpy
from tracekit.errors import CaptureError

# Records walked and decoded per kernel call: with the source's bounded window, this bounds the
# reader's working memory whatever the capture's size; small enough that the records the walk
# just touched are mostly still in cache when they are decoded (64k: fastest of 16k-256k).
RECORDS_PER_CALL = 1 << 16
# The most packet-table rows reserved up front (see _packet_capacity): 2**28 rows of about 50
# bytes of columns is 13 GB of address space, under what the kernel lets one process reserve
# on a machine of 16 GB or more.
MAX_RESERVED_ROWS = 1 << 28

PCAP_MAGICS = {
    b"\xa1\xb2\xc3\xd4": (True, False),  # (big-endian, nanosecond timestamps)
    b"\xd4\xc3\xb2\xa1": (False, False),
    b"\xa1\xb2\x3c\x4d": (True, True),
    b"\x4d\x3c\xb2\xa1": (False, True),
}
PCAPNG_BOM_BIG = b"\x1a\x2b\x3c\x4d"
PCAPNG_BOM_LITTLE = b"\x4d\x3c\x2b\x1a"
PCAPNG_MAGIC = b"\x0a\x0d\x0d\x0a"
PCAP_HEADER_BYTES = 24

_PACKET_NAMES = tuple(c.name for c in schema.PACKET_COLUMNS)


def read_capture(
    path: str | Path,
    *,
    progress: Callable[[int, int], None] | None = None,
    records_per_call: int = RECORDS_PER_CALL,
    tcp_read: Callable[[int], None] | None = None,
) -> Capture:
    """Read a capture into the declared packet, flow, SACK and UDP tables.

    Raises CaptureError for a file that cannot be read as a capture (see the module docstring for
    where a cut tail ends and corruption begins). `progress(bytes_done, bytes_total)` is called
    after each chunk, in bytes of the file on disk; `tcp_read(packets)` after each chunk of the
    packet table, with the TCP packets in it so far (what it raises stops the read: a caller
    that knows the table will not fit says so before the rest is read). The tables do not
    depend on `records_per_call`, the records walked and decoded per kernel call.
    """
    path = Path(path)
    with ByteSource(path) as source:
        reader = _Reader(path, source, progress, None, records_per_call)
        reader.tcp_read = tcp_read
        return reader.read()


def read_chunks(
    path: str | Path,
    consumer: Callable[[dict[str, np.ndarray], int], None],
    *,
    progress: Callable[[int, int], None] | None = None,
    records_per_call: int = RECORDS_PER_CALL,
) -> Capture:
    """Read a capture chunk by chunk, for a single pass that keeps no packet table.

    `consumer(columns, n_flows)` gets each chunk's packet columns (PACKET_COLUMNS, numpy, in
    capture order; its own arrays) and the flow count so far; chunks hold at most
    `records_per_call` records. Returns the Capture with an empty packet table and no SACK
    or UDP rows (the flows, statistics and warnings are whole). Errors as read_capture.
    """
    path = Path(path)
    with ByteSource(path) as source:
        return _Reader(path, source, progress, consumer, records_per_call).read()


def require_tcp(capture: Capture) -> None:
    """Raise CaptureError when the capture holds no TCP packet."""
    chunks = capture.packets.column("proto").chunks
    if not any((to_numpy(chunk) == schema.PROTO_TCP).any() for chunk in chunks):
        raise no_tcp_error(capture)


def no_tcp_error(capture: Capture) -> CaptureError:
    """The error for a capture without TCP, where the command needs TCP; it names what the
    reader skipped, so that a file whose only TCP headers are malformed says so."""
    skipped = ", ".join(f"{n} {why}" for why, n in sorted(capture.stats.skipped.items()) if n)
    why = f" (frames skipped: {skipped})" if skipped else ""
    return CaptureError(capture.path, f"no TCP packets in {capture.stats.frames} frames{why}")


class _Reader:
    """The state of one read: buffer, interfaces of the current pcapng section, output chunks."""

    def __init__(
        self,
        path: Path,
        source: ByteSource,
        progress: Callable[[int, int], None] | None,
        consumer: Callable[[dict[str, np.ndarray], int], None] | None = None,
        records_per_call: int = RECORDS_PER_CALL,
    ) -> None:
        self.path = path
        self.source = source
        self.progress = progress
        self.buf = source.buf
        self.n = source.n
        self.base = source.base  # file offset (decompressed) of buf[0]
        self.frames = 0
        self.rows = 0
        self.link_types: list[int] = []
        self.flows = FlowTable()
        # IP datagrams whose fragments are still coming, across chunks; and the latest time
        # seen, which says which of those left at the end were past their timeout.
        self.fragments = FragmentTable()
        self.last_ts = int(BAD_TS)
        self.skipped = np.zeros(len(SKIP_REASONS), np.int64)
        self.warnings: list[str] = []
        self.truncated = False
        # Records longer than their interface's snapshot length, and the lengths they exceeded.
        self.over_snaplen = 0
        self.snaplens_exceeded: set[int] = set()
        # Records whose captured length passes their original length, read as captured.
        self.over_origlen = 0
        # Whether any interface declared so far is of a link type the decoder reads, and the
        # link types of those that are not.
        self.known_iface = False
        self.unknown_links: list[int] = []
        self.consumer = consumer
        # Told the TCP packets of the table after each chunk (read_capture's `tcp_read`).
        self.tcp_read: Callable[[int], None] | None = None
        self.tcp = 0
        self.packets = _packet_columns(_packet_capacity(source) if consumer is None else 0)
        self.sack_chunks: dict[str, list[np.ndarray]] = {"row": [], "left": [], "right": []}
        self.udp_chunks: dict[str, list[np.ndarray]] = {"row": [], "head_len": [], "head": []}
        self.rec_off = np.empty(records_per_call, np.int64)
        self.rec_caplen = np.empty(records_per_call, np.uint32)
        self.rec_origlen = np.empty(records_per_call, np.uint32)
        self.rec_ts = np.empty(records_per_call, np.int64)
        self.rec_iface = np.zeros(records_per_call, np.uint8)
        # Records walked but not yet decoded. They gather across the pcapng blocks the walk
        # leaves to Python, so a file with a section per packet is decoded in full chunks.
        self.pending = 0
        # The interfaces of the read, shared with the pcapng walk (see records.IFACE_*): a
        # section that repeats an earlier one's interfaces reuses their rows. When a new one
        # finds all 256 rows taken, the walked records are decoded and the table starts again.
        self.iface_table = np.zeros((MAX_IFACES, 6), np.int64)
        self.section = np.zeros(MAX_IFACES, np.int64)  # the current section's rows
        self.state = np.zeros(STATE_SIZE, np.int64)
        self.big = False

    # -- the walk -------------------------------------------------------------------------------

    def read(self) -> Capture:
        self._report_progress()
        magic = bytes(self.buf[:4])
        if self.n < 4:
            raise CaptureError(self.path, f"too short for a capture ({self.n} bytes)")
        if magic in PCAP_MAGICS:
            file_format = "pcap"
            pos = self._pcap_header(*PCAP_MAGICS[magic])
        elif magic == PCAPNG_MAGIC:
            file_format = "pcapng"
            pos = 0
        else:
            raise CaptureError(
                self.path, f"bad magic 0x{magic.hex()}: not a pcap or pcapng capture"
            )
        self._walk(file_format, pos)
        self._check_link_types()
        if self.over_snaplen:
            lengths = ", ".join(str(n) for n in sorted(self.snaplens_exceeded))
            records = "record" if self.over_snaplen == 1 else "records"
            self.warnings.append(
                f"{self.over_snaplen} {records} longer than the snapshot length ({lengths}) "
                "read whole, as libpcap and Wireshark read them"
            )
        if self.over_origlen:
            records = "record claims" if self.over_origlen == 1 else "records claim"
            self.warnings.append(
                f"{self.over_origlen} {records} an original length shorter than the bytes "
                "captured: read as captured, as Wireshark reads them"
            )
        if self.source.cut_reason:
            self.truncated = True
            self.warnings.append(f"capture cut off: {self.source.cut_reason}")
        self._report_progress(done=True)
        return self._result(file_format)

    def _pcap_header(self, big: bool, nanos: bool) -> int:
        if self.n < PCAP_HEADER_BYTES:
            raise CaptureError(self.path, f"pcap file header cut off ({self.n} of 24 bytes)")
        order = ">" if big else "<"
        major, minor, _, _, snaplen, linktype = struct.unpack(
            order + "HHiIII", bytes(self.buf[4:PCAP_HEADER_BYTES])
        )
        if major != 2:
            raise CaptureError(self.path, f"unsupported pcap version {major}.{minor}")
        # The top bits of the link-type field carry FCS information (pcap draft 4): not the type.
        linktype &= 0xFFFF
        if linktype not in KNOWN_LINK_TYPES:  # every packet of the file is of this type
            raise CaptureError(self.path, f"unknown link type {linktype}")
        self._add_interface(linktype, snaplen, TSRES_POW10, 9 if nanos else 6, 0)
        self.big = big
        self.nanos = nanos
        return PCAP_HEADER_BYTES

    def _walk(self, file_format: str, pos: int) -> None:
        while True:
            at = self.pending  # the walk appends after the records not yet decoded
            records = (self.rec_off[at:], self.rec_caplen[at:], self.rec_origlen[at:])
            if file_format == "pcap":
                count, pos, status = walk_pcap(
                    self.buf, self.n, pos, self.big, self.nanos, *records, self.rec_ts[at:]
                )
            else:
                count, pos, status = walk_pcapng(
                    self.buf,
                    self.n,
                    pos,
                    self.big,
                    self.state,
                    self.section,
                    self.iface_table,
                    *records,
                    self.rec_ts[at:],
                    self.rec_iface[at:],
                )
            self.pending += count
            if status == WALK_FULL:
                self._flush()
                continue
            if status == WALK_META:
                try:
                    after = self._meta_block(pos)
                except CaptureError as damage:
                    self._flush()
                    self._damaged(damage)
                    return
                if after is not None:
                    pos = after
                    continue
                status = WALK_NEED_MORE
            # The records walked point into the buffer: decode them before it moves.
            self._flush()
            if status != WALK_NEED_MORE:
                self._damaged(CaptureError(self.path, self._corruption(file_format, pos, status)))
                return
            if self.source.eof:
                if pos < self.n:
                    self._cut_tail(pos)
                return
            before = self.n - pos
            pos = self.source.advance(pos)
            self.buf, self.n, self.base = self.source.buf, self.source.n, self.source.base
            if self.n - pos <= before and not self.source.eof:
                raise CaptureError(self.path, f"block at byte {self.base + pos} too large to read")
            self._report_progress()

    def _flush(self) -> None:
        """Decode the records walked so far."""
        count, self.pending = self.pending, 0
        if count:
            self._count_over_snaplen(count)
            # A record whose captured bytes pass its original length (a writer's bug) is read
            # as captured, as Wireshark reads it: the bytes are there.
            caplen, origlen = self.rec_caplen[:count], self.rec_origlen[:count]
            short = caplen > origlen
            if short.any():
                self.over_origlen += int(np.count_nonzero(short))
                origlen[short] = caplen[short]
            self._emit(count)

    def _count_over_snaplen(self, count: int) -> None:
        """Count the walked records longer than their interface's snapshot length (0: none)."""
        snaplen = self._per_record(IFACE_SNAPLEN, count)
        over = (snaplen > 0) & (self.rec_caplen[:count] > snaplen)
        if over.any():
            self.over_snaplen += int(np.count_nonzero(over))
            self.snaplens_exceeded.update(np.unique(snaplen[over]).tolist())

    def _per_record(
        self, column: int, count: int, dtype: type[np.generic] = np.int64
    ) -> np.ndarray:
        """The interface table's `column` for each of the first `count` walked records."""
        values = self.iface_table[:, column].astype(dtype)
        if self.state[STATE_TABLE_ROWS] <= 1:  # one interface (or none yet): every record's row 0
            return np.full(count, values[0], dtype)
        return values[self.rec_iface[:count]]

    def _check_link_types(self) -> None:
        """Refuse a file that holds nothing but packets of unknown link types (or, without
        packets, nothing but such interfaces); warn of the packets skipped for one."""
        if not self.unknown_links:
            return
        types = ", ".join(str(t) for t in self.unknown_links)
        label = "link type" if len(self.unknown_links) == 1 else "link types"
        unread = int(self.skipped[SKIP_UNKNOWN_LINK_TYPE])
        if (self.frames and unread == self.frames) or (not self.frames and not self.known_iface):
            raise CaptureError(self.path, f"unknown {label} {types}")
        if unread:
            self.warnings.append(
                f"{unread} frames skipped: their interfaces are of unknown {label} {types}"
            )

    def _damaged(self, damage: CaptureError) -> None:
        """A record or block that cannot be read: the file is refused if nothing came before
        it; otherwise it is read up to there, with a warning, as Wireshark reads it (it shows
        the packets before and stops at the damage)."""
        if self.frames == 0:
            raise damage
        self.truncated = True
        self.warnings.append(
            f"capture damaged after frame {self.frames}, read up to there: {damage.problem}"
        )

    def _cut_tail(self, pos: int) -> None:
        offset = self.base + pos
        if self.frames == 0:
            raise CaptureError(
                self.path, f"first record (byte {offset}) runs past the end of the file"
            )
        self.truncated = True
        self.warnings.append(
            f"capture cut off mid-record after frame {self.frames}: "
            f"{self.n - pos} bytes at byte {offset} ignored"
        )

    def _corruption(self, file_format: str, pos: int, status: int) -> str:
        where = f"record {self.frames + 1} (byte {self.base + pos})"
        order = ">" if self.big else "<"

        def field(at: int) -> int:
            return int(struct.unpack(order + "I", bytes(self.buf[pos + at : pos + at + 4]))[0])

        caplen_at = 8 if file_format == "pcap" else 20
        if status == WALK_CAPLEN_LIMIT:
            caplen = field(caplen_at) if file_format == "pcap" or field(0) != 3 else field(8)
            return f"{where}: captured length {caplen} is over 256 KiB ({MAX_CAPLEN})"
        if status == WALK_BLOCK_LENGTH:
            return f"{where}: bad block length {field(4)}"
        if status == WALK_BLOCK_TRAILER:
            return f"{where}: block length {field(4)} differs from the copy at the block's end"
        if status == WALK_BAD_IFACE:
            return f"{where}: packet on interface {field(8)}, which no interface block declared"
        if status == WALK_CAPLEN_BLOCK:
            return f"{where}: captured length {field(20)} runs past its block"
        return f"{where}: corrupt record (walk status {status})"

    # -- pcapng section and interface blocks ----------------------------------------------------

    def _meta_block(self, pos: int) -> int | None:
        """Parse the SHB or IDB at pos; the position after it, or None if it is not all in."""
        if pos + 12 > self.n:
            return None
        head = bytes(self.buf[pos : pos + 12])
        if head[:4] == PCAPNG_MAGIC:
            bom = head[8:12]
            if bom not in (PCAPNG_BOM_BIG, PCAPNG_BOM_LITTLE):
                raise CaptureError(
                    self.path, f"section header at byte {self.base + pos}: bad byte-order magic"
                )
            big = bom == PCAPNG_BOM_BIG
        else:
            big = self.big
        order = ">" if big else "<"
        btype, blen = struct.unpack(order + "II", head[:8])
        minimum = 28 if btype == BLOCK_SHB else 20
        if blen < minimum or blen % 4 or blen > MAX_BLOCK:
            raise CaptureError(
                self.path, f"block at byte {self.base + pos}: bad block length {blen}"
            )
        if pos + blen > self.n:
            return None
        block = bytes(self.buf[pos : pos + blen])
        if struct.unpack(order + "I", block[-4:])[0] != blen:
            raise CaptureError(
                self.path,
                f"block at byte {self.base + pos}: block length {blen} differs from the copy "
                "at the block's end",
            )
        if btype == BLOCK_SHB:
            major, minor = struct.unpack(order + "HH", block[12:16])
            if major != 1:
                raise CaptureError(self.path, f"unsupported pcapng version {major}.{minor}")
            # A new section: its own byte order and its own interface numbering (pcapng 4.1).
            self.big = big
            self.state[STATE_SECTION_IFACES] = 0
        else:
            self._interface_block(block, order)
        return pos + blen

    def _interface_block(self, block: bytes, order: str) -> None:
        linktype, _, snaplen = struct.unpack(order + "HHI", block[8:16])
        kind, exp, offset_s = TSRES_POW10, 6, 0  # microseconds unless if_tsresol says otherwise
        at, end = 16, len(block) - 4
        while at + 4 <= end:
            code, length = struct.unpack(order + "HH", block[at : at + 4])
            value = block[at + 4 : at + 4 + length]
            if code == OPT_ENDOFOPT or len(value) < length:
                break
            if code == IF_TSRESOL and length >= 1:
                kind = TSRES_POW2 if value[0] & 0x80 else TSRES_POW10
                exp = value[0] & 0x7F
            elif code == IF_TSOFFSET and length >= 8:
                offset_s = struct.unpack(order + "q", value[:8])[0]
            at += 4 + (length + 3) // 4 * 4
        if self.state[STATE_SECTION_IFACES] >= MAX_IFACES:
            raise CaptureError(self.path, f"more than {MAX_IFACES} interfaces in one section")
        self._add_interface(linktype, snaplen, kind, exp, offset_s)

    def _add_interface(
        self, linktype: int, snaplen: int, kind: int, exp: int, offset_s: int
    ) -> None:
        # An interface of an unknown link type is kept: the decoder skips its packets only.
        if linktype in KNOWN_LINK_TYPES:
            self.known_iface = True
        elif linktype not in self.unknown_links:
            self.unknown_links.append(linktype)
        if linktype not in self.link_types:
            self.link_types.append(linktype)
        local = int(self.state[STATE_SECTION_IFACES])
        row = (local, linktype, snaplen, kind, exp, offset_s)
        rows = int(self.state[STATE_TABLE_ROWS])
        same = np.flatnonzero((self.iface_table[:rows] == row).all(axis=1))
        if same.size:
            number = int(same[0])
        else:
            if rows == MAX_IFACES:
                # Start the table again: the records walked so far keep the rows they were given.
                self._flush()
                section = self.iface_table[self.section[:local]].copy()
                self.iface_table[:local] = section
                self.section[:local] = np.arange(local)
                rows = local
            number = rows
            self.iface_table[number] = row
            self.state[STATE_TABLE_ROWS] = rows + 1
        self.section[local] = number
        self.state[STATE_SECTION_IFACES] = local + 1

    # -- decoding and output ----------------------------------------------------------------------

    def _emit(self, count: int) -> None:
        """Decode `count` walked records and keep the TCP and UDP ones."""
        cols = Columns.empty(count)  # grown by the decoder where A-MSDUs need more rows
        rows = decode_chunk(
            self.buf,
            self.rec_off,
            self.rec_caplen,
            self.rec_origlen,
            self.rec_iface,
            count,
            self.iface_table[:, IFACE_LINK].copy(),  # contiguous, as the kernel takes it
            self.rec_ts,
            cols,
            self.flows,
            self.fragments,
        )
        self.last_ts = max(self.last_ts, int(self.rec_ts[:count].max()))
        # A row per record, unless an A-MSDU gave more: then the record arrays are read
        # through each row's record, and its frame number and time are the record's.
        every = rows == count and not np.any(cols.reason[:rows])
        if not every:
            # IPComp packets, inflated here: the decoder leaves them compressed.
            rows = inflate_rows(
                self.buf, self.rec_off, self.rec_caplen, self.rec_ts, cols, rows, self.flows
            )
        if every:  # the usual chunk (bincount would first widen each reason to 64 bits)
            self.skipped[KEPT] += count
            kept = np.empty(0, np.int64)  # not needed: every record is kept
            kept_count = count
        else:
            self.skipped += np.bincount(cols.reason[:rows], minlength=len(SKIP_REASONS))
            kept = np.flatnonzero(cols.reason[:rows] == 0)
            kept_count = kept.size
            if kept_count == 0:
                self.frames += count
                return
        source = kept if rows == count else cols.record[kept]

        def pick(values: np.ndarray) -> np.ndarray:
            return values[:count].copy() if every else values[source]

        frames = np.arange(self.frames + 1, self.frames + count + 1, dtype=np.uint32)
        chunk = {
            "ts_ns": pick(self.rec_ts),
            "frame": pick(frames),
            # The walk gives each record its interface's table row; the table keeps the id it
            # has in its section, as Wireshark's frame.interface_id.
            "iface": pick(self._per_record(IFACE_LOCAL, count, np.uint8)),
        }
        for name in _PACKET_NAMES:
            if name not in chunk:
                values = getattr(cols, name)
                # Every row kept: the columns as they are (a view when they grew for an A-MSDU).
                chunk[name] = values[:rows] if every else values[kept]
        if self.consumer is not None:
            self.consumer(chunk, int(self.flows.count[0]))
            self.frames += count
            self.rows += kept_count
            return
        self.packets.append(chunk)
        if self.tcp_read is not None:
            self.tcp += int(np.count_nonzero(chunk["proto"] == schema.PROTO_TCP))
            self.tcp_read(self.tcp)

        sack_n = chunk["sack_n"]
        carriers = np.flatnonzero(sack_n)
        if carriers.size:
            blocks = sack_n[carriers].astype(np.int64)
            source_rows = carriers if every else kept[carriers]
            rep = np.repeat(source_rows, blocks)
            starts = np.repeat(np.cumsum(blocks) - blocks, blocks)
            which = np.arange(rep.size) - starts
            self.sack_chunks["row"].append(
                (self.rows + np.repeat(carriers, blocks)).astype(np.uint32)
            )
            self.sack_chunks["left"].append(cols.sack[rep, 2 * which])
            self.sack_chunks["right"].append(cols.sack[rep, 2 * which + 1])

        udp = np.flatnonzero(chunk["proto"] == schema.PROTO_UDP)
        if udp.size:
            source_rows = udp if every else kept[udp]
            self.udp_chunks["row"].append((self.rows + udp).astype(np.uint32))
            self.udp_chunks["head_len"].append(cols.udp_head_len[source_rows])
            self.udp_chunks["head"].append(cols.udp_head[source_rows])

        self.frames += count
        self.rows += kept_count

    def _settle_fragments(self) -> None:
        """Count the fragments of datagrams that never completed under their own reasons
        (the decoder counted every fragment not a datagram's row as ip_fragment), and say
        how many there were."""
        state = self.fragments.state
        waiting, waiting_datagrams, late, late_datagrams = self.fragments.in_flight(self.last_ts)
        moved = {
            SKIP_FRAGMENT_INCOMPLETE: waiting,
            SKIP_FRAGMENT_TIMEOUT: int(state[S_TIMED_OUT]) + late,
            SKIP_FRAGMENT_EVICTED: int(state[S_EVICTED]),
        }
        for reason, count in moved.items():
            self.skipped[reason] += count
            self.skipped[SKIP_IP_FRAGMENT] -= count
        datagrams = {
            "still incomplete at the end of the capture": waiting_datagrams,
            f"not whole within the timeout ({IPV4_FRAGMENT_TIMEOUT_NS // 10**9} s for IPv4, "
            f"{IPV6_FRAGMENT_TIMEOUT_NS // 10**9} s for IPv6)": int(state[S_DATAGRAMS_TIMED_OUT])
            + late_datagrams,
            f"evicted from the table of {MAX_DATAGRAMS:,} datagrams in flight": int(
                state[S_DATAGRAMS_EVICTED]
            ),
        }
        fragments = sum(moved.values())
        if fragments:
            parts = ", ".join(f"{n:,} {why}" for why, n in datagrams.items() if n)
            total = sum(datagrams.values())
            self.warnings.append(
                f"{fragments:,} IP fragment{'s' if fragments != 1 else ''} of {total:,} "
                f"datagram{'s' if total != 1 else ''} that never completed skipped: {parts}"
            )

    def _report_progress(self, done: bool = False) -> None:
        if self.progress is not None:
            total = self.source.total_bytes
            self.progress(total if done else self.source.raw_position(), total)

    def _result(self, file_format: str) -> Capture:
        packets = _packet_table(self.packets)
        sack = _table(schema.SACK_COLUMNS, self.sack_chunks)
        udp = _table(schema.UDP_COLUMNS, self.udp_chunks)
        late = int(self.skipped[SKIP_BAD_TIMESTAMP])
        if late and late == self.frames:  # a wrong if_tsoffset, most likely: no time to show
            raise CaptureError(
                self.path,
                f"every frame ({late}) has a time outside the years 1677-2262 "
                "(int64 nanoseconds): check the interface's if_tsoffset and if_tsresol",
            )
        if late:
            self.warnings.append(
                f"{late} frames skipped: their time is outside the years 1677-2262 "
                "(int64 nanoseconds)"
            )
        self._settle_fragments()
        skipped = {
            reason: int(count)
            for reason, count in zip(SKIP_REASONS, self.skipped, strict=True)
            if reason != "kept" and count
        }
        stats = ReadStats(
            frames=self.frames,
            skipped=skipped,
            truncated_tail=self.truncated,
            warnings=tuple(self.warnings),
        )
        return Capture(
            path=self.path,
            file_format=file_format,
            compression=self.source.compression,
            link_types=tuple(self.link_types),
            packets=packets,
            flows=_flows_table(self.flows),
            sack=sack,
            udp=udp,
            stats=stats,
        )


def _packet_capacity(source: ByteSource) -> int:
    """Rows to reserve for the packet table: every record of an uncompressed file fits.

    A record takes 16 bytes or more, so a file of N bytes holds at most N / 16 of them. The
    reservation is address space only: pages that are never written cost no memory. Past
    MAX_RESERVED_ROWS (and for compressed files, whose size says little) the columns grow.
    """
    records = 1 << 20 if source.compression is not None else source.total_bytes // 16 + 1
    return int(min(records, MAX_RESERVED_ROWS))


def _packet_columns(capacity: int) -> ColumnBuffer:
    """The packet table's columns, each one contiguous array: every later stage reads columns
    as numpy arrays, which a chunked column would copy each time it is read."""
    dtypes = {c.name: np.dtype(c.type.to_pandas_dtype()) for c in schema.PACKET_COLUMNS}
    return ColumnBuffer(dtypes, capacity)


def _packet_table(columns: ColumnBuffer) -> pa.Table:
    arrays = [to_arrow(columns.column(c.name), c.type) for c in schema.PACKET_COLUMNS]
    return pa.Table.from_arrays(arrays, schema=schema.arrow_schema(schema.PACKET_COLUMNS))


def _table(columns: tuple[schema.Column, ...], chunks: dict[str, list[np.ndarray]]) -> pa.Table:
    """A table of the declared schema from per-chunk numpy arrays, without copying them."""
    arrays = [
        pa.chunked_array([to_arrow(a, c.type) for a in chunks[c.name]], type=c.type)
        for c in columns
    ]
    return pa.Table.from_arrays(arrays, schema=schema.arrow_schema(columns))


def _flows_table(flows: FlowTable) -> pa.Table:
    """One row per flow, its endpoints' addresses as text (the only place they are stored)."""
    count = int(flows.count[0])
    keys = flows.keys[:count]
    head = keys[:, 0]
    version = (head >> np.uint64(56)).astype(np.uint8)
    words = keys.tolist()
    versions = version.tolist()
    data: dict[str, np.ndarray | list[str]] = {
        "flow": np.arange(count, dtype=np.int32),
        "proto": ((head >> np.uint64(48)) & np.uint64(0xFF)).astype(np.uint8),
        "ip_version": version,
        "addr0": [_address(v, k[1], k[2]) for v, k in zip(versions, words, strict=True)],
        "port0": ((head >> np.uint64(16)) & np.uint64(0xFFFF)).astype(np.uint16),
        "addr1": [_address(v, k[3], k[4]) for v, k in zip(versions, words, strict=True)],
        "port1": (head & np.uint64(0xFFFF)).astype(np.uint16),
        "outer": [
            f"{_address(int(o[0]), o[1], o[2])} > {_address(int(o[0]), o[3], o[4])}" if o[0] else ""
            for o in flows.outer[:count].tolist()
        ],
    }
    arrays = [to_arrow(data[c.name], c.type) for c in schema.FLOW_COLUMNS]
    return pa.Table.from_arrays(arrays, schema=schema.arrow_schema(schema.FLOW_COLUMNS))


# Dotted-quad text of each octet value: IPv4 addresses are formatted from these, a port scan's
# hundreds of thousands of flows ten times faster than through ipaddress.
_OCTETS = tuple(str(i) for i in range(256))


def _address(version: int, high: int, low: int) -> str:
    """An address from its two big-endian 64-bit halves (IPv4: the top 32 bits of the first)."""
    if version == 4:
        a, o = high >> 32, _OCTETS
        return f"{o[a >> 24]}.{o[(a >> 16) & 255]}.{o[(a >> 8) & 255]}.{o[a & 255]}"
    return str(ipaddress.IPv6Address(high << 64 | low))
