"""stretch_acks: segments per ACK past RFC 5681's two, measured or inferred."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.helpers.lab_captures import lab_kind
from tracekit.capture import read_capture
from tracekit.pipeline import analyze

SWEEP = Path(__file__).resolve().parents[1] / "fixtures" / "sweep"


def _kind(name: str, kind: str, receiver: bool) -> list[dict[str, object]]:
    folder = SWEEP / name
    rcv = read_capture(folder / "receiver.pcap.zst") if receiver else None
    doc = analyze(read_capture(folder / "sender.pcap.zst"), rcv).to_dict()
    return [f for f in doc["findings"] if f["kind"] == kind]


def test_thinned_acks_are_an_inference_with_the_sender_capture_alone() -> None:
    # nftables forwarded one pure ACK in four toward the sender: each that arrived covered
    # about four times what the receiver acknowledged per ACK (two segments), past the four.
    truth = json.loads((SWEEP / "ack_drops_3of4" / "truth.json").read_text())
    assert truth["drops"]["reverse_acks"] > 0
    (f,) = _kind("ack_drops_3of4", "stretch_acks", receiver=False)
    assert f["evidence"]["measured_where"] == "inferred at the sender"  # type: ignore[index]
    assert f["evidence"]["segments_per_ack_median_segments"] >= 4  # type: ignore[index]
    assert "inference" in str(f["explanation"])


def test_with_the_receiver_capture_the_way_back_is_ack_losss() -> None:
    # The receiver's capture shows it acknowledged every second segment: the stretch is the
    # way back's doing, which ack_loss counts; this finding stays quiet.
    assert _kind("ack_drops_3of4", "stretch_acks", receiver=True) == []
    assert len(_kind("ack_drops_3of4", "ack_loss", receiver=True)) == 1


@pytest.mark.parametrize("name", ["base", "delay_step_20_120ms", "reader_4k_5ms"])
def test_quiet_where_the_receiver_acknowledges_every_second_segment(name: str) -> None:
    assert _kind(name, "stretch_acks", receiver=False) == []


@pytest.mark.parametrize("scenario", ["clean", "slow_start_overrun", "receiver_drops"])
def test_quiet_on_the_lab_pairs(scenario: str) -> None:
    assert lab_kind(scenario, "stretch_acks") == []


def test_gro_stretch_acks_are_measured_at_the_receiver() -> None:
    # GRO on the receiver's veth (flush timeout two frame times): the receiver itself
    # acknowledged about four segments per ACK, the relay's last-hop capture shows single
    # frames. The finding says it was measured there, and the path rate, counting bytes per
    # interval and never below the rate sustained over 8 RTTs, is the bottleneck's payload
    # rate within 3%; no finding states a rate above its path's.
    name = "gro_receiver_50m"
    truth = json.loads((SWEEP / name / "truth.json").read_text())
    (f,) = _kind(name, "stretch_acks", receiver=True)
    assert f["evidence"]["measured_where"] == "measured at the receiver"  # type: ignore[index]
    receiver = f["evidence"]["receiver_segments_per_ack_segments"]  # type: ignore[index]
    assert receiver == pytest.approx(truth["receiver"]["segments_per_ack"], rel=0.15)
    (verdict,) = _kind(name, "rate_limit_cause", receiver=True)
    path = verdict["evidence"]["path_rate_bps"]  # type: ignore[index]
    assert path == pytest.approx(truth["path"]["bottleneck_payload_rate_bps"], rel=0.03)
    assert verdict["evidence"]["rate_bps"] <= path  # type: ignore[index]
