"""IPComp (RFC 3173) with DEFLATE (RFC 2394): the TCP inside is inflated and counted as tshark
counts it, and a payload that cannot be inflated safely stays `compressed`.

Each capture is real pcap bytes crafted with scapy and zlib (fixtures/crafted/ipcomp.py): five
100-byte segments of one connection per carrier. The truth is how they were built, and tshark,
where installed, counts the same.
"""

from __future__ import annotations

import shutil
import struct
import subprocess
from pathlib import Path

import numpy as np
import pytest
from scapy.layers.inet import IP, TCP
from scapy.layers.l2 import Ether
from scapy.packet import Raw

from fixtures.crafted import ipcomp
from tracekit.capture import read_capture
from tracekit.capture.reader import read_chunks
from tracekit.connections import build_connections

CRAFTED = Path(ipcomp.__file__).resolve().parent
SEGMENTS = 5
needs_tshark = pytest.mark.skipif(not shutil.which("tshark"), reason="tshark not installed")


def _eth() -> Ether:
    return Ether(src="02:00:00:00:00:01", dst="02:00:00:00:00:02")


def _pcap(path: Path, frames: list[bytes], snaplen: int | None = None) -> Path:
    """A classic Ethernet pcap; each frame cut to `snaplen` bytes, its original length kept."""
    out = [struct.pack("<IHHiIII", 0xA1B2C3D4, 2, 4, 0, 0, 65535, 1)]
    for k, frame in enumerate(frames):
        kept = frame[:snaplen] if snaplen else frame
        out.append(struct.pack("<IIII", 1, k * 1000, len(kept), len(frame)) + kept)
    path.write_bytes(b"".join(out))
    return path


def _counts(path: Path) -> tuple[int, int]:
    conns = build_connections(read_capture(path)).table
    return (
        int(conns.column("packets_a2b").to_numpy().sum()),
        int(conns.column("bytes_a2b").to_numpy().sum()),
    )


def _tshark(path: Path, *fields: str) -> list[list[str]]:
    out = subprocess.run(
        ["tshark", "-r", str(path), "-Y", "tcp", "-T", "fields", *(f"-e{f}" for f in fields)],
        capture_output=True, text=True, check=True,
    ).stdout  # fmt: skip
    return [line.split("\t") for line in out.splitlines()]


@pytest.fixture(params=sorted(ipcomp.CARRIED))
def carried(request: pytest.FixtureRequest, tmp_path: Path) -> Path:
    build = ipcomp.CARRIED[request.param]
    return _pcap(tmp_path / f"{request.param}.pcap", [bytes(build(i)) for i in range(SEGMENTS)])


def test_the_tcp_inside_is_counted(carried: Path) -> None:
    assert _counts(carried) == (SEGMENTS, SEGMENTS * ipcomp.PAYLOAD)
    capture = read_capture(carried)
    assert capture.stats.skipped.get("compressed", 0) == 0
    packets = capture.packets
    # Each segment's own header, from its frame: sequence numbers as built, frames in order.
    assert packets.column("seq").to_pylist() == [1000 + i * ipcomp.PAYLOAD for i in range(5)]
    assert packets.column("frame").to_pylist() == [1, 2, 3, 4, 5]


@needs_tshark
def test_counts_equal_tsharks(carried: Path) -> None:
    lengths = [int(row[0]) for row in _tshark(carried, "tcp.len")]
    assert _counts(carried) == (len(lengths), sum(lengths))


@needs_tshark
def test_a_tunnel_mode_connection_records_the_gateways(tmp_path: Path) -> None:
    build = ipcomp.CARRIED["ipv4_tunnel_negotiated_cpi"]
    path = _pcap(tmp_path / "tunnel.pcap", [bytes(build(i)) for i in range(SEGMENTS)])
    (tunnel,) = build_connections(read_capture(path)).table.column("tunnel").to_pylist()
    first = _tshark(path, "ip.src", "ip.dst")[0]
    assert tunnel == f"{first[0].split(',')[0]} > {first[1].split(',')[0]}"
    assert tunnel == f"{ipcomp.GATEWAY_A} > {ipcomp.GATEWAY_B}"


# What each damaged payload is counted as. tshark differs on some, knowingly: it tries DEFLATE
# whatever the CPI says (LZS's and a reserved one included), inflates IPComp inside IPComp,
# inflates past what an IP datagram holds, and dissects the part of a truncated stream it
# inflated.
DAMAGED_REASONS = {
    "lzs": "compressed",
    "reserved_cpi": "compressed",
    "truncated_stream": "compressed",
    "not_deflate": "compressed",
    "bomb": "compressed",
    "nested": "compressed",
    "header_only": "compressed",
    "icmp_inside": "not_tcp_udp",
    "tcp_header_past_inflated": "bad_header",
}
TSHARK_AGREES = {"not_deflate", "header_only", "icmp_inside"}


def test_every_damaged_payload_has_its_reason() -> None:
    assert set(DAMAGED_REASONS) == set(ipcomp.DAMAGED)


@pytest.mark.parametrize("name", sorted(ipcomp.DAMAGED))
def test_a_damaged_payload_is_counted_and_no_tcp_invented(name: str, tmp_path: Path) -> None:
    frame = ipcomp.DAMAGED[name]()
    path = _pcap(tmp_path / f"{name}.pcap", [frame, frame])
    capture = read_capture(path)
    assert capture.packets.num_rows == 0
    assert {k: v for k, v in capture.stats.skipped.items() if v} == {DAMAGED_REASONS[name]: 2}
    if name in TSHARK_AGREES and shutil.which("tshark"):
        assert _tshark(path, "tcp.len") == []


def test_a_payload_cut_by_the_snapshot_length_stays_compressed(tmp_path: Path) -> None:
    frame = bytes(ipcomp.CARRIED["ipv4"](0))
    capture = read_capture(_pcap(tmp_path / "cut.pcap", [frame], snaplen=len(frame) - 3))
    assert capture.packets.num_rows == 0
    assert capture.stats.skipped["compressed"] == 1


def test_inflated_packets_keep_their_place_among_the_others(tmp_path: Path) -> None:
    # Plain segments, inflated ones and damaged ones interleaved, across several chunks of
    # the reader: every kept row is its frame's, in frame order, with its frame's time.
    plain = (
        _eth() / IP(src="10.9.0.3", dst="10.9.0.4") / TCP(sport=46000, dport=80, flags="A")
        / Raw(b"y" * 10)
    )  # fmt: skip
    frames: list[bytes] = []
    inflated: list[int] = []
    for i in range(40):
        if i % 3 == 0:
            frames.append(bytes(ipcomp.CARRIED["ipv6_tunnel_behind_ah"](i)))
            inflated.append(len(frames))
        elif i % 3 == 1:
            frames.append(bytes(plain))
        else:
            frames.append(ipcomp.DAMAGED["not_deflate"]())
    path = _pcap(tmp_path / "mixed.pcap", frames)
    whole = read_capture(path)
    chunked = read_capture(path, records_per_call=7)
    for capture in (whole, chunked):
        frame = capture.packets.column("frame").to_numpy()
        carried = capture.packets.column("payload_bytes").to_numpy() == ipcomp.PAYLOAD
        assert frame.tolist() == sorted(frame.tolist())
        assert frame[carried].tolist() == inflated
        ts = capture.packets.column("ts_ns").to_numpy()
        assert (ts == 1_000_000_000 + (frame.astype(np.int64) - 1) * 1_000_000).all()
        assert capture.stats.skipped["compressed"] == 13
        assert capture.stats.frames == 40
    assert whole.packets.equals(chunked.packets)
    if shutil.which("tshark"):
        ours = whole.packets.column("frame").to_pylist()
        assert ours == [int(row[0]) for row in _tshark(path, "frame.number")]


def test_the_chunked_read_inflates_too(tmp_path: Path) -> None:
    build = ipcomp.CARRIED["ipv4_behind_ah"]
    path = _pcap(tmp_path / "chunks.pcap", [bytes(build(i)) for i in range(SEGMENTS)])
    seen: list[np.ndarray] = []
    read_chunks(path, lambda columns, _flows: seen.append(columns["seq"]), records_per_call=2)
    assert np.concatenate(seen).tolist() == [1000 + i * ipcomp.PAYLOAD for i in range(5)]


def test_the_ipcomp_files_are_reproducible() -> None:
    for name, data in ipcomp.ipcomp_files().items():
        assert (CRAFTED / name).read_bytes() == data, name
