"""rate_limit_cause: T-RAT labels per phase on the lab captures, checked against their build."""

from __future__ import annotations

import itertools
from pathlib import Path

import pytest
from crafting import CLIENT, SERVER, tcp, write
from lab_captures import context, lab_context, lab_findings, truth

from tracekit.detectors import run_detectors
from tracekit.detectors.rate_limit_cause import LABELS, RateLimitCause
from tracekit.findings import Finding, Severity


def phases(name: str) -> list[Finding]:
    return lab_findings(name, RateLimitCause)


def longest(found: list[Finding]) -> Finding:
    return max(found, key=lambda f: f.end_s - f.start_s)


def test_phases_tile_the_transfer_and_are_informational() -> None:
    found = phases("slow_start_overrun")
    assert all(f.severity is Severity.INFO and f.direction == "a2b" for f in found)
    assert all(f.evidence["cause"] in LABELS for f in found)
    # Consecutive phases meet, and no two neighbours share a label (they would have merged).
    for a, b in itertools.pairwise(found):
        assert a.end_s == pytest.approx(b.start_s)
        assert a.evidence["cause"] != b.evidence["cause"]


def test_small_receive_buffer_is_receiver_window() -> None:
    found = phases("window_limited")
    f = longest(found)
    assert f.evidence["cause"] == "receiver_window"
    # Nearly the whole transfer: the window is reached within the first round trips.
    total = found[-1].end_s - found[0].start_s
    assert f.end_s - f.start_s > 0.8 * total
    assert (
        f.evidence["window_max_bytes"] <= truth("window_limited")["receiver"]["so_rcvbuf_effective"]
    )


def test_slow_reader_is_receiver_window() -> None:
    assert longest(phases("window_oscillation")).evidence["cause"] == "receiver_window"


def test_buffer_overrun_is_slow_start_then_congestion() -> None:
    t = truth("slow_start_overrun")
    assert t["drops"]["network"] > 0
    found = phases("slow_start_overrun")
    assert found[0].evidence["cause"] == "slow_start"
    congested = [f for f in found if f.evidence["cause"] == "congestion"]
    # Every retransmission falls in a congestion phase.
    resent = sum(f.evidence["retransmitted_segments"] for f in congested)
    assert resent == t["retransmissions"]["segments"]


def test_paced_writer_is_application_limited_at_its_write_rate() -> None:
    t = truth("paced_sender")
    f = longest(phases("paced_sender"))
    assert f.evidence["cause"] == "application"
    writes_bps = t["sender"]["write_chunk_bytes"] * 8 / (t["sender"]["write_interval_ms"] / 1e3)
    assert f.evidence["rate_bps"] == pytest.approx(writes_bps, rel=0.1)
    assert f.evidence["retransmitted_segments"] == 0


def test_quiet_without_round_trips(tmp_path: Path) -> None:
    # Data one way and no ACK at all: no RTT, so no phase can be sized or judged.
    packets = [tcp(i * 0.001, CLIENT, SERVER, 40000, 80, "A", 1 + 1000 * i, 7, 1000)
               for i in range(40)]  # fmt: skip
    ctx = context(write(tmp_path / "oneway.pcap", packets))
    assert run_detectors(ctx, [RateLimitCause]) == []


def test_windows_widen_so_a_direction_has_few_phases() -> None:
    # The overrun capture has several phases at 4 RTTs a window (slow start, congestion,
    # bandwidth...); allowed two windows, it can hold two phases at most, still tiling it.
    ctx = lab_context("slow_start_overrun")
    wide = run_detectors(
        ctx, [RateLimitCause], {"rate_limit_cause": RateLimitCause.Config(max_windows_count=2)}
    )
    assert len(phases("slow_start_overrun")) > 2
    assert 1 <= len(wide) <= 2
    assert wide[0].start_s == pytest.approx(phases("slow_start_overrun")[0].start_s)
