"""Captures whose IP headers and record lengths disagree with the wire (fixtures/crafted/wire.py),
read by the real reader and compared with tshark's reading of the same files."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import numpy as np
import pyarrow as pa
import pytest

from fixtures.crafted import wire
from tracekit.capture import read_capture
from tracekit.connections import build_connections
from tracekit.connections.stream import connections_table
from tracekit.errors import CaptureError
from tracekit.series import build_series

CRAFTED = Path(wire.__file__).resolve().parent

needs_tshark = pytest.mark.skipif(shutil.which("tshark") is None, reason="needs tshark")


def tshark_tcp_len(path: Path) -> dict[int, int]:
    """tcp.len by frame number, for the frames tshark decodes a TCP header in."""
    out = subprocess.run(
        ["tshark", "-n", "-r", str(path), "-T", "fields", "-e", "frame.number", "-e", "tcp.len"],
        check=True,
        capture_output=True,
        text=True,
    ).stdout
    lengths = {}
    for line in out.splitlines():
        frame, length = line.split("\t")
        if length:
            lengths[int(frame)] = int(length)
    return lengths


def payload_by_frame(path: Path) -> dict[int, int]:
    packets = read_capture(path).packets
    frames = packets.column("frame").to_pylist()
    return dict(zip(frames, packets.column("payload_bytes").to_pylist(), strict=True))


def test_wire_files_are_reproducible() -> None:
    for name, data in wire.wire_files().items():
        assert (CRAFTED / name).read_bytes() == data, name


# -- BIG TCP: segments over 64 KiB ------------------------------------------------------------


@needs_tshark
def test_big_tcp_segments_keep_their_size_as_tshark_reads_them() -> None:
    path = CRAFTED / "wire_big_tcp.pcap"
    assert payload_by_frame(path) == tshark_tcp_len(path)
    assert payload_by_frame(path)[4] == wire.BIG_V4_PAYLOAD


def test_the_jumbo_payload_option_wins_over_the_original_length() -> None:
    # The IPv6 frame's original length also counts a 4-byte FCS: only the option is exact.
    assert payload_by_frame(CRAFTED / "wire_big_tcp.pcap")[5] == wire.BIG_V6_PAYLOAD


def test_big_segments_flow_through_connections_series_and_the_stream() -> None:
    path = CRAFTED / "wire_big_tcp.pcap"
    capture = read_capture(path)
    assert capture.packets.schema.field("payload_bytes").type == pa.uint32()
    conns = build_connections(capture)
    table = conns.table.to_pylist()
    assert [row["bytes_a2b"] for row in table] == [wire.BIG_V4_PAYLOAD, wire.BIG_V6_PAYLOAD]
    assert all(row["tso"] for row in table)
    series = build_series(conns)
    lengths = np.sort(series.segments["len"].to_numpy())
    assert lengths[-2:].tolist() == [wire.BIG_V6_PAYLOAD, wire.BIG_V4_PAYLOAD]
    # The streaming pass of `tracekit flows` and `ingest` (tracekit.connections.stream).
    _, streamed = connections_table(path)
    assert streamed.column("bytes_a2b").to_pylist() == [wire.BIG_V4_PAYLOAD, wire.BIG_V6_PAYLOAD]


# -- IP lengths over what the frame holds -----------------------------------------------------


@needs_tshark
def test_ip_lengths_are_clamped_to_the_frame_as_tshark_does() -> None:
    path = CRAFTED / "wire_ip_len_over_frame.pcap"
    ours = payload_by_frame(path)
    theirs = tshark_tcp_len(path)
    assert ours == theirs
    # Frame 6 ends inside the TCP header: tshark calls it malformed, tracekit a bad header.
    assert 6 not in theirs
    assert read_capture(path).stats.skipped == {"bad_header": 1}


def test_whole_and_cut_frames_clamp_by_their_own_rule() -> None:
    ours = payload_by_frame(CRAFTED / "wire_ip_len_over_frame.pcap")
    # Whole frames hold 100 bytes whatever IPv4 (1500) or IPv6 (1480) claims; an FCS after the
    # IP packet is not payload; a frame cut at 64 bytes keeps what its original length holds.
    assert (ours[4], ours[5], ours[7], ours[8]) == (100, 100, 50, 200)


# -- one bad field rejects no whole file ------------------------------------------------------


@needs_tshark
def test_a_record_over_the_snapshot_length_is_read_with_a_warning() -> None:
    path = CRAFTED / "wire_snaplen_exceeded.pcap"
    capture = read_capture(path)
    assert capture.stats.frames == 5 and not capture.stats.skipped
    assert payload_by_frame(path) == tshark_tcp_len(path)
    (warning,) = capture.stats.warnings
    assert warning.startswith("1 record longer than the snapshot length (100)")


def test_an_unknown_interface_rejects_only_its_packets() -> None:
    capture = read_capture(CRAFTED / "wire_unknown_iface.pcapng")
    assert capture.stats.frames == 4
    assert capture.stats.skipped == {"unknown_link_type": 1}
    assert capture.packets.column("frame").to_pylist() == [2, 3, 4]
    assert capture.link_types == (wire.LINK_8023BR, 1)
    assert any("unknown link type 274" in w for w in capture.stats.warnings)
    _, table = connections_table(CRAFTED / "wire_unknown_iface.pcapng")
    assert table.num_rows == 1


def test_a_file_with_only_unknown_interfaces_is_refused_in_one_line() -> None:
    path = CRAFTED / "wire_unknown_only.pcapng"
    with pytest.raises(CaptureError) as info:
        read_capture(path)
    assert str(info.value) == f"{path}: unknown link type 274"


# -- IPv4 options -----------------------------------------------------------------------------


def tshark_destinations(path: Path) -> dict[int, tuple[str, str]]:
    out = subprocess.run(
        [
            *("tshark", "-n", "-r", str(path), "-T", "fields"),
            *("-e", "frame.number", "-e", "ip.src", "-e", "ip.dst"),
        ],
        check=True,
        capture_output=True,
        text=True,
    ).stdout
    rows = [line.split("\t") for line in out.splitlines()]
    return {int(frame): (src, dst) for frame, src, dst in rows}


@needs_tshark
def test_a_source_route_keys_the_flow_by_its_final_destination() -> None:
    path = CRAFTED / "wire_source_route.pcap"
    capture = read_capture(path)
    flows = capture.flows.to_pylist()
    assert len(flows) == 1
    assert {flows[0]["addr0"], flows[0]["addr1"]} == {wire.CLIENT, wire.SERVER}
    # tshark's ip.dst is the route's final destination too (its header field is the next hop).
    kept = capture.packets.column("frame").to_pylist()
    assert {tshark_destinations(path)[f] for f in kept if f != 2} == {(wire.CLIENT, wire.SERVER)}
    conns = build_connections(capture).table.to_pylist()
    assert [(c["a"], c["b"], c["bytes_a2b"]) for c in conns] == [
        (f"{wire.CLIENT}:40000", f"{wire.SERVER}:5201", 320)
    ]


def test_malformed_ipv4_options_are_bad_headers() -> None:
    capture = read_capture(CRAFTED / "wire_source_route.pcap")
    # An option of length 1 and one running past the header (RFC 791 3.1): frames 5 and 6.
    assert capture.stats.skipped == {"bad_header": 2}
    assert capture.packets.column("frame").to_pylist() == [1, 2, 3, 4]
