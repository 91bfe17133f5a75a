"""The tables that flow between tracekit's stages, declared once as data.

Each table is a tuple of `Column` rows (name, Arrow type, unit, meaning). The same rows build the
Arrow schema that the stages produce, the tables in `docs/tables.md`, and the schema tests.
Units are in the names where they matter (`ts_ns`, `payload_bytes`, `seq_rel`).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import numpy as np
import pyarrow as pa

if TYPE_CHECKING:
    import pandas as pd


@dataclass(frozen=True)
class Column:
    name: str
    type: pa.DataType
    unit: str
    meaning: str
    # A dictionary column's values, in the order of their codes (pandas: a Categorical).
    categories: tuple[str, ...] = ()
    # Only the batch dataset's tables hold nulls (an input without a receiver, a finding about
    # a whole connection); the tables between stages never do.
    nullable: bool = False

    @property
    def dtype(self) -> np.dtype:
        """The numpy dtype of the column's values; a dictionary column's is that of its codes."""
        arrow = self.type.index_type if pa.types.is_dictionary(self.type) else self.type
        return np.dtype(arrow.to_pandas_dtype())


# Bits of the `opts` column: which TCP options the segment carried.
OPT_MSS = 0x01  # Maximum Segment Size, RFC 9293 3.7.1
OPT_WSCALE = 0x02  # Window Scale, RFC 7323 2
OPT_SACK_PERM = 0x04  # SACK-Permitted, RFC 2018 2
OPT_TS = 0x08  # Timestamps, RFC 7323 3
OPT_SACK = 0x10  # SACK blocks, RFC 2018 3
# The TCP header ran past the captured bytes (a short snapshot length): options beyond the cut
# are unknown, not absent.
OPT_CUT = 0x20

# TCP header flags, RFC 9293 3.1 and RFC 3168 23.2.
TH_FIN = 0x01
TH_SYN = 0x02
TH_RST = 0x04
TH_PSH = 0x08
TH_ACK = 0x10
TH_URG = 0x20
TH_ECE = 0x40  # ECN echo, RFC 3168
TH_CWR = 0x80  # congestion window reduced, RFC 3168

PROTO_TCP = 6
PROTO_UDP = 17

# Classes of data segments (tracekit.connections.segments), in the order the report's legend
# lists them: the codes of the segments series' `kind`.
SEGMENT_KINDS: tuple[str, ...] = (
    "new",
    "retransmission",
    "partial_retransmission",
    "out_of_order",
    "window_probe",
    "keepalive",
)
# Where an RTT sample came from: the codes of the rtt series' `source`.
RTT_SOURCES: tuple[str, ...] = ("seq", "ts")

WRAP = np.int64(1 << 32)  # the TCP sequence space, RFC 9293 3.4

# What the reader produces: one row per TCP or UDP packet, in capture order.
# Frames that are not TCP/UDP over IP are counted in the read statistics, not kept.
PACKET_COLUMNS: tuple[Column, ...] = (
    Column("ts_ns", pa.int64(), "ns", "capture timestamp, nanoseconds since the Unix epoch"),
    Column(
        "frame",
        pa.uint32(),
        "",
        "frame number in the file, 1-based (tshark's frame.number; an 802.11 A-MSDU's packets "
        "share their frame's)",
    ),
    Column("iface", pa.uint8(), "", "pcapng interface id of the frame (0 in classic pcap)"),
    Column("flow", pa.int32(), "", "row of the flows table: the unordered 5-tuple"),
    Column("src_end", pa.uint8(), "", "which endpoint of the flow sent it: 0 or 1"),
    Column("proto", pa.uint8(), "", "IP protocol: 6 TCP, 17 UDP"),
    Column("ip_id", pa.uint16(), "", "IPv4 identification (0 for IPv6)"),
    Column(
        "payload_bytes",
        pa.uint32(),
        "bytes",
        "TCP or UDP payload length from the IP header (or the RFC 2675 jumbo option), exact "
        "under snaplen truncation, never past the frame's original length",
    ),
    Column("tcp_flags", pa.uint8(), "", "TCP flags FIN..CWR as one byte (0 for UDP)"),
    Column("seq", pa.uint32(), "", "raw TCP sequence number"),
    Column("ack", pa.uint32(), "", "raw TCP acknowledgment number"),
    Column("win_raw", pa.uint16(), "", "TCP window field as sent, before window scaling"),
    Column("opts", pa.uint8(), "", "bit set of the TCP options present (OPT_* in tracekit.schema)"),
    Column("mss", pa.uint16(), "bytes", "MSS option value (0 when absent)"),
    Column("wscale", pa.uint8(), "", "window scale shift option (255 when absent)"),
    Column("tsval", pa.uint32(), "", "TCP timestamp value (0 when absent)"),
    Column("tsecr", pa.uint32(), "", "TCP timestamp echo reply (0 when absent)"),
    Column("sack_n", pa.uint8(), "", "number of SACK blocks (their edges are in the sack table)"),
)

# Endpoints, stored once per flow rather than per packet. Endpoint 0 is the lower of the two
# (address bytes, port) pairs, so the key does not depend on who spoke first.
FLOW_COLUMNS: tuple[Column, ...] = (
    Column("flow", pa.int32(), "", "flow id, the row number"),
    Column("proto", pa.uint8(), "", "IP protocol: 6 TCP, 17 UDP"),
    Column("ip_version", pa.uint8(), "", "4 or 6"),
    Column("addr0", pa.string(), "", "endpoint 0's IP address, text form"),
    Column("port0", pa.uint16(), "", "endpoint 0's port"),
    Column("addr1", pa.string(), "", "endpoint 1's IP address, text form"),
    Column("port1", pa.uint16(), "", "endpoint 1's port"),
    Column(
        "outer",
        pa.string(),
        "",
        "where the flow's first packet came in a tunnel (IP-in-IP, GRE, VXLAN, Geneve, GTP-U, "
        "L2TP): its outermost IP header's source and destination as 'src > dst'; empty otherwise",
    ),
)

# SACK blocks (RFC 2018), only for the packets that carry them.
SACK_COLUMNS: tuple[Column, ...] = (
    Column("row", pa.uint32(), "", "row of the packet table that carried the block"),
    Column("left", pa.uint32(), "", "raw left edge: first sequence number of the block"),
    Column("right", pa.uint32(), "", "raw right edge: sequence number after the block"),
)

# The first payload bytes of UDP datagrams, for numbered test streams (UDPmon, iperf).
UDP_COLUMNS: tuple[Column, ...] = (
    Column("row", pa.uint32(), "", "row of the packet table"),
    Column("head_len", pa.uint8(), "bytes", "how many payload bytes were captured, at most 8"),
    Column("head", pa.uint64(), "", "the first 8 payload bytes as a big-endian integer, 0-padded"),
)


# What the connections stage adds to the packet table (tracekit.connections), replacing the reader's
# `flow`, `src_end`, `seq` and `ack`: the raw numbers are (seq_rel + isn) mod 2**32.
CONNECTION_PACKET_COLUMNS: tuple[Column, ...] = (
    Column("conn", pa.int32(), "", "row of the connections table"),
    Column("dir", pa.uint8(), "", "0: a2b (a sent the first SYN), 1: b2a"),
    Column(
        "seq_rel",
        pa.int64(),
        "bytes",
        "sequence number relative to the direction's ISN (SYN = 0, first data byte = 1), "
        "unwrapped across the 4 GiB wrap",
    ),
    Column(
        "ack_rel",
        pa.int64(),
        "bytes",
        "acknowledgment number relative to the other direction's ISN, unwrapped",
    ),
)

# One row per connection: a bidirectional TCP connection (one incarnation of its 4-tuple) or a
# UDP flow. `a` sent the first SYN; without a handshake in the capture, the first packet's source.
CONNECTION_COLUMNS: tuple[Column, ...] = (
    Column("conn", pa.int32(), "", "connection id, the row number"),
    Column("proto", pa.uint8(), "", "IP protocol: 6 TCP, 17 UDP"),
    Column("ip_version", pa.uint8(), "", "4 or 6"),
    Column("a", pa.string(), "", "side a as ip:port ([ip]:port for IPv6)"),
    Column("b", pa.string(), "", "side b as ip:port"),
    Column("start_ns", pa.int64(), "ns", "first packet's timestamp"),
    Column("end_ns", pa.int64(), "ns", "last packet's timestamp"),
    Column("duration_s", pa.float64(), "s", "end minus start"),
    Column("packets_a2b", pa.int64(), "packets", "packets a sent"),
    Column("packets_b2a", pa.int64(), "packets", "packets b sent"),
    Column("bytes_a2b", pa.int64(), "bytes", "payload bytes a sent, retransmissions included"),
    Column("bytes_b2a", pa.int64(), "bytes", "payload bytes b sent, retransmissions included"),
    Column(
        "throughput_a2b_bps",
        pa.float64(),
        "bit/s",
        "unique payload bytes a2b (highest sequence reached) times 8 over the duration",
    ),
    Column("throughput_b2a_bps", pa.float64(), "bit/s", "the same for b2a"),
    Column("retrans_a2b", pa.int64(), "segments", "data segments a2b that resend sent bytes"),
    Column("retrans_b2a", pa.int64(), "segments", "data segments b2a that resend sent bytes"),
    Column("syn_seen", pa.bool_(), "", "the capture holds a's SYN"),
    Column("synack_seen", pa.bool_(), "", "the capture holds b's SYN-ACK"),
    Column("isn_a", pa.uint32(), "", "a's initial sequence number (base of seq_rel a2b)"),
    Column("isn_b", pa.uint32(), "", "b's initial sequence number"),
    Column("mss_a", pa.uint16(), "bytes", "MSS option a sent (0: absent or not seen)"),
    Column("mss_b", pa.uint16(), "bytes", "MSS option b sent (0: absent or not seen)"),
    Column("ws_a", pa.int8(), "", "window scale shift a announced (-1: absent or unknown)"),
    Column("ws_b", pa.int8(), "", "window scale shift b announced (-1: absent or unknown)"),
    Column(
        "ws_state",
        pa.string(),
        "",
        "known: both SYNs seen with the option; absent: handshake seen, scaling off (RFC 7323 "
        "needs both); unknown: handshake not captured, windows may be off",
    ),
    Column("sack_ok", pa.bool_(), "", "both SYNs carried SACK-permitted"),
    Column("ts_ok", pa.bool_(), "", "both SYNs carried the timestamps option"),
    Column(
        "tso",
        pa.bool_(),
        "",
        "segments larger than the MSS were captured (TSO at the sender or GRO at the receiver)",
    ),
    Column(
        "tunnel",
        pa.string(),
        "",
        "the outer IP source and destination ('src > dst') of the tunnel its first packet came "
        "in (IP-in-IP, GRE, VXLAN, Geneve, GTP-U, L2TP); empty when not tunnelled. The connection "
        "is keyed by the inner packet's addresses and ports",
    ),
)


# What became of a data transmission, judged from the sender's and the receiver's captures
# together (tracekit.merge; docs/two-vantage.md). The code is the index in FATES.
FATES: tuple[str, ...] = (
    "delivered",  # arrived at the receiver's capture point and was acknowledged
    "network_drop",  # in the sender capture, absent from the receiver's: lost between them
    "receiver_drop",  # arrived, never acknowledged, resent: the receiving host discarded it
    "sender_capture_gap",  # at the receiver, absent from the sender's capture
    "receiver_capture_gap",  # acknowledged, yet absent from the receiver's capture
    "duplicate",  # arrived when the receiver had already acknowledged its bytes
    "reordered",  # arrived after a segment the sender sent later
    # arrived, and was resent before the receiver's ACKs showed it had taken anything that
    # came after: whether its host kept it, they cannot tell
    "receiver_untold",
)
FATE_NONE = 255  # the packet is not a data transmission of a connection in both captures

# The fate column that the merge adds to a packet table (sender's or receiver's).
FATE_PACKET_COLUMNS: tuple[Column, ...] = (
    Column("fate", pa.uint8(), "", "index in tracekit.schema.FATES; 255: not judged"),
)

# One row per data transmission of a connection seen in both captures (Merge.transmissions):
# the combined time-sequence graph of departures and arrivals (Antony et al. fig. 7). Columns
# name roles: `sender_*` is where the data left, `receiver_*` where it arrived. For data a
# connection carried back (from the receiver capture's host), that is the receiver's capture
# and the sender's, in turn; every time is on the sender capture's clock.
TRANSMISSION_COLUMNS: tuple[Column, ...] = (
    Column("conn", pa.int32(), "", "connection in the sender capture"),
    Column("dir", pa.uint8(), "", "0: a2b, 1: b2a (the sender capture's sides)"),
    Column("seq_rel", pa.int64(), "bytes", "first byte, relative to the sender capture's ISN"),
    Column("end_rel", pa.int64(), "bytes", "sequence number after the last byte"),
    Column("len", pa.uint32(), "bytes", "payload bytes"),
    Column("sender_frame", pa.uint32(), "", "frame in the data sender's capture (0: not in it)"),
    Column("receiver_frame", pa.uint32(), "", "first frame in its receiver's capture (0: none)"),
    Column("sender_t_s", pa.float64(), "s", "departure, s since the sender capture's start"),
    Column(
        "receiver_t_s",
        pa.float64(),
        "s",
        "arrival on the sender's clock (offset and skew removed), same origin; NaN: none",
    ),
    Column("fate", pa.string(), "", "one of tracekit.schema.FATES"),
)

# One-way delay of each packet seen at both ends, in the data direction (Merge.delay).
DELAY_COLUMNS: tuple[Column, ...] = (
    Column("conn", pa.int32(), "", "connection in the sender capture"),
    Column("dir", pa.uint8(), "", "0: a2b, 1: b2a"),
    Column("t_s", pa.float64(), "s", "departure, s since the sender capture's start"),
    Column("owd_s", pa.float64(), "s", "corrected arrival minus departure: the one-way delay"),
    Column(
        "queue_s",
        pa.float64(),
        "s",
        "one-way delay above the path's minimum: time spent queued (the bottleneck's queue)",
    ),
)

# Pure ACKs the receiver sent (no payload, no SYN, FIN or RST), each whether it reached the
# sender's capture: the way back, as exact as the data's fates.
REVERSE_ACK_COLUMNS: tuple[Column, ...] = (
    Column("conn", pa.int32(), "", "connection in the sender capture"),
    Column("dir", pa.uint8(), "", "direction of the data the ACK acknowledges: 0 a2b, 1 b2a"),
    Column("t_s", pa.float64(), "s", "departure at the receiver, on the sender's clock"),
    Column("arrived", pa.bool_(), "", "the sender's capture holds it"),
)

# Packets of the receiver capture's other flows (in no connection of the sender's capture)
# that arrived at the receiving host: the traffic that shared the last hop, and so the
# bottleneck in front of it, with the transfers under test.
COMPETING_COLUMNS: tuple[Column, ...] = (
    Column("conn", pa.int32(), "", "connection in the receiver capture"),
    Column("t_s", pa.float64(), "s", "arrival, on the sender's clock"),
    Column(
        "wire_bytes",
        pa.uint32(),
        "bytes",
        "payload plus UDP or TCP (with its timestamps option when the flow uses it), IP and "
        "Ethernet headers: what a bottleneck qdisc counts",
    ),
)


# The per-direction series (tracekit.series): one table each for every direction of every TCP
# connection, sorted by (conn, dir) and in capture order within a direction. A direction is
# named by its data: (conn, 0) holds a's segments and b's ACKs of them. Times are seconds since
# the capture's first packet; sequence numbers are relative to the direction's ISN (the first
# data byte is 1). `tracekit tsg --export` writes them without `conn`, `dir` and `row` (a
# reference into the packet table, which the files do not hold).
_SERIES_KEY: tuple[Column, ...] = (
    Column("conn", pa.int32(), "", "row of the connections table"),
    Column("dir", pa.uint8(), "", "direction of the data: 0 a2b, 1 b2a"),
)
SERIES_UNEXPORTED = ("conn", "dir", "row")

# Data segments and ACK-only probes of a direction.
SERIES_SEGMENT_COLUMNS: tuple[Column, ...] = (
    *_SERIES_KEY,
    Column("t_s", pa.float64(), "s", "when the segment was captured"),
    Column("seq_rel", pa.int64(), "bytes", "first byte"),
    Column("end_rel", pa.int64(), "bytes", "sequence number after the last byte"),
    Column("len", pa.uint32(), "bytes", "payload bytes (0 for an ACK-only probe or keepalive)"),
    Column(
        "kind",
        pa.dictionary(pa.int8(), pa.string()),
        "",
        "segment class: a retransmission resends bytes sent before (Karn's rule keeps it and "
        "the segments it resends out of the RTT samples); a window probe goes past a zero "
        "window, or is Linux's ACK-only probe one byte below the ACK line (a keepalive when the "
        "window is open)",
        categories=SEGMENT_KINDS,
    ),
    Column("frame", pa.uint32(), "", "frame number in the capture, 1-based"),
    Column(
        "row",
        pa.uint32(),
        "",
        "row of the packet table: its packet, where one frame holds several (an 802.11 A-MSDU)",
    ),
)

# The other side's ACKs of a direction's data. For a direction that carries no payload, only
# the ACKs that change the ACK number or the window are kept (a one-way transfer's data
# segments all repeat the same ACK of the other direction).
SERIES_ACK_COLUMNS: tuple[Column, ...] = (
    *_SERIES_KEY,
    Column("t_s", pa.float64(), "s", "when the ACK was captured"),
    Column("ack_rel", pa.int64(), "bytes", "acknowledgment number"),
    Column(
        "win_bytes",
        pa.int64(),
        "bytes",
        "advertised window, scaled (RFC 7323 2.2; the raw field when the scale is unknown)",
    ),
    Column("edge_rel", pa.int64(), "bytes", "ACK plus window: the receive window's right edge"),
    Column(
        "dupack",
        pa.bool_(),
        "",
        "a duplicate ACK (RFC 5681 2): no data, no SYN, FIN or RST, the same ACK number and "
        "window as the one before, while data is outstanding",
    ),
    Column(
        "dupack_run",
        pa.int32(),
        "ACKs",
        "place in a run of duplicates (1, 2, 3...; 0: not a duplicate): the third triggers fast "
        "retransmit (RFC 5681 3.2)",
    ),
    Column("advance", pa.bool_(), "", "the ACK raised the ACK line (or is the first)"),
    Column("frame", pa.uint32(), "", "frame number in the capture, 1-based"),
    Column(
        "row",
        pa.uint32(),
        "",
        "row of the packet table: its packet, where one frame holds several (an 802.11 A-MSDU)",
    ),
)

# SACK blocks (RFC 2018) on the ACKs of a direction's data.
SERIES_SACK_COLUMNS: tuple[Column, ...] = (
    *_SERIES_KEY,
    Column("t_s", pa.float64(), "s", "when the ACK that carried the block was captured"),
    Column("left_rel", pa.int64(), "bytes", "first byte of the block"),
    Column("right_rel", pa.int64(), "bytes", "sequence number after the block"),
    Column(
        "dsack",
        pa.bool_(),
        "",
        "a D-SACK (RFC 2883 4): the first block, below the ACK number or inside the second",
    ),
    Column("frame", pa.uint32(), "", "frame number of the ACK that carried the block, 1-based"),
)

# RTT samples of a direction's data.
SERIES_RTT_COLUMNS: tuple[Column, ...] = (
    *_SERIES_KEY,
    Column("t_s", pa.float64(), "s", "when the ACK that gave the sample was captured"),
    Column("rtt_s", pa.float64(), "s", "the round trip: that ACK's time minus its segment's"),
    Column(
        "source",
        pa.dictionary(pa.int8(), pa.string()),
        "",
        "seq: the ACK of exactly a segment's last byte, never from a resent segment (Karn); "
        "ts: the timestamp echo of an ACK that advanced the ACK line (RFC 7323 4.1)",
        categories=RTT_SOURCES,
    ),
)

# Flight and advertised window at each data segment of a direction.
SERIES_FLIGHT_COLUMNS: tuple[Column, ...] = (
    *_SERIES_KEY,
    Column("t_s", pa.float64(), "s", "when the data segment was captured"),
    Column("flight_bytes", pa.int64(), "bytes", "highest byte sent minus the ACK line"),
    Column("rwnd_bytes", pa.int64(), "bytes", "last advertised window (-1 before any)"),
)

# The five tables of `tracekit.series.Series`, by name.
SERIES_TABLES: dict[str, tuple[Column, ...]] = {
    "segments": SERIES_SEGMENT_COLUMNS,
    "acks": SERIES_ACK_COLUMNS,
    "sacks": SERIES_SACK_COLUMNS,
    "rtt": SERIES_RTT_COLUMNS,
    "flight": SERIES_FLIGHT_COLUMNS,
}

# Round trips of one direction as its sender saw them (tracekit.series.rounds): round r + 1
# starts at the first ACK beyond every byte sent before round r started, as Linux's HyStart
# marks them (tcp_cubic.c).
ROUND_COLUMNS: tuple[Column, ...] = (
    Column("round", pa.int64(), "", "round number; 0 starts with the first data segment"),
    Column("start_s", pa.float64(), "s", "start of the round"),
    Column(
        "end_s",
        pa.float64(),
        "s",
        "the next round's start; for the last round, its last data segment",
    ),
    Column(
        "mark_rel",
        pa.int64(),
        "bytes",
        "highest byte sent (snd_nxt) at the round's start: the first ACK beyond it ends the round",
    ),
    Column("packets", pa.int64(), "packets", "data segments sent in the round, resends included"),
    Column("bytes", pa.int64(), "bytes", "their payload bytes"),
)

# Packet trains of one direction (tracekit.series.trains): runs of data segments without an
# idle gap longer than the caller's.
TRAIN_COLUMNS: tuple[Column, ...] = (
    Column("start_s", pa.float64(), "s", "first segment's departure"),
    Column("end_s", pa.float64(), "s", "last segment's departure"),
    Column("packets", pa.int64(), "packets", "data segments in the train"),
    Column("bytes", pa.int64(), "bytes", "their payload bytes"),
    Column(
        "rate_bps",
        pa.float64(),
        "bit/s",
        "the bytes before the last segment over the time from first to last departure (NaN "
        "when they left at one instant): the train's rate inside it",
    ),
)

# Throughput of one direction over time (tracekit.series.rate): windows laid from the first
# packet on, kept where they hold a packet, with one empty window on each side of a gap.
RATE_COLUMNS: tuple[Column, ...] = (
    Column("t_s", pa.float64(), "s", "middle of the window"),
    Column("sent_bps", pa.float64(), "bit/s", "data bytes sent in it, resends included"),
    Column("acked_bps", pa.float64(), "bit/s", "the ACK line's advance in it (goodput)"),
)

# The dataset of `tracekit batch` (tracekit.batch, docs/commands/batch.md): one Parquet file per
# input in each of the folders captures/, connections/ and findings/.
BATCH_CAPTURE_COLUMNS: tuple[Column, ...] = (
    Column("capture", pa.string(), "", "the input's name", nullable=True),
    Column("sender", pa.string(), "", "path of the sender's capture", nullable=True),
    Column(
        "receiver", pa.string(), "", "path of the receiver's capture (null: none)", nullable=True
    ),
    Column(
        "status",
        pa.string(),
        "",
        "ok; error: the capture cannot be read; crash: a bug in tracekit",
        nullable=True,
    ),
    Column("error", pa.string(), "", "the one-line error (null when ok)", nullable=True),
    Column(
        "connections",
        pa.int64(),
        "",
        "connections of the sender capture (0 unless ok)",
        nullable=True,
    ),
    Column("findings", pa.int64(), "", "findings of the analysis (0 unless ok)", nullable=True),
    Column("time_s", pa.float64(), "s", "time the analysis took", nullable=True),
    Column(
        "fingerprint",
        pa.string(),
        "",
        "the input as it was analysed (its files' sizes and modification times, its NAT rules, "
        "the detector settings off their defaults): a run started again redoes an input whose "
        "fingerprint changed",
        nullable=True,
    ),
)

BATCH_CONNECTION_COLUMNS: tuple[Column, ...] = (
    Column("capture", pa.string(), "", "the input's name"),
    *CONNECTION_COLUMNS,
)

BATCH_FINDING_COLUMNS: tuple[Column, ...] = (
    Column("capture", pa.string(), "", "the input's name", nullable=True),
    Column("conn", pa.int32(), "", "the connection, a row of the connections table", nullable=True),
    Column("kind", pa.string(), "", "the finding's kind (docs/findings.md)", nullable=True),
    Column("severity", pa.string(), "", "info, warning or error", nullable=True),
    Column(
        "direction",
        pa.string(),
        "",
        "a2b or b2a (null: the connection as a whole)",
        nullable=True,
    ),
    Column("start_s", pa.float64(), "s", "start, since the capture's first packet", nullable=True),
    Column("end_s", pa.float64(), "s", "end, since the capture's first packet", nullable=True),
    Column("summary", pa.string(), "", "the finding's one line", nullable=True),
    Column(
        "evidence_json",
        pa.string(),
        "",
        "the evidence as a JSON object (names carry their units)",
        nullable=True,
    ),
)


def arrow_schema(columns: tuple[Column, ...]) -> pa.Schema:
    """The Arrow schema of a declared table."""
    return pa.schema([pa.field(c.name, c.type, nullable=c.nullable) for c in columns])


def pandas_dtype(column: Column) -> np.dtype | pd.CategoricalDtype:
    """The dtype of the column in a pandas frame: a dictionary column is a Categorical."""
    if column.categories:
        import pandas as pd  # here: the reader and ingest never load pandas

        return pd.CategoricalDtype(list(column.categories))
    return column.dtype


def frame(columns: tuple[Column, ...], values: Mapping[str, Any]) -> pd.DataFrame:
    """A pandas frame of the declared table, its columns in their declared order, each cast to
    its declared dtype (a dictionary column's values are its codes); no copy where the values
    have that dtype already."""
    import pandas as pd  # here: the reader and ingest never load pandas

    out: dict[str, Any] = {}
    for c in columns:
        column = np.asarray(values[c.name]).astype(c.dtype, copy=False)
        if c.categories:
            out[c.name] = pd.Categorical.from_codes(column, categories=list(c.categories))
        else:
            out[c.name] = column
    return pd.DataFrame(out, copy=False)


def empty_frame(columns: tuple[Column, ...]) -> pd.DataFrame:
    """A pandas frame of the declared table with no rows, each column of its declared dtype."""
    return frame(columns, {c.name: np.zeros(0, c.dtype) for c in columns})


def _type_name(column: Column) -> str:
    if pa.types.is_dictionary(column.type):
        return f"dictionary<{column.type.index_type}, {column.type.value_type}>"
    return f"{column.type}" + (", null" if column.nullable else "")


def _meaning(column: Column) -> str:
    if column.categories:
        return f"{column.meaning}; one of {', '.join(column.categories)}"
    return column.meaning


def markdown_table(columns: tuple[Column, ...]) -> str:
    """The declared table as a Markdown table, as `docs/tables.md` shows it."""
    lines = ["| column | type | unit | meaning |", "| --- | --- | --- | --- |"]
    lines += [
        f"| `{c.name}` | {_type_name(c)} | {c.unit or '-'} | {_meaning(c)} |" for c in columns
    ]
    return "\n".join(lines)


TABLES: tuple[tuple[str, str, tuple[Column, ...]], ...] = (
    ("packets", "what the reader produces, one row per TCP or UDP packet", PACKET_COLUMNS),
    ("flows", "endpoints, once per flow", FLOW_COLUMNS),
    ("sack", "SACK blocks of the packets that carry them", SACK_COLUMNS),
    ("udp", "first payload bytes of UDP datagrams", UDP_COLUMNS),
    (
        "connection packets",
        "columns the connections stage puts in place of flow, src_end, seq and ack",
        CONNECTION_PACKET_COLUMNS,
    ),
    ("connections", "one row per connection", CONNECTION_COLUMNS),
    ("fate", "the column the two-capture merge adds to a packet table", FATE_PACKET_COLUMNS),
    (
        "transmissions",
        "one row per data transmission seen from both captures (tracekit.merge)",
        TRANSMISSION_COLUMNS,
    ),
    ("delay", "one-way and queueing delay of packets seen at both ends", DELAY_COLUMNS),
    (
        "reverse acks",
        "pure ACKs in the receiver capture, and whether each reached the sender's capture",
        REVERSE_ACK_COLUMNS,
    ),
    (
        "competing",
        "packets of the receiver capture's other flows that arrived at the receiving host",
        COMPETING_COLUMNS,
    ),
    ("segments", "data segments and ACK-only probes of a direction", SERIES_SEGMENT_COLUMNS),
    ("acks", "the other side's ACKs of a direction's data", SERIES_ACK_COLUMNS),
    ("sacks", "SACK blocks on the ACKs of a direction's data", SERIES_SACK_COLUMNS),
    ("rtt", "RTT samples of a direction's data", SERIES_RTT_COLUMNS),
    ("flight", "flight and advertised window at each data segment", SERIES_FLIGHT_COLUMNS),
    ("rounds", "round trips of a direction, as its sender counted them", ROUND_COLUMNS),
    ("trains", "packet trains: runs of data segments without an idle gap", TRAIN_COLUMNS),
    ("rate", "throughput of a direction over time, one row per window", RATE_COLUMNS),
    ("batch captures", "tracekit batch: one row per input, in captures/", BATCH_CAPTURE_COLUMNS),
    (
        "batch connections",
        "tracekit batch: the connections table of each input, in connections/",
        BATCH_CONNECTION_COLUMNS,
    ),
    (
        "batch findings",
        "tracekit batch: the findings of each input, in findings/",
        BATCH_FINDING_COLUMNS,
    ),
)


def render_docs() -> str:
    """The text of docs/tables.md (regenerate with `python -m tracekit.schema > docs/tables.md`)."""
    parts = [
        "# Tables",
        "",
        "Generated from `tracekit/schema.py` by `python -m tracekit.schema`; a test keeps them "
        "equal.",
    ]
    for name, what, columns in TABLES:
        parts += ["", f"## {name}", "", what[0].upper() + what[1:] + "."]
        parts += ["", markdown_table(columns)]
    return "\n".join(parts) + "\n"


# The part of docs/commands/tsg.md between these lines is generated (render_tsg_columns).
TSG_BEGIN = (
    "<!-- generated from tracekit/schema.py by `python -m tracekit.schema --tsg`; a test keeps "
    "it equal -->"
)
TSG_END = "<!-- end of generated columns -->"


def render_tsg_columns() -> str:
    """The columns of the files `tracekit tsg --export` writes, one table per series, as
    docs/commands/tsg.md shows them (each file is one direction: no `conn` or `dir`; no
    `row`, a reference into the packet table)."""
    parts = [TSG_BEGIN]
    for name, what, columns in TABLES:
        if name in SERIES_TABLES:
            exported = tuple(c for c in columns if c.name not in SERIES_UNEXPORTED)
            parts += ["", f"`{name}`: {what}.", "", markdown_table(exported)]
    return "\n".join([*parts, "", TSG_END]) + "\n"


def tsg_columns_section(text: str) -> str:
    """The generated part of docs/commands/tsg.md's text, its two marker lines included."""
    start, end = text.index(TSG_BEGIN), text.index(TSG_END) + len(TSG_END) + 1
    return text[start:end]


if __name__ == "__main__":
    import sys

    print(render_tsg_columns() if sys.argv[1:] == ["--tsg"] else render_docs(), end="")
