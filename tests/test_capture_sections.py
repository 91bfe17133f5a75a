"""pcapng files with a section per packet (fixtures/crafted/sections.py), read by the real reader
and compared with the same packets in one classic pcap file and with tshark's reading."""

from __future__ import annotations

import shutil
import subprocess
from decimal import Decimal
from pathlib import Path

import pytest

import tracekit.capture.reader as reader
from fixtures.crafted import sections
from tracekit.capture import read_capture

ROOT = Path(__file__).resolve().parents[1]
# Real packets from the Linux kernel: TCP and UDP over IPv6 on a veth pair.
SOURCE = ROOT / "fixtures" / "kernel" / "veth_v6_tcp_udp_s128.pcap"

needs_tshark = pytest.mark.skipif(shutil.which("tshark") is None, reason="needs tshark")


def tshark_frames(path: Path) -> list[tuple[int, int]]:
    """(time in nanoseconds, interface id in its section) of every frame, as tshark reads it."""
    fields = ("-e", "frame.time_epoch", "-e", "frame.interface_id")
    out = subprocess.run(
        ["tshark", "-n", "-r", str(path), "-T", "fields", *fields],
        check=True,
        capture_output=True,
        text=True,
    ).stdout
    frames = []
    for line in out.splitlines():
        when, iface = line.split("\t")
        frames.append((int(Decimal(when) * 1_000_000_000), int(iface)))
    return frames


def write(tmp_path: Path, name: str, data: bytes) -> Path:
    path = tmp_path / name
    path.write_bytes(data)
    return path


@pytest.mark.parametrize("records_per_call", [1, 7, reader.RECORDS_PER_CALL])
def test_a_section_per_packet_reads_as_the_same_packets_in_one_file(
    tmp_path: Path, records_per_call: int
) -> None:
    path = write(tmp_path, "each.pcapng", sections.one_section_per_packet(SOURCE.read_bytes()))
    one = read_capture(SOURCE)
    each = read_capture(path, records_per_call=records_per_call)
    assert each.stats.frames == one.stats.frames > 1000
    assert each.packets.equals(one.packets)
    assert each.sack.equals(one.sack)
    assert each.udp.equals(one.udp)


def test_a_section_per_packet_is_decoded_in_full_chunks(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # The walk takes each repeated section header and interface block itself, so the records
    # of many sections are decoded together: one decoder call for a file that fits one chunk,
    # where a call per section would make it one per packet.
    path = write(tmp_path, "each.pcapng", sections.one_section_per_packet(SOURCE.read_bytes()))
    calls = []
    decode = reader.decode_chunk

    def counted(*args: object) -> int:
        calls.append(args[5])
        return decode(*args)  # type: ignore[arg-type]

    monkeypatch.setattr(reader, "decode_chunk", counted)
    capture = read_capture(path)
    assert capture.stats.frames > 1000
    assert calls == [capture.stats.frames]


@needs_tshark
@pytest.mark.parametrize("records_per_call", [1, 7, reader.RECORDS_PER_CALL])
def test_sections_of_differing_interfaces_read_as_tshark_reads_them(
    tmp_path: Path, records_per_call: int
) -> None:
    # Every section has its own byte order, time resolution, offset and snapshot length: more
    # distinct interfaces than the reader's one-byte table holds, so it numbers them again.
    data = sections.one_section_per_packet(SOURCE.read_bytes(), varied=True)
    path = write(tmp_path, "varied.pcapng", data)
    capture = read_capture(path, records_per_call=records_per_call)
    expected = tshark_frames(path)
    assert capture.stats.frames == len(expected) > 256
    frames = capture.packets.column("frame").to_pylist()
    times = capture.packets.column("ts_ns").to_pylist()
    ifaces = capture.packets.column("iface").to_pylist()
    assert [(times[i], ifaces[i]) for i in range(len(frames))] == [expected[f - 1] for f in frames]
    assert set(ifaces) == {1}
    plain = read_capture(SOURCE)
    assert capture.packets.column("payload_bytes").equals(plain.packets.column("payload_bytes"))
