"""receiver_untold: the arrivals whose fate the receiver's ACKs cannot tell are said so, never
counted as receiver drops."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.helpers.lab_captures import lab_kind

SWEEP = Path(__file__).resolve().parents[1] / "fixtures" / "sweep"


def _findings(scenario: str) -> tuple[dict, list[dict]]:  # type: ignore[type-arg]
    from tracekit.capture import read_capture
    from tracekit.pipeline import analyze

    folder = SWEEP / scenario
    truth = json.loads((folder / "truth.json").read_text())
    doc = analyze(
        read_capture(folder / "sender.pcap.zst"), read_capture(folder / "receiver.pcap.zst")
    ).to_dict()
    return truth, doc["findings"]


@pytest.mark.parametrize("scenario", ["lan_offloads_off_bbr", "lan_offloads_on_bbr"])
def test_a_host_whose_acks_lag_its_capture_gets_no_receiver_drop(scenario: str) -> None:
    # BBR over a direct veth pair: the receiving host's ACKs trail its capture point by tens
    # of segments and the sender resends thousands of segments, nearly all of which the host
    # reports as duplicates. Its nftables counter and its kernel's drop counters say it
    # dropped nothing.
    truth, findings = _findings(scenario)
    host = truth["counters"]["change"]["receiver_snmp"]
    assert truth["drops"]["receiver"] == 0
    assert host["TcpExt.TCPRcvQDrop"] == host["TcpExt.TCPBacklogDrop"] == 0
    assert [f for f in findings if f["kind"] == "receiver_drop"] == []
    (untold,) = [f for f in findings if f["kind"] == "receiver_untold"]
    # Every one is a segment the sender resent (tcpi_total_retrans), which it says it cannot
    # judge rather than call it delivered or dropped.
    assert 0 < untold["evidence"]["untold_packets"] <= truth["retransmissions"]["segments"]
    assert untold["severity"] == "info"


@pytest.mark.parametrize("scenario", ["clean", "receiver_drops", "network_drops"])
def test_quiet_where_the_acks_tell(scenario: str) -> None:
    assert lab_kind(scenario, "receiver_untold") == []
