"""capture_gaps: bytes the other end acknowledged that the capture never saw.

A capture that missed packets is made the way tcpdump's own drops make one: editcap deletes
frames from a real capture of the lab sweep. tshark reads the deleted frames from the original,
which gives the bytes and packets missed independently of tracekit.
"""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from fixtures.lab.sweep import decompress
from tracekit.capture import read_capture
from tracekit.detectors.capture_gaps import unseen_ranges
from tracekit.pipeline import analyze

SWEEP = Path(__file__).resolve().parents[1] / "fixtures" / "sweep"
KIND = "capture_gaps"
needs_tools = pytest.mark.skipif(
    not (shutil.which("tshark") and shutil.which("editcap")), reason="tshark and editcap"
)


def _gaps(sender: Path, receiver: Path | None = None) -> list[dict[str, Any]]:
    doc = analyze(read_capture(sender), read_capture(receiver) if receiver else None).to_dict()
    return [f for f in doc["findings"] if f["kind"] == KIND]


def _deleted(original: Path, frames: str, tmp_path: Path) -> tuple[Path, int, int]:
    """A copy of `original` without `frames` (editcap's ranges), and the deleted frames' data
    segments and payload bytes as tshark reads them in the original."""
    plain = tmp_path / original.name.removesuffix(".zst")
    plain.write_bytes(decompress(original))
    cut = tmp_path / f"cut-{plain.name}"
    subprocess.run(["editcap", str(plain), str(cut), *frames.split()], check=True)
    numbers = []
    for part in frames.split():
        low, _, high = part.partition("-")
        numbers.append(f"(frame.number >= {low} && frame.number <= {high or low})")
    select = f"({' || '.join(numbers)}) && tcp.len > 0"
    lengths = subprocess.run(
        ["tshark", "-r", str(plain), "-Y", select, "-T", "fields", "-e", "tcp.len"],
        capture_output=True,
        text=True,
        check=True,
    ).stdout.split()
    return cut, len(lengths), sum(int(x) for x in lengths)


@needs_tools
def test_frames_the_sender_capture_dropped_are_counted_to_the_byte(tmp_path: Path) -> None:
    folder = SWEEP / "base"
    cut, segments, payload = _deleted(
        folder / "sender.pcap.zst", "500-510 2000-2030 4000", tmp_path
    )
    assert segments > 0
    (f,) = _gaps(cut)
    assert f["direction"] == "a2b" and f["severity"] == "warning"
    assert f["evidence"]["unseen_bytes"] == payload
    # With the receiver's capture whole, the sender capture's own misses are still its gaps.
    (f,) = _gaps(cut, folder / "receiver.pcap.zst")
    assert f["evidence"]["unseen_bytes"] == payload


@needs_tools
def test_frames_the_receiver_capture_dropped_are_counted_alone_and_merged(tmp_path: Path) -> None:
    folder = SWEEP / "base"
    cut, segments, payload = _deleted(folder / "receiver.pcap.zst", "700-720 3000", tmp_path)
    assert segments > 0
    (alone,) = _gaps(cut)
    assert alone["evidence"]["unseen_bytes"] == payload
    (merged,) = _gaps(folder / "sender.pcap.zst", cut)
    assert merged["evidence"]["receiver_capture_missed_packets"] == segments
    assert merged["evidence"]["unseen_bytes"] == 0  # the sender's capture missed nothing


@pytest.mark.parametrize(
    "name",
    [
        "base",
        # Losses on the path, in the receiving host and in the sending host's own queue: each
        # resend fills its range.
        "overrun_reno_30m_50ms",
        "receiver_drops_30m_50ms",
        "sender_host_drops_20m",
        # No handshake, cut headers, merged receiver packets, data both ways.
        "base_midstream",
        "base_snap54",
        "gro_receiver_50m",
        "bidir_reverse_drops",
    ],
)
def test_quiet_where_the_captures_missed_nothing(name: str) -> None:
    folder = SWEEP / name
    sender, receiver = folder / "sender.pcap.zst", folder / "receiver.pcap.zst"
    assert _gaps(sender) == []
    assert _gaps(receiver) == []
    assert _gaps(sender, receiver) == []


def test_the_fin_and_the_bytes_before_the_first_seen_are_no_gap() -> None:
    seq = np.array([1001, 1, 2001], dtype=np.int64)
    end = np.array([2001, 1001, 3001], dtype=np.int64)
    start, stop = unseen_ranges(seq, end, 3002)  # the ACK of the FIN after byte 3000
    assert start.size == 0 and stop.size == 0
    start, stop = unseen_ranges(seq[[0, 2]], end[[0, 2]], 3002)  # a capture from byte 1001
    assert start.size == 0
    start, stop = unseen_ranges(seq[[1, 2]], end[[1, 2]], 4001)  # a gap and a missed tail
    assert start.tolist() == [1001, 3001] and stop.tolist() == [2001, 4001]


def test_the_ranges_are_the_bytes_no_segment_covered() -> None:
    # Against a byte-by-byte account: segments in any order (resends, reordering, overlaps, a
    # capture that starts late), every byte below the ACK line that none of them covers.
    rng = np.random.default_rng(3)
    for _ in range(300):
        n = int(rng.integers(1, 40))
        seq = rng.integers(1, 400, n).astype(np.int64)
        end = seq + rng.integers(1, 60, n)
        acked = int(rng.integers(1, 520))
        covered = np.zeros(600, bool)
        for a, b in zip(seq, end, strict=True):
            covered[a:b] = True
        first, high = int(seq.min()), int(end.max())
        expected = ~covered
        expected[:first] = False
        expected[acked:] = False
        if acked - high <= 1:  # the FIN's sequence number after the last byte
            expected[high:] = False
        start, stop = unseen_ranges(seq, end, acked)
        got = np.zeros(600, bool)
        for a, b in zip(start, stop, strict=True):
            got[a:b] = True
        assert (got == expected).all()
        assert (np.diff(start) > 0).all() and (stop > start).all()
