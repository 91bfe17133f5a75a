"""802.11 A-MSDUs: each subframe's packet is a row of its own, as tshark dissects each.

The captures are crafted with scapy (fixtures/crafted/amsdu.py): A-MSDUs in Aruba's GRE and
behind radiotap, and hostile ones no sender writes. The truth is how they were built, and
tshark, where installed, reads the same segments, frame by frame.
"""

from __future__ import annotations

import shutil
import struct
import subprocess
from pathlib import Path

import numpy as np
import pytest

from fixtures.crafted import amsdu
from tests.fuzz_reader import assert_same_tables, check_one
from tracekit.capture import read_capture
from tracekit.capture.decode import MAX_AMSDU_SUBFRAMES
from tracekit.connections import build_connections
from tracekit.pipeline import analyze_files

CRAFTED = Path(amsdu.__file__).resolve().parent
needs_tshark = pytest.mark.skipif(not shutil.which("tshark"), reason="tshark not installed")

# By construction: each client port's (segments, payload bytes).
BUILT = {
    "amsdu.pcap": {41100: (5, 5 * amsdu.PAYLOAD), 41101: (3, 3 * amsdu.PAYLOAD)},
    "amsdu_radiotap.pcap": {41102: (5, 5 * amsdu.PAYLOAD)},
}


def _write(path: Path, linktype: int, frames: list[bytes], start_us: int = 0) -> Path:
    out = [struct.pack("<IHHiIII", 0xA1B2C3D4, 2, 4, 0, 0, 262144, linktype)]
    for k, frame in enumerate(frames):
        head = struct.pack("<IIII", 1_700_000_000, start_us + k * 1000, len(frame), len(frame))
        out.append(head + frame)
    path.write_bytes(b"".join(out))
    return path


def _per_port(path: Path) -> dict[int, tuple[int, int]]:
    """The reader's (packets, payload bytes) of each connection, by its client port."""
    table = build_connections(read_capture(path)).table.to_pylist()
    return {
        int(r["b"].rsplit(":", 1)[1] if r["a"].endswith(":80") else r["a"].rsplit(":", 1)[1]): (
            r["packets_a2b"] + r["packets_b2a"],
            r["bytes_a2b"] + r["bytes_b2a"],
        )
        for r in table
    }


def _tshark_segments(path: Path) -> list[tuple[int, int, int, int]]:
    """(frame, client port, sequence number, payload bytes) of every TCP header tshark
    dissects, an A-MSDU frame's several in order."""
    out = subprocess.run(
        ["tshark", "-n", "-r", str(path), "-Y", "tcp", "-T", "fields",
         "-E", "occurrence=a", "-E", "aggregator=|", "-o", "tcp.relative_sequence_numbers:FALSE",
         "-e", "frame.number", "-e", "tcp.srcport", "-e", "tcp.seq", "-e", "tcp.len"],
        capture_output=True, text=True, check=True,
    ).stdout  # fmt: skip
    rows = []
    for line in out.splitlines():
        frame, ports, seqs, lengths = line.split("\t")
        for port, seq, length in zip(
            ports.split("|"), seqs.split("|"), lengths.split("|"), strict=True
        ):
            rows.append((int(frame), int(port), int(seq), int(length)))
    return rows


def _segments(path: Path) -> list[tuple[int, int, int, int]]:
    """The same from the reader's packet table, the port being the client's (src_end says
    which end sent it; the client is the lower address here)."""
    capture = read_capture(path)
    packets = capture.packets.to_pydict()
    flows = capture.flows.to_pylist()
    rows = []
    for frame, flow, seq, length in zip(
        packets["frame"], packets["flow"], packets["seq"], packets["payload_bytes"], strict=True
    ):
        rows.append((frame, flows[flow]["port0"], seq, length))
    return rows


@pytest.mark.parametrize("name", sorted(BUILT))
def test_every_subframe_is_a_packet(name: str) -> None:
    assert _per_port(CRAFTED / name) == BUILT[name]


@needs_tshark
@pytest.mark.parametrize("name", sorted(BUILT))
def test_segments_are_tsharks_frame_by_frame(name: str) -> None:
    # Each row keeps its record's frame number, and a frame's rows are its subframes in order.
    assert _segments(CRAFTED / name) == _tshark_segments(CRAFTED / name)


def test_rows_of_one_frame_keep_its_time_and_number() -> None:
    capture = read_capture(CRAFTED / "amsdu.pcap")
    packets = capture.packets.to_pydict()
    # Frames of 3, 1, 2 and 2 segments (the ARP subframe of frame 3 is no row), 1 ms apart.
    assert packets["frame"] == [1, 1, 1, 2, 3, 3, 4, 4]
    start = packets["ts_ns"][0]
    assert [t - start for t in packets["ts_ns"]] == [(f - 1) * 1_000_000 for f in packets["frame"]]
    assert capture.stats.frames == 4 and capture.stats.skipped == {}


def test_the_same_tables_whatever_the_chunks() -> None:
    for name in BUILT:
        whole = read_capture(CRAFTED / name)
        for per_call in (1, 2, 3):
            assert_same_tables(read_capture(CRAFTED / name, records_per_call=per_call), whole)


def test_hostile_subframes_are_read_without_harm(tmp_path: Path) -> None:
    hostile = amsdu.hostile_frames()
    capture = read_capture(CRAFTED / "amsdu_hostile.pcap")
    frames = capture.packets.column("frame").to_numpy()
    names = list(hostile)
    rows = {name: int((frames == k + 1).sum()) for k, name in enumerate(names)}
    # No MSDU at all; a length past the frame; a header cut: nothing to keep. A whole first
    # subframe is kept before a second whose length runs past the frame (tshark keeps it too).
    assert rows["zero_length"] == rows["length_past_frame"] == rows["cut_header"] == 0
    assert rows["second_past_frame"] == 1
    # More subframes than an MPDU can hold: the first MAX_AMSDU_SUBFRAMES are read.
    assert rows["many_segments"] == MAX_AMSDU_SUBFRAMES
    assert capture.stats.skipped == {"non_ip": 1, "bad_header": 1, "short_frame": 1}
    # And the fuzzer's invariants hold (tables together, chunked reads, connections, ingest).
    check_one((CRAFTED / "amsdu_hostile.pcap").read_bytes(), tmp_path)


@pytest.mark.parametrize("name", sorted(amsdu.hostile_frames()))
def test_each_hostile_frame_alone(name: str, tmp_path: Path) -> None:
    # Alone in its file, each frame's rows (grown for its subframes) make a chunk of their own.
    frame = amsdu.hostile_frames()[name]
    check_one(_write(tmp_path / "x.pcap", amsdu.LINKTYPE_RADIOTAP, [frame]).read_bytes(), tmp_path)


def test_a_fragment_in_a_subframe_is_skipped(tmp_path: Path) -> None:
    # An IP fragment in a subframe is not put together (the fragment table and the skipped
    # counts hold frames, and an A-MSDU frame holds many packets): it is skipped, and the
    # segment beside it kept.
    whole = amsdu.segment(41105, 0)
    first = bytes(whole)[: 20 + 48]
    piece = bytearray(first)
    piece[2:4] = struct.pack(">H", len(first))
    piece[6:8] = struct.pack(">H", 0x2000)  # more fragments, offset 0
    frame = bytes(amsdu.RadioTap()) + amsdu.qos_data(
        amsdu.amsdu([amsdu.subframe(bytes(piece)), amsdu.subframe(bytes(amsdu.segment(41106, 0)))])
    )
    path = _write(tmp_path / "fragment.pcap", amsdu.LINKTYPE_RADIOTAP, [frame, frame])
    capture = read_capture(path)
    assert capture.packets.num_rows == 2 and capture.stats.skipped == {}
    check_one(path.read_bytes(), tmp_path)


def test_rows_and_flows_grow_for_many_subframes(tmp_path: Path) -> None:
    # Records of A-MSDUs of 400 connections' segments each: more rows than records in every
    # chunk, and more flows than the flow table starts with (1,024), both grown between records.
    per_frame, frames = 400, 4
    body = [
        b"".join(
            [bytes(amsdu.RadioTap()), amsdu.qos_data(amsdu.amsdu([
                amsdu.subframe(bytes(amsdu.segment(20000 + f * per_frame + i, 0, payload=10)))
                for i in range(per_frame)
            ]))]
        )
        for f in range(frames)
    ]  # fmt: skip
    path = _write(tmp_path / "many.pcap", amsdu.LINKTYPE_RADIOTAP, body)
    capture = read_capture(path)
    assert capture.packets.num_rows == capture.flows.num_rows == per_frame * frames
    assert int(capture.packets.column("payload_bytes").to_numpy().sum()) == 10 * per_frame * frames
    frame_numbers = capture.packets.column("frame").to_numpy()
    assert (np.bincount(frame_numbers)[1:] == per_frame).all()
    assert_same_tables(read_capture(path, records_per_call=3), capture)


def test_a_transfer_in_amsdus_is_analysed_at_both_ends(tmp_path: Path) -> None:
    # The receiver saw the same frames 5 ms later: every segment is matched and delivered.
    receiver = _write(tmp_path / "receiver.pcap", 1, amsdu.carried_frames(), start_us=5000)
    analysis = analyze_files(CRAFTED / "amsdu.pcap", receiver)
    assert analysis.merge is not None
    fates = analysis.merge.transmissions["fate"].tolist()
    assert len(fates) == 8 and set(fates) == {"delivered"}


def test_the_amsdu_files_are_reproducible() -> None:
    for name, data in amsdu.amsdu_files().items():
        assert (CRAFTED / name).read_bytes() == data, name
