"""capture_holes: bytes a capture saw first after later bytes, placed by the handshake.

The lab's truth: `sender_host_drops_20m` shapes the sender's own NIC (a 20 Mbit/s tbf three
frames deep, before the sender's capture point); its tbf counts the drops and TCP_INFO the
segments TCP resent. On the sweep's drop rows the receiver's capture alone holds a hole for
each first copy the bottleneck dropped, which tshark flags independently. Crafted captures
give the cases without a handshake and a reordering, by construction.
"""

from __future__ import annotations

import json
import shutil
import subprocess
from pathlib import Path
from typing import Any

import pytest

from tests.helpers.crafting import c2s, s2c, write
from tracekit.capture import read_capture
from tracekit.pipeline import analyze

SWEEP = Path(__file__).resolve().parents[1] / "fixtures" / "sweep"
KIND = "capture_holes"
needs_tshark = pytest.mark.skipif(not shutil.which("tshark"), reason="tshark not installed")


def _holes(path: Path) -> list[dict[str, Any]]:
    doc = analyze(read_capture(path)).to_dict()
    return [f for f in doc["findings"] if f["kind"] == KIND]


def _truth(name: str) -> dict[str, Any]:
    return json.loads((SWEEP / name / "truth.json").read_text())


def test_drops_in_the_sending_host_are_resends_the_capture_shows_as_holes() -> None:
    truth = _truth("sender_host_drops_20m")
    drops = truth["drops"]
    # The host's own shaper dropped; nothing else did: every resend fills such a hole.
    assert drops["sender_nic"] > 0 and drops["network"] == 0 and drops["receiver"] == 0
    (f,) = _holes(SWEEP / "sender_host_drops_20m" / "sender.pcap.zst")
    ev = f["evidence"]
    assert f["direction"] == "a2b" and f["severity"] == "warning"
    assert ev["capture_point"] == "sender"
    assert ev["resent_segments_count"] == truth["retransmissions"]["segments"]
    assert ev["hole_bytes"] == truth["retransmissions"]["bytes"]
    # A resend follows news of the loss: a round trip after the later bytes, at least.
    assert ev["fill_delay_median_rtts"] >= 1.0
    assert ev["rtt_s"] == pytest.approx(truth["path"]["rtt_ms"] / 1000, rel=0.05)


@needs_tshark
@pytest.mark.parametrize(
    "name", ["overrun_reno_30m_50ms", "buffer_reno_1bdp", "bbr_0.1bdp", "initcwnd40_reno_200ms"]
)
def test_at_the_receiver_each_hole_is_a_first_copy_lost_on_the_path(name: str) -> None:
    truth = _truth(name)
    capture = next((SWEEP / name).glob("receiver.pcap*"))
    (f,) = _holes(capture)
    ev = f["evidence"]
    assert ev["capture_point"] == "receiver" and f["severity"] == "info"
    # tshark flags each segment that fills a hole as a retransmission or out of order; none
    # of these runs delivered a segment twice, so that is one frame per hole.
    done = subprocess.run(
        ["tshark", "-r", str(capture), "-Y", "tcp.analysis.retransmission || "
         "tcp.analysis.out_of_order", "-T", "fields", "-e", "frame.number"],
        capture_output=True, text=True, check=True,
    )  # fmt: skip
    assert ev["hole_segments_count"] == len(done.stdout.split())
    # Each hole is a dropped first copy; the tbf also counts dropped resends.
    assert 0 < ev["hole_segments_count"] <= truth["drops"]["network"]


@pytest.mark.parametrize("name", ["overrun_reno_30m_50ms", "bbr_0.1bdp", "receiver_drops_30m_50ms"])
def test_quiet_on_a_sender_capture_whose_host_dropped_nothing(name: str) -> None:
    assert _truth(name)["drops"]["sender_nic"] == 0
    assert _holes(next((SWEEP / name).glob("sender.pcap*"))) == []


def _midstream(fill_after_s: float) -> list[object]:
    """Ten 1000-byte segments from mid-connection (no handshake), the third missing from the
    capture, ACKed 50 ms later; the third's bytes come `fill_after_s` after the fourth's."""
    pkts: list[object] = []
    for i in range(10):
        if i != 2:
            pkts.append(c2s(0.001 * i, "A", 1 + 1000 * i, 1000))
    pkts.append(c2s(0.003 + fill_after_s, "A", 2001, 1000))
    for i in range(10):
        pkts.append(s2c(0.05 + 0.001 * i, 1 + 1000 * min(i + 1, 2)))
    pkts.sort(key=lambda p: p.time)  # type: ignore[attr-defined]
    return pkts


def test_without_the_handshake_the_capture_point_is_unknown(tmp_path: Path) -> None:
    (f,) = _holes(write(tmp_path / "mid.pcap", _midstream(0.055)))
    ev = f["evidence"]
    assert ev["capture_point"] == "unknown"
    assert ev["hole_segments_count"] == 1 and ev["hole_bytes"] == 1000
    assert ev["resent_segments_count"] == 1
    assert "cannot tell where the capture was taken" in f["explanation"]


def test_a_fill_sooner_than_half_a_round_trip_is_reordering(tmp_path: Path) -> None:
    # 0.5 ms after the later bytes, on a 50 ms round trip: no news of a loss came back yet.
    (f,) = _holes(write(tmp_path / "reorder.pcap", _midstream(0.0005)))
    ev = f["evidence"]
    assert ev["reordered_segments_count"] == 1 and ev["resent_segments_count"] == 0
    assert "reordered" in f["explanation"]
