"""Numbered UDP streams: lost numbers against the lab's truth, eq. 1's buffer, fig. 2's table."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
from click.testing import CliRunner
from scapy.layers.inet import IP, UDP
from scapy.layers.l2 import Ether
from scapy.utils import wrpcap
from tracekit.cli.main import cli

from tracekit.capture import read_capture
from tracekit.connections import build_connections
from tracekit.errors import TracekitError
from tracekit.merge.udpstream import Layout, udp_streams

LAB = Path(__file__).resolve().parent.parent / "fixtures" / "captures" / "udp_loss"


def _lab() -> tuple[Path, Path, dict]:  # type: ignore[type-arg]
    if not (LAB / "truth.json").is_file():
        pytest.skip("lab capture udp_loss not made yet")
    return LAB / "sender.pcap", LAB / "receiver.pcap", json.loads((LAB / "truth.json").read_text())


def test_lost_numbers_are_the_truth() -> None:
    sp, rp, truth = _lab()
    (stream,) = udp_streams(
        build_connections(read_capture(sp)), build_connections(read_capture(rp)), Layout(0, 4)
    )
    sent = truth["udp"]["datagrams_sent"]
    app = np.zeros(sent, dtype=bool)
    for lo, hi in truth["udp"]["received_by_application"]:
        app[lo : hi + 1] = True
    not_delivered = set(np.flatnonzero(~app).tolist())
    lost = set(stream.lost.tolist())
    # The capture points see the network's losses; nftables then drops inside the receiver
    # (after its capture point) drops.receiver datagrams of the receiver_drop_block.
    assert len(lost) == truth["drops"]["network"]
    assert lost <= not_delivered
    in_host = not_delivered - lost
    first, last = truth["impairment"]["receiver_drop_block"]
    assert len(in_host) == truth["drops"]["receiver"]
    assert all(first <= n <= last for n in in_host)
    assert stream.sent_count == sent
    # 45 Mbit/s into 30: about one in three lost once the queue is full (f / s = 3 / 2).
    assert stream.rate_ratio == pytest.approx(1.5, abs=0.05)
    # The queue the last datagram before the first loss found is the tbf's 500 kB limit. (Eq. 1
    # itself, stream.buffer_bytes, reads low here: the lab's relay holds packets back for
    # 10-40 ms between the sender's capture point and the bottleneck, so the rate f into the
    # queue is not the rate the sender's capture shows; docs/two-vantage.md.)
    buffer = truth["path"]["bottleneck_buffer_bytes"]
    assert stream.queue_at_first_loss_bytes == pytest.approx(buffer, rel=0.03)
    assert stream.buffer_bytes is not None and 0 < stream.buffer_bytes <= buffer * 1.03
    lost_rows = stream.arrivals[stream.arrivals["lost"]]
    assert set(lost_rows["number"].tolist()) == lost
    assert lost_rows["arrival_s"].isna().all()
    assert stream.first_loss_index == min(lost)


def _udp(path: Path, numbers: list[int], width: int = 4) -> Path:
    pkts = []
    for i, n in enumerate(numbers):
        p = Ether() / IP(src="10.2.0.1", dst="10.2.0.2") / UDP(sport=9000, dport=9001)
        p = p / (n.to_bytes(width, "big") + b"\0" * 100)
        p.time = 1.0 + 1e-4 * i
        pkts.append(p)
    wrpcap(str(path), pkts)
    return path


def test_one_capture_counts_gaps_and_blocks(tmp_path: Path) -> None:
    # Numbers 0..199: every third lost from 60 on, and a block of 20 at 150..169.
    numbers = [n for n in range(200) if not (n >= 60 and n % 3 == 0) and not 150 <= n < 170]
    (stream,) = udp_streams(build_connections(read_capture(_udp(tmp_path / "u.pcap", numbers))))
    assert stream.first_loss_index == 60
    assert stream.blocks == ((150, 170),) or stream.blocks == ((150, 169),)
    assert stream.loss_ratio_after_first == pytest.approx(1 / 3, abs=0.01)
    assert stream.received_count == len(numbers)


def test_layout() -> None:
    head = np.array([0x0000000100000002], dtype=np.uint64)
    assert Layout().numbers(head).tolist() == [1]
    assert Layout(4, 4).numbers(head).tolist() == [2]
    assert Layout(0, 8).numbers(head).tolist() == [0x100000002]
    with pytest.raises(TracekitError):
        Layout(6, 4)


def test_analyze_a_udp_only_capture(tmp_path: Path) -> None:
    path = _udp(tmp_path / "u.pcap", [n for n in range(100) if n != 50], width=8)
    ok = CliRunner().invoke(cli, ["analyze", str(path), "--udp-seq-width", "8"])
    assert ok.exit_code == 0, ok.output
    assert "99 of 100 received, first loss at index 50" in ok.stdout
    # Read as 4-byte numbers these are all 0: no numbered stream, no TCP: one line, exit 2.
    bad = CliRunner().invoke(cli, ["analyze", str(path)])
    assert bad.exit_code == 2
    assert "no TCP packets and no numbered UDP stream" in bad.output


def test_analyze_says_a_one_way_offset_holds_the_delay() -> None:
    """One direction only: the offset cannot be told from the one-way delay, and says so.
    Both captures ran on one host's clock, so the offset is the lab's forward delay."""
    sp, rp, truth = _lab()
    result = CliRunner().invoke(cli, ["analyze", str(sp), "--receiver", str(rp)])
    assert result.exit_code == 0, result.output
    (line,) = [ln for ln in result.output.splitlines() if ln.startswith("receiver clock:")]
    assert "one direction only" in line
    assert "disagree" not in line
    offset_s = float(line.split("offset ")[1].split(" s,")[0])
    assert offset_s == pytest.approx(truth["path"]["one_way_delay_fwd_ms"] / 1e3, abs=1e-3)
