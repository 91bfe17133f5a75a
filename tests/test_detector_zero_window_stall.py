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


def _stalled(
    tmp_path: Path,
    reopen_s: float,
    last_window: int = 0,
    rtt_s: float = 0.05,
    probes_s: tuple[float, ...] = (0.45, 0.95, 1.95),
) -> Path:
    """10 segments, all ACKed with a window of `last_window` (zero, or under the 1000-byte MSS)
    at 3.18 round trips; probes at `probes_s` (those before the reopening) answered with zero
    windows; the window reopens at `reopen_s`, 10 more segments follow. The round trip is
    `rtt_s` (each ACK one round trip after its segment, the segments 1/50 of it apart): with
    the default 50 ms, the last ACK comes at 0.159 s."""
    k = rtt_s / 0.05  # every time below is for a 50 ms round trip, scaled by k

    def seg(t: float, seq: int, size: int = 1000) -> object:
        return tcp(t, CLIENT, SERVER, 40000, 80, "A", seq, S + 1, size)

    def ack(t: float, ack_no: int, win: int = 65535) -> object:
        return tcp(t, SERVER, CLIENT, 80, 40000, "A", S + 1, ack_no, window=win)

    pkts = [
        tcp(0.00, CLIENT, SERVER, 40000, 80, "S", C, options=OPTS),
        tcp(0.05 * k, SERVER, CLIENT, 80, 40000, "SA", S, C + 1, options=OPTS),
        tcp(0.10 * k, CLIENT, SERVER, 40000, 80, "A", C + 1, S + 1),
    ]
    for i in range(10):
        pkts.append(seg((0.10 + i * 1e-3) * k, C + 1 + i * 1000))
        if i % 2:
            win = last_window if i == 9 else 20000
            pkts.append(ack((0.15 + i * 1e-3) * k, C + 1 + (i + 1) * 1000, win))
    una = C + 10_001
    # Linux's probe: an ACK one byte below the line.
    for t in (x for x in probes_s if x + rtt_s < reopen_s):
        pkts.append(seg(t, una - 1, 0))
        pkts.append(ack(t + rtt_s, una, 0))
    pkts.append(ack(reopen_s, una, 60000))
    for i in range(10):
        pkts.append(seg(reopen_s + (0.001 + i * 1e-3) * k, una + i * 1000))
    pkts.append(ack(reopen_s + 0.06 * k, una + 10_000))
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


def test_quiet_when_the_receiver_reopens_before_the_senders_persist_timer(
    tmp_path: Path,
) -> None:
    # A LAN of 20 us round trips: the reader is descheduled and the window stays shut for
    # 2 ms, a hundred round trips, but it reopens long before the sender's persist timer (one
    # retransmission timeout, 200 ms or more on Linux) would probe it: no probe, no stall.
    quiet = context(_stalled(tmp_path, reopen_s=2e-3, rtt_s=20e-6))
    assert run_detectors(quiet, [ZeroWindowStall]) == []
    # The same shut window with one probe in it: the sender had stopped on its persist timer.
    probed = context(_stalled(tmp_path, reopen_s=2e-3, rtt_s=20e-6, probes_s=(1e-3,)))
    (f,) = run_detectors(probed, [ZeroWindowStall])
    assert f.evidence["zero_window_probes_count"] == 1
    assert f.evidence["longest_stall_s"] == pytest.approx(2e-3 - 0.159 * 20e-6 / 0.05, rel=1e-3)


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
