"""tracekit.connections.stream: the packet table written as a stream equals the one built whole.

The whole-capture road (read_capture, build_connections, write_packet_table) is checked against
tshark and tcptrace elsewhere (test_connections, test_cli_ingest); here the stream must give
the same files, cut into chunks as small as one record.
"""

from __future__ import annotations

import struct
from pathlib import Path

import pyarrow.parquet as pq
import pytest

from tests.helpers.crafting import CLIENT, SERVER, tcp, write
from tracekit.capture import read_capture
from tracekit.connections import build_connections
from tracekit.connections import stream as ingest_module
from tracekit.connections.stream import connections_table, ingest_capture
from tracekit.connections.table_io import (
    PAIR_KEY,
    connections_path,
    read_connections,
    write_packet_table,
)
from tracekit.errors import CaptureError

ROOT = Path(__file__).resolve().parent.parent
CAPTURES = sorted(
    [
        *(ROOT / "fixtures" / "crafted").glob("*.pcap*"),
        *(ROOT / "fixtures" / "captures").glob("*/*.pcap*"),
    ]
)
# Real kernel captures, one of them several default chunks long (225,172 packets).
KERNEL = sorted((ROOT / "fixtures" / "kernel").glob("*.pcap*"))


def _whole(capture: Path, out: Path) -> None:
    write_packet_table(build_connections(read_capture(capture)), out)


def _same_files(a: Path, b: Path) -> None:
    ta, tb = pq.read_table(a), pq.read_table(b)
    assert ta.num_rows == tb.num_rows
    assert ta.equals(tb)
    # The same metadata but for each write's own pair id.
    assert _but_pair(ta.schema.metadata) == _but_pair(tb.schema.metadata)
    assert read_connections(a).equals(read_connections(b))


def _but_pair(metadata: dict[bytes, bytes] | None) -> dict[bytes, bytes]:
    return {k: v for k, v in (metadata or {}).items() if k != PAIR_KEY}


@pytest.mark.parametrize(
    ("records_per_call", "captures"),
    [(1, "crafted"), (7, "all"), (1 << 16, "all"), (4099, "kernel"), (1 << 18, "kernel")],
)
def test_the_stream_writes_what_the_whole_capture_gives(
    tmp_path: Path, records_per_call: int, captures: str
) -> None:
    checked = 0
    for capture in KERNEL if captures == "kernel" else CAPTURES:
        if captures == "crafted" and capture.parent.name != "crafted":
            continue  # one record a chunk: the lab's thousands of packets take too long
        try:
            _whole(capture, tmp_path / "whole.parquet")
        except CaptureError:
            continue
        if pq.read_metadata(tmp_path / "whole.parquet").num_rows == 0:
            # No TCP or UDP at all: ingest refuses it, as flows and analyze do.
            with pytest.raises(CaptureError, match="no TCP or UDP packets"):
                ingest_capture(capture, tmp_path / "stream.parquet", records_per_call=1)
            continue
        result = ingest_capture(
            capture, tmp_path / "stream.parquet", records_per_call=records_per_call
        )
        assert result.streamed, capture.name
        _same_files(tmp_path / "whole.parquet", tmp_path / "stream.parquet")
        assert result.packets == pq.read_metadata(tmp_path / "stream.parquet").num_rows
        checked += 1
    assert checked >= {"crafted": 20, "kernel": 5}.get(captures, 38)
    assert not list(tmp_path.glob(".*.tmp"))


def _mid_connection(tmp_path: Path) -> Path:
    # The capture starts after the handshake, with the server's ACKs of byte 1,001 on; 3
    # packets later the client resends bytes 501-1,000, below that line. The client's line
    # starts at its earliest number (RFC 9293 3.4), that segment's, which the server's first
    # ACK does not tell: streamed in chunks of 2, the ISN changes after use.
    c_isn, s_isn = 7000, 90000
    pkts = [
        tcp(1.0, SERVER, CLIENT, 80, 40000, "A", s_isn + 1, c_isn + 1001),
        tcp(1.1, SERVER, CLIENT, 80, 40000, "A", s_isn + 1, c_isn + 1001),
        tcp(1.2, SERVER, CLIENT, 80, 40000, "A", s_isn + 1, c_isn + 1001),
        tcp(1.3, CLIENT, SERVER, 40000, 80, "A", c_isn + 501, s_isn + 1, 500),
        tcp(1.4, SERVER, CLIENT, 80, 40000, "A", s_isn + 1, c_isn + 2501),
    ]
    return write(tmp_path / "mid.pcap", pkts)


def test_an_isn_learnt_late_starts_over_with_the_whole_capture(tmp_path: Path) -> None:
    capture = _mid_connection(tmp_path)
    _whole(capture, tmp_path / "whole.parquet")
    table = pq.read_table(tmp_path / "whole.parquet").to_pydict()
    # The client's first captured segment is byte 1 of its direction, and the ACK line moves
    # from byte 1,001 to 2,501 of the client's numbers (501 to 2,001 from that ISN).
    assert table["seq_rel"][3] == 1
    assert table["ack_rel"][4] - table["ack_rel"][0] == 1500
    late = ingest_capture(capture, tmp_path / "stream.parquet", records_per_call=2)
    assert not late.streamed
    _same_files(tmp_path / "whole.parquet", tmp_path / "stream.parquet")
    # In one chunk the stream sees the segment before it numbers anything.
    assert ingest_capture(capture, tmp_path / "stream.parquet").streamed
    _same_files(tmp_path / "whole.parquet", tmp_path / "stream.parquet")
    assert not list(tmp_path.glob(".*.tmp"))


def test_a_corrupt_capture_leaves_the_output_as_it_was(tmp_path: Path) -> None:
    out = tmp_path / "t.parquet"
    out.write_bytes(b"an earlier table")
    # Damage in the first record: nothing to read up to, so the file is refused.
    data = bytearray((ROOT / "fixtures" / "crafted" / "caplen_over_256k.pcap").read_bytes())
    struct.pack_into("<II", data, 24 + 8, 300_000, 300_000)
    bad = tmp_path / "bad.pcap"
    bad.write_bytes(bytes(data))
    with pytest.raises(CaptureError, match="256 KiB"):
        ingest_capture(bad, out, records_per_call=1)
    assert out.read_bytes() == b"an earlier table"
    assert not connections_path(out).exists()
    assert not list(tmp_path.glob(".*.tmp"))


def test_a_file_that_is_no_capture_leaves_no_folder_or_file(tmp_path: Path) -> None:
    out = tmp_path / "new" / "t.parquet"
    for bad in (ROOT / "fixtures" / "crafted" / "bad_magic.pcap", tmp_path / "missing.pcap"):
        with pytest.raises(CaptureError):
            ingest_capture(bad, out)
    assert not out.parent.exists()


def test_a_failed_write_is_raised_and_leaves_no_file(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    def full(self: object, table: object) -> None:
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(ingest_module.ParquetStream, "write", full)
    monkeypatch.setattr(ingest_module, "ROW_GROUP_ROWS", 100)
    capture = ROOT / "fixtures" / "captures" / "clean" / "sender.pcap"
    with pytest.raises(OSError, match="No space left"):
        # 10,502 packets in chunks of 64: the writer fails on the first row group while the
        # reader has more chunks than the queue holds to hand over (it must not hang).
        ingest_capture(capture, tmp_path / "t.parquet", records_per_call=64)
    assert list(tmp_path.iterdir()) == []


def test_the_streamed_connections_table_is_the_whole_captures(tmp_path: Path) -> None:
    # `tracekit flows` reads this way: no packet table, the same connections table.
    checked = 0
    for capture in CAPTURES:
        try:
            whole = build_connections(read_capture(capture))
        except CaptureError:
            continue
        if whole.table.num_rows and (whole.packets.column("proto").to_numpy() == 6).any():
            got, table = connections_table(capture, records_per_call=7)
            assert table.equals(whole.table), capture.name
            assert got.stats == whole.capture.stats
            assert got.packets.num_rows == 0
            checked += 1
    assert checked >= 35
    # A late ISN reads the whole way, with the same table.
    mid = _mid_connection(tmp_path)
    assert connections_table(mid, records_per_call=2)[1].equals(
        build_connections(read_capture(mid)).table
    )


def test_a_capture_without_tcp_has_no_connections_table(tmp_path: Path) -> None:
    from scapy.layers.inet import IP, UDP
    from scapy.layers.l2 import Ether

    udp = Ether() / IP(src=CLIENT, dst=SERVER) / UDP(sport=5000, dport=5001) / (b"x" * 20)
    udp.time = 1.0
    with pytest.raises(CaptureError, match="no TCP packets in 1 frames"):
        connections_table(write(tmp_path / "udp.pcap", [udp]))


def test_a_capture_without_tcp_or_udp_is_refused_and_writes_nothing(tmp_path: Path) -> None:
    # As flows and analyze refuse it: an empty table is no answer to "ingest this capture".
    from scapy.layers.inet import ICMP, IP
    from scapy.layers.l2 import Ether

    pings = []
    for i in range(5):
        ping = Ether() / IP(src=CLIENT, dst=SERVER) / ICMP(seq=i)
        ping.time = 1.0 + i
        pings.append(ping)
    out = tmp_path / "t.parquet"
    with pytest.raises(CaptureError, match="no TCP or UDP packets in 5 frames"):
        ingest_capture(write(tmp_path / "icmp.pcap", pings), out)
    assert not out.exists() and not connections_path(out).exists()
