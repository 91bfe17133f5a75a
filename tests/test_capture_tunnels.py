"""Tunnels, MPLS, PPPoE, IPsec and the rarer link types: the TCP inside is counted as tshark
counts it.

Each capture is real pcap bytes crafted with scapy (or framed by hand for the link types scapy
does not write): five 100-byte TCP segments of one connection, carried by the tunnel, the
encapsulation (fixtures/crafted/encap.py) or the link named. The truth is how they were built,
and tshark, where installed, counts the same.
"""

from __future__ import annotations

import os
import shutil
import struct
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import pytest
from scapy.contrib.erspan import ERSPAN_II, ERSPAN_III, ERSPAN_PlatformSpecific
from scapy.contrib.geneve import GENEVE
from scapy.contrib.gtp import GTP_U_Header
from scapy.contrib.mpls import MPLS
from scapy.layers.inet import GRE, IP, TCP, UDP
from scapy.layers.inet6 import IPv6
from scapy.layers.ipsec import ESP
from scapy.layers.l2 import Dot3, Ether
from scapy.layers.l2tp import L2TP
from scapy.layers.ppp import PPP, PPPoE
from scapy.layers.vxlan import VXLAN
from scapy.packet import Packet, Raw

from fixtures.crafted import encap
from tests.helpers.crafting import write
from tracekit.capture import read_capture
from tracekit.connections import build_connections

CRAFTED = Path(encap.__file__).resolve().parent

SEGMENTS, PAYLOAD = 5, 100
needs_tshark = pytest.mark.skipif(not shutil.which("tshark"), reason="tshark not installed")


def _tcp(i: int) -> Packet:
    return (
        IP(src="10.9.0.1", dst="10.9.0.2")
        / TCP(sport=40000, dport=80, flags="A", seq=1000 + i * PAYLOAD)
        / Raw(b"x" * PAYLOAD)
    )


def _eth() -> Packet:
    # Both addresses given: scapy otherwise looks the destination up (ARP), seconds a frame.
    return Ether(src="02:00:00:00:00:01", dst="02:00:00:00:00:02")


def _outer(p: Packet) -> Packet:
    return _eth() / IP(src="192.0.2.1", dst="192.0.2.2") / p


def _udp(port: int) -> Packet:
    return UDP(sport=5555, dport=port)


TUNNELS: dict[str, Callable[[int], Packet]] = {
    "ipip": lambda i: _outer(_tcp(i)),
    "ipv6_in_ipv4": lambda i: (
        _eth()
        / IP(src="192.0.2.1", dst="192.0.2.2", proto=41)
        / IPv6(src="2001:db8::1", dst="2001:db8::2")
        / TCP(sport=40000, dport=80, flags="A", seq=1000 + i * PAYLOAD)
        / Raw(b"x" * PAYLOAD)
    ),
    "gre": lambda i: _outer(GRE() / _tcp(i)),
    "gre_key_sequence_checksum": lambda i: _outer(
        GRE(chksum_present=1, key_present=1, key=7, seqnum_present=1, sequence_number=i) / _tcp(i)
    ),
    "gre_ethernet": lambda i: _outer(GRE(proto=0x6558) / _eth() / _tcp(i)),
    "erspan_ii": lambda i: _outer(
        GRE(proto=0x88BE, seqnum_present=1) / ERSPAN_II() / _eth() / _tcp(i)
    ),
    "erspan_iii": lambda i: _outer(
        GRE(proto=0x22EB, seqnum_present=1) / ERSPAN_III() / _eth() / _tcp(i)
    ),
    "erspan_iii_platform": lambda i: _outer(
        GRE(proto=0x22EB, seqnum_present=1) / ERSPAN_III(o=1) / ERSPAN_PlatformSpecific()
        / _eth() / _tcp(i)
    ),
    "vxlan": lambda i: _outer(_udp(4789) / VXLAN(vni=42, flags=0x08) / _eth() / _tcp(i)),
    "geneve": lambda i: _outer(_udp(6081) / GENEVE(vni=42, proto=0x6558) / _eth() / _tcp(i)),
    "gtp_u": lambda i: _outer(_udp(2152) / GTP_U_Header(teid=1, gtp_type=255) / _tcp(i)),
    "vxlan_in_gre": lambda i: _outer(
        GRE() / IP(src="198.51.100.1", dst="198.51.100.2") / UDP(sport=5555, dport=4789)
        / VXLAN(vni=42, flags=0x08) / _eth() / _tcp(i)
    ),
    **encap.CARRIED,
}  # fmt: skip


def _pcap(path: Path, linktype: int, frames: list[bytes]) -> Path:
    """A classic pcap of raw frames of one link type (scapy writes Ethernet, not these)."""
    with path.open("wb") as f:
        f.write(struct.pack("<IHHiIII", 0xA1B2C3D4, 2, 4, 0, 0, 65535, linktype))
        for k, frame in enumerate(frames):
            f.write(struct.pack("<IIII", 1, k * 1000, len(frame), len(frame)) + frame)
    return path


# Link type (tcpdump.org/linktypes.html) and the header put before each IPv4 packet.
LINKS = {
    "cisco_hdlc": (104, b"\x0f\x00\x08\x00"),
    "ppp": (9, b"\xff\x03\x00\x21"),
    "ppp_compressed": (9, b"\x21"),  # no address or control, a one-byte protocol field
    "ppp_hdlc": (50, b"\xff\x03\x00\x21"),
    "fddi": (10, b"\x50" + b"\x01" * 6 + b"\x02" * 6 + b"\xaa\xaa\x03\x00\x00\x00\x08\x00"),
    **encap.LINKED,
}


def _counts(path: Path) -> tuple[int, int]:
    conns = build_connections(read_capture(path)).table
    return (
        int(conns.column("packets_a2b").to_numpy().sum()),
        int(conns.column("bytes_a2b").to_numpy().sum()),
    )


def _tshark(path: Path) -> tuple[int, int]:
    out = subprocess.run(
        ["tshark", "-r", str(path), "-Y", "tcp", "-T", "fields", "-e", "tcp.len"],
        capture_output=True, text=True, check=True,
    ).stdout.split()  # fmt: skip
    return len(out), sum(int(x) for x in out)


@pytest.fixture(params=sorted(TUNNELS) + sorted(LINKS))
def carried(request: pytest.FixtureRequest, tmp_path: Path) -> Path:
    name = request.param
    path = tmp_path / f"{name}.pcap"
    if name in TUNNELS:
        packets = [TUNNELS[name](i) for i in range(SEGMENTS)]
        for k, p in enumerate(packets):
            p.time = 1.0 + k * 0.001
        return write(path, packets)
    linktype, head = LINKS[name]
    return _pcap(path, linktype, [head + bytes(_tcp(i)) for i in range(SEGMENTS)])


def test_the_tcp_inside_is_counted(carried: Path) -> None:
    assert _counts(carried) == (SEGMENTS, SEGMENTS * PAYLOAD)


@needs_tshark
def test_counts_equal_tsharks(carried: Path) -> None:
    assert _counts(carried) == _tshark(carried)


# The carriers whose outer header is IP: the connection records it as its tunnel.
IP_TUNNELS = {
    *("ipip", "ipv6_in_ipv4", "gre", "gre_key_sequence_checksum", "gre_ethernet", "vxlan"),
    *("geneve", "gtp_u", "vxlan_in_gre", "erspan_ii", "erspan_iii", "erspan_iii_platform"),
    *("wccp", "wccp_no_redirect_header", "gre_aruba", "gre_in_udp", "ayiya"),
}


@needs_tshark
@pytest.mark.parametrize("name", [*sorted(IP_TUNNELS), "plain"])
def test_a_tunnelled_connection_records_the_outer_header(name: str, tmp_path: Path) -> None:
    # Keyed by the inner packet, with the outermost IP header's addresses recorded: those the
    # build put there, as tshark reads the first IP layer of each frame.
    build = TUNNELS.get(name, lambda i: _eth() / _tcp(i))
    packets = [build(i) for i in range(SEGMENTS)]
    for k, p in enumerate(packets):
        p.time = 1.0 + k * 0.001
    path = write(tmp_path / f"{name}.pcap", packets)
    first_ip = ["-E", "occurrence=f", "-e", "ip.src", "-e", "ip.dst"]
    listed = subprocess.run(
        ["tshark", "-r", str(path), "-T", "fields", *first_ip],
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    outer = listed.split("\n")[0].split("\t")
    (tunnel,) = build_connections(read_capture(path)).table.column("tunnel").to_pylist()
    if name == "plain":
        assert tunnel == ""
    else:
        assert tunnel == f"{outer[0]} > {outer[1]}" == "192.0.2.1 > 192.0.2.2"


def _nested(depth: int) -> Packet:
    """One segment inside `depth` IPv4-in-IPv4 tunnels."""
    packet = _tcp(0)
    for _ in range(depth):
        packet = IP(src="192.0.2.1", dst="192.0.2.2") / packet
    return packet


@pytest.mark.parametrize(
    "build",
    [
        # A GRE header that says a key follows, cut before it.
        lambda: _outer(GRE(key_present=1)).__bytes__()[:-2],
        # Geneve options said to run past the packet.
        lambda: bytes(_outer(UDP(sport=1, dport=6081) / GENEVE(optionlen=63, proto=0x6558))),
        # GTP-U extension headers whose length is zero (a chain that never ends).
        lambda: bytes(_outer(UDP(sport=1, dport=2152)))
        + bytes([0x34, 0xFF, 0, 8, 0, 0, 0, 1, 0, 0, 0, 0x85, 0, 0, 0, 0]),
        # IP in IP nested deeper than the decoder follows: seven tunnels around one segment.
        lambda: bytes(_eth() / _nested(7)),
        # VXLAN without its VNI flag: an ordinary UDP datagram to port 4789.
        lambda: bytes(_outer(_udp(4789) / Raw(b"\x00" * 8 + bytes(_eth() / _tcp(0))))),
        # An L2TP offset size past the packet's end.
        lambda: bytes(_outer(_udp(1701) / L2TP(hdr="offset", offset=4000) / PPP() / _tcp(0))),
        # An L2TP control message (T bit): no PPP frame follows.
        lambda: bytes(_outer(_udp(1701) / L2TP(hdr="control+length+sequence") / PPP() / _tcp(0))),
        # GRE in UDP whose header says checksum, key and sequence number follow, cut after 6
        # of their 12 bytes.
        lambda: bytes(_outer(_udp(4754) / Raw(b"\xb0\x00\x08\x00" + b"\x00" * 6))),
        # WCCP's redirect header, then a frame cut inside the IPv4 header.
        lambda: bytes(_outer(GRE(proto=0x883E) / Raw(b"\x05\x59\x00\x48")))
        + bytes(_tcp(0))[:12],
        # AYIYA whose opcode is not forward (a heartbeat), and one whose identity (2**15
        # bytes) runs past the packet.
        lambda: bytes(_outer(_udp(5072) / Raw(encap.AYIYA[:2] + b"\x10" + encap.AYIYA[3:])))
        + bytes(_tcp(0)),
        lambda: bytes(_outer(_udp(5072) / Raw(b"\xf1" + encap.AYIYA[1:]) / _tcp(0))),
        # L2TP version 3, whose data header's layout the session's configuration says.
        lambda: bytes(_outer(_udp(1701) / Raw(b"\x00\x03\x00\x00" + b"\x00" * 4) / _tcp(0))),
    ],
    ids=[
        *("gre_cut", "geneve_options_past_end", "gtp_zero_extension", "too_deep"),
        *("vxlan_no_vni", "l2tp_offset_past_end", "l2tp_control", "gre_in_udp_cut", "wccp_cut"),
        *("ayiya_heartbeat", "ayiya_identity_past_end", "l2tp_version_3"),
    ],
)  # fmt: skip
def test_a_damaged_or_deep_tunnel_is_not_tcp(build: Callable[[], bytes], tmp_path: Path) -> None:
    frame = build()
    path = _pcap(tmp_path / "bad.pcap", 1, [frame, frame])
    capture = read_capture(path)
    # Read, not refused; and no TCP found where the inner segment is out of reach.
    proto = capture.packets.column("proto").to_numpy()
    assert not (proto == 6).any()


def test_an_ipv6_packet_behind_an_ipv4_ethernet_type_is_ipv6(tmp_path: Path) -> None:
    # tcprewrite gives every frame one Ethernet type: IPv6 packets then follow 0x0800.
    segment = (
        IPv6(src="2001:db8::1", dst="2001:db8::2")
        / TCP(sport=40000, dport=80, flags="A", seq=1)
        / Raw(b"x" * PAYLOAD)
    )
    frame = b"\x00" * 12 + b"\x08\x00" + bytes(segment)
    path = _pcap(tmp_path / "rewritten.pcap", 1, [frame] * SEGMENTS)
    assert _counts(path)[1] == SEGMENTS * PAYLOAD
    # Its addresses are the IPv6 header's, not its first bytes read as IPv4.
    ends = build_connections(read_capture(path)).table.select(["a", "b"]).to_pylist()[0]
    assert ends == {"a": "[2001:db8::1]:40000", "b": "[2001:db8::2]:80"}
    if shutil.which("tshark"):
        assert _counts(path) == _tshark(path)


def _skipped(frames: list[bytes], tmp_path: Path) -> tuple[Path, dict[str, int], int]:
    """The capture of these Ethernet frames, what the reader skipped, and the TCP it kept."""
    path = _pcap(tmp_path / "frames.pcap", 1, frames)
    capture = read_capture(path)
    tcp = int((capture.packets.column("proto").to_numpy() == 6).sum())
    return path, capture.stats.skipped, tcp


@pytest.mark.parametrize("name", sorted(encap.DAMAGED))
def test_a_damaged_encapsulation_is_read_without_inventing_tcp(name: str, tmp_path: Path) -> None:
    frame = encap.DAMAGED[name]()
    path, skipped, tcp = _skipped([frame, frame], tmp_path)
    assert tcp == 0
    assert sum(skipped.values()) == 2
    if shutil.which("tshark"):
        assert _tshark(path) == (0, 0)


def _nflog_pcap(path: Path, big: bool, frames: list[bytes]) -> Path:
    """A pcap of NFLOG records in the byte order its TLVs are written in (libpcap swaps them
    with the file's, so a big-endian host's file holds big-endian TLVs)."""
    order = ">" if big else "<"
    with path.open("wb") as f:
        f.write(struct.pack(order + "IHHiIII", 0xA1B2C3D4, 2, 4, 0, 0, 65535, 239))
        for k, frame in enumerate(frames):
            f.write(struct.pack(order + "IIII", 1, k * 1000, len(frame), len(frame)) + frame)
    return path


def _nflog_frame(packet: bytes, big: bool, family: int = 2, hardware: int = 0) -> bytes:
    tlv = struct.Struct(">HH" if big else "<HH")
    # The packet header TLV: hardware protocol (network byte order), hook, padding.
    prefix = tlv.pack(8, 1) + struct.pack(">HBB", hardware, 3, 0)
    payload = tlv.pack(4 + len(packet), 9) + packet + b"\x00" * (-len(packet) % 4)
    return bytes([family, 0, 0, 42]) + prefix + payload


@pytest.mark.parametrize("big", [False, True], ids=["little_endian", "big_endian"])
def test_nflog_is_read_in_its_files_byte_order(big: bool, tmp_path: Path) -> None:
    # IPv4 and IPv6 (Linux's AF_INET6 is 10), each segment 3 bytes off a 4-byte boundary so
    # that the payload TLV is padded after the packet.
    v6 = (
        IPv6(src="2001:db8::1", dst="2001:db8::2")
        / TCP(sport=40001, dport=80, flags="A", seq=1)
        / Raw(b"y" * (PAYLOAD + 1))
    )
    frames = [_nflog_frame(bytes(_tcp(i)), big) for i in range(SEGMENTS - 1)]
    # A bridge family's record: its hardware protocol says what the packet is.
    frames += [_nflog_frame(bytes(_tcp(SEGMENTS - 1)), big, family=7, hardware=0x0800)]
    frames += [_nflog_frame(bytes(v6), big, family=10)]
    path = _nflog_pcap(tmp_path / "nflog.pcap", big, frames)
    conns = build_connections(read_capture(path)).table
    packets, sizes = conns.column("packets_a2b").to_pylist(), conns.column("bytes_a2b").to_pylist()
    assert sorted(zip(packets, sizes, strict=True)) == [
        (1, PAYLOAD + 1),
        (SEGMENTS, SEGMENTS * PAYLOAD),
    ]
    if shutil.which("tshark"):
        assert _counts(path) == _tshark(path)


@pytest.mark.parametrize(
    ("frame", "reason"),
    [
        # A TLV shorter than its own 4-byte header: the walk cannot go on.
        (b"\x02\x00\x00\x2a" + b"\x02\x00\x01\x00" + b"\x00" * 40, "bad_header"),
        # No payload TLV (logged without the packet): nothing to read.
        (b"\x02\x00\x00\x2a" + b"\x08\x00\x01\x00\x08\x00\x03\x00", "non_ip"),
        # A family neither IPv4 nor IPv6 (AF_BRIDGE), no hardware protocol.
        (_nflog_frame(bytes(_tcp(0)), False, family=7), "non_ip"),
        # An IPv4 family whose hardware protocol says ARP.
        (_nflog_frame(bytes(_tcp(0)), False, hardware=0x0806), "non_ip"),
        # Cut inside the first TLV's header.
        (b"\x02\x00\x00\x2a\x08\x00", "short_frame"),
        # A payload TLV that says 24 bytes: the IPv4 header fits, TCP's does not.
        (b"\x02\x00\x00\x2a" + struct.pack("<HH", 24, 9) + bytes(_tcp(0)), "bad_header"),
    ],
    ids=[
        *("tlv_under_4_bytes", "no_payload", "bridge_family", "arp_hardware", "cut"),
        "payload_tlv_short",
    ],
)
def test_an_nflog_record_without_a_packet_is_counted_by_its_reason(
    frame: bytes, reason: str, tmp_path: Path
) -> None:
    path = _nflog_pcap(tmp_path / "nflog.pcap", False, [frame, frame])
    assert read_capture(path).stats.skipped == {reason: 2}
    if shutil.which("tshark"):
        assert _tshark(path) == (0, 0)


@pytest.mark.parametrize(
    ("frame", "reason"),
    [
        # The link header was stripped, and the protocol word says neither IP nor MPLS.
        (b"MGC\x02" + b"\x09\x00\x00\x00" + bytes(_tcp(0)), "non_ip"),
        # Not Juniper's magic.
        (b"MGX\x00" + bytes(_eth() / _tcp(0)), "bad_header"),
        # Extensions said to run past the frame.
        (b"MGC\x80\x01\x00" + bytes(_eth() / _tcp(0))[:40], "short_frame"),
        # Cut inside the extensions' length.
        (b"MGC\x80\x00", "short_frame"),
    ],
    ids=["no_l2_unknown_protocol", "bad_magic", "extensions_past_end", "cut"],
)
def test_a_juniper_record_without_an_ethernet_frame_is_counted_by_its_reason(
    frame: bytes, reason: str, tmp_path: Path
) -> None:
    path = _pcap(tmp_path / "juniper.pcap", 178, [frame, frame])
    assert read_capture(path).stats.skipped == {reason: 2}
    if shutil.which("tshark"):
        assert _tshark(path) == (0, 0)


@pytest.mark.parametrize(
    ("name", "reason"),
    [
        ("esp", "encrypted"),
        ("pppoe_discovery", "non_ip"),
        ("mpls_stack_off_frame", "short_frame"),
        ("mpls_unknown_payload", "non_ip"),
        ("pppoe_length_short", "bad_header"),
        ("ah_past_end", "bad_header"),
        ("llc_spanning_tree", "non_ip"),
        ("llc_snap_cut", "short_frame"),
        ("pbb_cut", "short_frame"),
    ],
)
def test_a_frame_without_readable_tcp_is_counted_by_its_reason(
    name: str, reason: str, tmp_path: Path
) -> None:
    assert _skipped([encap.DAMAGED[name]()], tmp_path)[1] == {reason: 1}


def test_esp_over_ipv6_is_encrypted(tmp_path: Path) -> None:
    frame = _eth() / IPv6(src="2001:db8::1", dst="2001:db8::2") / ESP(spi=1, seq=1, data=b"z" * 32)
    assert _skipped([bytes(frame)], tmp_path)[1] == {"encrypted": 1}


@pytest.mark.parametrize("length", [42, 100, 141])
def test_a_short_pppoe_length_cuts_the_packet(length: int, tmp_path: Path) -> None:
    # The length counts the 2-byte PPP protocol field; the IPv4 packet keeps what is left of it,
    # so TCP holds it less the two 20-byte headers (Wireshark reads it so).
    frames = [
        bytes(_eth() / PPPoE(sessionid=7, len=length) / PPP(proto=0x0021) / _tcp(i))
        for i in range(SEGMENTS)
    ]
    path = _pcap(tmp_path / "pppoe.pcap", 1, frames)
    assert _counts(path) == (SEGMENTS, SEGMENTS * (length - 2 - 40))
    if shutil.which("tshark"):
        assert _counts(path) == _tshark(path)


def test_an_802_3_length_ends_the_packet_before_the_padding(tmp_path: Path) -> None:
    # The IPv4 header claims 5 bytes past the 802.3 length; the frame's last 5 bytes are
    # padding after that length, so the segment holds 1 byte (Wireshark reads it so).
    frames = [
        bytes(
            Dot3(src="02:00:00:00:00:01", dst="02:00:00:00:00:02", len=8 + 40 + 1)
            / encap.llc_snap()
            / IP(src="10.9.0.1", dst="10.9.0.2", len=40 + 6)
            / TCP(sport=40000, dport=80, flags="A", seq=1000 + i)
            / Raw(b"x" + b"\0" * 5)
        )
        for i in range(SEGMENTS)
    ]
    path = _pcap(tmp_path / "llc.pcap", 1, frames)
    assert _counts(path) == (SEGMENTS, SEGMENTS)
    if shutil.which("tshark"):
        assert _counts(path) == _tshark(path)


@pytest.mark.parametrize(
    "head",
    [
        # Protected: the LLC header and the packet are encrypted.
        b"\x08\x41" + b"\x00" * 22 + b"\x00" * 8,
        # A QoS data frame whose QoS control says A-MSDU: subframes, not one packet.
        b"\x88\x01" + b"\x00" * 22 + b"\x80\x00" + encap.LINKED["ieee802_11"][1][24:],
        # A management frame (beacon) holds no packet.
        b"\x80\x00" + b"\x00" * 22 + encap.LINKED["ieee802_11"][1][24:],
        # Cut inside the LLC/SNAP header.
        encap.LINKED["ieee802_11"][1][:28],
    ],
    ids=["protected", "amsdu", "management", "cut_llc"],
)
def test_an_802_11_frame_without_one_clear_packet_is_not_tcp(head: bytes, tmp_path: Path) -> None:
    frames = [head + bytes(_tcp(i)) if len(head) > 28 else head for i in range(SEGMENTS)]
    path = _pcap(tmp_path / "wlan.pcap", 105, frames)
    capture = read_capture(path)
    assert not (capture.packets.column("proto").to_numpy() == 6).any()
    if shutil.which("tshark"):
        assert _tshark(path) == (0, 0)


def test_the_mpls_link_type_starts_with_the_label_stack(tmp_path: Path) -> None:
    # LINKTYPE_MPLS (219); tshark 4.0 does not read it, so the build is the only truth.
    frames = [bytes(MPLS(label=16, s=0) / MPLS(label=17, s=1) / _tcp(i)) for i in range(SEGMENTS)]
    assert _counts(_pcap(tmp_path / "mpls.pcap", 219, frames)) == (SEGMENTS, SEGMENTS * PAYLOAD)


def test_a_pseudowire_frame_is_found_by_its_own_ethernet_type(tmp_path: Path) -> None:
    # Locally administered addresses behind an all-zero control word: read without the word,
    # its zeros look like Xerox's vendor prefix, and Wireshark then takes the frame for one
    # without a control word and finds no TCP. The frame's Ethernet type, 4 bytes on, says
    # where it is; tracekit counts the segments that were sent.
    frames = [
        bytes(_eth() / MPLS(label=16, s=1) / Raw(b"\x00" * 4) / _eth() / _tcp(i))
        for i in range(SEGMENTS)
    ]
    assert _counts(_pcap(tmp_path / "pw.pcap", 1, frames)) == (SEGMENTS, SEGMENTS * PAYLOAD)


def test_the_encapsulation_files_are_reproducible() -> None:
    for name, data in encap.encap_files().items():
        assert (CRAFTED / name).read_bytes() == data, name


@needs_tshark
@pytest.mark.parametrize(
    ("name", "connections"),
    [("encap_carried.pcap", len(encap.CARRIED)), ("encap_links.pcapng", len(encap.LINKED))],
)
def test_the_encapsulation_file_counts_each_connection_as_tshark_does(
    name: str, connections: int
) -> None:
    path = CRAFTED / name
    conns = build_connections(read_capture(path)).table
    ours = sorted(
        zip(
            conns.column("packets_a2b").to_pylist(),
            conns.column("bytes_a2b").to_pylist(),
            strict=True,
        )
    )
    assert len(ours) == connections
    fields = ["-Y", "tcp", "-T", "fields", "-e", "tcp.stream", "-e", "tcp.len"]
    out = subprocess.run(
        ["tshark", "-r", str(path), *fields], capture_output=True, text=True, check=True
    ).stdout.split("\n")
    streams: dict[str, list[int]] = {}
    for line in filter(None, out):
        stream, length = line.split("\t")
        streams.setdefault(stream, []).append(int(length))
    assert ours == sorted((len(v), sum(v)) for v in streams.values())


# Every tunnel, IP and link header cut at every length, with random bytes, read by the compiled
# helpers with numba's bounds checks on: a header is read only as far as the captured bytes go.
_TUNNEL_PROBE = """
import numpy as np
from tracekit.capture import decode
rng = np.random.default_rng(7)
cases = [(decode.IPPROTO_GRE, None), (17, decode.PORT_VXLAN), (17, decode.PORT_GENEVE),
         (17, decode.PORT_GTP_U), (17, decode.PORT_L2TP), (17, decode.PORT_GRE_IN_UDP),
         (17, decode.PORT_AYIYA)]
for proto, port in cases:
    for n in range(0, 48):
        for _ in range(64):
            b = rng.integers(0, 256, n, dtype=np.uint8)
            if port is not None and n >= 4:
                b[2], b[3] = port >> 8, port & 0xFF
            if port == decode.PORT_GTP_U and n >= 10:
                b[8], b[9] = 0x30 | rng.integers(0, 8), 255
            if port == decode.PORT_AYIYA and n >= 12:
                b[10], b[11] = (b[10] & 0xF0) | decode.AYIYA_FORWARD, rng.choice([4, 41])
            if port == decode.PORT_L2TP and n >= 10:
                b[8], b[9] = rng.integers(0, 256) & 0x7F, 2  # a version 2 data message
            gre = 8 if port == decode.PORT_GRE_IN_UDP else 0 if port is None else -1
            if gre >= 0 and n >= gre + 4:  # version 0, and a protocol type that is followed
                b[gre] &= 0xB0
                b[gre + 1] = 0
                kind = rng.choice([0x883E, 0x8200, 0x8370, 0x88BE, 0x22EB, 0x6558, 0x8847])
                b[gre + 2], b[gre + 3] = kind >> 8, kind & 0xFF
            decode._tunnel(b, proto, 0, n, n)
            decode._gre(b, 0, n)
# The IP headers and their extensions, and the link layers a tunnel may carry, likewise.
for n in range(0, 96):
    for _ in range(64):
        b = rng.integers(0, 256, n, dtype=np.uint8)
        for version in (4, 6):
            if n:
                b[0] = (version << 4) | (b[0] & 0x0F)
            decode._network(b, 0, version, n, n)
            decode._network(b, 0, version, n + 1000, n)  # a cut frame: room past its bytes
        for proto in (0, 43, 44, 51, 60, decode.IPPROTO_AH):
            decode._extensions(b, 6, proto, 0, n, n)
            decode._extensions(b, 4, proto, 0, n, n)
        decode._ethernet(b, 0, n)
        for ethertype in (0x8100, 0x88A8, 0x8847, 0x8864, 0x0800, 0x86DD, 0x893F, 0x8926, 0x8903,
                          0x88E7, 0, 8, 46, 1500):
            decode._link_payload(b, ethertype, 0, n)
        if n >= 3:  # LLC/SNAP after an 802.3 length
            b[0], b[1], b[2] = 0xAA, 0xAA, 0x03
            decode._link_payload(b, n, 0, n)
            decode._link_payload(b, 1500, 0, n)
        decode._nflog(b, 0, n)
        if n >= 4:  # Juniper's magic, then any flags
            b[0], b[1], b[2] = 0x4D, 0x47, 0x43
        decode._juniper(b, 0, n)
        if n >= 8:  # a payload TLV at once, little- or big-endian, of any length
            b[4:8] = [b[4], b[5], 9, 0] if n % 2 else [b[4], b[5], 0, 9]
            decode._nflog(b, 0, n)
        if n >= 4:  # Juniper's magic, then any flags
            b[0], b[1], b[2] = 0x4D, 0x47, 0x43
        decode._juniper(b, 0, n)
        decode._ppp_protocol(b, 0, n)
        decode._ppp_frame(b, 0, n)
        decode._cisco_hdlc(b, 0, n)
        decode._arcnet(b, 0, n, True)
        decode._arcnet(b, 0, n, False)
        if n:
            b[0] = 0x88 if n % 2 else 0x08  # a data frame, QoS or not
        decode._wlan(b, 0, n)
        if n >= 2:
            b[0] = 0x0F
            decode._ppp_frame(b, 0, n)
print("ok")
"""


def test_a_cut_tunnel_header_is_never_read_past_its_captured_bytes(tmp_path: Path) -> None:
    # A cache of its own: numba's cache of the unchecked kernels must not answer for them.
    env = {
        **os.environ,
        "TRACEKIT_JIT": "1",
        "NUMBA_BOUNDSCHECK": "1",
        "NUMBA_CACHE_DIR": str(tmp_path / "numba"),
    }
    done = subprocess.run(
        [sys.executable, "-c", _TUNNEL_PROBE], capture_output=True, text=True, env=env
    )
    assert done.returncode == 0 and done.stdout.strip() == "ok", done.stderr[-2000:]
