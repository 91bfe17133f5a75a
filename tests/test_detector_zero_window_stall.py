"""zero_window_stall: a window shut for many round trips; quiet on start/stop and open windows."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.helpers.crafting import CLIENT, SERVER, tcp, write
from tests.helpers.lab_captures import context, lab_findings
from tracekit.capture import read_capture
from tracekit.detectors import run_detectors
from tracekit.detectors.zero_window_stall import ZeroWindowStall
from tracekit.pipeline import analyze

C, S = 1000, 5000  # ISNs
OPTS = [("MSS", 1000), ("SAckOK", b""), ("Timestamp", (1, 0))]


def _stalled(tmp_path: Path, reopen_s: float, last_window: int = 0) -> Path:
    """10 segments, all ACKed with a window of `last_window` (zero, or under the 1000-byte MSS)
    at 0.159 s; probes at 0.45, 0.95, 1.95 s (those before the reopening) answered with zero
    windows; the window reopens at `reopen_s`, 10 more segments follow. The round trip is 50 ms
    (each ACK 50 ms after its segment)."""
    pkts = [
        tcp(0.00, CLIENT, SERVER, 40000, 80, "S", C, options=OPTS),
        tcp(0.05, SERVER, CLIENT, 80, 40000, "SA", S, C + 1, options=OPTS),
        tcp(0.10, CLIENT, SERVER, 40000, 80, "A", C + 1, S + 1),
    ]
    for i in range(10):
        pkts.append(
            tcp(0.10 + i * 1e-3, CLIENT, SERVER, 40000, 80, "A", C + 1 + i * 1000, S + 1, 1000)
        )
        if i % 2:
            win = last_window if i == 9 else 20000
            ack = C + 1 + (i + 1) * 1000
            pkts.append(
                tcp(0.15 + i * 1e-3, SERVER, CLIENT, 80, 40000, "A", S + 1, ack, window=win)
            )
    una = C + 10_001
    # Linux's probe: an ACK one byte below the line.
    for t in (x for x in (0.45, 0.95, 1.95) if x + 0.05 < reopen_s):
        pkts.append(tcp(t, CLIENT, SERVER, 40000, 80, "A", una - 1, S + 1))
        pkts.append(tcp(t + 0.05, SERVER, CLIENT, 80, 40000, "A", S + 1, una, window=0))
    pkts.append(tcp(reopen_s, SERVER, CLIENT, 80, 40000, "A", S + 1, una, window=60000))
    for i in range(10):
        seq = una + i * 1000
        pkts.append(
            tcp(reopen_s + 0.001 + i * 1e-3, CLIENT, SERVER, 40000, 80, "A", seq, S + 1, 1000)
        )
    pkts.append(tcp(reopen_s + 0.06, SERVER, CLIENT, 80, 40000, "A", S + 1, una + 10_000))
    pkts.sort(key=lambda p: p.time)
    return write(tmp_path / "stall.pcap", pkts)


def test_a_long_stall_with_probes(tmp_path: Path) -> None:
    ctx = context(_stalled(tmp_path, reopen_s=2.5))
    (f,) = run_detectors(ctx, [ZeroWindowStall])
    assert f.direction == "a2b"
    # From the zero window at 0.159 s to the reopening at 2.5 s, by construction.
    assert f.evidence["longest_stall_s"] == pytest.approx(2.5 - 0.159, abs=1e-6)
    assert f.evidence["stalls_count"] == 1
    assert f.evidence["zero_window_probes_count"] == 3
    assert f.evidence["longest_stall_rtts"] == pytest.approx((2.5 - 0.159) / 0.05, rel=0.05)
    assert "RTTs" in f.summary and "probes" in f.summary


def test_a_stall_starts_where_the_window_left_no_room_for_a_segment(tmp_path: Path) -> None:
    # The receiver offers the last 500 bytes of its old window (under one 1000-byte segment)
    # at 0.159 s and zero only from the first probe's answer at 0.5 s: the sender stood still
    # from 0.159 s.
    ctx = context(_stalled(tmp_path, reopen_s=2.5, last_window=500))
    (f,) = run_detectors(ctx, [ZeroWindowStall])
    assert f.evidence["longest_stall_s"] == pytest.approx(2.5 - 0.159, abs=1e-6)
    assert f.evidence["stalls_count"] == 1


def test_quiet_when_the_window_reopens_within_a_few_round_trips(tmp_path: Path) -> None:
    # Shut for 0.1 s: two round trips of 50 ms, the ACK clock's hiccup, not a stall.
    ctx = context(_stalled(tmp_path, reopen_s=0.26))
    assert run_detectors(ctx, [ZeroWindowStall]) == []


@pytest.mark.parametrize("name", ["clean", "window_limited", "slow_start_overrun"])
def test_quiet_on_open_windows(name: str) -> None:
    assert lab_findings(name, ZeroWindowStall) == []


def test_quiet_where_a_lan_reader_dips_under_an_offloaded_segment() -> None:
    # A LAN veth with offloads and 65,535-byte windows: windows under one 64 kB super-segment
    # while whole wire segments still land, and a zero window of microseconds; no stall.
    folder = Path(__file__).resolve().parents[1] / "fixtures" / "sweep" / "lan_wscale_off_on"
    assert "zero_window_stall" in json.loads((folder / "truth.json").read_text())["absent_labels"]
    doc = analyze(
        read_capture(folder / "sender.pcap.zst"), read_capture(folder / "receiver.pcap.zst")
    ).to_dict()
    assert not [f for f in doc["findings"] if f["kind"] == "zero_window_stall"]


def test_quiet_on_a_reader_whose_cycle_spans_several_round_trips() -> None:
    # The lab's reader takes 16 kB every 24.5 ms from a 28 kB buffer on a 2.8 ms path: each
    # cycle the window stays shut for a few round trips, on the reader's rhythm. That is
    # start/stop, and the lab rules a stall out.
    folder = Path(__file__).resolve().parents[1] / "fixtures" / "sweep" / "reader_16k_25ms_3ms"
    truth = json.loads((folder / "truth.json").read_text())
    assert "zero_window_stall" in truth["absent_labels"]
    assert truth["receiver"]["read_interval_ms"] > 4 * truth["path"]["rtt_ms"]
    doc = analyze(
        read_capture(folder / "sender.pcap.zst"), read_capture(folder / "receiver.pcap.zst")
    ).to_dict()
    assert not [f for f in doc["findings"] if f["kind"] == "zero_window_stall"]
