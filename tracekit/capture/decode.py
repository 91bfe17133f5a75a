"""Decode link, IP, TCP and UDP headers of a chunk of records, and key each packet to its flow.

One compiled pass per record (numba): header chains (VLAN tags, IPv6 extension headers, TCP
options) are sequential by nature, and a compiled loop writes straight into compact column arrays
with no per-packet Python object.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

from tracekit.core.kernels import bind
from tracekit.schema import OPT_CUT

# Link types, https://www.tcpdump.org/linktypes.html
LINK_NULL = 0  # BSD loopback: 4-byte address family in the capturing host's byte order
LINK_ETHERNET = 1
LINK_PPP = 9  # PPP, RFC 1661: optional 0xFF 0x03 address and control, then the protocol
LINK_FDDI = 10  # FDDI: frame control, two 6-byte addresses, then 802.2 LLC/SNAP
LINK_PPP_HDLC = 50  # PPP in HDLC-like framing, RFC 1662
LINK_C_HDLC = 104  # Cisco HDLC: address, control, then an Ethernet type
LINK_RAW_BSD = 12  # DLT_RAW as most BSDs number it
LINK_RAW_OPENBSD = 14
LINK_RAW = 101  # LINKTYPE_RAW: the frame starts with the IPv4 or IPv6 header
LINK_LOOP = 108  # OpenBSD loopback: address family in network byte order
LINK_SLL = 113  # Linux cooked capture v1, 16-byte header
LINK_MPLS = 219  # the frame starts with an MPLS label stack
LINK_IPV4 = 228
LINK_IPV6 = 229
LINK_SLL2 = 276  # Linux cooked capture v2, 20-byte header
KNOWN_LINK_TYPES = frozenset(
    {
        LINK_NULL,
        LINK_ETHERNET,
        LINK_PPP,
        LINK_FDDI,
        LINK_PPP_HDLC,
        LINK_C_HDLC,
        LINK_RAW_BSD,
        LINK_RAW_OPENBSD,
        LINK_RAW,
        LINK_LOOP,
        LINK_SLL,
        LINK_MPLS,
        LINK_IPV4,
        LINK_IPV6,
        LINK_SLL2,
    }
)

ETHERTYPE_IPV4 = 0x0800
ETHERTYPE_IPV6 = 0x86DD
# 802.1Q customer tag, 802.1ad service tag (QinQ), and the pre-standard QinQ tag.
ETHERTYPE_VLAN = 0x8100
ETHERTYPE_QINQ = 0x88A8
ETHERTYPE_QINQ_OLD = 0x9100
# What a tunnel carries: Ethernet frames (transparent Ethernet bridging, RFC 1701's protocol
# type; VXLAN and Geneve say the same), and ERSPAN type II's mirrored frames.
ETHERTYPE_TEB = 0x6558
ETHERTYPE_ERSPAN_II = 0x88BE
# MPLS unicast and multicast (RFC 3032, RFC 5332), and PPPoE's session stage (RFC 2516); its
# discovery stage (0x8863) carries no IP and is left to the non-IP frames.
ETHERTYPE_MPLS = 0x8847
ETHERTYPE_MPLS_MC = 0x8848
ETHERTYPE_PPPOE_SESSION = 0x8864
# PPP's protocol numbers for IPv4 and IPv6 (RFC 1332, RFC 5072).
PPP_IPV4 = 0x0021
PPP_IPV6 = 0x0057
# IP protocol numbers of the tunnels decoded: IPv4 in IP (RFC 2003), IPv6 in IP (RFC 4213), GRE
# (RFC 2784, RFC 2890); and of IPsec: ESP's payload is encrypted (RFC 4303), AH's is not (RFC 4302).
IPPROTO_IPIP = 4
IPPROTO_IPV6 = 41
IPPROTO_GRE = 47
IPPROTO_ESP = 50
IPPROTO_AH = 51
# UDP ports of the tunnels decoded: VXLAN (RFC 7348), Geneve (RFC 8926), GTP-U (3GPP TS 29.281).
PORT_VXLAN = 4789
PORT_GENEVE = 6081
PORT_GTP_U = 2152
# Tunnels in tunnels followed at most this deep: real stacks nest two or three (GTP in GRE in
# IP), and a crafted chain of headers gets no more of the decoder's time than this.
MAX_TUNNEL_DEPTH = 4
# What `_tunnel` finds inside: nothing, an Ethernet frame, an MPLS label stack (or IPv4, IPv6).
INNER_NONE = 0
INNER_ETHERNET = 1
INNER_MPLS = 2
# The bytes an IP packet may hold when no link-layer length limits it (only PPPoE's does).
UNLIMITED = 1 << 62

# Why a record was not kept; index into SKIP_REASONS (0 means kept).
KEPT = 0
SKIP_NON_IP = 1
SKIP_NOT_TCP_UDP = 2
SKIP_IP_FRAGMENT = 3
SKIP_SHORT_FRAME = 4
SKIP_BAD_HEADER = 5
SKIP_BAD_TIMESTAMP = 6  # set by the reader: a pcapng time past int64 nanoseconds (records.BAD_TS)
SKIP_UNKNOWN_LINK_TYPE = 7  # a pcapng interface of a link type not in KNOWN_LINK_TYPES
SKIP_ENCRYPTED = 8  # IPsec ESP: the transport header is encrypted
SKIP_REASONS = (
    "kept",
    "non_ip",
    "not_tcp_udp",
    "ip_fragment",
    "short_frame",
    "bad_header",
    "bad_timestamp",
    "unknown_link_type",
    "encrypted",
)

# IPv4 options that carry a source route, RFC 791 3.1: loose (LSRR) and strict (SSRR).
IPOPT_LSRR = 131
IPOPT_SSRR = 137
# The IPv6 hop-by-hop Jumbo Payload option, RFC 2675 2.
IP6OPT_JUMBO = 0xC2


STATUS_DONE = 0
STATUS_GROW = 1  # the flow table is full: grow it and call again from the returned record

KEY_WORDS = 5  # see FlowTable
MIX_PRIME = np.uint64(0x9E3779B97F4A7C15)  # 2**64 / golden ratio, Fibonacci hashing (Knuth 6.4)


@dataclass
class Columns:
    """Per-record output arrays of one chunk, sized for `capacity` records."""

    reason: np.ndarray
    ip_version: np.ndarray
    proto: np.ndarray
    ip_id: np.ndarray
    payload_bytes: np.ndarray
    tcp_flags: np.ndarray
    seq: np.ndarray
    ack: np.ndarray
    win_raw: np.ndarray
    opts: np.ndarray
    mss: np.ndarray
    wscale: np.ndarray
    tsval: np.ndarray
    tsecr: np.ndarray
    sack_n: np.ndarray
    sack: np.ndarray  # (capacity, 8): left, right of up to 4 blocks
    flow: np.ndarray
    src_end: np.ndarray
    udp_head_len: np.ndarray
    udp_head: np.ndarray

    @classmethod
    def empty(cls, capacity: int) -> Columns:
        """Uninitialised arrays; the kernel writes every field of every record it decodes."""
        e = np.empty
        return cls(
            reason=e(capacity, np.uint8),
            ip_version=e(capacity, np.uint8),
            proto=e(capacity, np.uint8),
            ip_id=e(capacity, np.uint16),
            payload_bytes=e(capacity, np.uint32),
            tcp_flags=e(capacity, np.uint8),
            seq=e(capacity, np.uint32),
            ack=e(capacity, np.uint32),
            win_raw=e(capacity, np.uint16),
            opts=e(capacity, np.uint8),
            mss=e(capacity, np.uint16),
            wscale=e(capacity, np.uint8),
            tsval=e(capacity, np.uint32),
            tsecr=e(capacity, np.uint32),
            sack_n=e(capacity, np.uint8),
            sack=e((capacity, 8), np.uint32),
            flow=e(capacity, np.int32),
            src_end=e(capacity, np.uint8),
            udp_head_len=e(capacity, np.uint8),
            udp_head=e(capacity, np.uint64),
        )


class FlowTable:
    """Open-addressing hash table from flow key to flow id, ids in order of first sight.

    A key is KEY_WORDS 64-bit words: word 0 holds version << 56 | protocol << 48 | the lower
    endpoint's port << 16 | the higher endpoint's port; words 1-2 the lower endpoint's address as
    two big-endian halves (an IPv4 address in the top 32 bits of word 1), words 3-4 the higher's.
    """

    def __init__(self, capacity: int = 1024) -> None:
        self.slots = np.full(capacity * 2, -1, np.int32)
        self.keys = np.zeros((capacity, KEY_WORDS), np.uint64)
        self.hashes = np.zeros(capacity, np.uint64)
        self.count = np.zeros(1, np.int64)

    def grow(self) -> None:
        """Double the capacity and re-insert every flow."""
        capacity = self.keys.shape[0] * 2
        n = int(self.count[0])
        keys = np.zeros((capacity, KEY_WORDS), np.uint64)
        keys[:n] = self.keys[:n]
        hashes = np.zeros(capacity, np.uint64)
        hashes[:n] = self.hashes[:n]
        self.keys, self.hashes = keys, hashes
        self.slots = np.full(capacity * 2, -1, np.int32)
        _rehash(self.slots, self.hashes, n)


def _rehash(slots: np.ndarray, hashes: np.ndarray, n: int) -> None:
    mask = slots.shape[0] - 1
    for flow in range(n):
        s = np.int64(hashes[flow] & np.uint64(mask))
        while slots[s] >= 0:
            s = (s + 1) & mask
        slots[s] = flow


def _at(b: np.ndarray, p: Any) -> Any:
    """b[p] for a p known to be in range. numba checks a signed index for a negative value (to
    count it from the end) at every access; an unsigned one it takes as it is. The decoder
    reads about 40 bytes a packet: 27% of its time went to those checks."""
    return b[np.uint64(p)]


def _u16(b: np.ndarray, p: Any) -> Any:
    return (np.int64(_at(b, p)) << 8) | np.int64(_at(b, p + 1))


def _u32(b: np.ndarray, p: Any) -> Any:
    return (
        (np.int64(_at(b, p)) << 24)
        | (np.int64(_at(b, p + 1)) << 16)
        | (np.int64(_at(b, p + 2)) << 8)
        | np.int64(_at(b, p + 3))
    )


def _u64(b: np.ndarray, p: Any) -> Any:
    return (np.uint64(_u32(b, p)) << np.uint64(32)) | np.uint64(_u32(b, p + 4))


def _ethernet(b: np.ndarray, p: Any, end: Any) -> Any:
    """An Ethernet header at p: what `_link_payload` finds after its Ethernet type."""
    if end - p < 14:
        return 0, p, SKIP_SHORT_FRAME, UNLIMITED
    ethertype = _u16(b, p + 12)
    # Most frames carry IP right away: answered here, without the walk's loop.
    if ethertype == ETHERTYPE_IPV4:
        return 4, p + 14, KEPT, UNLIMITED
    if ethertype == ETHERTYPE_IPV6:
        return 6, p + 14, KEPT, UNLIMITED
    return _link_payload(b, ethertype, p + 14, end)


def _walked(ethertype: Any) -> Any:
    """An Ethernet type `_link_payload` reads past or into."""
    return ethertype in (
        ETHERTYPE_IPV4,
        ETHERTYPE_IPV6,
        ETHERTYPE_VLAN,
        ETHERTYPE_QINQ,
        ETHERTYPE_QINQ_OLD,
        ETHERTYPE_MPLS,
        ETHERTYPE_MPLS_MC,
        ETHERTYPE_PPPOE_SESSION,
    )


def _link_payload(b: np.ndarray, ethertype: Any, q: Any, end: Any) -> Any:
    """The packet an Ethernet type at q announces, through VLAN tags, MPLS label stacks (and
    the Ethernet pseudowires they carry) and PPPoE sessions: (IP version 4 or 6, or 0; its
    header's offset; KEPT or SKIP_SHORT_FRAME; the most bytes the IP packet may hold, which
    only a PPPoE length limits). Every step takes at least 4 bytes of the frame, so the walk
    ends within it."""
    while True:
        if ethertype in (ETHERTYPE_VLAN, ETHERTYPE_QINQ, ETHERTYPE_QINQ_OLD):
            if q + 4 > end:
                return 0, q, SKIP_SHORT_FRAME, UNLIMITED
            ethertype = _u16(b, q + 2)
            q += 4
        elif ethertype in (ETHERTYPE_MPLS, ETHERTYPE_MPLS_MC):
            # Label stack entries of 4 bytes down to the one with the bottom-of-stack bit
            # (RFC 3032 2.1). No field says what the stack carries: Wireshark guesses from the
            # first nibble (RFC 4928): 4 IPv4, 6 IPv6, 0 an Ethernet pseudowire.
            while True:
                if q + 4 > end:
                    return 0, q, SKIP_SHORT_FRAME, UNLIMITED
                bottom = _at(b, q + 2) & 1
                q += 4
                if bottom:
                    break
            if q >= end:
                return 0, q, SKIP_SHORT_FRAME, UNLIMITED
            nibble = _at(b, q) >> 4
            if nibble == 4:
                return 4, q, KEPT, UNLIMITED
            if nibble == 6:
                return 6, q, KEPT, UNLIMITED
            if nibble != 0:
                return 0, q, KEPT, UNLIMITED
            # An Ethernet pseudowire, with a 4-byte control word (RFC 4448 4.6, whose first
            # nibble is 0) or without one, where the destination address starts with a 0 nibble.
            # Wireshark tells them apart by whether both addresses read without the word belong
            # to a registered vendor; the frame's own Ethernet type tells it here as well.
            if q + 18 <= end and _walked(_u16(b, q + 16)):
                ethertype = _u16(b, q + 16)
                q += 18
            elif q + 14 <= end and _walked(_u16(b, q + 12)):
                ethertype = _u16(b, q + 12)
                q += 14
            elif q + 14 > end:
                return 0, q, SKIP_SHORT_FRAME, UNLIMITED
            else:
                return 0, q, KEPT, UNLIMITED
        elif ethertype == ETHERTYPE_PPPOE_SESSION:
            # Version, type, code, session id, then the length of what follows: the PPP
            # protocol field and the packet (RFC 2516 4). Wireshark holds the packet to a
            # shorter length and reads past a longer one to the frame's end; so does this.
            if q + 6 > end:
                return 0, q, SKIP_SHORT_FRAME, UNLIMITED
            length = _u16(b, q + 4)
            version, p, skip = _ppp_protocol(b, q + 6, end)
            return version, p, skip, length - (p - (q + 6))
        elif ethertype == ETHERTYPE_IPV4:
            return 4, q, KEPT, UNLIMITED
        elif ethertype == ETHERTYPE_IPV6:
            return 6, q, KEPT, UNLIMITED
        else:
            return 0, q, KEPT, UNLIMITED


def _ppp_protocol(b: np.ndarray, q: Any, end: Any) -> Any:
    """PPP's protocol field at q, two bytes or, compressed, one whose low bit is set (RFC 1661
    6.5): (IP version 4 or 6, or 0; the packet's offset; KEPT or SKIP_SHORT_FRAME)."""
    if end - q < 1:
        return 0, q, SKIP_SHORT_FRAME
    if _at(b, q) & 1:
        number = np.int64(_at(b, q))
        q += 1
    elif end - q >= 2:
        number = _u16(b, q)
        q += 2
    else:
        return 0, q, SKIP_SHORT_FRAME
    if number == PPP_IPV4:
        return 4, q, KEPT
    if number == PPP_IPV6:
        return 6, q, KEPT
    return 0, q, KEPT


def _tunnel(b: np.ndarray, proto: Any, l4: Any, l4len: Any, end: Any) -> Any:
    """The packet a tunnel header at l4 carries: (what: INNER_NONE, INNER_ETHERNET, INNER_MPLS,
    or 4 or 6 for IP; where it starts). Only tunnels whose header is whole in the captured bytes
    and in the outer payload are followed; anything else is what it was (a GRE or UDP packet)."""
    stop = min(end, l4 + l4len)
    if proto == IPPROTO_IPIP:
        return 4, l4
    if proto == IPPROTO_IPV6:
        return 6, l4
    if proto == IPPROTO_GRE:
        if stop - l4 < 4:
            return 0, l4
        flags = _u16(b, l4)
        # Version 0 without routing (RFC 2784; RFC 1701's routing is obsolete): checksum, key
        # and sequence number add 4 bytes each (RFC 2890). Version 1 is PPTP's PPP.
        if flags & 0x4007:
            return 0, l4
        hlen = 4 + 4 * ((flags >> 15) & 1) + 4 * ((flags >> 13) & 1) + 4 * ((flags >> 12) & 1)
        ptype = _u16(b, l4 + 2)
        if ptype == ETHERTYPE_ERSPAN_II:
            hlen += 8  # ERSPAN type II's own header, then the mirrored frame
        if l4 + hlen >= stop:
            return 0, l4
        if ptype == ETHERTYPE_IPV4:
            return 4, l4 + hlen
        if ptype == ETHERTYPE_IPV6:
            return 6, l4 + hlen
        if ptype in (ETHERTYPE_TEB, ETHERTYPE_ERSPAN_II):
            return INNER_ETHERNET, l4 + hlen
        if ptype in (ETHERTYPE_MPLS, ETHERTYPE_MPLS_MC):  # RFC 4023
            return INNER_MPLS, l4 + hlen
        return 0, l4
    if proto != 17 or stop - l4 < 16:
        return 0, l4
    dport = _u16(b, l4 + 2)
    h = l4 + 8  # the tunnel's header, after UDP's
    if dport == PORT_VXLAN:
        # The I flag says the VNI is valid (RFC 7348 5); the frame follows the 8-byte header.
        if _at(b, h) & 0x08:
            return INNER_ETHERNET, h + 8
        return 0, l4
    if dport == PORT_GENEVE:
        first = _at(b, h)
        if first >> 6 != 0:  # version 0 only (RFC 8926 3.4)
            return 0, l4
        start = h + 8 + np.int64(first & 0x3F) * 4
        if start >= stop:
            return 0, l4
        ptype = _u16(b, h + 2)
        if ptype == ETHERTYPE_TEB:
            return INNER_ETHERNET, start
        if ptype == ETHERTYPE_IPV4:
            return 4, start
        if ptype == ETHERTYPE_IPV6:
            return 6, start
        return 0, l4
    if dport == PORT_GTP_U:
        # Version 1, protocol type GTP, message type G-PDU (255): user data (TS 29.281 5.1).
        flags = _at(b, h)
        if flags >> 5 != 1 or not flags & 0x10 or _at(b, h + 1) != 255:
            return 0, l4
        start = h + 8
        if flags & 0x07:  # sequence number, N-PDU number, next extension type: 4 more bytes
            start += 4
            following = np.int64(_at(b, h + 11)) if flags & 0x04 else np.int64(0)
            # Extension headers: a length in 4-byte units, content, the next type last.
            hops = 0
            while following != 0:
                if start >= stop or hops >= 16:
                    return 0, l4
                units = np.int64(_at(b, start)) * 4
                if units == 0 or start + units > stop:
                    return 0, l4
                following = np.int64(_at(b, start + units - 1))
                start += units
                hops += 1
        if start >= stop:
            return 0, l4
        nibble = _at(b, start) >> 4
        if nibble == 4:
            return 4, start
        if nibble == 6:
            return 6, start
    return 0, l4


def _skipped(reason: Any) -> Any:
    """What `_network` returns for a header it does not keep."""
    zero = np.uint64(0)
    return (reason, np.int64(0), np.int64(0), np.int64(0), zero, zero, zero, zero, np.int64(0), 0)


def _network(b: np.ndarray, q: Any, version: Any, room: Any, end: Any) -> Any:
    """The IP header at q: (KEPT or a SKIP_ reason, the transport protocol, its header's
    offset, its length, the source and destination addresses as high and low 64-bit halves,
    the IPv4 identification, the IP version read).

    The transport length comes from the IP header, so that snaplen-cut frames keep their true
    payload size, but never runs past `room`, the bytes the frame (or the tunnel carrying this
    packet) held from the IP header on: a whole frame holds what it holds whatever a damaged or
    rewritten header claims, and a cut one held its original length; tshark reads both so. A
    frame longer than its IP packet (Ethernet padding, an FCS) is the IP length's. A zero length
    field is a super-packet over 64 KiB (Linux BIG TCP: IPv4 since 6.3; IPv6 since 5.19, with
    the RFC 2675 Jumbo Payload option that says its size): its size is the jumbo option's, else
    the frame's. A header that does not fit in that length is a bad header; one past the
    captured bytes of a cut frame is short.
    """
    buf = b
    zero = np.uint64(0)
    # A version nibble of 6 where the link layer said IPv4 (a rewritten capture: tcprewrite
    # gives every frame one Ethernet type) is an IPv6 packet, as Wireshark's IPv4 dissector
    # hands it to IPv6.
    if version == 4 and end - q >= 1 and _at(buf, q) >> 4 == 6:
        version = 6
    if version == 4:
        if room < 20:
            return _skipped(SKIP_BAD_HEADER)
        if end - q < 20:
            return _skipped(SKIP_SHORT_FRAME)
        ihl = np.int64(_at(buf, q) & 15) * 4
        if _at(buf, q) >> 4 != 4 or ihl < 20:
            return _skipped(SKIP_BAD_HEADER)
        total = _u16(buf, q + 2)
        if total == 0 or total > room:
            total = room
        if total < ihl:
            return _skipped(SKIP_BAD_HEADER)
        if _u16(buf, q + 6) & 0x3FFF:  # MF flag or a fragment offset, RFC 791
            return _skipped(SKIP_IP_FRAGMENT)
        proto = np.int64(_at(buf, q + 9))
        src_hi = np.uint64(_u32(buf, q + 12)) << np.uint64(32)
        dst_hi = np.uint64(_u32(buf, q + 16)) << np.uint64(32)
        # Options, RFC 791 3.1: type, length (counting type and length), value; a length
        # under 2 or past the header is malformed. Read as far as they were captured.
        skip = KEPT
        o = q + 20
        hend = q + ihl
        oend = min(hend, end)
        while o < oend:
            kind = _at(buf, o)
            if kind == 0:  # end of option list
                break
            if kind == 1:  # no operation
                o += 1
                continue
            if o + 1 >= hend:
                skip = SKIP_BAD_HEADER
                break
            if o + 1 >= end:
                break
            olen = np.int64(_at(buf, o + 1))
            if olen < 2 or o + olen > hend:
                skip = SKIP_BAD_HEADER
                break
            # A source route: until its pointer (1-based) passes the option's end, the
            # header's destination is the next hop and the route's last address the final
            # destination, which keys the flow (as tshark's ip.dst shows it).
            if (
                kind in (IPOPT_LSRR, IPOPT_SSRR)
                and olen >= 7
                and o + olen <= end
                and np.int64(_at(buf, o + 2)) <= olen
            ):
                final = o + 3 + ((olen - 3) // 4 - 1) * 4
                dst_hi = np.uint64(_u32(buf, final)) << np.uint64(32)
            o += olen
        if skip != KEPT:
            return _skipped(skip)
        src_lo = zero
        dst_lo = zero
        l4 = q + ihl
        l4len = total - ihl
        ident = _u16(buf, q + 4)
        # Authentication headers: next header, then the length in 4-byte units minus 2 (RFC 4302
        # 2.2); the payload follows in the clear. Each one takes 8 bytes or more.
        while proto == IPPROTO_AH:
            if l4len < 8:
                return _skipped(SKIP_BAD_HEADER)
            if end - l4 < 8:
                return _skipped(SKIP_SHORT_FRAME)
            ext = (np.int64(_at(buf, l4 + 1)) + 2) * 4
            if ext > l4len:
                return _skipped(SKIP_BAD_HEADER)
            proto = np.int64(_at(buf, l4))
            l4 += ext
            l4len -= ext
    else:
        if room < 40:
            return _skipped(SKIP_BAD_HEADER)
        if end - q < 40:
            return _skipped(SKIP_SHORT_FRAME)
        if _at(buf, q) >> 4 != 6:
            return _skipped(SKIP_BAD_HEADER)
        l4len = _u16(buf, q + 4)
        proto = np.int64(_at(buf, q + 6))
        if l4len == 0:
            l4len = room - 40
            # A Jumbo Payload option is in a hop-by-hop header right after the IPv6 header
            # (RFC 2675 3); options are type, length (of the value), value; Pad1 is 1 byte.
            if proto == 0 and end - q >= 42:
                o = q + 42
                oend = min(q + 40 + (np.int64(_at(buf, q + 41)) + 1) * 8, end)
                while o + 1 < oend:
                    kind = _at(buf, o)
                    if kind == 0:
                        o += 1
                        continue
                    olen = np.int64(_at(buf, o + 1)) + 2
                    if kind == IP6OPT_JUMBO and olen == 6 and o + 6 <= oend:
                        l4len = _u32(buf, o + 2)  # all but the IPv6 header
                        break
                    o += olen
        if l4len > room - 40:
            l4len = room - 40
        src_hi = _u64(buf, q + 8)
        src_lo = _u64(buf, q + 16)
        dst_hi = _u64(buf, q + 24)
        dst_lo = _u64(buf, q + 32)
        ident = 0
        l4 = q + 40
        # Skip extension headers, RFC 8200 4: each is (next header, length) then data.
        skip = KEPT
        while proto in (0, 43, 44, 51, 60, 135, 139, 140):
            if l4len < 8:
                skip = SKIP_BAD_HEADER
                break
            if end - l4 < 8:
                skip = SKIP_SHORT_FRAME
                break
            if proto == 44:  # fragment header: only an atomic fragment is whole
                if _u16(buf, l4 + 2) & 0xFFF9:
                    skip = SKIP_IP_FRAGMENT
                    break
                ext = np.int64(8)
            elif proto == IPPROTO_AH:  # AH counts its length in 4-byte units, RFC 4302 2.2
                ext = (np.int64(_at(buf, l4 + 1)) + 2) * 4
            else:
                ext = (np.int64(_at(buf, l4 + 1)) + 1) * 8
            proto = np.int64(_at(buf, l4))
            l4 += ext
            l4len -= ext
        if skip != KEPT:
            return _skipped(skip)
        if l4len < 0:
            return _skipped(SKIP_BAD_HEADER)

    return (
        KEPT,
        np.int64(proto),
        np.int64(l4),
        np.int64(l4len),
        src_hi,
        src_lo,
        dst_hi,
        dst_lo,
        np.int64(ident),
        version,
    )


def decode_records(
    buf: np.ndarray,
    rec_off: np.ndarray,
    rec_caplen: np.ndarray,
    rec_origlen: np.ndarray,
    rec_iface: np.ndarray,
    start: int,
    count: int,
    link_by_iface: np.ndarray,
    reason: np.ndarray,
    ip_version: np.ndarray,
    proto_out: np.ndarray,
    ip_id: np.ndarray,
    payload_out: np.ndarray,
    tcp_flags: np.ndarray,
    seq: np.ndarray,
    ack: np.ndarray,
    win_raw: np.ndarray,
    opts: np.ndarray,
    mss: np.ndarray,
    wscale: np.ndarray,
    tsval: np.ndarray,
    tsecr: np.ndarray,
    sack_n: np.ndarray,
    sack: np.ndarray,
    flow_out: np.ndarray,
    src_end: np.ndarray,
    udp_head_len: np.ndarray,
    udp_head: np.ndarray,
    slots: np.ndarray,
    flow_keys: np.ndarray,
    flow_hashes: np.ndarray,
    flow_count: np.ndarray,
) -> tuple[int, int]:
    """Decode records [start, count); returns (next record, STATUS_*).

    A skipped record gets only its `reason`; a kept one gets every field, written once.
    """
    mask = slots.shape[0] - 1
    last = -1
    zero = np.uint64(0)
    for r in range(start, count):
        i = np.uint64(r)  # unsigned: see _at
        off = np.int64(rec_off[i])
        end = off + np.int64(rec_caplen[i])
        origlen = np.int64(rec_origlen[i])

        # Link layer: find the network header and its version (0: not IP).
        link = link_by_iface[rec_iface[i]]
        q = off
        version = 0
        cap = UNLIMITED
        if link == LINK_ETHERNET:
            version, q, skip, cap = _ethernet(buf, off, end)
            if skip != KEPT:
                reason[i] = skip
                continue
        elif link == LINK_MPLS:
            version, q, skip, cap = _link_payload(buf, ETHERTYPE_MPLS, off, end)
            if skip != KEPT:
                reason[i] = skip
                continue
        elif link == LINK_C_HDLC:
            if end - off < 4:
                reason[i] = SKIP_SHORT_FRAME
                continue
            ethertype = _u16(buf, off + 2)
            q = off + 4
            if ethertype == ETHERTYPE_IPV4:
                version = 4
            elif ethertype == ETHERTYPE_IPV6:
                version = 6
        elif link in (LINK_PPP, LINK_PPP_HDLC):
            # Address and control (0xFF 0x03) may be left out (RFC 1661 6.6), and a protocol
            # number below 256 sent in one byte (protocol field compression, RFC 1661 6.5).
            q = off
            if end - q >= 2 and _at(buf, q) == 0xFF and _at(buf, q + 1) == 0x03:
                q += 2
            version, q, skip = _ppp_protocol(buf, q, end)
            if skip != KEPT:
                reason[i] = skip
                continue
        elif link == LINK_FDDI:
            # Frame control and two addresses (13 bytes), then LLC/SNAP: AA AA 03, an OUI of
            # zero, and an Ethernet type (RFC 1390).
            if end - off < 21:
                reason[i] = SKIP_SHORT_FRAME
                continue
            q = off + 21
            if _at(buf, off + 13) == 0xAA and _at(buf, off + 14) == 0xAA:
                ethertype = _u16(buf, off + 19)
                if ethertype == ETHERTYPE_IPV4:
                    version = 4
                elif ethertype == ETHERTYPE_IPV6:
                    version = 6
        elif link in (LINK_SLL, LINK_SLL2):
            hdr = 16 if link == LINK_SLL else 20
            if end - off < hdr:
                reason[i] = SKIP_SHORT_FRAME
                continue
            ethertype = _u16(buf, off + 14) if link == LINK_SLL else _u16(buf, off)
            q = off + hdr
            if ethertype == ETHERTYPE_IPV4:
                version = 4
            elif ethertype == ETHERTYPE_IPV6:
                version = 6
        elif link in (LINK_NULL, LINK_LOOP):
            if end - off < 4:
                reason[i] = SKIP_SHORT_FRAME
                continue
            family = _u32(buf, off)
            if link == LINK_NULL and family > 0xFFFF:
                # Written in the capturing host's byte order: a little-endian host's AF value.
                family = (
                    np.int64(_at(buf, off))
                    | (np.int64(_at(buf, off + 1)) << 8)
                    | (np.int64(_at(buf, off + 2)) << 16)
                    | (np.int64(_at(buf, off + 3)) << 24)
                )
            q = off + 4
            # AF_INET is 2 everywhere; AF_INET6 is 24 (NetBSD/OpenBSD), 28 (FreeBSD), 30 (macOS).
            if family == 2:
                version = 4
            elif family in (24, 28, 30):
                version = 6
        elif link == LINK_IPV4:
            version = 4
        elif link == LINK_IPV6:
            version = 6
        elif link in (LINK_RAW, LINK_RAW_BSD, LINK_RAW_OPENBSD):  # the version nibble says which
            if end - off < 1:
                reason[i] = SKIP_SHORT_FRAME
                continue
            nibble = _at(buf, off) >> 4
            if nibble == 4:
                version = 4
            elif nibble == 6:
                version = 6
        else:  # an interface whose link type the reader does not know (pcapng IDB)
            reason[i] = SKIP_UNKNOWN_LINK_TYPE
            continue
        if version == 0:
            reason[i] = SKIP_NON_IP
            continue

        room = min(origlen - (q - off), cap)
        skip, proto, l4, l4len, src_hi, src_lo, dst_hi, dst_lo, ident, version = _network(
            buf, q, version, room, end
        )
        # Tunnels: the packet a tunnel carries is the one to count (tshark dissects it so); its
        # room is what the outer packet's payload held.
        depth = 0
        while skip == KEPT and depth < MAX_TUNNEL_DEPTH:
            inner, nq = _tunnel(buf, proto, l4, l4len, end)
            if inner == 0:
                break
            limit = min(end, l4 + l4len)
            cap = UNLIMITED
            if inner == INNER_ETHERNET:
                version, nq, skip, cap = _ethernet(buf, nq, limit)
            elif inner == INNER_MPLS:
                version, nq, skip, cap = _link_payload(buf, ETHERTYPE_MPLS, nq, limit)
            else:
                version = inner
            if skip != KEPT:
                break
            if version == 0:
                skip = SKIP_NON_IP
                break
            room = min(l4 + l4len - nq, cap)
            skip, proto, l4, l4len, src_hi, src_lo, dst_hi, dst_lo, ident, version = _network(
                buf, nq, version, room, end
            )
            depth += 1
        if skip != KEPT:
            reason[i] = skip
            continue

        # Transport layer.
        flags = 0
        sq = 0
        ak = 0
        window = 0
        bits = 0
        mss_value = 0
        shift = 255
        ts_value = 0
        ts_echo = 0
        blocks = 0
        if proto == 6:
            if l4len < 20:
                reason[i] = SKIP_BAD_HEADER
                continue
            if end - l4 < 20:
                reason[i] = SKIP_SHORT_FRAME
                continue
            doff = np.int64(_at(buf, l4 + 12) >> 4) * 4
            if doff < 20 or l4len < doff:
                reason[i] = SKIP_BAD_HEADER
                continue
            sport = _u16(buf, l4)
            dport = _u16(buf, l4 + 2)
            sq = _u32(buf, l4 + 4)
            ak = _u32(buf, l4 + 8)
            flags = _at(buf, l4 + 13)
            window = _u16(buf, l4 + 14)
            payload = l4len - doff
            # Options, RFC 9293 3.1: kind, length, value; parsed as far as they were captured.
            o = l4 + 20
            oend = min(l4 + doff, end)
            if l4 + doff > end:
                bits |= OPT_CUT  # the snapshot length cut the header: the rest is unknown
            while o < oend:
                kind = _at(buf, o)
                if kind == 0:  # end of option list
                    break
                if kind == 1:  # no-operation
                    o += 1
                    continue
                if o + 1 >= oend:
                    break
                olen = np.int64(_at(buf, o + 1))
                if olen < 2 or o + olen > oend:
                    break
                if kind == 2 and olen == 4:
                    mss_value = _u16(buf, o + 2)
                    bits |= 0x01
                elif kind == 3 and olen == 3:
                    shift = _at(buf, o + 2)
                    bits |= 0x02
                elif kind == 4 and olen == 2:
                    bits |= 0x04
                elif kind == 5 and olen >= 10 and (olen - 2) & 7 == 0:
                    blocks = int((olen - 2) >> 3)
                    if blocks > 4:  # 40 option bytes hold at most 4 blocks, RFC 2018 3
                        blocks = 4
                    for k in range(blocks):
                        sack[i, 2 * k] = _u32(buf, o + 2 + 8 * k)
                        sack[i, 2 * k + 1] = _u32(buf, o + 6 + 8 * k)
                    bits |= 0x10
                elif kind == 8 and olen == 10:
                    ts_value = _u32(buf, o + 2)
                    ts_echo = _u32(buf, o + 6)
                    bits |= 0x08
                o += olen
        elif proto == 17:
            if l4len < 8:
                reason[i] = SKIP_BAD_HEADER
                continue
            if end - l4 < 8:
                reason[i] = SKIP_SHORT_FRAME
                continue
            sport = _u16(buf, l4)
            dport = _u16(buf, l4 + 2)
            payload = l4len - 8
            head_len = min(8, payload, end - (l4 + 8))
            head = zero
            for k in range(head_len):
                head |= np.uint64(_at(buf, l4 + 8 + k)) << np.uint64(56 - 8 * k)
            udp_head[i] = head
            udp_head_len[i] = head_len
        elif proto == IPPROTO_ESP:
            reason[i] = SKIP_ENCRYPTED
            continue
        else:
            reason[i] = SKIP_NOT_TCP_UDP
            continue
        reason[i] = KEPT
        ip_version[i] = version
        proto_out[i] = proto
        ip_id[i] = ident
        payload_out[i] = payload
        tcp_flags[i] = flags
        seq[i] = sq
        ack[i] = ak
        win_raw[i] = window
        opts[i] = bits
        mss[i] = mss_value
        wscale[i] = shift
        tsval[i] = ts_value
        tsecr[i] = ts_echo
        sack_n[i] = blocks

        # Flow key: the unordered 5-tuple, lower (address, port) endpoint first; comparing the
        # big-endian halves as integers orders the endpoints as their bytes would.
        if src_hi < dst_hi or (
            src_hi == dst_hi and (src_lo < dst_lo or (src_lo == dst_lo and sport <= dport))
        ):
            src_end[i] = 0
            w1, w2, w3, w4 = src_hi, src_lo, dst_hi, dst_lo
            lo_port, hi_port = sport, dport
        else:
            src_end[i] = 1
            w1, w2, w3, w4 = dst_hi, dst_lo, src_hi, src_lo
            lo_port, hi_port = dport, sport
        w0 = (
            (np.uint64(version) << np.uint64(56))
            | (np.uint64(proto) << np.uint64(48))
            | (np.uint64(lo_port) << np.uint64(16))
            | np.uint64(hi_port)
        )
        # Consecutive packets mostly belong to the same flow: try the last one before hashing.
        if (
            last >= 0
            and flow_keys[last, 0] == w0
            and flow_keys[last, 1] == w1
            and flow_keys[last, 2] == w2
            and flow_keys[last, 3] == w3
            and flow_keys[last, 4] == w4
        ):
            flow_out[i] = last
            continue
        h = w0 * MIX_PRIME
        h = ((h ^ (h >> np.uint64(29))) ^ w1) * MIX_PRIME
        h = ((h ^ (h >> np.uint64(29))) ^ w2) * MIX_PRIME
        h = ((h ^ (h >> np.uint64(29))) ^ w3) * MIX_PRIME
        h = ((h ^ (h >> np.uint64(29))) ^ w4) * MIX_PRIME
        h ^= h >> np.uint64(32)
        s = np.int64(h & np.uint64(mask))
        flow = -1
        while slots[s] >= 0:
            cand = slots[s]
            if (
                flow_hashes[cand] == h
                and flow_keys[cand, 0] == w0
                and flow_keys[cand, 1] == w1
                and flow_keys[cand, 2] == w2
                and flow_keys[cand, 3] == w3
                and flow_keys[cand, 4] == w4
            ):
                flow = cand
                break
            s = (s + 1) & mask
        if flow < 0:
            n = flow_count[0]
            if n >= flow_keys.shape[0]:
                return r, STATUS_GROW
            flow_keys[n, 0] = w0
            flow_keys[n, 1] = w1
            flow_keys[n, 2] = w2
            flow_keys[n, 3] = w3
            flow_keys[n, 4] = w4
            flow_hashes[n] = h
            slots[s] = n
            flow_count[0] = n + 1
            flow = n
        last = flow
        flow_out[i] = flow
    return count, STATUS_DONE


def decode_chunk(
    buf: np.ndarray,
    rec_off: np.ndarray,
    rec_caplen: np.ndarray,
    rec_origlen: np.ndarray,
    rec_iface: np.ndarray,
    count: int,
    link_by_iface: np.ndarray,
    cols: Columns,
    flows: FlowTable,
) -> None:
    """Decode `count` records into `cols`, growing the flow table as needed."""
    start = 0
    while True:
        start, status = decode_records(
            buf,
            rec_off,
            rec_caplen,
            rec_origlen,
            rec_iface,
            start,
            count,
            link_by_iface,
            cols.reason,
            cols.ip_version,
            cols.proto,
            cols.ip_id,
            cols.payload_bytes,
            cols.tcp_flags,
            cols.seq,
            cols.ack,
            cols.win_raw,
            cols.opts,
            cols.mss,
            cols.wscale,
            cols.tsval,
            cols.tsecr,
            cols.sack_n,
            cols.sack,
            cols.flow,
            cols.src_end,
            cols.udp_head_len,
            cols.udp_head,
            flows.slots,
            flows.keys,
            flows.hashes,
            flows.count,
        )
        if status == STATUS_DONE:
            return
        flows.grow()


bind(
    globals(),
    ("decode_records", "_rehash"),
    helpers=(
        *("_at", "_u16", "_u32", "_u64", "_ethernet", "_walked", "_link_payload"),
        *("_ppp_protocol", "_tunnel", "_skipped", "_network"),
    ),
)
