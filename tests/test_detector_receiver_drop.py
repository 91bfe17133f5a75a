"""receiver_drop: fires with the receiver's nftables counter exactly, quiet without it."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tracekit.pipeline import analyze_paths

LAB = Path(__file__).resolve().parent.parent / "fixtures" / "captures"


def _findings(scenario: str) -> tuple[list, dict]:  # type: ignore[type-arg]
    lab = LAB / scenario
    if not (lab / "truth.json").is_file():
        pytest.skip(f"lab capture {scenario} not made yet")
    truth = json.loads((lab / "truth.json").read_text())
    analysis = analyze_paths(lab / "sender.pcap", lab / "receiver.pcap")
    return [f for f in analysis.findings if f.kind == "receiver_drop"], truth


def test_count_is_the_nftables_counter() -> None:
    found, truth = _findings("receiver_drops")
    (f,) = found
    assert f.evidence["receiver_drops_packets"] == truth["drops"]["receiver"]
    # nftables drops every 100th data segment: about 1 in 100 of all transmissions.
    assert f.evidence["drop_ratio"] == pytest.approx(0.01, abs=0.002)


@pytest.mark.parametrize("scenario", ["clean", "network_drops", "slow_start_overrun"])
def test_quiet_when_the_host_kept_everything(scenario: str) -> None:
    found, truth = _findings(scenario)
    assert truth["drops"]["receiver"] == 0
    assert found == []
