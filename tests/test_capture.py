"""tracekit.capture on crafted captures: every expected value comes from the packets as crafted."""

from __future__ import annotations

import gzip
import ipaddress
from pathlib import Path

import pyarrow as pa
import pytest
from scapy.layers.inet import IP, TCP, UDP
from scapy.layers.inet6 import IPv6
from scapy.packet import Packet

from fixtures.crafted import craft
from tracekit import schema
from tracekit.capture import Capture, read_capture, reader, require_tcp, source
from tracekit.errors import CaptureError

CRAFTED = Path(craft.__file__).resolve().parent


def reparse(ip: Packet) -> Packet:
    """The crafted packet as its bytes say (computed lengths, flags and options filled in)."""
    return (IPv6 if ip.version == 6 else IP)(bytes(ip))


def expected_row(ip: Packet) -> dict[str, int]:
    """The packet-table fields of one crafted IP packet, read with scapy."""
    p = reparse(ip)
    row = {"ip_id": p.id if p.version == 4 else 0}
    if TCP in p:
        tcp = p[TCP]
        opts, mss, wscale, tsval, tsecr, sack = 0, 0, 255, 0, 0, ()
        for name, value in tcp.options:
            if name == "MSS":
                opts, mss = opts | schema.OPT_MSS, value
            elif name == "WScale":
                opts, wscale = opts | schema.OPT_WSCALE, value
            elif name == "SAckOK":
                opts |= schema.OPT_SACK_PERM
            elif name == "Timestamp":
                opts, (tsval, tsecr) = opts | schema.OPT_TS, value
            elif name == "SAck":
                opts, sack = opts | schema.OPT_SACK, value
        row |= {
            "proto": 6,
            "payload_bytes": len(tcp.payload),
            "tcp_flags": int(tcp.flags),
            "seq": tcp.seq,
            "ack": tcp.ack,
            "win_raw": tcp.window,
            "opts": opts,
            "mss": mss,
            "wscale": wscale,
            "tsval": tsval,
            "tsecr": tsecr,
            "sack_n": len(sack) // 2,
        }
    else:
        row |= {
            "proto": 17,
            "payload_bytes": len(p[UDP].payload),
            "tcp_flags": 0,
            "seq": 0,
            "ack": 0,
            "win_raw": 0,
            "opts": 0,
            "mss": 0,
            "wscale": 255,
            "tsval": 0,
            "tsecr": 0,
            "sack_n": 0,
        }
    return row


def endpoints(ip: Packet) -> tuple[tuple[bytes, int], tuple[bytes, int]]:
    p = reparse(ip)
    layer = p[TCP] if TCP in p else p[UDP]
    src = (ipaddress.ip_address(p.src).packed, layer.sport)
    dst = (ipaddress.ip_address(p.dst).packed, layer.dport)
    return src, dst


def kept_entries(reasons: list[str]) -> list[int]:
    return [i for i, reason in enumerate(reasons) if reason == "kept"]


def rows(table: pa.Table) -> list[dict[str, int]]:
    return table.to_pylist()


def check_zoo(capture: Capture, frame_numbers: list[int], ips: list[Packet]) -> None:
    """Each kept crafted packet is a row with its crafted fields, flows keyed as specified."""
    packets = rows(capture.packets)
    assert [r["frame"] for r in packets] == frame_numbers
    first_seen: dict[tuple[int, tuple[bytes, int], tuple[bytes, int]], int] = {}
    for row, ip in zip(packets, ips, strict=True):
        want = expected_row(ip)
        assert {k: row[k] for k in want} == want, (row["frame"], want)
        src, dst = endpoints(ip)
        low, high = sorted((src, dst))
        flow_key = (want["proto"], low, high)
        first_seen.setdefault(flow_key, len(first_seen))
        assert row["flow"] == first_seen[flow_key]
        assert row["src_end"] == (0 if src == low else 1)
    flows = rows(capture.flows)
    assert len(flows) == len(first_seen)
    for (proto, low, high), flow in first_seen.items():
        got = flows[flow]
        assert got["flow"] == flow and got["proto"] == proto
        assert got["ip_version"] == (4 if len(low[0]) == 4 else 6)
        assert (ipaddress.ip_address(got["addr0"]).packed, got["port0"]) == low
        assert (ipaddress.ip_address(got["addr1"]).packed, got["port1"]) == high


def check_sack_and_udp(capture: Capture, ips: list[Packet]) -> None:
    want_sack, want_udp = [], []
    for row, ip in enumerate(ips):
        p = reparse(ip)
        if TCP in p:
            for name, value in p[TCP].options:
                if name == "SAck":
                    want_sack += [
                        {"row": row, "left": value[k], "right": value[k + 1]}
                        for k in range(0, len(value), 2)
                    ]
        else:
            payload = bytes(p[UDP].payload)[:8]
            head = int.from_bytes(payload.ljust(8, b"\x00"), "big")
            want_udp.append({"row": row, "head_len": len(payload), "head": head})
    assert rows(capture.sack) == want_sack
    assert rows(capture.udp) == want_udp


def check_schemas(capture: Capture) -> None:
    assert capture.packets.schema == schema.arrow_schema(schema.PACKET_COLUMNS)
    assert capture.flows.schema == schema.arrow_schema(schema.FLOW_COLUMNS)
    assert capture.sack.schema == schema.arrow_schema(schema.SACK_COLUMNS)
    assert capture.udp.schema == schema.arrow_schema(schema.UDP_COLUMNS)


def skipped_counts(reasons: list[str]) -> dict[str, int]:
    counts: dict[str, int] = {}
    for reason in reasons:
        if reason != "kept":
            counts[reason] = counts.get(reason, 0) + 1
    return counts


@pytest.mark.parametrize(
    ("name", "nanos"),
    [
        ("zoo_ethernet_le_us.pcap", False),
        ("zoo_ethernet_be_us.pcap", False),
        ("zoo_ethernet_le_ns.pcap", True),
        ("zoo_ethernet_be_ns.pcap", True),
        ("zoo_gzip.pcap", True),
        ("zoo_xz.pcap", True),
    ],
)
def test_classic_pcap_byte_orders_resolutions_and_compression(name: str, nanos: bool) -> None:
    capture = read_capture(CRAFTED / name)
    frames = craft.frames("ethernet")
    reasons = [reason for _, reason in frames]
    kept = kept_entries(reasons)
    assert capture.file_format == "pcap"
    assert capture.compression == {"zoo_gzip.pcap": "gzip", "zoo_xz.pcap": "xz"}.get(name)
    assert capture.link_types == (1,)
    assert capture.stats.frames == len(frames)
    assert capture.stats.skipped == skipped_counts(reasons)
    assert not capture.stats.truncated_tail
    assert capture.stats.warnings == (craft.ZOO_FRAGMENT_WARNING,)
    ips = [entry.ip for entry in craft.ZOO if entry.reason == "kept"]
    check_schemas(capture)
    check_zoo(capture, [i + 1 for i in kept], ips)
    check_sack_and_udp(capture, ips)
    # Microsecond files keep the crafted time to the microsecond, nanosecond files exactly.
    unit = 1 if nanos else 1000
    want_ts = [craft.ts_ns(i) // unit * unit for i in kept]
    assert capture.packets.column("ts_ns").to_pylist() == want_ts
    assert set(capture.packets.column("iface").to_pylist()) == {0}


@pytest.mark.parametrize("link", [link for link in craft.LINKS if link != "ethernet"])
def test_link_types(link: str) -> None:
    capture = read_capture(CRAFTED / f"zoo_{link}.pcap")
    reasons = [entry.reason for entry in craft.ZOO]
    assert capture.link_types == (craft.LINKS[link][0],)
    assert capture.stats.skipped == skipped_counts(reasons)
    ips = [entry.ip for entry in craft.ZOO if entry.reason == "kept"]
    check_zoo(capture, [i + 1 for i in kept_entries(reasons)], ips)
    check_sack_and_udp(capture, ips)


@pytest.mark.parametrize("name", ["zoo.pcapng", "zoo_zstd.pcapng"])
def test_pcapng_interfaces_resolutions_sections_and_block_kinds(name: str) -> None:
    capture = read_capture(CRAFTED / name)
    assert capture.file_format == "pcapng"
    assert capture.compression == ("zstd" if "zstd" in name else None)
    assert capture.link_types == (1, 276, 101)
    zoo = craft.ZOO
    reasons = [entry.reason for entry in zoo] * 2
    assert capture.stats.frames == 2 * len(zoo)
    assert capture.stats.skipped == skipped_counts(reasons)
    kept = kept_entries(reasons)
    ips = [zoo[i % len(zoo)].ip for i in kept]
    check_zoo(capture, [i + 1 for i in kept], ips)
    check_sack_and_udp(capture, ips)

    # Section 1: interface i % 3, each with its own if_tsresol; section 2: all interface 0.
    n = len(zoo)
    want_iface = [i % 3 if i < n else 0 for i in kept]
    assert capture.packets.column("iface").to_pylist() == want_iface

    def section1_ns(i: int) -> int:
        tsresol = craft.NG_INTERFACES[i % 3][1]
        raw = craft.raw_timestamp(craft.ts_ns(i), tsresol)
        if tsresol is None:
            return raw * 1000
        if tsresol & 0x80:
            return raw * 1_000_000_000 // 2 ** (tsresol & 0x7F)
        return raw * 10 ** (9 - tsresol)

    # Simple Packet Blocks carry no time: the last timestamp of section 1 carries on.
    want_ts = [section1_ns(i) if i < n else section1_ns(n - 1) for i in kept]
    assert capture.packets.column("ts_ns").to_pylist() == want_ts


def test_snaplen_truncated_frames_keep_their_payload_length_from_the_ip_header() -> None:
    capture = read_capture(CRAFTED / "zoo_snap96.pcap")
    frames = craft.frames("ethernet")
    reasons = [reason for _, reason in frames]
    ips = [e.ip for e in craft.ZOO]
    ips.insert(3, None)  # the ARP frame that only the Ethernet zoo has
    # Frames whose TCP or UDP header lies past byte 96 cannot be decoded: counted short.
    for i, ip in enumerate(ips):
        if reasons[i] == "kept":
            p = reparse(ip)
            l4 = p[TCP] if TCP in p else p[UDP]
            header_end = 14 + len(p) - len(l4) + (l4.dataofs * 4 if TCP in p else 8)
            if header_end > 96:
                reasons[i] = "short_frame"
    assert capture.stats.skipped == skipped_counts(reasons)
    kept = kept_entries(reasons)
    kept_ips = [ips[i] for i in kept]
    check_zoo(capture, [i + 1 for i in kept], kept_ips)
    payload = capture.packets.column("payload_bytes").to_pylist()
    assert 1000 in payload  # the 1000-byte segments, captured as 96 bytes, keep their size
    lengths = [len(frame) for frame, _ in frames]
    assert max(lengths) > 96


def test_require_tcp_accepts_tcp_and_refuses_udp_only(tmp_path: Path) -> None:
    require_tcp(read_capture(CRAFTED / "zoo_raw.pcap"))
    udp_only = [
        (craft.ts_ns(i), craft.link_raw(e.ip))
        for i, e in enumerate(craft.ZOO)
        if e.reason == "kept" and UDP in reparse(e.ip)
    ]
    path = tmp_path / "udp.pcap"
    path.write_bytes(craft.pcap_bytes(udp_only, 101))
    with pytest.raises(CaptureError) as info:
        require_tcp(read_capture(path))
    assert str(info.value) == f"{path}: no TCP packets in {len(udp_only)} frames"


def test_a_capture_whose_only_tcp_headers_are_malformed_is_refused_naming_them(
    tmp_path: Path,
) -> None:
    # A data offset of 60 bytes in a 40-byte IPv4 payload (a fuzzer's or a damaged frame):
    # tshark marks each one malformed; a receiving stack drops it (RFC 9293 3.1).
    head = IP(src="10.0.0.1", dst="10.0.0.2") / TCP(sport=1, dport=2, dataofs=15)
    frames = [(craft.ts_ns(i), craft.link_raw(bytes(head) + b"\0" * 20)) for i in range(2)]
    path = tmp_path / "malformed.pcap"
    path.write_bytes(craft.pcap_bytes(frames, 101))
    with pytest.raises(CaptureError) as info:
        require_tcp(read_capture(path))
    assert str(info.value) == f"{path}: no TCP packets in 2 frames (frames skipped: 2 bad_header)"


def test_progress_reaches_the_file_size() -> None:
    calls: list[tuple[int, int]] = []
    path = CRAFTED / "zoo.pcapng"
    read_capture(path, progress=lambda done, total: calls.append((done, total)))
    size = path.stat().st_size
    assert calls and calls[-1] == (size, size)
    assert all(total == size and 0 <= done <= size for done, total in calls)


def test_reading_leaves_the_file_untouched() -> None:
    for name in ("zoo.pcapng", "zoo_gzip.pcap", "cut_mid_record.pcap"):
        path = CRAFTED / name
        before = (path.read_bytes(), path.stat().st_mtime_ns)
        read_capture(path)
        assert (path.read_bytes(), path.stat().st_mtime_ns) == before


def test_read_only_file_can_be_read(tmp_path: Path) -> None:
    path = tmp_path / "ro.pcap"
    path.write_bytes((CRAFTED / "zoo_raw.pcap").read_bytes())
    path.chmod(0o444)
    assert read_capture(path).packets.num_rows > 0


def test_crafted_files_are_reproducible() -> None:
    for name, data in craft.crafted_files().items():
        assert (CRAFTED / name).read_bytes() == data, name


@pytest.mark.parametrize("compress", [False, True])
@pytest.mark.parametrize("file_format", ["pcap", "pcapng"])
def test_records_across_window_and_call_boundaries(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, file_format: str, compress: bool
) -> None:
    # Small windows and kernel calls, so records straddle window ends many times over, and a
    # small reservation, so the packet table's columns grow many times over.
    monkeypatch.setattr(source, "WINDOW_BYTES", 2 * 4096)
    monkeypatch.setattr(source, "BUFFER_BYTES", 2 * 4096)
    monkeypatch.setattr(reader, "RECORDS_PER_CALL", 7)
    monkeypatch.setattr(reader, "MAX_RESERVED_ROWS", 3)
    repeats = 10
    records = [
        (craft.ts_ns(i), craft.link_ethernet(e.ip)) for i, e in enumerate(craft.ZOO * repeats)
    ]
    if file_format == "pcap":
        data = craft.pcap_bytes(records, 1, nanos=True)
    else:
        blocks = [craft.epb("<", 0, ts // 1000, frame) for ts, frame in records]
        data = craft.shb("<") + craft.idb("<", 1) + b"".join(blocks)
    if compress:
        data = gzip.compress(data, mtime=0)
    path = tmp_path / "many.cap"
    path.write_bytes(data)
    # Mapped windows (plain) or decompression buffers (gzip): either way, many of them.
    plain = gzip.decompress(data) if compress else data
    assert len(plain) > 4 * (source.BUFFER_BYTES if compress else source.WINDOW_BYTES)
    capture = read_capture(path)
    reasons = [e.reason for e in craft.ZOO] * repeats
    assert capture.stats.frames == len(reasons)
    # The zoo's fragments come back every 26 s, the same datagrams: past IPv4's 30 s
    # timeout some of them count as timed out instead.
    skipped = dict(capture.stats.skipped)
    skipped["fragment_incomplete"] += skipped.pop("fragment_timeout", 0)
    assert skipped == skipped_counts(reasons)
    ips = [e.ip for e in craft.ZOO * repeats if e.reason == "kept"]
    check_zoo(capture, [i + 1 for i in kept_entries(reasons)], ips)
    check_sack_and_udp(capture, ips)


def test_pcapng_absurd_timestamp_resolution_reads_as_zero(tmp_path: Path) -> None:
    # Found by tests/fuzz_reader.py: if_tsresol 10**-100 s made 10**91 overflow to a zero divisor.
    # Any 64-bit count of 10**-100 s units is far below 1 ns.
    frame = craft.link_raw(craft.ZOO[0].ip)
    data = craft.shb("<") + craft.idb("<", 101, 0, 100) + craft.epb("<", 0, 2**40, frame)
    path = tmp_path / "tsresol.pcapng"
    path.write_bytes(data)
    assert read_capture(path).packets.column("ts_ns").to_pylist() == [0]


@pytest.mark.parametrize("seed", range(3))
def test_ipv4_text_is_what_ipaddress_writes(seed: int) -> None:
    import random

    rng = random.Random(seed)
    values = [0, 1, 255, 256, 0x0A000001, 2**32 - 1] + [rng.getrandbits(32) for _ in range(2000)]
    for value in values:
        assert reader._address(4, value << 32, 0) == str(ipaddress.IPv4Address(value))
    v6 = rng.getrandbits(128)
    assert reader._address(6, v6 >> 64, v6 & (2**64 - 1)) == str(ipaddress.IPv6Address(v6))
