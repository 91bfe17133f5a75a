"""receiver_drop: fires with the receiver's nftables counter exactly, quiet without it."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.helpers.lab_captures import lab_kind, truth


def test_count_is_the_nftables_counter() -> None:
    (f,) = lab_kind("receiver_drops", "receiver_drop")
    assert f.evidence["receiver_drops_packets"] == truth("receiver_drops")["drops"]["receiver"]
    # nftables drops every 100th data segment: about 1 in 100 of all transmissions.
    assert f.evidence["drop_ratio"] == pytest.approx(0.01, abs=0.002)


@pytest.mark.parametrize("scenario", ["clean", "network_drops", "slow_start_overrun"])
def test_quiet_when_the_host_kept_everything(scenario: str) -> None:
    found = lab_kind(scenario, "receiver_drop")
    assert truth(scenario)["drops"]["receiver"] == 0
    assert found == []


@pytest.mark.parametrize("scenario", ["lan_offloads_on_receiver_drops", "lan_stall"])
def test_the_count_is_the_counter_with_super_segments_and_held_acks(scenario: str) -> None:
    # With offloads on the sender resends a dropped super-segment in pieces; behind a stalled
    # reader the receiver holds its ACK until a tail-loss probe's copy, which it reports as
    # a duplicate (D-SACK). Either way the count is the receiver's nftables counter.
    from tracekit.capture import read_capture
    from tracekit.pipeline import analyze

    folder = Path(__file__).resolve().parents[1] / "fixtures" / "sweep" / scenario
    counter = json.loads((folder / "truth.json").read_text())["drops"]["receiver"]
    doc = analyze(
        read_capture(folder / "sender.pcap.zst"), read_capture(folder / "receiver.pcap.zst")
    ).to_dict()
    found = [f for f in doc["findings"] if f["kind"] == "receiver_drop"]
    assert sum(f["evidence"]["receiver_drops_packets"] for f in found) == counter
