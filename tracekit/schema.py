"""The tables that flow between tracekit's stages, declared once as data.

Each table is a tuple of `Column` rows (name, Arrow type, unit, meaning). The same rows build the
Arrow schema that the stages produce, the tables in `docs/tables.md`, and the schema tests.
Units are in the names where they matter (`ts_ns`, `payload_bytes`, `seq_rel`).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pyarrow as pa


@dataclass(frozen=True)
class Column:
    name: str
    type: pa.DataType
    unit: str
    meaning: str


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

WRAP = np.int64(1 << 32)  # the TCP sequence space, RFC 9293 3.4

# What the reader produces: one row per TCP or UDP packet, in capture order.
# Frames that are not TCP/UDP over IP are counted in the read statistics, not kept.
PACKET_COLUMNS: tuple[Column, ...] = (
    Column("ts_ns", pa.int64(), "ns", "capture timestamp, nanoseconds since the Unix epoch"),
    Column("frame", pa.uint32(), "", "frame number in the file, 1-based (tshark's frame.number)"),
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
)
FATE_NONE = 255  # the packet is not a data transmission of a connection in both captures

# The fate column that the merge adds to a packet table (sender's or receiver's).
FATE_PACKET_COLUMNS: tuple[Column, ...] = (
    Column("fate", pa.uint8(), "", "index in tracekit.schema.FATES; 255: not judged"),
)

# One row per data transmission of a connection seen in both captures (Merge.transmissions):
# the combined time-sequence graph of departures and arrivals (Antony et al. fig. 7).
TRANSMISSION_COLUMNS: tuple[Column, ...] = (
    Column("conn", pa.int32(), "", "connection in the sender capture"),
    Column("dir", pa.uint8(), "", "0: a2b, 1: b2a (the sender capture's sides)"),
    Column("seq_rel", pa.int64(), "bytes", "first byte, relative to the sender capture's ISN"),
    Column("end_rel", pa.int64(), "bytes", "sequence number after the last byte"),
    Column("len", pa.int64(), "bytes", "payload bytes"),
    Column("sender_frame", pa.int64(), "", "frame in the sender capture (-1: not in it)"),
    Column("receiver_frame", pa.int64(), "", "first frame in the receiver capture (-1: none)"),
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


def arrow_schema(columns: tuple[Column, ...]) -> pa.Schema:
    """The Arrow schema of a declared table."""
    return pa.schema([pa.field(c.name, c.type, nullable=False) for c in columns])


def markdown_table(columns: tuple[Column, ...]) -> str:
    """The declared table as a Markdown table, as `docs/tables.md` shows it."""
    lines = ["| column | type | unit | meaning |", "| --- | --- | --- | --- |"]
    lines += [f"| `{c.name}` | {c.type} | {c.unit or '-'} | {c.meaning} |" for c in columns]
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


if __name__ == "__main__":
    print(render_docs(), end="")
