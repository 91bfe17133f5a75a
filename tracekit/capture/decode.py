"""Decode link, IP, TCP and UDP headers of a chunk of records, and key each packet to its flow.

One compiled pass per record (numba): header chains (VLAN tags, IPv6 extension headers, TCP
options) are sequential by nature, and a compiled loop writes straight into compact column arrays
with no per-packet Python object.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

from tracekit.capture.records import BAD_TS
from tracekit.core.kernels import bind
from tracekit.schema import OPT_CUT

# Link types, https://www.tcpdump.org/linktypes.html
LINK_NULL = 0  # BSD loopback: 4-byte address family in the capturing host's byte order
LINK_ETHERNET = 1
LINK_PPP = 9  # PPP, RFC 1661: optional 0xFF 0x03 address and control, then the protocol
LINK_FDDI = 10  # FDDI: frame control, two 6-byte addresses, then 802.2 LLC/SNAP
LINK_ARCNET_BSD = 7  # ARCNET: source, destination, then the protocol id (RFC 1051, RFC 1201)
LINK_PPP_HDLC = 50  # PPP in HDLC-like framing, RFC 1662
LINK_C_HDLC = 104  # Cisco HDLC: address, control, then an Ethernet type
LINK_IEEE802_11 = 105  # an 802.11 frame
LINK_RADIOTAP = 127  # radiotap (its length in its bytes 2-3, little-endian), then an 802.11 frame
LINK_PPI = 192  # PPI: its length in bytes 2-3 and the link type of what follows in 4-7 (LE)
LINK_RAW_BSD = 12  # DLT_RAW as most BSDs number it
LINK_RAW_OPENBSD = 14
LINK_RAW = 101  # LINKTYPE_RAW: the frame starts with the IPv4 or IPv6 header
LINK_LOOP = 108  # OpenBSD loopback: address family in network byte order
LINK_SLL = 113  # Linux cooked capture v1, 16-byte header
LINK_ARCNET_LINUX = 129  # ARCNET as Linux captures it: a 2-byte offset after the addresses
LINK_MPLS = 219  # the frame starts with an MPLS label stack
LINK_JUNIPER_ETHER = 178  # a Juniper router's capture of an Ethernet port: see `_juniper`
LINK_NFLOG = 239  # Linux NFLOG (`tcpdump -i nflog`): see `_nflog`
# IP over InfiniBand as Linux captures it: 40 bytes of link addresses (Wireshark shows the last
# 20, the destination's hardware address), then RFC 4391's 4-byte header (an Ethernet type and
# 2 reserved bytes), as tcpdump's print-ipoib.c reads it.
LINK_IPOIB = 242
IPOIB_HEADER_BYTES = 44
LINK_IPV4 = 228
LINK_IPV6 = 229
LINK_SLL2 = 276  # Linux cooked capture v2, 20-byte header
KNOWN_LINK_TYPES = frozenset(
    {
        LINK_NULL,
        LINK_ETHERNET,
        LINK_PPP,
        LINK_FDDI,
        LINK_ARCNET_BSD,
        LINK_ARCNET_LINUX,
        LINK_PPP_HDLC,
        LINK_C_HDLC,
        LINK_IEEE802_11,
        LINK_RADIOTAP,
        LINK_PPI,
        LINK_RAW_BSD,
        LINK_RAW_OPENBSD,
        LINK_RAW,
        LINK_LOOP,
        LINK_SLL,
        LINK_MPLS,
        LINK_JUNIPER_ETHER,
        LINK_NFLOG,
        LINK_IPOIB,
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
# ERSPAN type III (draft-foschiano-erspan 4.3): a 12-byte header whose frame type (FT) says what
# follows, 0 an Ethernet frame, and whose O bit adds an 8-byte platform-specific subheader.
ETHERTYPE_ERSPAN_III = 0x22EB
ERSPAN_III_BYTES = 12
ERSPAN_III_PLATFORM_BYTES = 8
# MPLS unicast and multicast (RFC 3032, RFC 5332), and PPPoE's session stage (RFC 2516); its
# discovery stage (0x8863) carries no IP and is left to the non-IP frames.
ETHERTYPE_MPLS = 0x8847
ETHERTYPE_MPLS_MC = 0x8848
ETHERTYPE_PPPOE_SESSION = 0x8864
# Bridge port extension tags before the Ethernet type: IEEE 802.1BR's E-tag (6 bytes after its
# own type) and Cisco's VN-tag (4 bytes after its own type); the frame's type follows each.
ETHERTYPE_ETAG = 0x893F
ETHERTYPE_VNTAG = 0x8926
# Cisco FabricPath: after its type, the FTag and TTL (2 bytes), then the whole Ethernet frame
# the edge switch took in (its addresses, tags and type).
ETHERTYPE_FABRICPATH = 0x8903
# IEEE 802.1ah provider backbone bridging: after its type, the 4-byte I-tag (priority, flags,
# service id), then the customer's addresses and the type of what follows.
ETHERTYPE_PBB = 0x88E7
# An Ethernet type field of at most this is an IEEE 802.3 length: 802.2 LLC follows.
ETHERNET_MAX_LENGTH = 1500
# Cisco HDLC's address byte, unicast and multicast: a frame of the PPP link types that starts
# with one is Cisco HDLC (Wireshark's PPP dissector hands it on so).
CHDLC_UNICAST = 0x0F
CHDLC_MULTICAST = 0x8F
# ARCNET protocol ids: IPv4 in RFC 1051's encapsulation (no further header), and IPv4 and IPv6
# in RFC 1201's (RFC 2497 for IPv6), whose split flag and sequence number take 3 bytes more; a
# BSD capture may hold RFC 1201's exception packets, a split flag of 0xFF then 4 bytes before
# the real header.
ARC_IP_RFC1051 = 0xF0
ARC_IP_RFC1201 = 0xD4
ARC_IPV6 = 0xC4
# An 802.11 frame (IEEE 802.11-2020 9.2.4.1): frame control's type 2 is data; its subtype's
# bit 2 means no data (null functions), bit 3 a QoS frame (2 bytes of QoS control, and 4 of HT
# control when the +HTC/order flag is set). Flags: to and from DS both set add a fourth address,
# protected means encrypted. The data starts with LLC/SNAP (RFC 1042): AA AA 03, an OUI of zero
# (or Cisco's 00-00-F8, which Wireshark reads alike), then an Ethernet type.
WLAN_HEADER_BYTES = 24
WLAN_TO_FROM_DS = 0x03
WLAN_PROTECTED = 0x40
WLAN_ORDER = 0x80
WLAN_AMSDU = 0x80  # the QoS control's A-MSDU present bit: subframes, not one LLC packet
# An A-MSDU (IEEE 802.11-2016 9.3.2.2.2): subframes of a 6-byte DA, a 6-byte SA and a 2-byte
# length, then that many bytes of MSDU (LLC/SNAP and the packet), each but the last padded to
# a multiple of 4 bytes from the A-MSDU's start. What `_wlan` says in place of an IP version
# for a frame that holds one: the decoder then reads each subframe as a packet of its own.
AMSDU_SUBFRAME_HEADER_BYTES = 14
WLAN_CARRIES_AMSDU = 3
# Subframes read from one A-MSDU, the most rows one record can give. An A-MSDU fills at most
# one MPDU of 11,454 octets (VHT, IEEE 802.11-2016 9.2.4.7.1 and 21.2.4), and a subframe takes
# at least 16 of them (its 14-byte header padded to 4): 716 at most, and a crafted frame of
# more gets no more rows, flows or time than a real one.
MAX_AMSDU_SUBFRAMES = 716
# LLC/SNAP (RFC 1042): AA AA 03, then an OUI and an Ethernet type. The OUI is zero, or
# Cisco's 00-00-F8 (RFC 1042's "bridge tunnel" usage), which Wireshark reads alike.
SNAP_BYTES = 8
# Juniper's capture header (tcpdump's print-juniper.c, Wireshark's packet-juniper.c): the magic
# "MGC", a flags byte, and with its extension flag a 2-byte length of extension TLVs that
# follow; then the frame, unless the no-L2 flag says the link header was stripped: a 4-byte
# protocol (little-endian, as Wireshark reads it) then says what follows, IPv4 (2, or 3 from
# MPLS), IPv6 (6, or 7 from MPLS) or an MPLS label stack (4, 5, 8).
JUNIPER_MAGIC = 0x4D4743
JUNIPER_FLAG_NO_L2 = 0x02
JUNIPER_FLAG_EXT = 0x80
# NFLOG (tcpdump.org/linktypes/LINKTYPE_NFLOG.html): address family, version and resource id
# (4 bytes), then TLVs of a 2-byte length (counting its own 4 header bytes), a 2-byte type
# (the top bit a flag) and a value padded to 4 bytes; the packet is the payload TLV's value.
NFLOG_HEADER_BYTES = 4
NFULA_PACKET_HDR = 1  # its value starts with the hardware protocol (an Ethernet type)
NFULA_PAYLOAD = 9
AF_INET = 2
AF_INET6_LINUX = 10
# PPP's protocol numbers for IPv4 and IPv6 (RFC 1332, RFC 5072), MPLS unicast and multicast
# (RFC 3032 4.3), and what `_ppp_protocol` says for the MPLS ones in place of an IP version.
PPP_IPV4 = 0x0021
PPP_IPV6 = 0x0057
PPP_MPLS = 0x0281
PPP_MPLS_MC = 0x0283
PPP_CARRIES_MPLS = 2
# IP protocol numbers of the tunnels decoded: IPv4 in IP (RFC 2003), IPv6 in IP (RFC 4213), GRE
# (RFC 2784, RFC 2890); of IPsec: ESP's payload is encrypted (RFC 4303), AH's is not (RFC 4302).
IPPROTO_IPIP = 4
IPPROTO_IPV6 = 41
IPPROTO_GRE = 47
IPPROTO_ESP = 50
IPPROTO_AH = 51
# The IPv6 next-header values `_extensions` reads past: hop-by-hop (0), routing (43),
# fragment (44), AH (51), destination options (60), mobility (135), HIP (139), shim6 (140).
IPV6_EXTENSION_HEADERS = (0, 43, 44, 51, 60, 135, 139, 140)
IPPROTO_COMP = 108  # IPComp (RFC 3173): the payload is compressed (DEFLATE, LZS)
# UDP ports of the tunnels decoded: VXLAN (RFC 7348), Geneve (RFC 8926), GTP-U (3GPP TS 29.281),
# L2TP (RFC 2661: version 2, which carries PPP).
PORT_VXLAN = 4789
PORT_GENEVE = 6081
PORT_GTP_U = 2152
PORT_L2TP = 1701
# GRE in UDP (RFC 8086 3): the GRE header right after UDP's; Wireshark reads the port either way.
PORT_GRE_IN_UDP = 4754
# AYIYA, "anything in anything" (draft-massar-v6ops-ayiya 5): an 8-byte header, an identity of
# 2**IDLen bytes and a signature of SigLen 4-byte words; a forward message (opcode 1) then
# carries the packet its next header names.
PORT_AYIYA = 5072
AYIYA_FORWARD = 1
# GRE protocol types of what Wireshark reads: WCCP version 2's redirected IPv4 packets, behind a
# 4-byte redirect header unless an IPv4 header starts right away (WCCP version 1 and the
# Cisco draft's "no redirect header" mode); and Aruba's access points' 802.11 frames, without
# their FCS, one protocol type every 16 from 0x8200 to 0x8370 (Wireshark's GRE_ARUBA_*).
GRE_WCCP = 0x883E
WCCP_REDIRECT_BYTES = 4
GRE_ARUBA_FIRST = 0x8200
GRE_ARUBA_LAST = 0x8370
# Tunnels in tunnels followed at most this deep: real stacks nest two or three (GTP in GRE in
# IP), and a crafted chain of headers gets no more of the decoder's time than this.
MAX_TUNNEL_DEPTH = 4
# What `_tunnel` finds inside: nothing, an Ethernet frame, an MPLS label stack, a PPP frame (or
# IPv4, IPv6).
INNER_NONE = 0
INNER_ETHERNET = 1
INNER_MPLS = 2
INNER_PPP = 3
INNER_WLAN = 5  # an 802.11 frame (not 4 or 6, which mean IP)
# The bytes an IP packet may hold when no link-layer length limits it (a PPPoE length, an 802.3
# length or an NFLOG payload TLV's does).
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
# What became of an IP fragment's frame that is not its datagram's row. The decoder marks
# every such frame SKIP_IP_FRAGMENT; the reader moves to the last three those whose datagram
# never completed, from the fragment table's counts.
SKIP_FRAGMENT_INCOMPLETE = 9  # its datagram still lacked bytes at the end of the capture
SKIP_FRAGMENT_TIMEOUT = 10  # ... or past its timeout (IPV4/IPV6_FRAGMENT_TIMEOUT_NS)
SKIP_FRAGMENT_EVICTED = 11  # its datagram was evicted from the full fragment table
SKIP_COMPRESSED = 12  # IPComp: the transport header is compressed
SKIP_REASONS = (
    "kept",
    "non_ip",
    "not_tcp_udp",
    "ip_fragment",  # a fragment of a datagram reassembled: counted in the frame completing it
    "short_frame",
    "bad_header",
    "bad_timestamp",
    "unknown_link_type",
    "encrypted",
    "fragment_incomplete",
    "fragment_timeout",
    "fragment_evicted",
    "compressed",
)

# IPv4 options that carry a source route, RFC 791 3.1: loose (LSRR) and strict (SSRR).
IPOPT_LSRR = 131
IPOPT_SSRR = 137
# The IPv6 hop-by-hop Jumbo Payload option, RFC 2675 2.
IP6OPT_JUMBO = 0xC2


STATUS_DONE = 0
STATUS_GROW = 1  # the flow table is full: grow it and call again from the returned record
STATUS_ROWS = 2  # the output columns are full: grow them and call again from the returned record
# What the tunnel walk says when it finds an A-MSDU: read its subframes, each a packet.
_AMSDU_FOUND = 255

KEY_WORDS = 5  # see FlowTable
MIX_PRIME = np.uint64(0x9E3779B97F4A7C15)  # 2**64 / golden ratio, Fibonacci hashing (Knuth 6.4)


@dataclass
class Columns:
    """Per-row output arrays of one chunk: a row per record, and for an A-MSDU one per
    subframe kept. `record` says which record of the chunk each row came from."""

    record: np.ndarray
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
            record=e(capacity, np.int64),
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

    @property
    def capacity(self) -> int:
        return int(self.reason.shape[0])

    def grow(self, rows: int, capacity: int) -> None:
        """Room for `capacity` rows, keeping the first `rows`."""
        wider = Columns.empty(capacity)
        for name, values in vars(self).items():
            target = getattr(wider, name)
            target[:rows] = values[:rows]
            setattr(self, name, target)


OUTER_WORDS = 5


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
        # Per flow, the outermost IP header of its first packet where that packet came in a
        # tunnel (OUTER_WORDS: word 0 the outer IP version, 0 when not tunnelled; then the
        # source's and the destination's two halves, as the key's words 1-4).
        self.outer = np.zeros((capacity, OUTER_WORDS), np.uint64)

    def grow(self) -> None:
        """Double the capacity and re-insert every flow."""
        capacity = self.keys.shape[0] * 2
        n = int(self.count[0])
        keys = np.zeros((capacity, KEY_WORDS), np.uint64)
        keys[:n] = self.keys[:n]
        hashes = np.zeros(capacity, np.uint64)
        hashes[:n] = self.hashes[:n]
        outer = np.zeros((capacity, OUTER_WORDS), np.uint64)
        outer[:n] = self.outer[:n]
        self.keys, self.hashes, self.outer = keys, hashes, outer
        self.slots = np.full(capacity * 2, -1, np.int32)
        _rehash(self.slots, self.hashes, n)


# IP fragment reassembly. A datagram is keyed as RFC 791 and RFC 8200 4.5 say: source,
# destination, protocol and identification for IPv4; source, destination and identification
# for IPv6. It is whole, as Wireshark has it, once a fragment without the more-fragments bit
# has set its length (the first such fragment's end) and the fragments received cover every
# byte from 0 up to it, in whatever order they came, overlapping or repeated. Its row is the
# frame of the fragment that completes it, with that fragment's time.
#
# Datagrams in flight at once: Linux holds at most ipfrag_high_thresh (4 MiB) of fragments,
# under 3,000 full-sized ones, so a real capture point rarely sees more; past this the oldest
# is evicted (counted) and the table never grows, whatever the capture.
MAX_DATAGRAMS = 4096
# Bytes kept of each datagram, from its start: room for the transport header and its
# options (60 bytes), the first payload bytes of a UDP stream, and the tunnel headers (GRE, an
# Ethernet frame with tags, an inner IPv6 header and its extensions) that may come before.
HEAD_BYTES = 256
# Received byte ranges tracked per datagram (adjacent ones merge): any arrival order of a
# 64 KiB datagram in fragments of 512 bytes or more (128 of them) fits, and in-order arrival
# takes one whatever the size. A datagram that needs more is evicted.
MAX_RUNS = 64
# A datagram not whole this long after its first fragment is dropped, as the receiving host
# drops it: IPv4 after Linux's ipfrag_time (30 s); IPv6 after RFC 8200 4.5's 60 s (Linux's
# ip6frag_time too). Wireshark keeps fragments for ever.
IPV4_FRAGMENT_TIMEOUT_NS = 30 * 1_000_000_000
IPV6_FRAGMENT_TIMEOUT_NS = 60 * 1_000_000_000
# Columns of FragmentTable.slots.
F_FIRST_TS = 0  # time of the datagram's first fragment, ns
F_LENGTH = 1  # its length, set by the first fragment without more-fragments; -1 until then
F_FRAGMENTS = 2  # frames that brought a fragment of it (0: the slot is free)
F_RUNS = 3  # byte ranges in FragmentTable.runs
F_OLDER = 4  # the age list: the datagram begun before this one, or -1
F_NEWER = 5  # the one begun after, or -1
F_CHAIN = 6  # the next datagram in the same hash bucket, or -1
F_KNOWN = 7  # bytes of FragmentTable.head known from 0, once whole
F_COLUMNS = 8
# FragmentTable.state: the age list's ends, free slots, then what became of fragments and
# datagrams (frames counted in the reasons of SKIP_REASONS).
S_OLDEST = 0
S_NEWEST = 1
S_FREE = 2
S_REASSEMBLED = 3  # fragments of whole datagrams, besides the one that completed each
S_TIMED_OUT = 4  # fragments of datagrams dropped at the timeout
S_EVICTED = 5  # fragments of datagrams evicted (the table full, or too many byte ranges)
S_DATAGRAMS = 6  # datagrams reassembled
S_DATAGRAMS_TIMED_OUT = 7
S_DATAGRAMS_EVICTED = 8
S_SIZE = 9
NO_OWNER = 0xFFFF  # a byte of FragmentTable.head no fragment has written


class FragmentTable:
    """The IP datagrams being reassembled, carried from one chunk of records to the next.

    A fixed table of MAX_DATAGRAMS slots: `keys` (the flow table's five words, word 0 holding
    version << 56 | protocol << 48 | identification), `slots` (F_* columns), `runs` (byte
    ranges received, start and end pairs), `head` (the datagram's first HEAD_BYTES bytes) and
    `owner` (the offset of the fragment each head byte came from: where fragments overlap,
    the one with the lowest offset gives the byte, the first to arrive among equals, as
    Wireshark builds the datagram), a hash of `buckets` and a stack of `free` slots.
    """

    def __init__(self) -> None:
        n = MAX_DATAGRAMS
        self.keys = np.zeros((n, KEY_WORDS), np.uint64)
        self.slots = np.zeros((n, F_COLUMNS), np.int64)
        self.runs = np.zeros((n, 2 * MAX_RUNS), np.int32)
        self.head = np.zeros((n, HEAD_BYTES), np.uint8)
        self.owner = np.zeros((n, HEAD_BYTES), np.uint16)
        self.buckets = np.full(2 * n, -1, np.int64)
        self.free = np.arange(n - 1, -1, -1, dtype=np.int64)  # slot 0 is taken first
        self.state = np.zeros(S_SIZE, np.int64)
        self.state[S_OLDEST] = self.state[S_NEWEST] = -1
        self.state[S_FREE] = n

    def in_flight(self, now_ns: int) -> tuple[int, int, int, int]:
        """Datagrams still incomplete at `now_ns` (the capture's last time): (fragments and
        datagrams within their timeout, fragments and datagrams past it)."""
        fragments = self.slots[:, F_FRAGMENTS]
        live = fragments > 0
        version = (self.keys[:, 0] >> np.uint64(56)).astype(np.int64)
        timeout = np.where(version == 4, IPV4_FRAGMENT_TIMEOUT_NS, IPV6_FRAGMENT_TIMEOUT_NS)
        late = live & (now_ns - self.slots[:, F_FIRST_TS] > timeout)
        waiting = live & ~late
        return (
            int(fragments[waiting].sum()),
            int(np.count_nonzero(waiting)),
            int(fragments[late].sum()),
            int(np.count_nonzero(late)),
        )


def _hash_key(w0: Any, w1: Any, w2: Any, w3: Any, w4: Any) -> Any:
    """The hash of a five-word key (the flow table's, the fragment table's)."""
    h = w0 * MIX_PRIME
    h = ((h ^ (h >> np.uint64(29))) ^ w1) * MIX_PRIME
    h = ((h ^ (h >> np.uint64(29))) ^ w2) * MIX_PRIME
    h = ((h ^ (h >> np.uint64(29))) ^ w3) * MIX_PRIME
    h = ((h ^ (h >> np.uint64(29))) ^ w4) * MIX_PRIME
    return h ^ (h >> np.uint64(32))


def _fragment_unlink(
    keys: np.ndarray, slots: np.ndarray, buckets: np.ndarray, state: np.ndarray, slot: Any
) -> None:
    """Take a datagram out of its hash bucket and the age list (its slot is not free yet)."""
    k = np.uint64(slot)
    h = _hash_key(keys[k, 0], keys[k, 1], keys[k, 2], keys[k, 3], keys[k, 4])
    bucket = np.uint64(h & np.uint64(buckets.shape[0] - 1))
    at = buckets[bucket]
    if at == slot:
        buckets[bucket] = slots[k, F_CHAIN]
    else:
        # Every live datagram is in its bucket's chain, which holds distinct live slots only.
        while at >= 0:
            following = slots[np.uint64(at), F_CHAIN]
            if following == slot:
                slots[np.uint64(at), F_CHAIN] = slots[k, F_CHAIN]
                break
            at = following
    older = slots[k, F_OLDER]
    newer = slots[k, F_NEWER]
    if older >= 0:
        slots[np.uint64(older), F_NEWER] = newer
    else:
        state[S_OLDEST] = newer
    if newer >= 0:
        slots[np.uint64(newer), F_OLDER] = older
    else:
        state[S_NEWEST] = older


def _fragment_free(slots: np.ndarray, free: np.ndarray, state: np.ndarray, slot: Any) -> None:
    slots[np.uint64(slot), F_FRAGMENTS] = 0
    n = state[S_FREE]
    if n < free.shape[0]:
        free[np.uint64(n)] = slot
        state[S_FREE] = n + 1


def _fragment_drop(
    keys: np.ndarray,
    slots: np.ndarray,
    buckets: np.ndarray,
    free: np.ndarray,
    state: np.ndarray,
    slot: Any,
    counter: Any,
) -> None:
    """Drop an incomplete datagram: its fragments count in state[counter] (S_TIMED_OUT or
    S_EVICTED), the datagram in the datagrams' counter of the same cause, three further on."""
    state[counter] += slots[np.uint64(slot), F_FRAGMENTS]
    state[counter + 3] += 1
    _fragment_unlink(keys, slots, buckets, state, slot)
    _fragment_free(slots, free, state, slot)


def _cover(runs: np.ndarray, n: Any, start: Any, stop: Any) -> Any:
    """Add the bytes [start, stop) to the n sorted, disjoint, non-touching ranges of `runs`
    (start, end pairs); the new count, or -1 when that would take more than MAX_RUNS."""
    i = 0
    while i < n and runs[2 * i + 1] < start:
        i += 1
    j = i
    low = start
    high = stop
    while j < n and runs[2 * j] <= stop:
        low = min(low, np.int64(runs[2 * j]))
        high = max(high, np.int64(runs[2 * j + 1]))
        j += 1
    merged = j - i
    if merged == 0:
        if n >= MAX_RUNS:
            return -1
        for k in range(n - 1, i - 1, -1):
            runs[2 * k + 2] = runs[2 * k]
            runs[2 * k + 3] = runs[2 * k + 1]
    elif merged > 1:
        for k in range(j, n):
            runs[2 * (k - merged + 1)] = runs[2 * k]
            runs[2 * (k - merged + 1) + 1] = runs[2 * k + 1]
    runs[2 * i] = low
    runs[2 * i + 1] = high
    return n - merged + 1


def _fragment_add(
    keys: np.ndarray,
    slots: np.ndarray,
    runs: np.ndarray,
    head: np.ndarray,
    owner: np.ndarray,
    buckets: np.ndarray,
    free: np.ndarray,
    state: np.ndarray,
    b: np.ndarray,
    start: Any,
    length: Any,
    end: Any,
    version: Any,
    proto: Any,
    ident: Any,
    src_hi: Any,
    src_lo: Any,
    dst_hi: Any,
    dst_lo: Any,
    offset: Any,
    more: Any,
    ts: Any,
) -> Any:
    """Add the fragment whose data is b[start:start + length] (captured up to `end`) at
    `offset` of its datagram. Returns the datagram's slot when this fragment completes it
    (taken out of the table; the caller frees it once done with its head bytes), -1 when the
    datagram is still incomplete (or was just evicted), -2 for a fragment without data (which
    Wireshark does not add either)."""
    if length <= 0:
        return -2
    w0 = (
        (np.uint64(version) << np.uint64(56))
        | (np.uint64(proto if version == 4 else 0) << np.uint64(48))
        | np.uint64(ident)
    )
    h = _hash_key(w0, src_hi, src_lo, dst_hi, dst_lo)
    bucket = np.uint64(h & np.uint64(buckets.shape[0] - 1))
    # Datagrams past their timeout, oldest first (the age list is in order of first fragment,
    # which is time order in a capture whose clock does not step back).
    while state[S_OLDEST] >= 0:
        oldest = np.uint64(state[S_OLDEST])
        limit = (
            IPV4_FRAGMENT_TIMEOUT_NS
            if keys[oldest, 0] >> np.uint64(56) == np.uint64(4)
            else IPV6_FRAGMENT_TIMEOUT_NS
        )
        if ts - slots[oldest, F_FIRST_TS] <= limit:
            break
        _fragment_drop(keys, slots, buckets, free, state, oldest, S_TIMED_OUT)
    slot = buckets[bucket]
    while slot >= 0:
        k = np.uint64(slot)
        if (
            keys[k, 0] == w0
            and keys[k, 1] == src_hi
            and keys[k, 2] == src_lo
            and keys[k, 3] == dst_hi
            and keys[k, 4] == dst_lo
        ):
            break
        slot = slots[k, F_CHAIN]
    if slot >= 0:
        limit = IPV4_FRAGMENT_TIMEOUT_NS if version == 4 else IPV6_FRAGMENT_TIMEOUT_NS
        if ts - slots[np.uint64(slot), F_FIRST_TS] > limit:  # met again only past its time
            _fragment_drop(keys, slots, buckets, free, state, slot, S_TIMED_OUT)
            slot = -1
    if slot < 0:
        if state[S_FREE] == 0:
            if state[S_OLDEST] < 0:  # every slot is a datagram this very frame completed
                state[S_EVICTED] += 1
                state[S_DATAGRAMS_EVICTED] += 1
                return -1
            _fragment_drop(keys, slots, buckets, free, state, state[S_OLDEST], S_EVICTED)
        n = state[S_FREE] - 1
        state[S_FREE] = n
        slot = free[np.uint64(n)]
        k = np.uint64(slot)
        keys[k, 0] = w0
        keys[k, 1] = src_hi
        keys[k, 2] = src_lo
        keys[k, 3] = dst_hi
        keys[k, 4] = dst_lo
        slots[k, F_FIRST_TS] = ts
        slots[k, F_LENGTH] = -1
        slots[k, F_FRAGMENTS] = 0
        slots[k, F_RUNS] = 0
        slots[k, F_KNOWN] = 0
        slots[k, F_CHAIN] = buckets[bucket]
        buckets[bucket] = slot
        newest = state[S_NEWEST]
        slots[k, F_OLDER] = newest
        slots[k, F_NEWER] = -1
        if newest >= 0:
            slots[np.uint64(newest), F_NEWER] = slot
        else:
            state[S_OLDEST] = slot
        state[S_NEWEST] = slot
        for p in range(HEAD_BYTES):
            owner[k, p] = NO_OWNER
    k = np.uint64(slot)
    stop = offset + length
    slots[k, F_FRAGMENTS] += 1
    if more == 0 and slots[k, F_LENGTH] < 0:
        slots[k, F_LENGTH] = stop
    count = _cover(runs[k], slots[k, F_RUNS], offset, stop)
    if count < 0:
        _fragment_drop(keys, slots, buckets, free, state, slot, S_EVICTED)
        return -1
    slots[k, F_RUNS] = count
    if offset < HEAD_BYTES:
        # The bytes this fragment brings to the head, as far as they were captured.
        last = min(stop, HEAD_BYTES, offset + max(end - start, 0))
        for p in range(offset, last):
            if owner[k, p] > offset:
                head[k, p] = _at(b, start + p - offset)
                owner[k, p] = offset
    total = slots[k, F_LENGTH]
    if total < 0 or runs[k, 0] != 0 or runs[k, 1] < total:
        return -1
    state[S_REASSEMBLED] += slots[k, F_FRAGMENTS] - 1
    state[S_DATAGRAMS] += 1
    known = 0
    while known < min(total, HEAD_BYTES) and owner[k, known] != NO_OWNER:
        known += 1
    slots[k, F_KNOWN] = known
    _fragment_unlink(keys, slots, buckets, state, slot)
    return slot


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
        ETHERTYPE_ETAG,
        ETHERTYPE_VNTAG,
        ETHERTYPE_FABRICPATH,
        ETHERTYPE_PBB,
    )


def _tag_bytes(ethertype: Any) -> Any:
    """The bytes a tag of this Ethernet type takes after the type, the next type being its last
    two (0: not a tag): a VLAN tag, an E-tag, a VN-tag, or FabricPath's or 802.1ah's header and
    the customer frame's own addresses."""
    if ethertype in (ETHERTYPE_VLAN, ETHERTYPE_QINQ, ETHERTYPE_QINQ_OLD):
        return 4
    if ethertype == ETHERTYPE_ETAG:
        return 8
    if ethertype == ETHERTYPE_VNTAG:
        return 6
    if ethertype == ETHERTYPE_FABRICPATH:
        return 16
    if ethertype == ETHERTYPE_PBB:
        return 18
    return 0


def _link_payload(b: np.ndarray, ethertype: Any, q: Any, end: Any) -> Any:
    """The packet an Ethernet type at q announces, through VLAN tags, E-tags, VN-tags, Cisco
    FabricPath, 802.1ah, MPLS label stacks (and the Ethernet pseudowires they carry), 802.3
    lengths with LLC/SNAP, and PPPoE sessions: (IP version 4 or 6, or 0; its header's offset;
    KEPT or SKIP_SHORT_FRAME; the most bytes the IP packet may hold, which only an 802.3 or
    PPPoE length limits). Every step takes at least 4 bytes of the frame, so the walk ends
    within it."""
    stop = UNLIMITED  # where an 802.3 length ends the frame's data
    while True:
        size = _tag_bytes(ethertype)
        if size:
            if q + size > end:
                return 0, q, SKIP_SHORT_FRAME, UNLIMITED
            ethertype = _u16(b, q + size - 2)
            q += size
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
                return 4, q, KEPT, stop - q
            if nibble == 6:
                return 6, q, KEPT, stop - q
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
            if version == PPP_CARRIES_MPLS:  # not followed here: the walk is one level deep
                version = 0
            return version, p, skip, min(stop - p, length - (p - (q + 6)))
        elif ethertype <= ETHERNET_MAX_LENGTH:
            # An IEEE 802.3 length: 802.2 LLC follows, and IP only behind SNAP. The length
            # counts the LLC data; bytes after it are padding (Wireshark reads them so), and a
            # length past the frame is read to the frame's end.
            if end - q < 3 or _at(b, q) != 0xAA or _at(b, q + 1) != 0xAA or _at(b, q + 2) != 0x03:
                return 0, q, KEPT, UNLIMITED
            if end - q < SNAP_BYTES:
                return 0, q, SKIP_SHORT_FRAME, UNLIMITED
            if _at(b, q + 3) != 0 or _at(b, q + 4) != 0 or _at(b, q + 5) not in (0x00, 0xF8):
                return 0, q, KEPT, UNLIMITED
            stop = min(stop, q + ethertype)
            ethertype = _u16(b, q + 6)
            q += SNAP_BYTES
        elif ethertype == ETHERTYPE_IPV4:
            return 4, q, KEPT, stop - q
        elif ethertype == ETHERTYPE_IPV6:
            return 6, q, KEPT, stop - q
        else:
            return 0, q, KEPT, UNLIMITED


def _ppp_protocol(b: np.ndarray, q: Any, end: Any) -> Any:
    """PPP's protocol field at q, two bytes or, compressed, one whose low bit is set (RFC 1661
    6.5): (IP version 4 or 6, PPP_CARRIES_MPLS, or 0; the packet's offset; KEPT or
    SKIP_SHORT_FRAME)."""
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
    if number in (PPP_MPLS, PPP_MPLS_MC):
        return PPP_CARRIES_MPLS, q, KEPT
    return 0, q, KEPT


def _cisco_hdlc(b: np.ndarray, q: Any, end: Any) -> Any:
    """A Cisco HDLC frame at q: address, control, then a protocol of the Ethernet types' numbers
    (IPv4, IPv6 or MPLS where IP is carried; Wireshark reads no VLAN tag there); what
    `_link_payload` finds."""
    if end - q < 4:
        return 0, q, SKIP_SHORT_FRAME, UNLIMITED
    protocol = _u16(b, q + 2)
    if protocol not in (ETHERTYPE_IPV4, ETHERTYPE_IPV6, ETHERTYPE_MPLS, ETHERTYPE_MPLS_MC):
        return 0, q + 4, KEPT, UNLIMITED
    return _link_payload(b, protocol, q + 4, end)


def _ppp_frame(b: np.ndarray, q: Any, end: Any) -> Any:
    """A PPP frame at q, as a PPP link or L2TP carries it; what `_link_payload` finds. Address
    and control (0xFF 0x03) may be left out (RFC 1661 6.6), and a protocol number below 256
    sent in one byte (protocol field compression, RFC 1661 6.5). A frame that starts with a
    Cisco HDLC address is Cisco HDLC, as Wireshark's PPP dissector reads it."""
    if end - q >= 1 and _at(b, q) in (CHDLC_UNICAST, CHDLC_MULTICAST):
        return _cisco_hdlc(b, q, end)
    if end - q >= 2 and _at(b, q) == 0xFF and _at(b, q + 1) == 0x03:
        q += 2
    version, q, skip = _ppp_protocol(b, q, end)
    if version == PPP_CARRIES_MPLS:
        return _link_payload(b, ETHERTYPE_MPLS, q, end)
    return version, q, skip, UNLIMITED


def _arcnet(b: np.ndarray, q: Any, end: Any, linux: Any) -> Any:
    """An ARCNET frame at q, as Wireshark reads its link types: (IP version 4 or 6, or 0; the
    packet's offset; KEPT or SKIP_SHORT_FRAME)."""
    q += 4 if linux else 2  # source, destination (and Linux's offset)
    if end - q < 1:
        return 0, q, SKIP_SHORT_FRAME
    protocol = _at(b, q)
    if protocol == ARC_IP_RFC1051:
        return 4, q + 1, KEPT
    if protocol != ARC_IP_RFC1201 and protocol != ARC_IPV6:
        return 0, q + 1, KEPT
    if end - q < 2:
        return 0, q, SKIP_SHORT_FRAME
    if not linux and _at(b, q + 1) == 0xFF:
        q += 4
    version = 4 if protocol == ARC_IP_RFC1201 else 6
    return version, q + 4, KEPT


def _u16le(b: np.ndarray, p: Any) -> Any:
    return np.int64(_at(b, p)) | (np.int64(_at(b, p + 1)) << 8)


def _juniper(b: np.ndarray, q: Any, end: Any) -> Any:
    """A Juniper Ethernet record at q: what `_link_payload` finds after its capture header."""
    if end - q < 4:
        return 0, q, SKIP_SHORT_FRAME, UNLIMITED
    if (_u16(b, q) << 8) | np.int64(_at(b, q + 2)) != JUNIPER_MAGIC:
        return 0, q, SKIP_BAD_HEADER, UNLIMITED
    flags = _at(b, q + 3)
    h = q + 4
    if flags & JUNIPER_FLAG_EXT:
        if end - h < 2:
            return 0, q, SKIP_SHORT_FRAME, UNLIMITED
        h += 2 + _u16(b, h)
    if not flags & JUNIPER_FLAG_NO_L2:
        return _ethernet(b, h, end)
    if end - h < 4:
        return 0, q, SKIP_SHORT_FRAME, UNLIMITED
    protocol = _u16le(b, h) | (_u16le(b, h + 2) << 16)
    if protocol in (2, 3):
        return 4, h + 4, KEPT, UNLIMITED
    if protocol in (6, 7):
        return 6, h + 4, KEPT, UNLIMITED
    if protocol in (4, 5, 8):
        return _link_payload(b, ETHERTYPE_MPLS, h + 4, end)
    return 0, h + 4, KEPT, UNLIMITED


def _nflog(b: np.ndarray, q: Any, end: Any) -> Any:
    """An NFLOG record at q: what `_link_payload` finds (IP version 4 or 6, or 0; the packet's
    offset; KEPT, SKIP_SHORT_FRAME or SKIP_BAD_HEADER; the payload TLV's length as the most
    the packet may hold). The packet's protocol is the packet header TLV's hardware protocol,
    an Ethernet type, when it is set, else the record's address family (Wireshark reads it so).

    The TLVs' length and type are in the capturing host's byte order (libpcap swaps them with
    the file's). Every type defined is under 256, so the first TLV's type, read both ways,
    tells the order: read in the wrong one it is a multiple of 256."""
    if end - q < NFLOG_HEADER_BYTES + 4:
        return 0, q, SKIP_SHORT_FRAME, UNLIMITED
    family = _at(b, q)
    t = q + NFLOG_HEADER_BYTES
    little = (_u16le(b, t + 2) & 0x7FFF) < 256
    hardware = np.int64(0)
    packet = np.int64(-1)
    size = np.int64(0)
    while end - t >= 4:
        length = _u16le(b, t) if little else _u16(b, t)
        kind = (_u16le(b, t + 2) if little else _u16(b, t + 2)) & 0x7FFF
        if length < 4:  # a TLV shorter than its own header: Wireshark stops there too
            return 0, t, SKIP_BAD_HEADER, UNLIMITED
        if kind == NFULA_PACKET_HDR and length >= 6 and end - t >= 6:
            hardware = _u16(b, t + 4)  # network byte order, as the kernel writes it
        elif kind == NFULA_PAYLOAD:
            packet = t + 4
            size = length - 4
        t += (length + 3) & ~3
    if packet < 0:
        return 0, t, KEPT, UNLIMITED
    if hardware == ETHERTYPE_IPV4 or (hardware == 0 and family == AF_INET):
        return 4, packet, KEPT, size
    if hardware == ETHERTYPE_IPV6 or (hardware == 0 and family == AF_INET6_LINUX):
        return 6, packet, KEPT, size
    return 0, packet, KEPT, UNLIMITED


def _wlan(b: np.ndarray, q: Any, end: Any) -> Any:
    """An 802.11 frame at q: what `_link_payload` finds after its LLC/SNAP header, or for an
    A-MSDU WLAN_CARRIES_AMSDU and where its first subframe starts (`_amsdu_subframe` reads
    them); a frame that is not an unencrypted data frame is not IP."""
    if end - q < WLAN_HEADER_BYTES:
        return 0, q, SKIP_SHORT_FRAME, UNLIMITED
    control = _at(b, q)
    flags = _at(b, q + 1)
    if control & 0x0F != 0x08 or control & 0x40 or flags & WLAN_PROTECTED:
        return 0, q, KEPT, UNLIMITED
    h = q + WLAN_HEADER_BYTES
    if flags & WLAN_TO_FROM_DS == WLAN_TO_FROM_DS:
        h += 6
    if control & 0x80:
        if end - h < 2:
            return 0, q, SKIP_SHORT_FRAME, UNLIMITED
        amsdu = _at(b, h) & WLAN_AMSDU
        h += 2
        if flags & WLAN_ORDER:
            h += 4
        if amsdu:
            return WLAN_CARRIES_AMSDU, h, KEPT, UNLIMITED
    if end - h < 8:
        return 0, q, SKIP_SHORT_FRAME, UNLIMITED
    if _at(b, h) != 0xAA or _at(b, h + 1) != 0xAA or _at(b, h + 2) != 0x03:
        return 0, q, KEPT, UNLIMITED
    if _at(b, h + 3) != 0 or _at(b, h + 4) != 0 or _at(b, h + 5) not in (0x00, 0xF8):
        return 0, q, KEPT, UNLIMITED
    return _link_payload(b, _u16(b, h + 6), h + 8, end)


def _amsdu_subframe(b: np.ndarray, base: Any, at: Any, stop: Any, end: Any) -> Any:
    """The A-MSDU subframe at `at` of the A-MSDU that starts at `base` and ends at `stop` (its
    captured bytes at `end`): what `_link_payload` finds behind its LLC/SNAP header (IP version
    4 or 6, or 0; the packet's offset; KEPT, SKIP_SHORT_FRAME or SKIP_BAD_HEADER; the most bytes
    the packet may hold), and where the next subframe starts (-1: none). As Wireshark reads
    them, subframes follow while more than a subframe header's bytes remain, and one whose
    length runs past the A-MSDU ends the walk as malformed."""
    if at + AMSDU_SUBFRAME_HEADER_BYTES > end:
        return 0, at, SKIP_SHORT_FRAME, UNLIMITED, np.int64(-1)
    msdu = at + AMSDU_SUBFRAME_HEADER_BYTES
    msdu_end = msdu + _u16(b, at + 12)
    if msdu_end > stop:
        return 0, at, SKIP_BAD_HEADER, UNLIMITED, np.int64(-1)
    following = base + ((msdu_end - base + 3) & ~np.int64(3))
    if stop - following <= AMSDU_SUBFRAME_HEADER_BYTES:
        following = np.int64(-1)
    limit = min(end, msdu_end)
    if msdu_end - msdu < SNAP_BYTES:
        return 0, msdu, KEPT, UNLIMITED, following
    if limit - msdu < SNAP_BYTES:
        return 0, msdu, SKIP_SHORT_FRAME, UNLIMITED, following
    if _at(b, msdu) != 0xAA or _at(b, msdu + 1) != 0xAA or _at(b, msdu + 2) != 0x03:
        return 0, msdu, KEPT, UNLIMITED, following
    if _at(b, msdu + 3) != 0 or _at(b, msdu + 4) != 0 or _at(b, msdu + 5) not in (0x00, 0xF8):
        return 0, msdu, KEPT, UNLIMITED, following
    version, q, skip, cap = _link_payload(b, _u16(b, msdu + 6), msdu + SNAP_BYTES, limit)
    return version, q, skip, min(cap, msdu_end - q), following


def _amsdu_room(row: Any, records: Any, rows: Any, flows: Any, flow_rows: Any) -> Any:
    """Whether an A-MSDU whose record's row is `row`, with `records` records left counting its
    own, has room in the output's `rows` and the flow table's `flow_rows` (STATUS_DONE), or
    which must grow first: every subframe may be a row and a new flow."""
    if row + MAX_AMSDU_SUBFRAMES + (records - 1) > rows:
        return STATUS_ROWS
    if flows + MAX_AMSDU_SUBFRAMES > flow_rows:
        return STATUS_GROW
    return STATUS_DONE


def _gre(b: np.ndarray, g: Any, stop: Any) -> Any:
    """The packet a GRE header at g carries, as `_tunnel` gives it; (0, g) when it is not
    followed. The header and what follows it must lie before stop."""
    if stop - g < 4:
        return 0, g
    flags = _u16(b, g)
    # Version 0 without routing (RFC 2784; RFC 1701's routing is obsolete): checksum, key and
    # sequence number add 4 bytes each (RFC 2890). Version 1 is PPTP's PPP.
    if flags & 0x4007:
        return 0, g
    hlen = 4 + 4 * ((flags >> 15) & 1) + 4 * ((flags >> 13) & 1) + 4 * ((flags >> 12) & 1)
    ptype = _u16(b, g + 2)
    if ptype == ETHERTYPE_ERSPAN_II:
        hlen += 8  # ERSPAN type II's own header, then the mirrored frame
    elif ptype == ETHERTYPE_ERSPAN_III:
        e = g + hlen
        if e + ERSPAN_III_BYTES > stop:
            return 0, g
        if (_at(b, e + 10) >> 2) & 0x1F != 0:  # FT: only mirrored Ethernet frames
            return 0, g
        hlen += ERSPAN_III_BYTES
        if _at(b, e + 11) & 1:  # O: the platform-specific subheader follows
            hlen += ERSPAN_III_PLATFORM_BYTES
    elif ptype == GRE_WCCP and g + hlen < stop and _at(b, g + hlen) >> 4 != 4:
        hlen += WCCP_REDIRECT_BYTES
    if g + hlen >= stop:
        return 0, g
    if ptype in (ETHERTYPE_IPV4, GRE_WCCP):
        return 4, g + hlen
    if ptype == ETHERTYPE_IPV6:
        return 6, g + hlen
    if ptype in (ETHERTYPE_TEB, ETHERTYPE_ERSPAN_II, ETHERTYPE_ERSPAN_III):
        return INNER_ETHERNET, g + hlen
    if ptype in (ETHERTYPE_MPLS, ETHERTYPE_MPLS_MC):  # RFC 4023
        return INNER_MPLS, g + hlen
    if GRE_ARUBA_FIRST <= ptype <= GRE_ARUBA_LAST and ptype & 0x0F == 0:
        return INNER_WLAN, g + hlen
    return 0, g


def _tunnel(b: np.ndarray, proto: Any, l4: Any, l4len: Any, end: Any) -> Any:
    """The packet a tunnel header at l4 carries: (what: INNER_NONE, INNER_ETHERNET, INNER_MPLS,
    INNER_PPP, INNER_WLAN, or 4 or 6 for IP; where it starts). Only tunnels whose header is
    whole in the captured bytes and in the outer payload are followed; anything else is what it
    was (a GRE or UDP packet)."""
    stop = min(end, l4 + l4len)
    if proto == IPPROTO_IPIP:
        return 4, l4
    if proto == IPPROTO_IPV6:
        return 6, l4
    if proto == IPPROTO_GRE:
        inner, start = _gre(b, l4, stop)
        return (inner, start) if inner != 0 else (0, l4)
    if proto != 17 or stop - l4 < 16:
        return 0, l4
    dport = _u16(b, l4 + 2)
    h = l4 + 8  # the tunnel's header, after UDP's
    if PORT_L2TP in (dport, _u16(b, l4)):
        # L2TP version 2 (RFC 2661 3.1): flags and version, then the length (L bit), tunnel and
        # session ids, Ns and Nr (S bit), an offset size and that many bytes of padding (O bit);
        # a data message (T bit clear) carries a PPP frame. Wireshark reads the port either way.
        flags = _u16(b, h)
        if flags & 0x000F != 2 or flags & 0x8000:
            return 0, l4
        start = h + 6 + 2 * ((flags >> 14) & 1) + 4 * ((flags >> 11) & 1)
        if flags & 0x0200:
            if start + 2 > stop:
                return 0, l4
            start += 2 + _u16(b, start)
        if start >= stop:
            return 0, l4
        return INNER_PPP, start
    if PORT_GRE_IN_UDP in (dport, _u16(b, l4)):
        inner, start = _gre(b, h, stop)
        return (inner, start) if inner != 0 else (0, l4)
    if PORT_AYIYA in (dport, _u16(b, l4)):
        if _at(b, h + 2) & 0x0F != AYIYA_FORWARD:
            return 0, l4
        following = _at(b, h + 3)
        identity = np.int64(1) << np.int64(_at(b, h) >> 4)
        start = h + 8 + identity + np.int64(_at(b, h + 1) >> 4) * 4
        if start >= stop:
            return 0, l4
        if following == IPPROTO_IPIP:
            return 4, start
        if following == IPPROTO_IPV6:
            return 6, start
        return 0, l4
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
            if start > stop:  # the optional fields must be captured before they are read
                return 0, l4
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
    none = np.int64(0)
    return (reason, none, none, none, zero, zero, zero, zero, none, 0, np.int64(-1), none, none)


def _extensions(b: np.ndarray, version: Any, proto: Any, l4: Any, l4len: Any, end: Any) -> Any:
    """The headers between the IP header and the transport header at l4: IPv6 extension headers
    (RFC 8200 4), IPsec AH (RFC 4302) after IPv4 or IPv6. Returns (KEPT, SKIP_IP_FRAGMENT or
    another reason; the transport protocol, its header's offset and length; for a fragment,
    its offset in the datagram in bytes, its more-fragments bit and its identification).

    A fragment's "transport header" is its data: what follows its fragment header (IPv6) or
    its IPv4 header, which the fragment table puts together (`_fragment_add`)."""
    no = np.int64(-1)
    zero = np.int64(0)
    if version == 4:
        # Authentication headers: next header, then the length in 4-byte units minus 2 (RFC
        # 4302 2.2); the payload follows in the clear. Each one takes 8 bytes or more.
        while proto == IPPROTO_AH:
            if l4len < 8:
                return SKIP_BAD_HEADER, proto, l4, l4len, no, zero, zero
            if end - l4 < 8:
                return SKIP_SHORT_FRAME, proto, l4, l4len, no, zero, zero
            ext = (np.int64(_at(b, l4 + 1)) + 2) * 4
            if ext > l4len:
                return SKIP_BAD_HEADER, proto, l4, l4len, no, zero, zero
            proto = np.int64(_at(b, l4))
            l4 += ext
            l4len -= ext
        return KEPT, proto, l4, l4len, no, zero, zero
    # Each extension header is (next header, length) then data.
    while proto in IPV6_EXTENSION_HEADERS:
        if l4len < 8:
            return SKIP_BAD_HEADER, proto, l4, l4len, no, zero, zero
        if end - l4 < 8:
            return SKIP_SHORT_FRAME, proto, l4, l4len, no, zero, zero
        if proto == 44:
            # Fragment header, RFC 8200 4.5: next header, reserved, offset in 8-byte units
            # (13 bits), two reserved bits, M; identification. An atomic fragment (offset 0,
            # M 0) is a whole packet (RFC 6946), as Wireshark reads it.
            word = _u16(b, l4 + 2)
            if word & 0xFFF9:
                offset = word & 0xFFF8
                following = np.int64(_at(b, l4))
                more = word & 1
                return SKIP_IP_FRAGMENT, following, l4 + 8, l4len - 8, offset, more, _u32(b, l4 + 4)
            ext = np.int64(8)
        elif proto == IPPROTO_AH:  # AH counts its length in 4-byte units, RFC 4302 2.2
            ext = (np.int64(_at(b, l4 + 1)) + 2) * 4
        else:
            ext = (np.int64(_at(b, l4 + 1)) + 1) * 8
        proto = np.int64(_at(b, l4))
        l4 += ext
        l4len -= ext
    if l4len < 0:
        return SKIP_BAD_HEADER, proto, l4, l4len, no, zero, zero
    return KEPT, proto, l4, l4len, no, zero, zero


def _network(buf: np.ndarray, q: Any, version: Any, room: Any, end: Any) -> Any:
    """The IP header at q: (KEPT, SKIP_IP_FRAGMENT or another reason, the transport protocol,
    its header's offset, its length, the source and destination addresses as high and low
    64-bit halves, the IPv4 identification, the IP version read; for a fragment, its offset,
    more-fragments bit and identification, as `_extensions` gives them).

    The transport length comes from the IP header, so that snaplen-cut frames keep their true
    payload size, but never runs past `room`, the bytes the frame (or the tunnel carrying this
    packet) held from the IP header on: a whole frame holds what it holds whatever a damaged or
    rewritten header claims, and a cut one held its original length; tshark reads both so. A
    frame longer than its IP packet (Ethernet padding, an FCS) is the IP length's. A zero length
    field is a super-packet over 64 KiB (Linux BIG TCP: IPv4 since 6.3; IPv6 since 5.19, with
    the RFC 2675 Jumbo Payload option that says its size): its size is the jumbo option's, else
    the frame's. A header that does not fit in that length is a bad header; one past the
    captured bytes of a cut frame is short.

    `_extensions` is called only where it has headers to read: a call to a helper that takes
    the buffer costs numba's reference counting of it, for every packet.
    """
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
        whole = total <= room
        if total == 0 or total > room:
            total = room
        if total < ihl:
            return _skipped(SKIP_BAD_HEADER)
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
        l4 = q + ihl
        l4len = total - ihl
        ident = _u16(buf, q + 4)
        src_lo = zero
        dst_lo = zero
        word = _u16(buf, q + 6)
        if word & 0x3FFF:  # MF flag or a fragment offset (in 8-byte units), RFC 791
            if not whole:
                # A fragment longer than its frame held: damaged, or cut short on the way.
                # Its bytes cannot be placed in a datagram (Wireshark does not add it either).
                return _skipped(SKIP_BAD_HEADER)
            skip = SKIP_IP_FRAGMENT
            frag_off = (word & 0x1FFF) * 8
            more = (word >> 13) & 1
            frag_id = ident
        elif proto == IPPROTO_AH:
            skip, proto, l4, l4len, frag_off, more, frag_id = _extensions(
                buf, 4, proto, l4, l4len, end
            )
            if skip != KEPT:
                return _skipped(skip)
        else:  # what _extensions gives an IPv4 header without AH
            frag_off, more, frag_id = np.int64(-1), np.int64(0), np.int64(0)
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
        whole = l4len <= room - 40
        if l4len > room - 40:
            l4len = room - 40
        src_hi = _u64(buf, q + 8)
        src_lo = _u64(buf, q + 16)
        dst_hi = _u64(buf, q + 24)
        dst_lo = _u64(buf, q + 32)
        ident = 0
        if proto in IPV6_EXTENSION_HEADERS:
            skip, proto, l4, l4len, frag_off, more, frag_id = _extensions(
                buf, 6, proto, q + 40, l4len, end
            )
        else:  # what _extensions gives an IPv6 header without extension headers
            skip, l4 = KEPT, q + 40
            frag_off, more, frag_id = np.int64(-1), np.int64(0), np.int64(0)
        if skip == SKIP_IP_FRAGMENT and not whole:  # as for IPv4 above
            return _skipped(SKIP_BAD_HEADER)
        if skip != KEPT and skip != SKIP_IP_FRAGMENT:
            return _skipped(skip)

    return (
        skip,
        np.int64(proto),
        np.int64(l4),
        np.int64(l4len),
        src_hi,
        src_lo,
        dst_hi,
        dst_lo,
        np.int64(ident),
        version,
        np.int64(frag_off),
        np.int64(more),
        np.int64(frag_id),
    )


def _transport(b: np.ndarray, proto: Any, l4: Any, l4len: Any, bend: Any) -> Any:
    """The TCP (proto 6) or UDP (17) header at `l4` of `b`, read up to `bend`: (KEPT or the
    reason to skip the packet, source port, destination port, payload bytes, TCP flags,
    sequence, acknowledgment, window, option bits, MSS, window scale (255: none), timestamp
    value and echo, SACK blocks, the SACK words set (its most blocks, as the last of several
    options leaves them), UDP's first payload bytes and their count, then eight SACK words)."""
    i0 = np.int64(0)
    sport = dport = payload = flags = sq = ak = window = bits = i0
    mss_value = ts_value = ts_echo = blocks = written = head_len = i0
    shift = np.int64(255)
    head = np.uint64(0)
    s0 = s1 = s2 = s3 = s4 = s5 = s6 = s7 = i0
    why = np.int64(KEPT)
    if proto == 6:
        if l4len < 20:
            why = np.int64(SKIP_BAD_HEADER)
        elif bend - l4 < 20:
            why = np.int64(SKIP_SHORT_FRAME)
        else:
            doff = np.int64(_at(b, l4 + 12) >> 4) * 4
            if doff < 20 or l4len < doff:
                why = np.int64(SKIP_BAD_HEADER)
            else:
                sport = _u16(b, l4)
                dport = _u16(b, l4 + 2)
                sq = _u32(b, l4 + 4)
                ak = _u32(b, l4 + 8)
                flags = np.int64(_at(b, l4 + 13))
                window = _u16(b, l4 + 14)
                payload = l4len - doff
                # Options, RFC 9293 3.1: kind, length, value; parsed as far as they were
                # captured.
                o = l4 + 20
                oend = min(l4 + doff, bend)
                if l4 + doff > bend:
                    bits |= OPT_CUT  # the snapshot length cut the header: the rest is unknown
                while o < oend:
                    kind = _at(b, o)
                    if kind == 0:  # end of option list
                        break
                    if kind == 1:  # no-operation
                        o += 1
                        continue
                    if o + 1 >= oend:
                        break
                    olen = np.int64(_at(b, o + 1))
                    if olen < 2 or o + olen > oend:
                        break
                    if kind == 2 and olen == 4:
                        mss_value = _u16(b, o + 2)
                        bits |= 0x01
                    elif kind == 3 and olen == 3:
                        shift = np.int64(_at(b, o + 2))
                        bits |= 0x02
                    elif kind == 4 and olen == 2:
                        bits |= 0x04
                    elif kind == 5 and olen >= 10 and (olen - 2) & 7 == 0:
                        # 40 option bytes hold at most 4 blocks, RFC 2018 3
                        blocks = min((olen - 2) >> 3, np.int64(4))
                        s0 = _u32(b, o + 2)
                        s1 = _u32(b, o + 6)
                        if blocks > 1:
                            s2 = _u32(b, o + 10)
                            s3 = _u32(b, o + 14)
                        if blocks > 2:
                            s4 = _u32(b, o + 18)
                            s5 = _u32(b, o + 22)
                        if blocks > 3:
                            s6 = _u32(b, o + 26)
                            s7 = _u32(b, o + 30)
                        written = max(written, blocks)
                        bits |= 0x10
                    elif kind == 8 and olen == 10:
                        ts_value = _u32(b, o + 2)
                        ts_echo = _u32(b, o + 6)
                        bits |= 0x08
                    o += olen
    elif l4len < 8:
        why = np.int64(SKIP_BAD_HEADER)
    elif bend - l4 < 8:
        why = np.int64(SKIP_SHORT_FRAME)
    else:
        sport = _u16(b, l4)
        dport = _u16(b, l4 + 2)
        payload = l4len - 8
        head_len = min(np.int64(8), payload, bend - (l4 + 8))
        for k in range(head_len):
            head |= np.uint64(_at(b, l4 + 8 + k)) << np.uint64(56 - 8 * k)
    return (
        *(why, sport, dport, payload, flags, sq, ak, window, bits),
        *(mss_value, shift, ts_value, ts_echo, blocks, written, head, head_len),
        *(s0, s1, s2, s3, s4, s5, s6, s7),
    )


def decode_records(
    buf: np.ndarray,
    rec_off: np.ndarray,
    rec_caplen: np.ndarray,
    rec_origlen: np.ndarray,
    rec_iface: np.ndarray,
    rec_ts: np.ndarray,
    start: int,
    count: int,
    first_row: int,
    link_by_iface: np.ndarray,
    record_out: np.ndarray,
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
    flow_outer: np.ndarray,
    frag_keys: np.ndarray,
    frag_slots: np.ndarray,
    frag_runs: np.ndarray,
    frag_head: np.ndarray,
    frag_owner: np.ndarray,
    frag_buckets: np.ndarray,
    frag_free: np.ndarray,
    frag_state: np.ndarray,
) -> tuple[int, int, int]:
    """Decode records [start, count) into rows from `first_row` on; returns (next record, next row,
    STATUS_*).

    A record gets one row, and an A-MSDU one per subframe kept (`record_out` says whose row
    each is). A skipped record's row gets only its `reason` (for an A-MSDU none of whose
    subframes is kept, the first one's), and an IPComp packet's row what the reader needs to
    inflate it (`seq` the IPComp header's offset in the record, or 0; `payload_bytes` its
    length and the compressed payload's; `ip_version`, `ip_id`, and the source's and
    destination's addresses as eight 32-bit words in `sack`); a kept row gets every field,
    written once. A fragment
    goes to the fragment table (FragmentTable's arrays, frag_*): it is skipped as
    SKIP_IP_FRAGMENT unless it completes its datagram, whose row it then is.

    Room is checked before a record is decoded, never in its middle: a row for every record
    left, and before an A-MSDU's subframes are read, MAX_AMSDU_SUBFRAMES rows and flows.
    """
    mask = slots.shape[0] - 1
    last = -1
    zero = np.uint64(0)
    # Datagrams the current record completed: their head bytes are read until it is done.
    done = np.empty(MAX_TUNNEL_DEPTH + 1, np.int64)
    n_done = 0
    # The bytes a packet is read from: the record's (-1), or the head of the reassembled
    # datagram in this row of frag_head. A row number, not an array variable: an array that
    # may be one of two costs numba's reference counting at every record (a call and an
    # atomic add each), a tenth of the decoder's time.
    fr = np.int64(-1)
    nrow = first_row  # the next row to write
    for r in range(start, count):
        if n_done:
            for d in range(n_done):
                _fragment_free(frag_slots, frag_free, frag_state, done[d])
            n_done = 0
            fr = np.int64(-1)
        # A record is decoded once (the fragment table keeps what it saw): room for one more
        # flow is made before it, never in its middle.
        if flow_count[0] >= flow_keys.shape[0]:
            return r, nrow, STATUS_GROW
        if nrow + (count - r) > reason.shape[0]:
            return r, nrow, STATUS_ROWS
        w = nrow  # the record's row
        i = np.uint64(w)  # unsigned: see _at
        rec = np.uint64(r)
        record_out[i] = r
        nrow += 1
        ts = rec_ts[rec]
        if ts == BAD_TS:
            reason[i] = SKIP_BAD_TIMESTAMP
            continue
        off = np.int64(rec_off[rec])
        end = off + np.int64(rec_caplen[rec])
        origlen = np.int64(rec_origlen[rec])

        # Link layer: find the network header and its version (0: not IP).
        link = link_by_iface[rec_iface[rec]]
        q = off
        version = 0
        cap = UNLIMITED
        skip = KEPT
        if link == LINK_ETHERNET:
            # IP right after the Ethernet header, answered here as `_ethernet` would: a call
            # to a helper that takes the buffer costs numba's reference counting of it.
            ethertype = _u16(buf, off + 12) if end - off >= 14 else np.int64(-1)
            if ethertype == ETHERTYPE_IPV4:
                version, q = 4, off + 14
            elif ethertype == ETHERTYPE_IPV6:
                version, q = 6, off + 14
            else:
                version, q, skip, cap = _ethernet(buf, off, end)
        elif link == LINK_MPLS:
            version, q, skip, cap = _link_payload(buf, ETHERTYPE_MPLS, off, end)
        elif link == LINK_C_HDLC:
            version, q, skip, cap = _cisco_hdlc(buf, off, end)
        elif link in (LINK_PPP, LINK_PPP_HDLC):
            version, q, skip, cap = _ppp_frame(buf, off, end)
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
        elif link in (LINK_IEEE802_11, LINK_RADIOTAP, LINK_PPI):
            # Radiotap and PPI give their own length; PPI also the link type after it.
            q = off
            if link != LINK_IEEE802_11:
                if end - off < 8:
                    reason[i] = SKIP_SHORT_FRAME
                    continue
                q = off + _u16le(buf, off + 2)
                if link == LINK_PPI and _u16le(buf, off + 4) | _u16le(buf, off + 6) << 16 != 105:
                    reason[i] = SKIP_NON_IP
                    continue
            version, q, skip, cap = _wlan(buf, q, end)
        elif link == LINK_JUNIPER_ETHER:
            version, q, skip, cap = _juniper(buf, off, end)
        elif link == LINK_NFLOG:
            version, q, skip, cap = _nflog(buf, off, end)
        elif link == LINK_IPOIB:
            if end - off < IPOIB_HEADER_BYTES:
                reason[i] = SKIP_SHORT_FRAME
                continue
            ethertype = _u16(buf, off + IPOIB_HEADER_BYTES - 4)
            q = off + IPOIB_HEADER_BYTES
            if ethertype > ETHERNET_MAX_LENGTH:  # an Ethernet type; never an 802.3 length here
                version, q, skip, cap = _link_payload(buf, ethertype, q, end)
        elif link in (LINK_ARCNET_BSD, LINK_ARCNET_LINUX):
            version, q, skip = _arcnet(buf, off, end, link == LINK_ARCNET_LINUX)
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
        if skip != KEPT:
            reason[i] = skip
            continue
        if version == 0:
            reason[i] = SKIP_NON_IP
            continue
        # An A-MSDU's subframes, each read as a packet of its own: where the next one starts
        # (-1: none left), the A-MSDU's start (-1: no A-MSDU found), its end and captured end,
        # the tunnel depth of its packets, and the subframes read.
        sub_at = np.int64(-1)
        sub_base = np.int64(-1)
        sub_stop = np.int64(0)
        sub_end = np.int64(0)
        sub_depth = 0
        subframes = 0
        if version == WLAN_CARRIES_AMSDU:
            sub_base, sub_stop, sub_end = q, off + origlen, end
        kept = False  # whether a packet of the record has been kept
        noted = False  # whether the record's row holds a skipped packet's reason
        why = -1  # the reason of the packet just read (-1: none read yet)
        depth = 0
        outer_version = 0
        outer_src_hi = outer_src_lo = outer_dst_hi = outer_dst_lo = zero
        while True:  # the record's packet, or its A-MSDU's, one at a time
            if why >= 0:
                if why != KEPT and not kept and not noted:
                    reason[i] = why
                    noted = True
                if sub_at < 0:
                    break
            if sub_base >= 0 and subframes == 0:
                # Room for every subframe as a row and a new flow, before the first is read.
                status = _amsdu_room(
                    w, count - r, reason.shape[0], flow_count[0], flow_keys.shape[0]
                )
                if status != STATUS_DONE:
                    return r, w, status
                sub_at = sub_base
            if sub_at >= 0:
                if n_done:
                    for d in range(n_done):
                        _fragment_free(frag_slots, frag_free, frag_state, done[d])
                    n_done = 0
                    fr = np.int64(-1)
                version, q, skip, cap, sub_at = _amsdu_subframe(
                    buf, sub_base, sub_at, sub_stop, sub_end
                )
                subframes += 1
                if subframes >= MAX_AMSDU_SUBFRAMES:
                    sub_at = np.int64(-1)
                depth = sub_depth
                if skip != KEPT:
                    why = skip
                    continue
                if version == 0:
                    why = SKIP_NON_IP
                    continue
            # The row this packet writes: the record's, until one of its packets is kept.
            p = np.uint64(nrow) if kept else i

            room: Any = min(origlen - (q - off), cap)
            bend = end
            # An IPv4 header of 20 bytes (no options) that is whole in the frame, no fragment and
            # not followed by AH: most packets, read here as `_network` reads them, since a
            # call to a helper that takes the buffer costs numba's reference counting of it.
            # `fr` is -1 here (a datagram's head is read only after this).
            v4 = version == 4 and room >= 20 and end - q >= 20 and _at(buf, q) == 0x45
            total = _u16(buf, q + 2) if v4 else np.int64(0)
            if v4:
                if total == 0 or total > room:
                    total = room
                if _u16(buf, q + 6) & 0x3FFF or _at(buf, q + 9) == IPPROTO_AH:
                    total = np.int64(0)
            if total >= 20:
                skip = KEPT
                proto = np.int64(_at(buf, q + 9))
                l4 = q + 20
                l4len = total - 20
                src_hi = np.uint64(_u32(buf, q + 12)) << np.uint64(32)
                dst_hi = np.uint64(_u32(buf, q + 16)) << np.uint64(32)
                src_lo = zero
                dst_lo = zero
                ident = _u16(buf, q + 4)
                frag_off = np.int64(-1)
                more = np.int64(0)
                frag_id = np.int64(0)
            else:
                header = _network(buf, q, version, room, bend)
                skip, proto, l4, l4len, src_hi, src_lo, dst_hi, dst_lo = header[:8]
                ident, version, frag_off, more, frag_id = header[8:]
            # The outermost IP header: a tunnelled flow records it (FlowTable.outer). The
            # packets of an A-MSDU in a tunnel keep the tunnel's.
            if depth == 0:
                outer_version = version
                outer_src_hi, outer_src_lo = src_hi, src_lo
                outer_dst_hi, outer_dst_lo = dst_hi, dst_lo
            # Fragments are put together, and tunnels followed: the packet a tunnel carries is
            # the one to count (tshark dissects it so); its room is what the outer packet's
            # payload held.
            while True:
                if skip == SKIP_IP_FRAGMENT:
                    if n_done > MAX_TUNNEL_DEPTH:  # a fragment in every layer's reassembled data
                        skip = SKIP_BAD_HEADER
                        break
                    # A fragment in an A-MSDU's subframe is not put together: the fragment
                    # table and the skipped counts hold frames, and a frame holds many of these.
                    if subframes:
                        break
                    slot = _fragment_add(
                        frag_keys,
                        frag_slots,
                        frag_runs,
                        frag_head,
                        frag_owner,
                        frag_buckets,
                        frag_free,
                        frag_state,
                        buf if fr < 0 else frag_head[np.uint64(fr)],
                        l4,
                        l4len,
                        bend,
                        version,
                        proto,
                        frag_id,
                        src_hi,
                        src_lo,
                        dst_hi,
                        dst_lo,
                        frag_off,
                        more,
                        ts,
                    )
                    if slot == -2:
                        skip = SKIP_BAD_HEADER
                    if slot < 0:
                        break
                    done[n_done] = slot
                    n_done += 1
                    row = np.uint64(slot)
                    fr = np.int64(slot)
                    bend = frag_slots[row, F_KNOWN]
                    skip, proto, l4, l4len, frag_off, more, frag_id = _extensions(
                        frag_head[row], version, proto, np.int64(0), frag_slots[row, F_LENGTH], bend
                    )
                    continue
                if skip != KEPT or depth >= MAX_TUNNEL_DEPTH:
                    break
                # Only these carry a tunnel (`_tunnel`); TCP never does.
                if proto not in (IPPROTO_IPIP, IPPROTO_IPV6, IPPROTO_GRE, 17):
                    break
                b = buf if fr < 0 else frag_head[np.uint64(fr)]
                inner, nq = _tunnel(b, proto, l4, l4len, bend)
                if inner == 0:
                    break
                limit = min(bend, l4 + l4len)
                cap = UNLIMITED
                if inner == INNER_ETHERNET:
                    version, nq, skip, cap = _ethernet(b, nq, limit)
                elif inner == INNER_PPP:
                    version, nq, skip, cap = _ppp_frame(b, nq, limit)
                elif inner == INNER_MPLS:
                    version, nq, skip, cap = _link_payload(b, ETHERTYPE_MPLS, nq, limit)
                elif inner == INNER_WLAN:
                    version, nq, skip, cap = _wlan(b, nq, limit)
                    if version == WLAN_CARRIES_AMSDU:
                        # Read in the record's own bytes, once: an A-MSDU in a reassembled
                        # datagram (which holds only its head) or in another's subframe is not.
                        if n_done or subframes:
                            version = 0
                        else:
                            sub_base, sub_stop, sub_end = nq, l4 + l4len, limit
                            sub_depth = depth + 1
                            skip = _AMSDU_FOUND
                            break
                else:
                    version = inner
                if skip != KEPT:
                    break
                if version == 0:
                    skip = SKIP_NON_IP
                    break
                room = min(l4 + l4len - nq, cap)
                header = _network(b, nq, version, room, bend)
                skip, proto, l4, l4len, src_hi, src_lo, dst_hi, dst_lo = header[:8]
                ident, version, frag_off, more, frag_id = header[8:]
                depth += 1
            if skip == _AMSDU_FOUND:
                why = -1
                continue
            if skip != KEPT:
                why = skip
                continue

            # Transport layer. `_transport` reads the header from the record's bytes or from the
            # datagram's head: the array passed is then one of two, which costs numba's
            # reference counting once a packet, not at every loop turn.
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
            if proto == 6 or proto == 17:
                if fr < 0:
                    th = _transport(buf, proto, l4, l4len, bend)
                else:
                    th = _transport(frag_head[np.uint64(fr)], proto, l4, l4len, bend)
                why_t, sport, dport, payload, flags, sq, ak, window, bits = th[:9]
                mss_value, shift, ts_value, ts_echo, blocks, written, head, head_len = th[9:17]
                if why_t != KEPT:
                    why = why_t
                    continue
                sacks = th[17:]
                for k in range(2 * written):
                    sack[p, k] = sacks[k]
                if proto == 17:
                    udp_head[p] = head
                    udp_head_len[p] = head_len
            elif proto == IPPROTO_ESP:
                why = SKIP_ENCRYPTED
                continue
            elif proto == IPPROTO_COMP:
                # The reader inflates what it can (capture/ipcomp.py): it is told where the
                # IPComp header lies in the record and the packet's IP fields, when the header
                # is in the record's own bytes and the packet is the record's only one.
                seq[i] = 0
                if not n_done and not subframes and p == i:
                    seq[i] = l4 - off
                    payload_out[i] = l4len
                    ip_version[i] = version
                    ip_id[i] = ident
                    sack[i, 0] = np.uint32(src_hi >> np.uint64(32))
                    sack[i, 1] = np.uint32(src_hi & np.uint64(0xFFFFFFFF))
                    sack[i, 2] = np.uint32(src_lo >> np.uint64(32))
                    sack[i, 3] = np.uint32(src_lo & np.uint64(0xFFFFFFFF))
                    sack[i, 4] = np.uint32(dst_hi >> np.uint64(32))
                    sack[i, 5] = np.uint32(dst_hi & np.uint64(0xFFFFFFFF))
                    sack[i, 6] = np.uint32(dst_lo >> np.uint64(32))
                    sack[i, 7] = np.uint32(dst_lo & np.uint64(0xFFFFFFFF))
                why = SKIP_COMPRESSED
                continue
            else:
                why = SKIP_NOT_TCP_UDP
                continue
            reason[p] = KEPT
            record_out[p] = r
            if kept:
                nrow += 1
            kept = True
            why = KEPT
            ip_version[p] = version
            proto_out[p] = proto
            ip_id[p] = ident
            payload_out[p] = payload
            tcp_flags[p] = flags
            seq[p] = sq
            ack[p] = ak
            win_raw[p] = window
            opts[p] = bits
            mss[p] = mss_value
            wscale[p] = shift
            tsval[p] = ts_value
            tsecr[p] = ts_echo
            sack_n[p] = blocks

            # Flow key: the unordered 5-tuple, lower (address, port) endpoint first; comparing the
            # big-endian halves as integers orders the endpoints as their bytes would.
            if src_hi < dst_hi or (
                src_hi == dst_hi and (src_lo < dst_lo or (src_lo == dst_lo and sport <= dport))
            ):
                src_end[p] = 0
                w1, w2, w3, w4 = src_hi, src_lo, dst_hi, dst_lo
                lo_port, hi_port = sport, dport
            else:
                src_end[p] = 1
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
                flow_out[p] = last
                continue
            h = _hash_key(w0, w1, w2, w3, w4)
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
                    return r, w, STATUS_GROW
                flow_keys[n, 0] = w0
                flow_keys[n, 1] = w1
                flow_keys[n, 2] = w2
                flow_keys[n, 3] = w3
                flow_keys[n, 4] = w4
                flow_hashes[n] = h
                slots[s] = n
                flow_count[0] = n + 1
                flow = n
                if depth > 0 and n < flow_outer.shape[0]:
                    flow_outer[n, 0] = np.uint64(outer_version)
                    flow_outer[n, 1] = outer_src_hi
                    flow_outer[n, 2] = outer_src_lo
                    flow_outer[n, 3] = outer_dst_hi
                    flow_outer[n, 4] = outer_dst_lo
            last = flow
            flow_out[p] = flow
    for d in range(n_done):
        _fragment_free(frag_slots, frag_free, frag_state, done[d])
    return count, nrow, STATUS_DONE


def decode_chunk(
    buf: np.ndarray,
    rec_off: np.ndarray,
    rec_caplen: np.ndarray,
    rec_origlen: np.ndarray,
    rec_iface: np.ndarray,
    count: int,
    link_by_iface: np.ndarray,
    rec_ts: np.ndarray,
    cols: Columns,
    flows: FlowTable,
    fragments: FragmentTable,
) -> int:
    """Decode `count` records into `cols`, growing it and the flow table as needed; fragments
    go to (and datagrams come out of) `fragments`. Returns the rows written: one a record, more
    for an A-MSDU (`cols.record` says whose each is)."""
    start = 0
    row = 0
    if cols.capacity < count:
        cols.grow(0, count)
    while True:
        start, row, status = decode_records(
            buf,
            rec_off,
            rec_caplen,
            rec_origlen,
            rec_iface,
            rec_ts,
            start,
            count,
            row,
            link_by_iface,
            cols.record,
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
            flows.outer,
            fragments.keys,
            fragments.slots,
            fragments.runs,
            fragments.head,
            fragments.owner,
            fragments.buckets,
            fragments.free,
            fragments.state,
        )
        if status == STATUS_DONE:
            return row
        if status == STATUS_ROWS:
            # Rows for an A-MSDU's subframes and one for every record left; doubling keeps
            # the copies few when many records hold A-MSDUs.
            need = row + MAX_AMSDU_SUBFRAMES + (count - start)
            cols.grow(row, max(need, 2 * cols.capacity))
        else:
            flows.grow()


# The header readers, called once a packet or more: they read the bytes they are given.
_READERS = (
    *("_at", "_u16", "_u32", "_u64", "_ethernet", "_walked", "_tag_bytes", "_link_payload"),
    *("_ppp_protocol", "_cisco_hdlc", "_ppp_frame", "_arcnet", "_u16le", "_juniper"),
    *("_nflog", "_wlan", "_amsdu_subframe", "_amsdu_room"),
    *("_gre", "_tunnel", "_skipped"),
    *("_extensions", "_network", "_transport"),
)
bind(
    globals(),
    ("decode_records", "_rehash"),
    helpers=(
        *_READERS,
        *("_hash_key", "_fragment_unlink", "_fragment_free", "_fragment_drop", "_cover"),
        "_fragment_add",
    ),
    unmanaged=_READERS,
)
