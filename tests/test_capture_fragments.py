"""IP fragments: the datagrams they carry are counted as tshark counts them.

Each capture is real pcap bytes crafted with scapy (fixtures/crafted/fragments.py): TCP and UDP
segments cut into IPv4 and IPv6 fragments, in order, reversed, shuffled, overlapping, repeated,
in tunnels, incomplete, late, and a flood of datagrams that never complete. The truth is how
they were built, and tshark, where installed, counts the same, except where this reader
bounds its memory or keeps the receiving host's timeouts (said at each test).
"""

from __future__ import annotations

import shutil
import struct
import subprocess
from pathlib import Path

import pytest

from fixtures.crafted import fragments
from fixtures.crafted.fragments import PAYLOAD, PIECE, SEGMENTS
from tests.fuzz_reader import assert_same_tables
from tracekit.capture import Capture, read_capture
from tracekit.capture.decode import MAX_DATAGRAMS
from tracekit.connections import build_connections

CRAFTED = Path(fragments.__file__).resolve().parent
needs_tshark = pytest.mark.skipif(not shutil.which("tshark"), reason="tshark not installed")

# What each whole scenario carries, by construction: (datagrams, payload bytes).
WHOLE = (SEGMENTS, SEGMENTS * PAYLOAD)
CARRIED = {
    **{name: WHOLE for name in fragments.CARRIED},
    "v4_overlap": (1, 1000),
    "v6_overlap": (1, 1000),
    "v4_duplicates": (1, 2 * PIECE),
    "v4_tiny_first": (1, 1000),
    "v6_within_timeout": (1, 1000),
}
# Where this reader and tshark part: tshark keeps fragments for ever and for any number of
# holes; this reader drops a datagram past the receiving host's timeout, or one that arrives
# as more byte ranges at once than it tracks.
NOT_TSHARKS = {"v4_past_timeout", "v6_past_timeout", "v4_scattered"}


def _write(path: Path, frames: fragments.Frames) -> Path:
    path.write_bytes(fragments.pcap_bytes(frames))
    return path


def _counts(capture: Capture) -> list[tuple[int, int, int]]:
    """(protocol, packets, payload bytes) of each connection, both ways."""
    table = build_connections(capture).table.to_pylist()
    return sorted(
        (r["proto"], r["packets_a2b"] + r["packets_b2a"], r["bytes_a2b"] + r["bytes_b2a"])
        for r in table
    )


def _tshark(path: Path) -> list[tuple[int, int, int]]:
    """The same from tshark: its TCP and UDP streams (not VXLAN's carrier), each both ways."""
    found = []
    for proto, shown, field, header in (
        (6, "tcp", "tcp", 0),
        (17, "udp && !vxlan", "udp", 8),
    ):
        out = subprocess.run(
            ["tshark", "-r", str(path), "-Y", shown, "-T", "fields", "-E", "separator=,",
             "-e", f"{field}.stream", "-e", f"{field}.length" if proto == 17 else "tcp.len"],
            capture_output=True, text=True, check=True,
        ).stdout.split()  # fmt: skip
        streams: dict[str, list[int]] = {}
        for line in out:
            stream, length = line.split(",")
            streams.setdefault(stream, []).append(int(length) - header)
        found += [(proto, len(sizes), sum(sizes)) for sizes in streams.values()]
    return sorted(found)


@pytest.fixture(params=sorted(fragments.CARRIED))
def carried(request: pytest.FixtureRequest, tmp_path: Path) -> tuple[str, Path]:
    name = request.param
    return name, _write(tmp_path / f"{name}.pcap", fragments.CARRIED[name]())


def test_each_datagram_is_counted_once(carried: tuple[str, Path]) -> None:
    name, path = carried
    ((_, packets, payload),) = _counts(read_capture(path))
    assert (packets, payload) == CARRIED[name]


@needs_tshark
def test_counts_equal_tsharks(carried: tuple[str, Path]) -> None:
    _, path = carried
    assert _counts(read_capture(path)) == _tshark(path)


@needs_tshark
@pytest.mark.parametrize("name", sorted(set(fragments.DAMAGED) - NOT_TSHARKS))
def test_damaged_fragments_count_as_tshark_counts(name: str, tmp_path: Path) -> None:
    path = _write(tmp_path / f"{name}.pcap", fragments.DAMAGED[name]())
    assert _counts(read_capture(path)) == _tshark(path) == []


def test_a_datagram_is_the_row_of_the_fragment_that_completes_it(tmp_path: Path) -> None:
    # Shuffled: each segment's second fragment, then its third, then its first, which
    # completes it: frames 3 and 6, at their own times.
    path = _write(tmp_path / "shuffled.pcap", fragments.CARRIED["v4_tcp_shuffled"]())
    capture = read_capture(path)
    packets = capture.packets.to_pylist()
    assert [p["frame"] for p in packets] == [3, 6]
    start_ns = 1_700_000_000 * 10**9
    assert [p["ts_ns"] - start_ns for p in packets] == [2_000_000, 5_000_000]
    assert [p["seq"] for p in packets] == [1000, 1000 + PAYLOAD]
    assert [p["payload_bytes"] for p in packets] == [PAYLOAD, PAYLOAD]
    assert capture.stats.skipped == {"ip_fragment": 4}
    assert capture.stats.warnings == ()


def test_the_udp_stream_reads_the_first_bytes_of_each_datagram(tmp_path: Path) -> None:
    # A numbered test stream's datagrams carry their number in their first 8 bytes: the
    # reassembled datagram's, even when its first fragment came last.
    for name in ("v4_udp", "v4_udp_reversed", "v6_udp"):
        capture = read_capture(_write(tmp_path / f"{name}.pcap", fragments.CARRIED[name]()))
        heads = capture.udp.to_pylist()
        assert [h["head_len"] for h in heads] == [8] * SEGMENTS, name
        assert [struct.pack(">Q", h["head"]) for h in heads] == [
            struct.pack(">Q", i) for i in range(SEGMENTS)
        ], name


@pytest.mark.parametrize(
    ("name", "skipped"),
    [
        ("v4_missing_middle", {"fragment_incomplete": 2}),
        # 31 s after its first fragment: past IPv4's 30 s (Linux's ipfrag_time); its last
        # fragment starts a datagram of its own, incomplete at the end.
        ("v4_past_timeout", {"fragment_timeout": 1, "fragment_incomplete": 1}),
        # 61 s: past IPv6's 60 s (RFC 8200 4.5).
        ("v6_past_timeout", {"fragment_timeout": 1, "fragment_incomplete": 1}),
        ("v4_empty", {"bad_header": 2}),
        ("v4_longer_than_frame", {"bad_header": 1, "fragment_incomplete": 1}),
        # 65 disjoint ranges at once, then 65 more: evicted twice over.
        ("v4_scattered", {"fragment_evicted": 130}),
        ("v6_cut_header", {"bad_header": 1}),
    ],
)
def test_fragments_never_completed_are_skipped_by_reason(
    name: str, skipped: dict[str, int], tmp_path: Path
) -> None:
    capture = read_capture(_write(tmp_path / f"{name}.pcap", fragments.DAMAGED[name]()))
    assert capture.packets.num_rows == 0
    assert capture.stats.skipped == skipped


def test_a_warning_says_how_many_fragments_never_completed(tmp_path: Path) -> None:
    capture = read_capture(_write(tmp_path / "late.pcap", fragments.DAMAGED["v4_past_timeout"]()))
    assert capture.stats.warnings == (
        "2 IP fragments of 2 datagrams that never completed skipped: 1 still incomplete at "
        "the end of the capture, 1 not whole within the timeout (30 s for IPv4, 60 s for IPv6)",
    )


@pytest.mark.parametrize(
    "name", ["v4_tcp_shuffled", "v6_udp", "gre_outer_fragmented", "v4_duplicates"]
)
def test_datagrams_straddling_chunks_read_as_in_one(name: str, tmp_path: Path) -> None:
    path = _write(tmp_path / f"{name}.pcap", fragments.CARRIED[name]())
    whole = read_capture(path)
    for records_per_call in (1, 2, 3, 5):
        assert_same_tables(read_capture(path, records_per_call=records_per_call), whole)


def test_snaplen_cut_fragments_count_their_whole_datagram(tmp_path: Path) -> None:
    # Cut at 200 bytes, every fragment still says its length and place: the datagrams count
    # whole, as an uncut capture's do. (tshark puts only fragments captured whole together.)
    frames = fragments.CARRIED["v4_tcp_reversed"]() + fragments.CARRIED["v6_tcp_in_order"]()
    data = bytearray(fragments.pcap_bytes(frames))
    at, out = 24, [bytes(data[:24])]
    while at < len(data):
        sec, usec, caplen, origlen = struct.unpack_from("<IIII", data, at)
        keep = min(caplen, 200)
        out.append(struct.pack("<IIII", sec, usec, keep, origlen) + data[at + 16 : at + 16 + keep])
        at += 16 + caplen
    cut = tmp_path / "cut.pcap"
    cut.write_bytes(b"".join(out))
    assert _counts(read_capture(cut)) == [(6, SEGMENTS, SEGMENTS * PAYLOAD)] * 2


def test_a_flood_of_fragments_is_bounded_and_counted(tmp_path: Path) -> None:
    # A datagram begun before a flood of 5,000 others that never complete, finished after it;
    # then one more datagram. The table holds MAX_DATAGRAMS: the flood evicts the early
    # datagram and 904 of its own first (5,001 begun), the early datagram's last fragment
    # (begun anew) and the late datagram's first one evict two more. Only the late datagram
    # is whole. (tshark, without a bound, would count the early one too.)
    assert MAX_DATAGRAMS == 4096
    raw = fragments._datagram(43300)
    early = [fragments._piece4(43300, 0, raw[:512], True)]
    early_end = [fragments._piece4(43300, 512, raw[512:], False)]
    late = [
        fragments._piece4(43301, 0, raw[:512], True, ident=1),
        fragments._piece4(43301, 512, raw[512:], False, ident=1),
    ]
    frames = (
        fragments._in_order(early)
        + [(0.001 + t, f) for t, f in fragments.flood(5000)]
        + [(6.0 + t, f) for t, f in fragments._in_order(early_end + late)]
    )
    path = _write(tmp_path / "flood.pcap", frames)
    capture = read_capture(path)
    assert capture.stats.frames == 5004
    assert capture.packets.num_rows == 1
    assert capture.stats.skipped == {
        "ip_fragment": 1,
        "fragment_evicted": 907,
        "fragment_incomplete": 5004 - 1 - 1 - 907,
    }
    assert capture.stats.warnings[-1].startswith("5,002 IP fragments of 5,002 datagrams")
    assert "907 evicted from the table of 4,096 datagrams in flight" in capture.stats.warnings[-1]
    assert_same_tables(read_capture(path, records_per_call=1000), capture)


def test_the_fragment_files_are_reproducible() -> None:
    for name, data in fragments.fragment_files().items():
        assert (CRAFTED / name).read_bytes() == data, name


@needs_tshark
def test_the_fragment_file_counts_as_tshark_does() -> None:
    path = CRAFTED / "fragments_carried.pcap"
    assert _counts(read_capture(path)) == _tshark(path)
