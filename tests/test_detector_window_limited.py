"""window_limited: fires on the lab's small-window capture with numbers from its truth."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from scapy.layers.inet import TCP
from scapy.utils import rdpcap, wrpcap

from tests.helpers.lab_captures import CAPTURES, context, lab_context, lab_findings, truth
from tracekit.detectors import run_detectors
from tracekit.detectors._measure import packet_pair_rate_samples_bps
from tracekit.detectors.window_limited import WindowLimited
from tracekit.findings import Finding

# The tbf counts whole Ethernet frames (truth.json path.rate_counts); TCP moves 1448 payload
# bytes per 1514-byte frame on the lab's path.
PAYLOAD_PER_FRAME = 1448 / 1514


def findings(name: str, config: WindowLimited.Config | None = None) -> list[Finding]:
    if config is None:
        return lab_findings(name, WindowLimited)
    return run_detectors(lab_context(name), [WindowLimited], {"window_limited": config})


def test_fires_on_the_small_receive_buffer() -> None:
    t = truth("window_limited")
    (f,) = findings("window_limited")
    ev = f.evidence
    assert (f.conn, f.direction, ev["limited_by"]) == (0, "a2b", "receiver")
    # The window is part of the receive buffer the kernel granted (SO_RCVBUF doubled).
    assert 0 < ev["window_bytes"] <= t["receiver"]["so_rcvbuf_effective"]
    payload_rate = t["path"]["bottleneck_rate_bps"] * PAYLOAD_PER_FRAME
    assert ev["path_rate_bps"] == pytest.approx(payload_rate, rel=0.05)
    assert ev["rtt_s"] == pytest.approx(t["path"]["rtt_ms"] / 1000, abs=0.002)
    bdp = t["path"]["bdp_bytes"] * PAYLOAD_PER_FRAME
    assert ev["window_needed_bytes"] == pytest.approx(bdp, rel=0.07)
    # 65535 << 1 < about 179,000 bytes <= 65535 << 2.
    assert ev["window_scale_shift_needed"] == 2
    # The receiver announced shift 0 (truth: a 32 kB buffer needs none).
    assert ev["window_scale_shift_announced"] == 0
    # Goodput: the 1.5 MB transfer over its duration, bounded by one window per RTT.
    assert ev["achieved_rate_bps"] <= ev["window_rate_bps"] * 1.02
    assert ev["achieved_rate_bps"] < payload_rate / 3
    assert "SO_RCVBUF" in f.advice and "tcp_rmem" in f.advice


@pytest.mark.parametrize("name", ["clean", "slow_start_overrun", "network_drops", "paced_sender"])
def test_quiet_where_the_window_covers_the_path(name: str) -> None:
    assert "window_limited" in truth(name)["absent_labels"]
    assert findings(name) == []


def test_path_rate_from_ack_dispersion_on_a_busy_path() -> None:
    # On the clean capture the bottleneck is busy all along: every estimate is its rate.
    d = lab_context("clean").series.of(0, 0)
    payload_rate = truth("clean")["path"]["bottleneck_rate_bps"] * PAYLOAD_PER_FRAME
    samples = packet_pair_rate_samples_bps(d)
    assert samples.size > 50
    assert float(sorted(samples)[samples.size // 2]) == pytest.approx(payload_rate, rel=0.03)


def test_configured_path_rate_sets_the_window_needed() -> None:
    # Cooper et al.'s path: 135 Mbit/s; at the lab's 50 ms that is 843,750 bytes, shift 4.
    (f,) = findings("window_limited", WindowLimited.Config(path_rate_bps=135e6))
    ev = f.evidence
    assert ev["path_rate_source"] == "config"
    assert ev["window_needed_bytes"] == pytest.approx(135e6 * ev["rtt_s"] / 8)
    assert ev["window_scale_shift_needed"] == 4


def test_quiet_when_the_configured_path_is_slower_than_the_window() -> None:
    # 37,648 bytes per 50 ms is 6 Mbit/s: a 5 Mbit/s path is filled by that window.
    assert findings("window_limited", WindowLimited.Config(path_rate_bps=5e6)) == []


def test_quiet_when_the_window_scale_is_unknown(tmp_path: Path) -> None:
    # The same transfer without its handshake: the window field's scale is unknown (RFC 7323),
    # so no window claim is made.
    packets = [p for p in rdpcap(str(CAPTURES / "window_limited" / "sender.pcap"))]
    kept = [p for p in packets if not (p.haslayer(TCP) and p[TCP].flags & 0x02)]
    assert len(kept) == len(packets) - 2
    wrpcap(str(tmp_path / "no_syn.pcap"), kept)
    ctx = context(tmp_path / "no_syn.pcap")
    assert ctx.series.window_known[(0, 0)] is False
    assert run_detectors(ctx, [WindowLimited]) == []


def test_path_rate_from_the_arrivals_when_each_burst_gets_one_ack() -> None:
    # A reader draining a 16 kB buffer every 200 ms: each burst of a window is acknowledged
    # by one ACK, so no ACK spacing shows the path; the receiver's capture shows the burst
    # arriving at the bottleneck's rate (the lab's tbf, in payload bytes).
    from tracekit.capture import read_capture
    from tracekit.pipeline import analyze

    folder = Path(__file__).resolve().parents[1] / "fixtures" / "sweep" / "reader_all_200ms"
    t = json.loads((folder / "truth.json").read_text())
    doc = analyze(
        read_capture(folder / "sender.pcap.zst"), read_capture(folder / "receiver.pcap.zst")
    ).to_dict()
    (f,) = [x for x in doc["findings"] if x["kind"] == "window_limited"]
    ev = f["evidence"]
    assert (ev["limited_by"], ev["path_rate_source"]) == ("receiver", "arrival_dispersion")
    payload_rate = t["path"]["bottleneck_rate_bps"] * PAYLOAD_PER_FRAME
    assert ev["path_rate_bps"] == pytest.approx(payload_rate, rel=0.05)
    # The window offered is within the buffer the kernel granted; the path needs its BDP.
    assert 0 < ev["window_bytes"] <= t["receiver"]["so_rcvbuf_effective"]
    bdp = t["path"]["bdp_bytes"] * PAYLOAD_PER_FRAME
    assert ev["window_needed_bytes"] == pytest.approx(bdp, rel=0.07)
