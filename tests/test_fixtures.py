"""The committed lab captures agree with their truth.json, read independently (tshark, tcptrace).

No root needed: these read fixtures/captures/, which `make fixtures` regenerates.
"""

from __future__ import annotations

import json
import shutil
from functools import cache
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from fixtures.lab.readings import (
    Frames,
    line_rate_runs,
    missing_at_receiver,
    read_frames,
    tcptrace_retransmissions,
)
from fixtures.lab.scenarios import ALL_LABELS, SCENARIOS

CAPTURES = Path(__file__).resolve().parents[1] / "fixtures" / "captures"
TCP = [name for name, s in SCENARIOS.items() if s.protocol == "tcp"]
TH_SYN, TH_FIN, TH_RST = 0x02, 0x01, 0x04  # RFC 9293 3.1
MSS_BYTES = 1448  # 1500-byte MTU less 20 IP, 20 TCP and 12 timestamp option bytes

needs_tshark = pytest.mark.skipif(not shutil.which("tshark"), reason="tshark not installed")
needs_tcptrace = pytest.mark.skipif(not shutil.which("tcptrace"), reason="tcptrace not installed")


@cache
def truth(name: str) -> dict[str, Any]:
    return json.loads((CAPTURES / name / "truth.json").read_text())


@cache
def frames(name: str, side: str) -> Frames:
    return read_frames(CAPTURES / name / f"{side}.pcap")


@pytest.mark.parametrize("name", SCENARIOS)
def test_each_scenario_has_small_captures_and_its_truth(name: str) -> None:
    folder = CAPTURES / name
    for capture in ("sender.pcap", "receiver.pcap"):
        assert 0 < (folder / capture).stat().st_size < 5_000_000
    doc = truth(name)
    assert doc["scenario"] == name
    assert doc["labels"] == list(SCENARIOS[name].labels)
    assert doc["path"]["bottleneck_buffer_bytes"] == SCENARIOS[name].path.buffer_bytes
    assert doc["capture"]["snaplen"] == 128
    if name in TCP:
        assert (
            doc["flow"]["bytes"] == doc["receiver"]["bytes_read"] == SCENARIOS[name].transfer_bytes
        )


def test_all_fixtures_stay_under_40_megabytes() -> None:
    total = sum(f.stat().st_size for f in CAPTURES.rglob("*") if f.is_file())
    assert total < 40_000_000


@pytest.mark.parametrize("name", SCENARIOS)
def test_truth_agrees_with_the_kernel_counters(name: str) -> None:
    doc = truth(name)
    change = doc["counters"]["change"]
    assert doc["drops"]["network"] == change["bottleneck_tbf"]["drops"]
    assert doc["drops"]["receiver"] == change["receiver_nft"].get("receiver_drops", 0)
    # The relay saw each bottleneck drop as a refused send (ENOBUFS): the same count twice.
    assert doc["relay"]["m0->m1"]["send_errors"].get("ENOBUFS", 0) == doc["drops"]["network"]
    # Nothing else may lose a frame: not the sender's own queue, the relay or either tcpdump.
    assert doc["drops"]["sender_nic"] == 0
    assert doc["drops"]["relay"] == 0
    assert doc["capture"]["kernel_drops"] == {"sender": 0, "receiver": 0}
    # The delay line kept time: no frame left the relay more than 10 ms after it was due.
    for direction in ("m0->m1", "m1->m0"):
        assert doc["relay"][direction]["max_late_ns"] <= 10_000_000
    if name not in TCP:
        # Every datagram that passed nftables reached the socket (no receive-buffer overflow).
        assert doc["udp"]["received_count"] == change["receiver_snmp"]["Udp.InDatagrams"]
        assert change["receiver_snmp"]["Udp.RcvbufErrors"] == 0
    if name in TCP:
        retrans = doc["retransmissions"]
        assert (
            retrans["segments"]
            == retrans["snmp_retrans_segs"]
            == change["sender_snmp"]["Tcp.RetransSegs"]
        )


@pytest.mark.parametrize("name", SCENARIOS)
def test_drop_labels_agree_with_the_drop_counters(name: str) -> None:
    doc = truth(name)
    assert set(doc["labels"]) | set(doc["absent_labels"]) <= set(ALL_LABELS)
    assert not set(doc["labels"]) & set(doc["absent_labels"])
    for label in ("network_drops", "receiver_drops"):
        drops = doc["drops"][label.removesuffix("_drops")]
        assert (label in doc["labels"]) == (drops > 0)
        if label in doc["absent_labels"]:
            assert drops == 0


@needs_tshark
@pytest.mark.parametrize(
    "name", [name for name, s in SCENARIOS.items() if "zero_window" in s.absent_labels]
)
def test_no_window_closes_where_the_truth_rules_it_out(name: str) -> None:
    received = frames(name, "receiver")
    window = received.window_bytes[~received.from_sender][1:]  # after the SYN-ACK
    assert window.min() >= MSS_BYTES


@needs_tcptrace
@pytest.mark.parametrize("name", TCP)
def test_retransmissions_equal_tcptrace(name: str) -> None:
    # tcptrace counts data segments that resend bytes already sent; TCP_INFO tcpi_total_retrans
    # counts every segment the kernel retransmitted (tail loss probes that resend the last
    # segment included, since tcptrace sees those as resends too). With offloads off each
    # retransmitted segment is one frame in the sender capture, so the two must be equal.
    assert (
        tcptrace_retransmissions(CAPTURES / name / "sender.pcap")
        == (truth(name)["retransmissions"]["segments"])
    )


@needs_tshark
@pytest.mark.parametrize("name", SCENARIOS)
def test_network_drops_are_the_frames_missing_from_the_receiver_capture(name: str) -> None:
    lost, appeared = missing_at_receiver(frames(name, "sender"), frames(name, "receiver"))
    assert appeared == 0
    assert lost == truth(name)["drops"]["network"]


@needs_tshark
@pytest.mark.parametrize("name", TCP)
def test_every_transfer_closes_cleanly(name: str) -> None:
    # A receiver that closed with data in flight would answer with RSTs, and that tail would
    # look like receiver drops: both ends send a FIN and neither ever sends a RST.
    for side in ("sender", "receiver"):
        capture = frames(name, side)
        assert not (capture.flags & TH_RST).any()
        assert (capture.flags[capture.from_sender] & TH_FIN).any()
        assert (capture.flags[~capture.from_sender] & TH_FIN).any()


@needs_tshark
def test_clean_capture_loses_and_resends_nothing() -> None:
    sent, received = frames("clean", "sender"), frames("clean", "receiver")
    assert sent.from_sender.sum() == received.from_sender.sum()
    data = sent.from_sender & (sent.payload_bytes > 0)
    assert np.unique(sent.seq[data]).size == data.sum()  # no sequence number sent twice
    # No loss by construction: window scale 2 caps the window at 65,535 << 2 bytes, and the
    # bottleneck buffer holds that much as full frames.
    window = received.window_bytes[~received.from_sender][1:]
    assert window.max() <= 65_535 << 2
    assert truth("clean")["path"]["bottleneck_buffer_bytes"] >= (65_535 << 2) * 1514 / 1448
    assert truth("clean")["drops"]["receiver"] == 0


@needs_tshark
def test_receiver_drops_are_in_the_receiver_capture_and_never_acknowledged() -> None:
    doc = truth("receiver_drops")
    every = doc["impairment"]["receiver_drop_every"]
    received = frames("receiver_drops", "receiver")
    data = np.flatnonzero(
        received.from_sender
        & (received.payload_bytes > 0)
        & (received.flags & (TH_SYN | TH_FIN | TH_RST) == 0)
    )
    # The nftables rule counts the data segments that reach it and drops each `every`-th, so
    # the dropped ones are known by position in the receiver capture.
    assert data.size == doc["counters"]["change"]["receiver_nft"]["data_segments"]
    dropped = data[every - 1 :: every]
    assert dropped.size == doc["drops"]["receiver"] > 0
    from_receiver = ~received.from_sender
    for row in dropped:
        seq = received.seq[row]
        again = np.flatnonzero(received.from_sender & (received.seq == seq))
        resent = again[again > row]
        assert resent.size, f"segment {seq} never arrived again"
        # Until its next copy arrived, the receiver's cumulative ACK never passed the segment
        # (sequence arithmetic mod 2**32, RFC 9293 3.4): the host discarded it after the
        # capture point.
        acks = received.ack[row : resent[0]][from_receiver[row : resent[0]]]
        assert np.all((seq - acks) % 2**32 < 2**31)


@needs_tshark
def test_udp_loss_numbers_match_the_truth() -> None:
    doc = truth("udp_loss")
    sent = frames("udp_loss", "sender").udp_number
    at_host = set(frames("udp_loss", "receiver").udp_number.tolist())
    assert sorted(sent.tolist()) == list(range(doc["udp"]["datagrams_sent"]))
    delivered = set()
    for first, last in doc["udp"]["received_by_application"]:
        delivered.update(range(first, last + 1))
    assert delivered <= at_host
    first, last = doc["impairment"]["receiver_drop_block"]
    discarded = at_host - delivered
    assert discarded <= set(range(first, last + 1))
    assert len(discarded) == doc["drops"]["receiver"]
    assert len(sent) - len(at_host) == doc["drops"]["network"]


@needs_tshark
def test_slow_start_overrun_loses_a_block_in_one_round() -> None:
    doc = truth("slow_start_overrun")
    assert doc["sender"]["congestion_control"] == "reno"
    assert doc["path"]["bottleneck_buffer_bytes"] < doc["path"]["bdp_bytes"] / 2
    sent, received = (
        frames("slow_start_overrun", "sender"),
        frames("slow_start_overrun", "receiver"),
    )
    arrived = received.keys(received.from_sender)
    data = sent.from_sender & (sent.payload_bytes > 0)
    lost = np.array([data[row] and not arrived[key] for row, key in enumerate(sent.identities())])
    lost_ts = sent.ts_s[lost]
    # The sender learns of the first loss one round trip later (base RTT plus a full queue) and
    # doubles on until then, so every packet lost in the overrun leaves within about that time
    # of the first (10% for the ACK's own queueing and serialization); none is a resend.
    round_trip_s = (
        doc["path"]["rtt_ms"] / 1000
        + doc["path"]["bottleneck_buffer_bytes"] * 8 / doc["path"]["bottleneck_rate_bps"]
    )
    assert lost_ts.size >= 10
    assert np.all(lost_ts <= lost_ts.min() + 1.1 * round_trip_s)
    _, first_copy = np.unique(sent.seq[data], return_index=True)
    assert set(np.flatnonzero(lost)) <= set(np.flatnonzero(data)[first_copy])


@needs_tshark
def test_window_oscillation_closes_and_reopens_the_window_repeatedly() -> None:
    received = frames("window_oscillation", "receiver")
    window = received.window_bytes[~received.from_sender][1:]  # after the SYN-ACK
    closed = window < MSS_BYTES
    reopened = np.sum(closed[:-1] & (window[1:] >= 4 * MSS_BYTES))
    assert reopened >= 5
    assert np.sum(window == 0) >= 5


@needs_tshark
def test_window_limited_window_stays_well_below_the_bdp() -> None:
    doc = truth("window_limited")
    received = frames("window_limited", "receiver")
    window = received.window_bytes[~received.from_sender][1:]
    assert window.max() < doc["path"]["bdp_bytes"] / 3
    assert doc["retransmissions"]["segments"] == 0


@needs_tshark
def test_bursty_sender_sends_line_rate_bursts_and_paced_sender_does_not() -> None:
    nic_gap_s = 1514 * 8 / truth("bursty_sender")["path"]["sender_nic_rate_bps"]
    bursty = line_rate_runs(frames("bursty_sender", "sender"), 1.5 * nic_gap_s)
    paced = line_rate_runs(frames("paced_sender", "sender"), 1.5 * nic_gap_s)
    assert np.sum(bursty >= 20) >= 5
    # The paced sender's only long run is its initial window, sent before an RTT sample exists.
    assert np.sum(paced >= 11) == 0
    assert (
        truth("paced_sender")["drops"]["network"] == 0 < truth("bursty_sender")["drops"]["network"]
    )


@needs_tshark
@pytest.mark.parametrize("name", SCENARIOS)
def test_path_delay_and_rate_are_what_the_truth_says(name: str) -> None:
    doc = truth(name)
    path = doc["path"]
    sent, received = frames(name, "sender"), frames(name, "receiver")
    # Both captures share one clock: a frame's one-way delay is its receiver-capture time minus
    # its sender-capture time. The least of them is the relay's delay plus one frame's
    # serialization at the bottleneck (1514 bytes at 30 Mbit/s: 0.4 ms).
    sent_at = dict(zip(sent.identities(), sent.ts_s.tolist(), strict=True))
    delays = [
        ts - sent_at[key]
        for key, ts, forward in zip(
            received.identities(), received.ts_s.tolist(), received.from_sender, strict=True
        )
        if forward and key in sent_at
    ]
    one_way_ms = 1000 * min(delays)
    assert path["one_way_delay_fwd_ms"] <= one_way_ms <= path["one_way_delay_fwd_ms"] + 2
    # The bottleneck's rate: no 50 full frames in a row arrive faster than it sends them (the
    # receive path jitters single gaps, so they are taken in runs).
    frame_bytes = 1042 if name == "udp_loss" else 1514
    wire_bytes = np.maximum(received.payload_bytes, 0) + 66  # Ethernet, IP, TCP + timestamps
    if name == "udp_loss":
        wire_bytes = np.full(received.ts_s.size, frame_bytes)
    ts = received.ts_s[received.from_sender & (wire_bytes == frame_bytes)]
    fastest_s = np.min(ts[50:] - ts[:-50])
    assert fastest_s >= 0.97 * 50 * frame_bytes * 8 / path["bottleneck_rate_bps"]
