"""receiver_coalescing: fires on arrivals bunched tighter than departures, quiet on a real path."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.helpers.exchange import Ack, Seg, exchange
from tests.helpers.lab_captures import lab_kind
from tracekit.pipeline import analyze_files


def test_bunched_arrivals_fire(tmp_path: Path) -> None:
    # 64 segments leave 200 us apart; the receiver's host hands them over in bunches of 8,
    # 2 us apart (each held back until the 8th of its bunch arrives), like fig. 7.
    segs = []
    for i in range(64):
        t = 0.1 + 200e-6 * i
        hold = (7 - i % 8) * 200e-6 - (7 - i % 8) * 2e-6
        segs.append(Seg(t, 1 + 1000 * i, 1000, 10 + i, late=hold))
    acks = [Ack(0.1 + 0.03 + 0.0016 * k, 8001 + 8000 * k, 100 + k) for k in range(8)]
    analysis = analyze_files(*exchange(tmp_path, segs, acks))
    (f,) = [f for f in analysis.findings if f.kind == "receiver_coalescing"]
    assert f.evidence["bunched_packets"] == 56  # 7 of each 8 gaps
    assert f.evidence["median_bunch_packets"] == 8
    assert f.evidence["median_receiver_gap_s"] == pytest.approx(2e-6, abs=1e-6)


def test_spaced_arrivals_are_quiet(tmp_path: Path) -> None:
    segs = [Seg(0.1 + 200e-6 * i, 1 + 1000 * i, 1000, 10 + i) for i in range(64)]
    acks = [Ack(0.1 + 0.03 + 0.0016 * k, 8001 + 8000 * k, 100 + k) for k in range(8)]
    analysis = analyze_files(*exchange(tmp_path, segs, acks))
    assert not [f for f in analysis.findings if f.kind == "receiver_coalescing"]


@pytest.mark.parametrize("scenario", ["network_drops", "receiver_drops"])
def test_quiet_on_the_lab_path(scenario: str) -> None:
    # The lab's bottleneck only widens spacing (veth, no NIC coalescing): no finding.
    assert lab_kind(scenario, "receiver_coalescing") == []
