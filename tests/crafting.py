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
