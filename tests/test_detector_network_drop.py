"""network_drop: fires with the bottleneck's drop counter exactly, stays quiet on a clean path."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tracekit.pipeline import analyze_paths

LAB = Path(__file__).resolve().parent.parent / "fixtures" / "captures"


def _findings(scenario: str, kind: str) -> tuple[list, dict]:  # type: ignore[type-arg]
    lab = LAB / scenario
    if not (lab / "truth.json").is_file():
        pytest.skip(f"lab capture {scenario} not made yet")
    truth = json.loads((lab / "truth.json").read_text())
    analysis = analyze_paths(lab / "sender.pcap", lab / "receiver.pcap")
    return [f for f in analysis.findings if f.kind == kind], truth


@pytest.mark.parametrize("scenario", ["network_drops", "slow_start_overrun", "bursty_sender"])
def test_count_is_the_bottleneck_counter(scenario: str) -> None:
    found, truth = _findings(scenario, "network_drop")
    assert sum(f.evidence["network_drops_packets"] for f in found) == truth["drops"]["network"]
    (f,) = found
    assert len(f.evidence["drop_times_s"]) == truth["drops"]["network"]
    assert f.start_s == min(f.evidence["drop_times_s"])


@pytest.mark.parametrize("scenario", ["clean", "receiver_drops", "window_limited"])
def test_quiet_without_network_loss(scenario: str) -> None:
    found, truth = _findings(scenario, "network_drop")
    assert truth["drops"]["network"] == 0
    assert found == []


def test_quiet_with_one_capture() -> None:
    lab = LAB / "network_drops"
    if not lab.is_dir():
        pytest.skip("lab capture not made yet")
    assert not [f for f in analyze_paths(lab / "sender.pcap").findings if f.kind == "network_drop"]
