"""Bad input to tracekit.capture: one-line CaptureErrors, and cut tails read up to the cut."""

from __future__ import annotations

import shutil
import struct
import subprocess
from pathlib import Path

import pytest

from fixtures.crafted import craft
from tracekit.capture import read_capture
from tracekit.errors import CaptureError

CRAFTED = Path(craft.__file__).resolve().parent
ZOO_FRAMES = len(craft.frames("ethernet"))


def problem(path: Path) -> str:
    with pytest.raises(CaptureError) as info:
        read_capture(path)
    message = str(info.value)
    assert "\n" not in message
    assert message.startswith(f"{path}: ")
    return info.value.problem


@pytest.mark.parametrize(
    ("name", "expected"),
    [
        ("empty.pcap", "empty file"),
        ("bad_magic.pcap", "bad magic 0x47494638: not a pcap or pcapng capture"),
        ("first_record_past_end.pcap", "first record (byte 24) runs past the end of the file"),
        ("unknown_linktype.pcap", "unknown link type 147"),
    ],
)
def test_refused_files(name: str, expected: str) -> None:
    assert problem(CRAFTED / name) == expected


def test_missing_file(tmp_path: Path) -> None:
    assert problem(tmp_path / "nope.pcap") == "no such file"


def test_directory(tmp_path: Path) -> None:
    assert problem(tmp_path) == "is a directory, not a capture file"


def tshark_frames(path: Path) -> int:
    """Frames tshark shows before it stops (it reports damage after printing them)."""
    out = subprocess.run(
        ["tshark", "-n", "-r", str(path), "-T", "fields", "-e", "frame.number"],
        capture_output=True,
        text=True,
        check=False,
    ).stdout
    return len(out.split())


needs_tshark = pytest.mark.skipif(shutil.which("tshark") is None, reason="needs tshark")


@needs_tshark
def test_a_damaged_record_after_good_ones_is_read_up_to_there_as_wireshark_does() -> None:
    # The crafted file sets the second record's lengths to 300000 (craft.malformed_files):
    # tshark shows the first frame, then says the file is damaged.
    path = CRAFTED / "caplen_over_256k.pcap"
    capture = read_capture(path)
    assert capture.stats.frames == tshark_frames(path) == 1
    assert capture.stats.truncated_tail
    assert capture.stats.warnings == (
        "capture damaged after frame 1, read up to there: record 2 (byte 114): captured length "
        "300000 is over 256 KiB (262144)",
    )


def test_a_damaged_first_record_refuses_the_file(tmp_path: Path) -> None:
    data = bytearray((CRAFTED / "caplen_over_256k.pcap").read_bytes())
    struct.pack_into("<II", data, 24 + 8, 300_000, 300_000)  # the first record's lengths
    path = tmp_path / "first.pcap"
    path.write_bytes(bytes(data))
    assert problem(path).endswith("captured length 300000 is over 256 KiB (262144)")


@needs_tshark
def test_record_longer_than_its_original_length_is_read_as_captured() -> None:
    # Wireshark reads such a record (a writer's bug) with the bytes it holds.
    path = CRAFTED / "caplen_over_origlen.pcap"
    capture = read_capture(path)
    assert capture.stats.frames == tshark_frames(path) == ZOO_FRAMES
    assert capture.stats.warnings == (
        "1 record claims an original length shorter than the bytes captured: read as "
        "captured, as Wireshark reads them",
        craft.ZOO_FRAGMENT_WARNING,
    )


def test_record_longer_than_the_snapshot_length_is_read_whole(tmp_path: Path) -> None:
    # libpcap and Wireshark read records up to 256 KiB whatever the snapshot length says.
    records = [(craft.ts_ns(0), b"\x45" + b"\x00" * 99)]
    data = bytearray(craft.pcap_bytes(records, 101, snaplen=200))
    struct.pack_into("<I", data, 16, 64)  # snaplen 64 in the file header, record still 100
    path = tmp_path / "snap.pcap"
    path.write_bytes(bytes(data))
    capture = read_capture(path)
    assert capture.stats.frames == 1
    assert capture.stats.warnings == (
        "1 record longer than the snapshot length (64) read whole, as libpcap and Wireshark "
        "read them",
    )


def test_pcapng_block_trailer_mismatch() -> None:
    assert "differs from the copy at the block's end" in problem(CRAFTED / "bad_trailer.pcapng")


def test_pcapng_packet_on_undeclared_interface(tmp_path: Path) -> None:
    frame = craft.link_raw(craft.ZOO[0].ip)
    data = craft.shb("<") + craft.idb("<", 101) + craft.epb("<", 5, 0, frame)
    path = tmp_path / "iface.pcapng"
    path.write_bytes(data)
    assert "packet on interface 5" in problem(path)


def test_pcapng_bad_block_length(tmp_path: Path) -> None:
    data = bytearray(craft.shb("<") + craft.idb("<", 101))
    data += struct.pack("<II", 6, 13) + b"\x00" * 12
    path = tmp_path / "blen.pcapng"
    path.write_bytes(bytes(data))
    assert problem(path).endswith("bad block length 13")


def test_pcapng_unknown_link_type(tmp_path: Path) -> None:
    path = tmp_path / "lt.pcapng"
    path.write_bytes(craft.shb("<") + craft.idb("<", 147))
    assert problem(path) == "unknown link type 147"


def test_corrupt_compressed_data(tmp_path: Path) -> None:
    data = bytearray((CRAFTED / "zoo_gzip.pcap").read_bytes())
    data[20:40] = b"\xff" * 20
    path = tmp_path / "bad.gz"
    path.write_bytes(bytes(data))
    assert problem(path).startswith("corrupt gzip data")


def test_cut_mid_record_is_read_up_to_the_cut() -> None:
    capture = read_capture(CRAFTED / "cut_mid_record.pcap")
    # The last crafted frame lost its final 30 bytes: every frame before it is read.
    assert capture.stats.frames == ZOO_FRAMES - 1
    assert capture.stats.truncated_tail
    warning, fragments = capture.stats.warnings
    assert warning.startswith(f"capture cut off mid-record after frame {ZOO_FRAMES - 1}")
    assert fragments == craft.ZOO_FRAGMENT_WARNING


def test_cut_inside_a_record_header() -> None:
    capture = read_capture(CRAFTED / "cut_mid_header.pcap")
    assert capture.stats.frames == 1
    assert capture.stats.truncated_tail
    assert "7 bytes" in capture.stats.warnings[0]


def test_pcapng_cut_mid_block() -> None:
    capture = read_capture(CRAFTED / "cut_mid_record.pcapng")
    assert capture.stats.frames == 2 * len(craft.ZOO) - 1
    assert capture.stats.truncated_tail


def test_gzip_stream_cut_before_its_end() -> None:
    capture = read_capture(CRAFTED / "gzip_cut.pcap")
    assert capture.compression == "gzip"
    assert capture.stats.truncated_tail
    assert any("gzip stream ends before its end marker" in w for w in capture.stats.warnings)
    # What was decompressed before the cut is there, frame numbers from 1.
    frames = capture.packets.column("frame").to_pylist()
    assert frames and frames[0] == 1 and capture.stats.frames < ZOO_FRAMES


def test_header_only_capture_is_empty_not_an_error() -> None:
    capture = read_capture(CRAFTED / "header_only.pcap")
    assert capture.stats.frames == 0
    assert capture.packets.num_rows == 0 and capture.flows.num_rows == 0
