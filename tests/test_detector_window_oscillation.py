"""window_oscillation: start/stop mode on the lab's slow reader; crafted zero windows unscaled."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest

from tests.helpers.crafting import CLIENT, SERVER, tcp, write
from tests.helpers.lab_captures import CAPTURES, context, lab_findings, truth
from tracekit.detectors import run_detectors
from tracekit.detectors.window_oscillation import WindowOscillation


def test_fires_on_the_slow_reader() -> None:
    t = truth("window_oscillation")
    (f,) = lab_findings("window_oscillation", WindowOscillation)
    ev = f.evidence
    assert (f.conn, f.direction) == (0, "a2b")
    # The reader empties the buffer every read_interval_ms: that is the period.
    period_s = t["receiver"]["read_interval_ms"] / 1000
    assert ev["period_s"] == pytest.approx(period_s, rel=0.05)
    # One cycle per read while data remained: the transfer lasted about cycles x period.
    duration_s = f.end_s - f.start_s
    assert ev["cycles_count"] == pytest.approx(duration_s / period_s, abs=2)
    assert ev["cycles_count"] >= 10
    # The window offered never exceeds the buffer the kernel granted.
    assert 0 < ev["largest_window_bytes"] <= t["receiver"]["so_rcvbuf_effective"]
    # Nearly all the time is spent waiting for the reader (one burst per 200 ms).
    assert ev["stopped_fraction"] > 0.8
    # All 400 kB went out in those bursts: at most one window per period.
    assert ev["rate_bps"] <= ev["largest_window_bytes"] * 8 / period_s * 1.1
    assert "SO_RCVBUF" in f.advice


@pytest.mark.skipif(not shutil.which("tshark"), reason="tshark not installed")
def test_zero_windows_agree_with_tshark() -> None:
    out = subprocess.run(
        ["tshark", "-r", str(CAPTURES / "window_oscillation" / "sender.pcap"), "-Y",
         "tcp.analysis.zero_window", "-T", "fields", "-e", "frame.number"],
        capture_output=True, text=True, check=True,
    ).stdout  # fmt: skip
    (f,) = lab_findings("window_oscillation", WindowOscillation)
    assert f.evidence["zero_window_count"] == len(out.split()) > 0


@pytest.mark.parametrize(
    "name", ["clean", "window_limited", "slow_start_overrun", "network_drops", "paced_sender"]
)
def test_quiet_where_the_window_never_swings(name: str) -> None:
    assert "window_oscillation" in truth(name)["absent_labels"]
    assert lab_findings(name, WindowOscillation) == []


# --- crafted without a handshake: the window scale is unknown, only zeros count -------------


def flow(zero: bool, cycles: int = 5) -> list[object]:
    """A capture from mid-transfer: bursts of 8 segments, each ACKed with a closed window
    (zero=True) or an open one, reopened 200 ms later."""
    packets: list[object] = []
    seq = 1
    for c in range(cycles):
        t = c * 0.3
        for i in range(8):
            packets.append(
                tcp(t + i * 1e-4, CLIENT, SERVER, 40000, 80, "A", seq, 7, 1000)
            )  # fmt: skip
            seq += 1000
        packets.append(tcp(t + 0.05, SERVER, CLIENT, 80, 40000, "A", 7, seq, 0, None,
                           0 if zero else 8000))  # fmt: skip
        packets.append(tcp(t + 0.25, SERVER, CLIENT, 80, 40000, "A", 7, seq, 0, None, 8000))
    return packets


def test_crafted_zero_windows_without_handshake(tmp_path: Path) -> None:
    ctx = context(write(tmp_path / "zero.pcap", flow(zero=True)))
    assert ctx.series.window_known[(0, 0)] is False
    (f,) = run_detectors(ctx, [WindowOscillation])
    ev = f.evidence
    # Built with 5 zero windows, each reopened 200 ms later, 300 ms apart.
    assert ev["window_scale_known"] is False
    assert ev["zero_window_count"] == 5
    assert ev["cycles_count"] == 5
    assert ev["period_s"] == pytest.approx(0.3)
    assert ev["stopped_s"] == pytest.approx(5 * 0.2)


def test_crafted_open_windows_without_handshake_are_quiet(tmp_path: Path) -> None:
    ctx = context(write(tmp_path / "open.pcap", flow(zero=False)))
    assert run_detectors(ctx, [WindowOscillation]) == []


def test_fewer_cycles_than_the_threshold_are_quiet(tmp_path: Path) -> None:
    ctx = context(write(tmp_path / "two.pcap", flow(zero=True, cycles=2)))
    assert run_detectors(ctx, [WindowOscillation]) == []
