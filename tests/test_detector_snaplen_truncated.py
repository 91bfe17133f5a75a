"""snaplen_truncated: a lab capture cut to 54 bytes a record says its options are unknown."""

from __future__ import annotations

import struct
from pathlib import Path

from tests.helpers.lab_captures import CAPTURES, context, lab_findings
from tracekit.capture import read_capture
from tracekit.connections import build_connections
from tracekit.detectors import run_detectors
from tracekit.detectors.snaplen_truncated import SnaplenTruncated

SNAP = 54  # Ethernet 14 + IPv4 20 + TCP 20: every option cut, as tcpdump -s 54 keeps them


def cut_to(source: Path, out: Path, snaplen: int = SNAP) -> Path:
    """The classic pcap `source` with every record cut to `snaplen` bytes, as tcpdump -s would
    have captured it (the original lengths stay)."""
    data = source.read_bytes()
    head = bytearray(data[:24])
    order = "<" if data[:4] == b"\xd4\xc3\xb2\xa1" else ">"
    head[16:20] = struct.pack(order + "I", snaplen)
    parts = [bytes(head)]
    pos = 24
    while pos + 16 <= len(data):
        sec, frac, caplen, origlen = struct.unpack(order + "IIII", data[pos : pos + 16])
        keep = min(caplen, snaplen)
        parts.append(struct.pack(order + "IIII", sec, frac, keep, origlen))
        parts.append(data[pos + 16 : pos + 16 + keep])
        pos += 16 + caplen
    out.write_bytes(b"".join(parts))
    return out


def test_a_capture_cut_at_54_bytes_says_its_options_are_unknown(tmp_path: Path) -> None:
    cut = cut_to(CAPTURES / "window_limited" / "sender.pcap", tmp_path / "cut.pcap")
    (f,) = run_detectors(context(cut), [SnaplenTruncated])
    assert f.evidence["handshake_cut"] is True
    assert f.evidence["cut_fraction"] == 1.0
    assert "window scale" in f.summary
    # The handshake's window scale is unknown, not absent (RFC 7323: the option may lie past
    # the cut); the whole capture read as the lab made it has it known.
    cut_table = build_connections(read_capture(cut)).frame()
    whole = build_connections(read_capture(CAPTURES / "window_limited" / "sender.pcap")).frame()
    assert whole["ws_state"].iloc[0] == "known"
    assert cut_table["ws_state"].iloc[0] == "unknown"
    # Volumes come from the IP header: the cut changes none of them.
    for column in ("packets_a2b", "packets_b2a", "bytes_a2b", "bytes_b2a"):
        assert cut_table[column].iloc[0] == whole[column].iloc[0]


def test_a_capture_keeping_every_header_is_quiet() -> None:
    assert lab_findings("window_limited", SnaplenTruncated) == []
