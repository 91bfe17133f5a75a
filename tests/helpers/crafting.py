"""Crafting real pcap bytes with scapy: the truth of a crafted capture is how it was built."""

from __future__ import annotations

from collections.abc import Iterable
from pathlib import Path

from scapy.layers.inet import IP, TCP
from scapy.layers.inet6 import IPv6
from scapy.layers.l2 import Ether
from scapy.utils import wrpcap

CLIENT, SERVER = "10.1.0.1", "10.1.0.2"


def write(path: Path, packets: Iterable[object]) -> Path:
    """Write the packets as a classic pcap file and return its path."""
    wrpcap(str(path), list(packets))
    return path


def tcp(
    t: float,
    src: str,
    dst: str,
    sport: int,
    dport: int,
    flags: str,
    seq: int,
    ack: int = 0,
    payload: int = 0,
    options: list[tuple[str, object]] | None = None,
    window: int = 65535,
) -> Ether:
    """One Ethernet/IP/TCP frame at time t with `payload` bytes of data."""
    ip = IPv6(src=src, dst=dst) if ":" in src else IP(src=src, dst=dst)
    segment = TCP(
        sport=sport,
        dport=dport,
        flags=flags,
        seq=seq % 2**32,
        ack=ack % 2**32,
        window=window,
        options=options or [],
    )
    pkt = Ether() / ip / segment / (b"x" * payload)
    pkt.time = t
    return pkt


# A transfer whose events are known by construction: seq offsets are relative to the ISNs.
C_ISN, S_ISN = 1000, 5000
OPTS = [("MSS", 1000), ("WScale", 0), ("SAckOK", b""), ("Timestamp", (100, 0))]


def c2s(t: float, flags: str, rel: int, payload: int = 0, tsval: int = 0) -> object:
    opts: list[tuple[str, object]] = [("Timestamp", (tsval, 0))]
    return tcp(t, CLIENT, SERVER, 40000, 80, flags, C_ISN + rel, S_ISN + 1, payload, opts)


def s2c(t: float, ack_rel: int, tsecr: int = 0, window: int = 65535, sack=()) -> object:
    opts: list[tuple[str, object]] = [("Timestamp", (900, tsecr))]
    if sack:
        opts.append(("SAck", tuple(C_ISN + e for block in sack for e in block)))
    return tcp(t, SERVER, CLIENT, 80, 40000, "A", S_ISN + 1, C_ISN + ack_rel, 0, opts, window)


def transfer() -> list[object]:
    """A transfer with every event a TSG marks, at known times (see the comments)."""
    return [
        tcp(0.0, CLIENT, SERVER, 40000, 80, "S", C_ISN, 0, 0, OPTS),
        tcp(0.1, SERVER, CLIENT, 80, 40000, "SA", S_ISN, C_ISN + 1, 0, OPTS),
        c2s(0.2, "A", 1),
        # A..E: five segments; C (2001) is lost, the receiver SACKs D and E.
        c2s(1.000, "A", 1, 1000, 200),
        c2s(1.001, "A", 1001, 1000, 201),
        c2s(1.002, "A", 2001, 1000, 202),
        c2s(1.003, "A", 3001, 1000, 203),
        c2s(1.004, "A", 4001, 1000, 204),
        s2c(1.100, 1001, 200),
        s2c(1.101, 2001, 201),
        s2c(1.103, 2001, 201, sack=[(3001, 4001)]),
        s2c(1.104, 2001, 201, sack=[(3001, 5001)]),
        s2c(1.105, 2001, 201, sack=[(3001, 5001)]),
        c2s(1.110, "A", 2001, 1000, 210),  # fast retransmit of C
        s2c(1.210, 5001, 210),
        # The receiver closes its window; Linux probes with an ACK-only segment below the line.
        s2c(2.000, 5001, 210, window=0),
        c2s(2.200, "A", 5000, 0, 220),
        s2c(2.201, 5001, 220, window=0),
        s2c(2.600, 5001, 220),
        c2s(2.700, "A", 5001, 1000, 300),  # F
        s2c(2.800, 6001, 300),
        c2s(2.900, "A", 5501, 1000, 310),  # G: half old, half new bytes
        s2c(3.000, 6501, 310, sack=[(5501, 6001)]),  # D-SACK: below the ACK number
        c2s(10.0, "A", 6500, 0, 400),  # keepalive: window open
        s2c(10.1, 6501, 400),
    ]
