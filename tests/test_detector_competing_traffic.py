"""competing_traffic: other flows through the bottleneck, named with their share, against the
relay's per-flow count of what the bottleneck delivered."""

from __future__ import annotations

import json
from functools import cache
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from tests.helpers.lab_captures import lab_kind
from tracekit.capture import read_capture
from tracekit.pipeline import analyze

SWEEP = Path(__file__).resolve().parents[1] / "fixtures" / "sweep"
CROSS = "cross_udp_tcp_20m"


@cache
def _analyze(name: str) -> tuple[dict[str, Any], dict[str, Any]]:
    """The analysis of a sweep pair as JSON, and its truth: made once per process, since three
    tests read the same pair (read them, do not change them)."""
    folder = SWEEP / name
    analysis = analyze(
        read_capture(folder / "sender.pcap.zst"), read_capture(folder / "receiver.pcap.zst")
    )
    return analysis.to_dict(), json.loads((folder / "truth.json").read_text())


def _truth_shares(truth: dict[str, Any], start_s: float, end_s: float) -> dict[str, float]:
    """Each flow's share of the bytes the bottleneck delivered over [start_s, end_s] (seconds
    since the sender capture's first packet), from the relay's half-second counts."""
    bins = truth["cross_traffic"]["bins"]
    rows = np.asarray(bins["rows"], dtype=np.float64)
    origin = truth["capture"]["counts"]["sender"]["first_epoch_s"]
    t = rows[:, 0] - origin
    inside = (t + bins["bin_s"] > start_s) & (t < end_s)
    fields = bins["fields"]
    got = {
        f: rows[inside, fields.index(f"{f}_bytes")].sum() for f in truth["cross_traffic"]["flows"]
    }
    total = sum(got.values())
    return {f: x / total for f, x in got.items()}


def test_competing_flows_are_named_with_their_share() -> None:
    doc, truth = _analyze(CROSS)
    (f,) = [x for x in doc["findings"] if x["kind"] == "competing_traffic"]
    flows = truth["cross_traffic"]["flows"]
    names = f["evidence"]["competing_flows"].split("; ")
    expected = {
        name: f"{flows[name]['bottleneck']['src']} -> {flows[name]['bottleneck']['dst']}"
        for name in ("cross_udp", "cross_tcp")
    }
    assert [n.rsplit(" ", 1)[0] for n in names] == [expected["cross_udp"], expected["cross_tcp"]]
    truth_shares = _truth_shares(truth, f["start_s"], f["end_s"])
    found = f["evidence"]["competing_share_fractions"]
    shares = dict(zip(("cross_udp", "cross_tcp"), found, strict=True))
    for name, share in shares.items():
        assert share == pytest.approx(truth_shares[name], abs=0.10), name
    assert f["evidence"]["own_share_fraction"] == pytest.approx(truth_shares["test"], abs=0.10)
    # Together they kept the 20 Mbit/s bottleneck busy: a warning.
    rate = truth["path"]["bottleneck_rate_bps"]
    assert f["evidence"]["arrival_rate_bps"] >= 0.8 * rate
    assert f["severity"] == "warning"


def test_the_verdict_names_the_traffic_it_competed_with() -> None:
    doc, truth = _analyze(CROSS)
    (verdict,) = [x for x in doc["findings"] if x["kind"] == "rate_limit_cause"]
    udp = truth["cross_traffic"]["flows"]["cross_udp"]["bottleneck"]["src"]
    assert f"competing with {udp}" in verdict["summary"]
    assert verdict["evidence"]["competing_share_fraction"] > 0.1


def test_an_evenly_spaced_stream_gets_no_eq1_buffer() -> None:
    # The cross host's UDP stream is evenly spaced at a quarter of the path's rate: its few
    # losses came from the load it shared the queue with, not from its own burst (eq. 1).
    doc, _ = _analyze(CROSS)
    (stream,) = doc["udp_streams"]
    assert stream["lost_packets"] > 0
    assert stream["buffer_bytes"] is None
    assert stream["competing_share"] > 0.5


def test_quiet_without_other_traffic() -> None:
    doc, _ = _analyze("base")
    assert [x for x in doc["findings"] if x["kind"] == "competing_traffic"] == []


@pytest.mark.parametrize("scenario", ["clean", "udp_loss", "slow_start_overrun"])
def test_quiet_on_the_lab_pairs(scenario: str) -> None:
    assert lab_kind(scenario, "competing_traffic") == []


def test_a_flow_that_ran_for_part_of_the_transfer_competes(tmp_path: Path) -> None:
    # The sweep's pair with the receiver's capture cut down to 0.3 s of the UDP flow (5 Mbit/s
    # in the relay's truth) and none of the other TCP flow: over the transfer's 6.6 s it
    # averages less than one full segment per 50 ms round trip, but while it ran it carried
    # dozens per round trip through the same bottleneck.
    from scapy.layers.inet import IP, UDP
    from scapy.utils import rdpcap, wrpcap

    from tests.helpers.independent import plain_capture

    folder = SWEEP / CROSS
    truth = json.loads((folder / "truth.json").read_text())
    flows = truth["cross_traffic"]["flows"]
    udp_src = flows["cross_udp"]["bottleneck"]["src"]
    tcp_src = flows["cross_tcp"]["bottleneck"]["src"]
    origin = truth["capture"]["counts"]["sender"]["first_epoch_s"]
    kept = []
    with plain_capture(folder / "receiver.pcap.zst") as plain:
        for p in rdpcap(str(plain)):
            src = f"{p[IP].src}:{p.sport}" if IP in p and hasattr(p, "sport") else ""
            dst = f"{p[IP].dst}:{p.dport}" if IP in p and hasattr(p, "dport") else ""
            if tcp_src in (src, dst):
                continue
            if UDP in p and src == udp_src and not 3.0 <= float(p.time) - origin < 3.3:
                continue
            kept.append(p)
    cut = tmp_path / "receiver.pcap"
    wrpcap(str(cut), kept)
    doc = analyze(read_capture(folder / "sender.pcap.zst"), read_capture(cut)).to_dict()
    rtt_s = truth["path"]["rtt_ms"] / 1000
    test = flows["test"]["bottleneck"]
    frame = truth["path"]["mtu_bytes"] + 14
    udp_bytes = flows["cross_udp"]["rate_bps"] / 8 * 0.3
    # Under a full frame per round trip over the transfer, over sixteen while it ran.
    assert udp_bytes < frame * (test["last_epoch_s"] - test["first_epoch_s"]) / rtt_s
    assert udp_bytes > 16 * frame * 0.3 / rtt_s
    (f,) = [x for x in doc["findings"] if x["kind"] == "competing_traffic"]
    assert f["evidence"]["competing_flows"].split(" -> ")[0] == udp_src
    assert "udp" in f["evidence"]["competing_flows"]
