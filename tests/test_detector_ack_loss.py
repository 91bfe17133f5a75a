"""ack_loss: pure ACKs lost on the way back, counted exactly against the firewall's counter."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.helpers.lab_captures import lab_kind, truth
from tracekit.capture import read_capture
from tracekit.pipeline import analyze

SWEEP = Path(__file__).resolve().parents[1] / "fixtures" / "sweep"


def _sweep(name: str) -> tuple[list[dict[str, object]], dict[str, object]]:
    folder = SWEEP / name
    doc = analyze(
        read_capture(folder / "sender.pcap.zst"), read_capture(folder / "receiver.pcap.zst")
    ).to_dict()
    return [f for f in doc["findings"] if f["kind"] == "ack_loss"], json.loads(
        (folder / "truth.json").read_text()
    )


def test_count_is_the_firewalls_counter() -> None:
    # nftables in the middle forwards one pure ACK in four toward the sender and counts the
    # ones it drops: the two captures must count exactly those.
    (f,), doc = _sweep("ack_drops_3of4")
    ev = f["evidence"]
    assert ev["acks_lost_packets"] == doc["drops"]["reverse_acks"]  # type: ignore[index]
    assert ev["ack_loss_ratio"] == pytest.approx(0.75, abs=0.01)
    # Three ACKs in four lost: the sender's ACK clock is four times coarser than the
    # receiver's, past the doubling that makes trains: a warning.
    assert f["severity"] == "warning"


def test_quiet_when_every_ack_arrived() -> None:
    found, doc = _sweep("base")
    assert "reverse_acks" not in doc["drops"]  # type: ignore[operator]
    assert found == []


@pytest.mark.parametrize("scenario", ["clean", "receiver_drops", "slow_start_overrun"])
def test_quiet_on_the_lab_pairs(scenario: str) -> None:
    assert truth(scenario)["drops"]["relay"] == 0
    assert lab_kind(scenario, "ack_loss") == []
