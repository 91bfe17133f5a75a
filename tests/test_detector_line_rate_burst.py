"""line_rate_burst on the lab's captures (truth.json, tshark) and on crafted trains.

The lab's bursty_sender writes 64 kB every 50 ms through a 100 Mbit/s NIC tbf into a 30 Mbit/s
bottleneck with a 32 kB limit; paced_sender is the same path and writes, paced below the
bottleneck rate. The crafted cases are trains whose spacing is known by construction.
"""

from __future__ import annotations

import json
import shutil
from collections import Counter
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from fixtures.lab.scenarios import SCENARIOS
from tests.helpers import lab_captures
from tests.helpers.crafting import CLIENT, SERVER, tcp, write
from tracekit.capture import read_capture
from tracekit.detectors import run_detectors
from tracekit.detectors.base import AnalysisContext
from tracekit.detectors.line_rate_burst import MAX_LISTED_BURSTS, LineRateBurst, _median_length
from tracekit.findings import Finding, Severity
from tracekit.pipeline import analyze

KIND = LineRateBurst.kind
needs_tshark = pytest.mark.skipif(not shutil.which("tshark"), reason="tshark not installed")
FRAME_BYTES = 1514  # 1500-byte IP packet + 14-byte Ethernet header: what the tbf counts


def lab(name: str) -> tuple[list[Finding], dict[str, Any]]:
    """This detector's findings on a lab capture (sender side), and the capture's truth."""
    return lab_captures.lab_findings(name, LineRateBurst), lab_captures.truth(name)


# --- the lab ------------------------------------------------------------------------------


def test_fires_on_the_bursty_sender_with_the_path_s_numbers() -> None:
    found, truth = lab("bursty_sender")
    assert len(found) == 1
    f = found[0]
    path, sender = truth["path"], truth["sender"]
    assert (f.conn, f.direction, f.severity) == (0, "a2b", Severity.WARNING)
    assert f.evidence["bursts_count"] >= 3
    # Bursts leave near the NIC tbf's rate; the ACKs return at the bottleneck tbf's.
    nic, bottleneck = path["sender_nic_rate_bps"], path["bottleneck_rate_bps"]
    assert 0.8 * nic <= f.evidence["burst_rate_bps"] <= 1.05 * nic
    assert f.evidence["line_rate_bps"] == pytest.approx(nic, rel=0.1)
    assert f.evidence["bottleneck_bps"] == pytest.approx(bottleneck, rel=0.1)
    assert f.evidence["burst_to_bottleneck_ratio"] >= 2
    # The application writes a chunk per interval: that is the average, in wire bytes.
    chunk_bps = sender["write_chunk_bytes"] * 8 / (sender["write_interval_ms"] / 1000)
    assert f.evidence["average_rate_bps"] == pytest.approx(chunk_bps * 1514 / 1448, rel=0.25)
    configured = path["bottleneck_buffer_bytes"]
    assert configured / 1.5 <= f.evidence["buffer_estimate_bytes"] <= configured * 1.5
    assert f.evidence["packet_bytes"] == FRAME_BYTES
    assert 0 < f.evidence["lost_in_bursts_packets"] <= f.evidence["lost_in_direction_packets"]
    assert f.evidence["lost_in_direction_packets"] <= truth["drops"]["network"]
    assert "\n" not in f.summary and f.explanation and f.advice


@needs_tshark
def test_bursts_are_the_runs_tshark_sees_and_their_losses_the_receiver_never_got() -> None:
    from fixtures.lab.readings import released_runs  # on tshark's frames, not tracekit's

    found, truth = lab("bursty_sender")
    f = found[0]
    sent = lab_captures.lab_frames("bursty_sender", "sender")
    received = lab_captures.lab_frames("bursty_sender", "receiver")
    # Runs split where the gap exceeds 1.5 packet times at the line rate the detector measured
    # (checked against the NIC tbf's above), each widened to what the bottleneck queued with
    # it at the tbf's configured rate; every such burst is far above the bottleneck rate.
    config = LineRateBurst.Config()
    gap_s = config.max_gap_factor * FRAME_BYTES * 8 / f.evidence["line_rate_bps"]
    bursts = released_runs(
        sent,
        gap_s,
        truth["path"]["bottleneck_rate_bps"],
        FRAME_BYTES - MSS,
        config.min_burst_packets,
    )
    assert f.evidence["bursts_count"] == len(bursts)
    assert f.evidence["burst_packets"] == tuple(bursts[:MAX_LISTED_BURSTS])
    # Lost: first copies of data the receiver's capture never saw.
    arrived = Counter(
        zip(
            received.ip_id[received.from_sender].tolist(),
            received.seq[received.from_sender].tolist(),
            strict=True,
        )
    )
    data = np.flatnonzero(sent.from_sender & (sent.payload_bytes > 0))
    _, first = np.unique(sent.seq[data], return_index=True)
    missing = [i for i in data[first] if (sent.ip_id[i], sent.seq[i]) not in arrived]
    assert f.evidence["lost_in_direction_packets"] == len(missing)


SWEEP = Path(__file__).resolve().parent.parent / "fixtures" / "sweep"


@pytest.mark.parametrize("name", ["bursty_writes_25m_70ms", "bursty_writes_40m_30ms"])
def test_each_write_is_one_burst_however_the_nic_s_timer_cuts_it(name: str) -> None:
    # The NIC's tbf lets frames out on a timer, and a late one splits a write's train at the
    # sender's spacing into parts that each queue less than the whole: the bottleneck sees
    # one write. No burst is more than one of the lab's writes (its size over the MSS), and
    # once slow start has grown the window past a write, most leave whole. A frame that left
    # a bottleneck packet time or more before the rest of its write is not in its burst.
    folder = SWEEP / name
    truth = json.loads((folder / "truth.json").read_text())
    found = run(lab_captures.context(folder / "sender.pcap.zst"))
    assert [f.kind for f in found] == [KIND]
    whole = -(-truth["sender"]["write_chunk_bytes"] // MSS)
    sizes = found[0].evidence["burst_packets"]
    assert max(sizes) == whole
    assert 2 * sizes.count(whole) > truth["transfer"]["sender"]["writes"]


def test_quiet_on_the_paced_sender() -> None:
    found, truth = lab("paced_sender")
    assert truth["sender"]["so_max_pacing_rate_bytes_per_s"]
    assert found == []


@pytest.mark.parametrize(
    "name", [n for n, s in SCENARIOS.items() if "line_rate_bursts" in s.absent_labels]
)
def test_quiet_where_the_lab_rules_bursts_out(name: str) -> None:
    assert lab(name)[0] == []


LOSSLESS = ["clean", "receiver_drops", "window_limited", "window_oscillation"]


@pytest.mark.parametrize("name", LOSSLESS)
def test_only_informational_where_the_bottleneck_dropped_nothing(name: str) -> None:
    # An unpaced sender does burst on these paths (the lab does not rule it out); where the
    # buffer absorbed every burst the finding is informational, with nothing lost in a burst.
    found, truth = lab(name)
    assert truth["drops"]["network"] == 0
    for f in found:
        assert f.severity is Severity.INFO
        assert f.evidence["lost_in_bursts_packets"] == 0
        # Eq. 1 with N_d = 0: the buffer held what the longest burst queued.
        assert f.evidence["buffer_at_least_bytes"] <= truth["path"]["bottleneck_buffer_bytes"]


# --- crafted trains ---------------------------------------------------------------------------

MSS = 1448
WIRE = MSS + 66  # Ethernet 14 + IPv4 20 + TCP 20 + timestamps 12
C_ISN, S_ISN = 1000, 5000
SYN_OPTS = [("MSS", MSS), ("WScale", 7), ("SAckOK", b""), ("Timestamp", (1, 0))]


def trains(
    count: int,
    packets: int,
    send_bps: float,
    path_bps: float,
    rtt_s: float = 0.05,
    apart_s: float = 0.1,
    late_s: float = 0.0,
) -> list[object]:
    """`count` trains of `packets` segments sent at send_bps, starting `apart_s` apart, through
    a path of path_bps with no loss: each segment's ACK returns one RTT after the path
    delivered it. The second half of each train leaves `late_s` later (a late NIC timer)."""
    pkts: list[object] = [
        tcp(0.0, CLIENT, SERVER, 40000, 80, "S", C_ISN, 0, 0, SYN_OPTS),
        tcp(rtt_s, SERVER, CLIENT, 80, 40000, "SA", S_ISN, C_ISN + 1, 0, SYN_OPTS),
        tcp(rtt_s, CLIENT, SERVER, 40000, 80, "A", C_ISN + 1, S_ISN + 1, 0, [("NOP", None)]),
    ]
    i = 0
    delivered = 0.0
    for k in range(count):
        start = 0.2 + apart_s * k
        for j in range(packets):
            t = start + j * WIRE * 8 / send_bps + (late_s if 2 * j >= packets else 0.0)
            delivered = max(delivered, t) + WIRE * 8 / path_bps
            seq = C_ISN + 1 + i * MSS
            opts = [("Timestamp", (100 + i, 1))]
            pkts.append(tcp(t, CLIENT, SERVER, 40000, 80, "A", seq, S_ISN + 1, MSS, opts))
            ack = seq + MSS
            back = [("Timestamp", (900, 100 + i))]
            pkts.append(tcp(delivered + rtt_s, SERVER, CLIENT, 80, 40000, "A", S_ISN + 1, ack,
                            0, back))  # fmt: skip
            i += 1
    pkts.sort(key=lambda p: p.time)  # type: ignore[attr-defined]
    return pkts


def run(ctx: AnalysisContext, **config: Any) -> list[Finding]:
    """This detector alone, configured."""
    return run_detectors(ctx, [LineRateBurst], {KIND: LineRateBurst.Config(**config)})


def detect(pkts: list[object], path: Path, **config: Any) -> list[Finding]:
    """This detector alone on crafted packets."""
    return run(lab_captures.context(write(path, pkts)), **config)


def test_crafted_line_rate_trains_fire_as_info_without_loss(tmp_path: Path) -> None:
    found = detect(trains(4, 30, send_bps=100e6, path_bps=30e6), tmp_path / "b.pcap")
    assert len(found) == 1
    f = found[0]
    assert f.evidence["bursts_count"] == 4
    assert f.evidence["burst_packets"] == (30, 30, 30, 30)
    assert f.evidence["burst_rate_bps"] == pytest.approx(100e6, rel=0.01)
    assert f.evidence["bottleneck_bps"] == pytest.approx(30e6, rel=0.01)
    assert f.evidence["lost_in_bursts_packets"] == 0
    # Eq. 1 with N_d = 0: 30 packets at 100 into 30 Mbit/s queue 21 of them.
    assert f.evidence["buffer_at_least_bytes"] == pytest.approx(30 * 0.7 * WIRE, rel=0.01)
    assert f.severity is Severity.INFO


def test_a_train_cut_by_a_late_timer_is_one_burst(tmp_path: Path) -> None:
    # 40 packets at 100 Mbit/s into 30 Mbit/s, cut in the middle by 0.5 ms (four packet times
    # at the line rate): the bottleneck drained about one packet of the 14 the first half
    # queued meanwhile, so the halves are one burst of 40, not two of 20.
    late = trains(4, 40, send_bps=100e6, path_bps=30e6, late_s=0.0005)
    found = detect(late, tmp_path / "late.pcap")
    assert [f.evidence["burst_packets"] for f in found] == [(40, 40, 40, 40)]
    # An ACK in the gap clocks out what follows it: with a round trip shorter than the first
    # half's departure, the halves are two releases of 20.
    clocked = trains(4, 40, send_bps=100e6, path_bps=30e6, rtt_s=0.0001, late_s=0.0005)
    found = detect(clocked, tmp_path / "clocked.pcap")
    assert [f.evidence["burst_packets"] for f in found] == [(20,) * 8]


def test_crafted_paced_trains_are_quiet(tmp_path: Path) -> None:
    # The same segments spaced at 90% of the path's rate: no burst at all.
    assert detect(trains(4, 30, send_bps=27e6, path_bps=30e6), tmp_path / "p.pcap") == []


def test_too_few_or_too_short_bursts_are_quiet(tmp_path: Path) -> None:
    pkts = trains(2, 30, send_bps=100e6, path_bps=30e6)
    two = lab_captures.context(write(tmp_path / "two.pcap", pkts))
    assert run(two) == []
    assert len(run(two, min_bursts_count=2)) == 1
    short = trains(4, 12, send_bps=100e6, path_bps=30e6)
    assert detect(short, tmp_path / "short.pcap") == []


def test_bursts_count_by_the_queue_they_build(tmp_path: Path) -> None:
    # Back to back at 50 Mbit/s into 30: each 30-packet train queues 30 (1 - 30/50) = 12
    # packets (eq. 1 with M = 0), past the 8 of the shortest train surely no ACK clock's.
    pkts = trains(4, 30, send_bps=50e6, path_bps=30e6)
    slow = lab_captures.context(write(tmp_path / "slow.pcap", pkts))
    (f,) = run(slow)
    assert f.evidence["burst_to_bottleneck_ratio"] == pytest.approx(50 / 30, rel=0.1)
    assert run(slow, min_queue_packets=13) == []
    # 18-packet trains at the same rate queue 7.2: quiet.
    short = trains(4, 18, send_bps=50e6, path_bps=30e6)
    assert detect(short, tmp_path / "short.pcap") == []


def test_trains_within_the_rate_estimates_error_are_quiet(tmp_path: Path) -> None:
    # 200-packet trains at 1.1x the path: they would queue 18 packets, but a rate only 10%
    # above the estimate is within its error (a sender paced near the path's rate).
    pkts = trains(4, 200, send_bps=33e6, path_bps=30e6, rtt_s=0.02)
    assert detect(pkts, tmp_path / "near.pcap") == []


@pytest.mark.parametrize(("gap_packets", "bursts"), [(1.8, 0), (3.0, 0), (45.0, 5)])
def test_a_stream_the_line_cuts_is_not_a_burst(
    tmp_path: Path, gap_packets: float, bursts: int
) -> None:
    # 125 packets at 85 Mbit/s into a 33 Mbit/s path (BBR's start-up paced past its NIC's
    # rate), cut every 25 by a gap of a few of the line's packet times: each piece would
    # queue 15 packets (eq. 1 with M = 0), but the bottleneck, whose packet time is 2.6 of the
    # line's, drains only about one packet in each gap and never empties: one stream, not
    # five bursts. Gaps of 45 outlast the 15 packets' drain (39 of the line's packet times),
    # and the pieces are bursts of their own.
    line = WIRE * 8 / 85e6
    apart = (24 + gap_packets) * line
    pkts = trains(5, 25, send_bps=85e6, path_bps=33e6, apart_s=apart)
    found = detect(pkts, tmp_path / "s.pcap")
    assert [f.evidence["bursts_count"] for f in found] == ([bursts] if bursts else [])


def test_median_length_by_counting_matches_numpy() -> None:
    rng = np.random.default_rng(3)
    for _ in range(500):
        lengths = rng.integers(0, 1500, int(rng.integers(1, 50))).astype(np.uint16)
        assert _median_length(lengths) == int(np.median(lengths.astype(float)))


SWEEP_DIR = Path(__file__).resolve().parents[1] / "fixtures" / "sweep"


@pytest.mark.parametrize("name", ["lan_offloads_off", "lan_reno", "lan_stall"])
def test_no_train_reads_faster_than_the_senders_line_on_a_lan(name: str) -> None:
    # A veth pair, offloads off: the host's software clock stamps frames in batches, and
    # trains of 45 frames read at three times the tightest rate the sender keeps. No train
    # leaves faster than the line, and nothing between the captures dropped (the lab's
    # counters): no warning, and no burst faster than the line it left by.
    folder = SWEEP_DIR / name
    truth_doc = json.loads((folder / "truth.json").read_text())
    assert truth_doc["path"]["direct"] and not truth_doc["sender"]["offloads"]
    assert not any(truth_doc["drops"][k] for k in ("network", "receiver", "sender_nic"))
    doc = analyze(
        read_capture(folder / "sender.pcap.zst"), read_capture(folder / "receiver.pcap.zst")
    ).to_dict()
    for f in doc["findings"]:
        if f["kind"] == KIND:
            assert f["severity"] == "info"
            assert f["evidence"]["burst_rate_bps"] <= f["evidence"]["line_rate_bps"]
