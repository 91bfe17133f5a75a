"""tracekit.check.metrics: judged numbers against how crafted transfers were built, and
against the kernel counters in the lab captures' truth.json."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.helpers.check_crafting import transfer
from tests.helpers.crafting import CLIENT, SERVER, tcp, write
from tracekit.check.metrics import connection_metrics
from tracekit.inputs import CaptureInput, analyze_input, find_inputs

LAB = Path(__file__).parent.parent / "fixtures/captures"


def test_upload_numbers_from_construction(tmp_path: Path) -> None:
    sender = transfer(tmp_path / "s.pcap", segments=50, segment_bytes=1200, resend=[3, 4, 9])
    analysis, _ = analyze_input(CaptureInput("t", sender))
    (m,) = connection_metrics(analysis)
    assert m.direction == "a2b"
    assert m.bytes == (50 + 3) * 1200
    assert m.throughput_bps == pytest.approx(50 * 1200 * 8 / 1.0)
    assert (m.data_segments, m.retrans_segments) == (53, 3)
    assert m.retrans_ratio == pytest.approx(3 / 53)
    assert m.receiver_drops is None  # no receiver capture


def test_download_is_judged_on_b2a(tmp_path: Path) -> None:
    pkts = [
        tcp(1.0, CLIENT, SERVER, 40000, 80, "S", 0),
        tcp(1.1, SERVER, CLIENT, 80, 40000, "SA", 0, 1),
        tcp(1.2, CLIENT, SERVER, 40000, 80, "PA", 1, 1, 100),
        *[tcp(1.3 + i / 100, SERVER, CLIENT, 80, 40000, "A", 1 + i * 1000, 101, 1000)
          for i in range(20)],
        tcp(3.0, CLIENT, SERVER, 40000, 80, "A", 101, 20_001),
    ]  # fmt: skip
    analysis, _ = analyze_input(CaptureInput("d", write(tmp_path / "d.pcap", pkts)))
    (m,) = connection_metrics(analysis)
    assert (m.direction, m.bytes, m.data_segments) == ("b2a", 20_000, 20)
    assert m.throughput_bps == pytest.approx(20_000 * 8 / 2.0)


def test_receiver_drops_are_copies_the_receiver_saw_twice(tmp_path: Path) -> None:
    # Segments 4 and 7 reached the receiver's capture point, were dropped after it and resent
    # (its SACK blocks show the segments after them held without them); segment 2 was lost in
    # the network (the receiver first sees the retransmission).
    sender = transfer(tmp_path / "x.sender.pcap", resend=[2, 4, 7])
    transfer(
        tmp_path / "x.receiver.pcap", resend=[2, 4, 7], omit=[2], sack_acks=True, host_drops=[4, 7]
    )
    (inp,) = find_inputs([tmp_path])
    assert inp.sender == sender
    analysis, _ = analyze_input(inp)
    (m,) = connection_metrics(analysis)
    assert (m.retrans_segments, m.receiver_drops) == (3, 2)


def lab_inputs() -> list[CaptureInput]:
    if not LAB.is_dir():
        return []
    return [i for i in find_inputs([LAB]) if (i.sender.parent / "truth.json").is_file()]


@pytest.mark.parametrize("inp", lab_inputs(), ids=lambda i: Path(i.name).name)
def test_lab_captures_agree_with_kernel_counters(inp: CaptureInput) -> None:
    truth = json.loads((inp.sender.parent / "truth.json").read_text())
    analysis, _ = analyze_input(inp)
    flow = next(m for m in connection_metrics(analysis) if m.b == truth["flow"]["receiver"])
    assert flow.a == truth["flow"]["sender"]
    if truth["flow"]["protocol"] == "udp":
        sent = truth["udp"]["datagrams_sent"]
        assert (flow.proto, flow.data_segments) == ("udp", sent)
        assert flow.bytes == sent * truth["udp"]["datagram_bytes"]
        # Receiver drops of UDP are invisible in the captures (no resend): not counted.
        assert flow.receiver_drops is None
        return
    # Payload bytes sent, retransmissions included.
    assert flow.bytes == truth["flow"]["bytes"] + truth["retransmissions"]["bytes"]
    # tcpi_total_retrans counts every retransmitted segment, as the capture shows them.
    assert flow.retrans_segments == truth["retransmissions"]["segments"]
    # The nftables counter after the receiver's capture point.
    assert flow.receiver_drops == truth["drops"]["receiver"]
