"""network_drop: fires with the bottleneck's drop counter exactly, stays quiet on a clean path."""

from __future__ import annotations

import pytest

from tests.helpers.lab_captures import CAPTURES, lab_findings, lab_kind, truth
from tracekit.detectors.network_drop import NetworkDrop


@pytest.mark.parametrize("scenario", ["network_drops", "slow_start_overrun", "bursty_sender"])
def test_count_is_the_bottleneck_counter(scenario: str) -> None:
    found = lab_kind(scenario, "network_drop")
    drops = truth(scenario)["drops"]["network"]
    assert sum(f.evidence["network_drops_packets"] for f in found) == drops
    (f,) = found
    assert len(f.evidence["drop_times_s"]) == drops
    assert f.start_s == min(f.evidence["drop_times_s"])


@pytest.mark.parametrize("scenario", ["clean", "receiver_drops", "window_limited"])
def test_quiet_without_network_loss(scenario: str) -> None:
    found = lab_kind(scenario, "network_drop")
    assert truth(scenario)["drops"]["network"] == 0
    assert found == []


def test_quiet_with_one_capture() -> None:
    if not (CAPTURES / "network_drops").is_dir():
        pytest.skip("lab capture not made yet")
    assert lab_findings("network_drops", NetworkDrop) == []
