"""slow_start_overrun on the lab's captures (truth.json, tshark) and on simulated slow starts.

The lab's slow_start_overrun capture is Reno slow start into a 30 Mbit/s tbf with a 60 kB
limit; its truth is the tbf's own counters and configuration. The crafted cases come from a
small simulation below: slow start through a FIFO bottleneck of known rate and buffer, so the
drops and the buffer are known by construction.
"""

from __future__ import annotations

import heapq
import json
import shutil
from collections import Counter
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import pytest

from fixtures.lab.scenarios import SCENARIOS
from tests.helpers import lab_captures
from tests.helpers.crafting import CLIENT, SERVER, tcp, write
from tracekit import physics
from tracekit.analysis import Analysis
from tracekit.detectors import run_detectors
from tracekit.detectors.base import AnalysisContext
from tracekit.detectors.slow_start_overrun import SlowStartOverrun, _arrival_rate_bps
from tracekit.findings import Finding

KIND = SlowStartOverrun.kind
needs_tshark = pytest.mark.skipif(not shutil.which("tshark"), reason="tshark not installed")


def lab(name: str) -> tuple[list[Finding], dict[str, Any]]:
    """This detector's findings on a lab capture (sender side), and the capture's truth."""
    return lab_captures.lab_findings(name, SlowStartOverrun), lab_captures.truth(name)


# --- the lab ------------------------------------------------------------------------------


def test_fires_once_on_the_slow_start_overrun_capture() -> None:
    found, truth = lab("slow_start_overrun")
    assert len(found) == 1
    f = found[0]
    assert (f.conn, f.direction) == (0, "a2b")
    rounds = np.array(f.evidence["round_packets"])
    # Linux starts with 10 segments (RFC 6928) and doubles per round in slow start.
    assert rounds[0] == 10
    assert np.all(rounds[1:] >= 1.4 * rounds[:-1])
    assert f.evidence["overrun_round_packets"] == rounds[-1]
    # Every drop of this run was the tbf's (truth: receiver and relay drops are 0). It counts
    # every frame, a dropped resend too, where the detector counts first copies. The sender
    # hears of the first loss a round trip later, so the next round loses packets too: the
    # overrun round holds a block of them, not all.
    assert truth["drops"]["receiver"] == 0
    drops = truth["drops"]["network"]
    assert f.evidence["lost_packets"] <= f.evidence["lost_in_direction_packets"] <= drops
    assert f.evidence["lost_packets"] >= 10


# Captures whose bottleneck drops packets: slow start may overrun it, depending on the run.
OVERRUNS = ("slow_start_overrun", "network_drops", "bursty_sender")


def lab_overrun(name: str) -> Finding:
    """The finding on one of OVERRUNS; skips the test where this run's slow start lost none."""
    found, _ = lab(name)
    if not found:
        pytest.skip(f"{name}: this run's slow start did not end in a block loss")
    return found[0]


@pytest.mark.parametrize("name", OVERRUNS)
def test_evidence_matches_the_bottleneck_configuration(name: str) -> None:
    f = lab_overrun(name)
    path = lab_captures.truth(name)["path"]
    configured = path["bottleneck_buffer_bytes"]
    # The tbf counts whole Ethernet frames: 1448 payload + 52 IP/TCP + 14 Ethernet bytes.
    assert f.evidence["packet_bytes"] == path["mtu_bytes"] + 14
    assert configured / 1.5 <= f.evidence["buffer_estimate_bytes"] <= configured * 1.5
    s = f.evidence["bottleneck_bps"]
    assert s == pytest.approx(path["bottleneck_rate_bps"], rel=0.1)
    # The flight leaves faster than the bottleneck and no faster than the sender's NIC tbf.
    assert s < f.evidence["ingress_bps"] <= 1.05 * path["sender_nic_rate_bps"]
    assert f.evidence["base_rtt_s"] == pytest.approx(path["rtt_ms"] / 1000, rel=0.1)
    # Eq. 3 and eq. 2 with the configured rate, RTT and buffer.
    ingress = f.evidence["ingress_bps"]
    rtt = path["rtt_ms"] / 1000
    needed = physics.buffer_needed_bytes(path["bottleneck_rate_bps"], ingress, rtt)
    assert f.evidence["buffer_needed_bytes"] == pytest.approx(needed, rel=0.15)
    loss_free = physics.loss_free_rate_bps(configured, ingress, path["bottleneck_rate_bps"], rtt)
    assert loss_free / 1.5 <= f.evidence["loss_free_rate_bps"] <= loss_free * 1.5
    assert f.severity.value == "warning"
    assert "\n" not in f.summary and f.explanation and f.advice


@needs_tshark
@pytest.mark.parametrize("name", OVERRUNS)
def test_lost_packets_are_the_ones_the_receiver_never_saw(name: str) -> None:
    f = lab_overrun(name)
    sent = lab_captures.lab_frames(name, "sender")
    received = lab_captures.lab_frames(name, "receiver")
    arrived = Counter(
        zip(
            received.ip_id[received.from_sender].tolist(),
            received.seq[received.from_sender].tolist(),
            strict=True,
        )
    )
    t = sent.ts_s - sent.ts_s[0]
    data = np.flatnonzero(sent.from_sender & (sent.payload_bytes > 0))
    _, first = np.unique(sent.seq[data], return_index=True)
    first_copies = data[np.sort(first)]
    in_round = first_copies[(t[first_copies] >= f.start_s) & (t[first_copies] < f.end_s)]
    missing = [i for i in in_round if (sent.ip_id[i], sent.seq[i]) not in arrived]
    assert f.evidence["lost_packets"] == len(missing)


QUIET = [
    name
    for name, s in SCENARIOS.items()
    if s.protocol == "tcp" and "slow_start_overrun" in s.absent_labels
]


@pytest.mark.parametrize("name", QUIET)
def test_quiet_where_the_lab_rules_an_overrun_out(name: str) -> None:
    found, _ = lab(name)
    assert found == []


# --- simulated slow starts ------------------------------------------------------------------

MSS = 1448
WIRE = MSS + 66  # Ethernet 14 + IPv4 20 + TCP 20 + timestamps 12: what the detector counts
C_ISN, S_ISN = 1000, 5000
SYN_OPTS = [("MSS", MSS), ("WScale", 7), ("SAckOK", b""), ("Timestamp", (1, 0))]


def simulate(
    s_bps: float,
    f_bps: float,
    buffer_packets: int,
    rtt_s: float = 0.05,
    iw: int = 10,
    max_segments: int = 2000,
    spurious: tuple[int, ...] = (),
    first_pause_s: float = 0.0,
) -> tuple[list[object], set[int], dict[int, int]]:
    """Slow start through a FIFO bottleneck: the sender capture's packets, the dropped segments
    and each segment's round (the initial window is round 0; an ACK of a round-r segment
    releases segments of round r + 1). The initial window's second segment leaves
    `first_pause_s` later than the line would let it (a device's hiccup).

    The sender sends at f_bps; each segment an ACK newly covers releases two (slow start). The
    bottleneck serves at s_bps and holds buffer_packets waiting (one more in service); the
    receiver ACKs every segment, with one SACK block (RFC 2018) while there is a hole. At the
    first duplicate ACK the sender stops sending new data; when the ACKs are in, it resends the
    dropped segments, and the ones listed in `spurious` (D-SACKed by the receiver, RFC 2883).
    """
    pkts: list[object] = [
        tcp(0.0, CLIENT, SERVER, 40000, 80, "S", C_ISN, 0, 0, SYN_OPTS),
        tcp(rtt_s, SERVER, CLIENT, 80, 40000, "SA", S_ISN, C_ISN + 1, 0, SYN_OPTS),
        tcp(rtt_s, CLIENT, SERVER, 40000, 80, "A", C_ISN + 1, S_ISN + 1, 0, [("NOP", None)]),
    ]
    serve, wire_f = WIRE * 8 / s_bps, WIRE * 8 / f_bps
    departures: list[float] = []  # of the accepted packets, ascending
    received: set[int] = set()
    dropped: set[int] = set()
    round_of: dict[int, int] = {}
    resent_once: dict[int, bool] = {}
    acks: list[tuple[float, int, int]] = []  # (arrival at the sender, order, segment)
    state = {"nic": rtt_s, "cum": 0, "n": 0}

    def send(i: int, after: float) -> None:
        t = max(after, state["nic"]) + wire_f
        state["nic"] = t
        seq = C_ISN + 1 + i * MSS
        opts = [("Timestamp", (100 + i, 1))]
        pkts.append(tcp(t, CLIENT, SERVER, 40000, 80, "A", seq, S_ISN + 1, MSS, opts))
        waiting = sum(d > t for d in departures) - 1
        if waiting >= buffer_packets:
            if not resent_once.get(i):
                dropped.add(i)  # only first copies: the truth the detector is checked against
            return
        d = max(t, departures[-1] if departures else 0.0) + serve
        departures.append(d)
        heapq.heappush(acks, (d + rtt_s, i, len(acks)))

    for i in range(iw):
        round_of[i] = 0
        send(i, state["nic"] + first_pause_s if i == 1 else rtt_s)
    state["n"] = iw
    recovery = False
    last_ack = rtt_s
    while acks:
        t, i, _ = heapq.heappop(acks)
        dsack = i in received
        received.add(i)
        before = state["cum"]
        while state["cum"] in received:
            state["cum"] += 1
        cum = state["cum"]
        sack: list[int] = []
        if dsack:
            sack = [C_ISN + 1 + i * MSS, C_ISN + 1 + (i + 1) * MSS]
        elif i >= cum:
            lo = hi = i
            while lo - 1 in received and lo - 1 >= cum:
                lo -= 1
            while hi + 1 in received:
                hi += 1
            sack = [C_ISN + 1 + lo * MSS, C_ISN + 1 + (hi + 1) * MSS]
        opts: list[tuple[str, object]] = [("Timestamp", (900, 100 + i))]
        if sack:
            opts.append(("SAck", tuple(sack)))
        ack = C_ISN + 1 + cum * MSS
        pkts.append(tcp(t, SERVER, CLIENT, 80, 40000, "A", S_ISN + 1, ack, 0, opts, 65535))
        last_ack = t
        if cum == before and not dsack:
            recovery = True  # a duplicate ACK: loss detected, no more new data
        if not recovery and cum > before:
            for _ in range(2 * (cum - before)):
                if state["n"] < max_segments:
                    round_of[state["n"]] = round_of[i] + 1
                    send(state["n"], t)
                    state["n"] += 1
        pending = [j for j in range(state["n"]) if j not in received] if not acks else []
        if pending or (not acks and spurious):
            # The needless resends first, into the empty queue, so their copies arrive.
            for j in [*spurious, *pending]:
                resent_once[j] = True
                send(j, last_ack)
            spurious = ()
    pkts.sort(key=lambda p: p.time)  # type: ignore[attr-defined]
    return pkts, dropped, round_of


def run(ctx: AnalysisContext, **config: Any) -> list[Finding]:
    """This detector alone, configured (the whole pipeline would only cost time)."""
    return run_detectors(ctx, [SlowStartOverrun], {KIND: SlowStartOverrun.Config(**config)})


def detect(pkts: list[object], path: Path, **config: Any) -> list[Finding]:
    """This detector alone on crafted packets."""
    return run(lab_captures.context(write(path, pkts)), **config)


def lost_by_round(dropped: set[int], round_of: dict[int, int]) -> Counter[int]:
    return Counter(round_of[i] for i in dropped)


# 30 Mbit/s out of a 100 Mbit/s sender with room for 24 waiting packets: at f = 2 s (two
# segments per ACK) the flights of 10, 20 and 40 packets queue 5, 10 and 20; 80 overruns it.
OVERRUN = {"s_bps": 30e6, "f_bps": 100e6, "buffer_packets": 24}


@pytest.fixture(scope="module")
def overrun() -> tuple[list[object], set[int], dict[int, int]]:
    return simulate(**OVERRUN)


@pytest.fixture(scope="module")
def overrun_ctx(
    overrun: tuple[list[object], set[int], dict[int, int]],
    tmp_path_factory: pytest.TempPathFactory,
) -> AnalysisContext:
    """The simulated overrun's capture, written and read once for all the tests that use it."""
    path = tmp_path_factory.mktemp("overrun") / "ss.pcap"
    return lab_captures.context(write(path, overrun[0]))


def test_simulated_overrun_gives_the_drops_and_the_buffer(overrun, overrun_ctx) -> None:
    _, dropped, round_of = overrun
    found = run(overrun_ctx)
    assert len(found) == 1
    f = found[0]
    # The next round's first segments, sent before the loss is known, are dropped too, but
    # they are not the overrun round's.
    by_round = lost_by_round(dropped, round_of)
    assert min(by_round) == 3
    assert f.evidence["round"] == 3
    assert f.evidence["round_packets"] == (10, 20, 40, 80)
    assert f.evidence["lost_packets"] == by_round[3]
    assert f.evidence["spurious_resent_packets"] == 0
    assert f.evidence["bottleneck_bps"] == pytest.approx(30e6, rel=0.05)
    # The buffer holds 24 waiting packets plus the one in service.
    assert 24 * WIRE / 1.5 <= f.evidence["buffer_estimate_bytes"] <= 25 * WIRE * 1.5


def test_dsacked_resends_are_not_counted_as_lost(tmp_path: Path, overrun) -> None:
    # Resend two segments of the overrun round that did arrive: the receiver D-SACKs them.
    _, dropped, round_of = overrun
    first_drop = min(dropped)
    arrived = [i for i in range(first_drop - 10, first_drop) if i not in dropped][:2]
    assert [round_of[i] for i in arrived] == [3, 3]
    pkts, dropped_again, _ = simulate(**OVERRUN, spurious=tuple(arrived))
    assert dropped_again == dropped
    f = detect(pkts, tmp_path / "dsack.pcap")[0]
    assert f.evidence["lost_packets"] == lost_by_round(dropped, round_of)[3]
    assert f.evidence["spurious_resent_packets"] == 2


def test_quiet_when_the_buffer_holds_every_flight(tmp_path: Path) -> None:
    pkts, dropped, _ = simulate(s_bps=30e6, f_bps=100e6, buffer_packets=200, max_segments=300)
    assert dropped == set()
    assert detect(pkts, tmp_path / "big.pcap") == []


def test_quiet_below_the_block_size_and_fires_at_it(overrun, overrun_ctx) -> None:
    _, dropped, round_of = overrun
    lost = lost_by_round(dropped, round_of)
    (found,) = run(overrun_ctx, min_lost_packets=lost[3])
    assert found.evidence["round"] == 3
    # Round 4 loses a block of its own into the queue round 3 filled: cut short at the first
    # duplicate ACK, before it doubled round 3, it still let out two segments for each one
    # its ACKs covered, as slow start does. A block size above round 3's finds it there.
    (found,) = run(overrun_ctx, min_lost_packets=lost[3] + 1)
    assert found.evidence["round"] == 4
    assert found.evidence["lost_packets"] == lost[4]
    assert found.evidence["round_packets"][-1] < 1.4 * found.evidence["round_packets"][-2]
    # Its buffer estimate is the bottleneck's (24 waiting and one in service), as round 3's.
    assert 24 * WIRE / 1.5 <= found.evidence["buffer_estimate_bytes"] <= 25 * WIRE * 1.5
    assert run(overrun_ctx, min_lost_packets=max(lost[3], lost[4]) + 1) == []


def test_quiet_when_the_round_did_not_grow(overrun_ctx) -> None:
    # Round 3 is twice round 2; asking for more growth than that rules slow start out.
    assert run(overrun_ctx, min_growth_factor=2.5) == []


def test_growth_is_judged_against_the_largest_round_before(overrun_ctx) -> None:
    # Round 3 (80) is twice round 2 (40), the largest before it: 2.0 passes, 2.01 does not.
    assert len(run(overrun_ctx, min_growth_factor=2.0)) == 1
    assert run(overrun_ctx, min_growth_factor=2.01) == []


# --- a paced start-up (the lab sweep) ---------------------------------------------------------

SWEEP = Path(__file__).resolve().parents[1] / "fixtures" / "sweep"


def _sweep_pair(name: str) -> tuple[dict[str, Any], Analysis]:
    """A sweep scenario's truth, and the analysis of its sender and receiver captures."""
    from tracekit.capture import read_capture
    from tracekit.pipeline import analyze

    folder = SWEEP / name
    truth = json.loads((folder / "truth.json").read_text())
    analysis = analyze(
        read_capture(next(folder.glob("sender.pcap*"))),
        read_capture(next(folder.glob("receiver.pcap*"))),
    )
    return truth, analysis


@pytest.mark.parametrize("name", ["bbr_0.1bdp", "bbr_0.5bdp", "initcwnd40_bbr_0.1bdp"])
def test_a_paced_start_up_measures_the_bottleneck_not_the_pacer(name: str) -> None:
    # BBR paces each start-up round at a gain over the rate the round before delivered, so
    # the ACK line across a round shows the pacer's rate, below the bottleneck's: s is then
    # the path's rate, and eq. 1 gives the configured buffer.
    truth, analysis = _sweep_pair(name)
    assert truth["sender"]["congestion_control"] == "bbr"
    doc = analysis.to_dict()
    found = [f for f in doc["findings"] if f["kind"] == KIND]
    assert found, "the start-up lost a block at the bottleneck (truth: network drops)"
    ev = found[0]["evidence"]
    path = truth["path"]
    assert ev["bottleneck_bps"] == pytest.approx(path["bottleneck_rate_bps"], rel=0.1)
    configured = path["bottleneck_buffer_bytes"]
    assert configured / 1.5 <= ev["buffer_estimate_bytes"] <= configured * 1.5


def test_a_queue_before_a_path_step_is_read_over_its_own_paths_floor() -> None:
    # Slow start overruns a quarter-BDP buffer on a 100 ms path, which 3 s later steps down to
    # 40 ms: every packet after the step takes 30 ms less each way. Over the least one-way
    # delay of the whole transfer, the overrun's packets read that 30 ms as queue; over the
    # floor of the path they crossed, their wait is the configured buffer's.
    truth, analysis = _sweep_pair("delay_step_down_reno_100_40ms")
    steps = truth["path"]["delay_schedule"]["steps"]
    assert [s["rtt_ms"] for s in steps] == [40.0]
    doc = analysis.to_dict()
    (found,) = [f for f in doc["findings"] if f["kind"] == KIND]
    assert found["end_s"] < steps[0]["at_s"]
    assert found["evidence"]["buffer_basis"] == "queue_wait"
    configured = truth["path"]["bottleneck_buffer_bytes"]
    assert configured / 1.5 <= found["evidence"]["buffer_estimate_bytes"] <= configured * 1.5
    assert any(f["kind"] == "path_change" for f in doc["findings"])


def test_with_both_captures_the_buffer_is_the_full_queues_wait() -> None:
    # CUBIC paced at 87% of 40 Mbit/s lets its first window into a buffer of three frames in
    # bursts of a few packets: its mean rate, 1.3 times the path's, queues by eq. 1 barely
    # more than it lost. The packets that got in after the first loss waited behind a full
    # buffer: their wait at the bottleneck's rate, read from their arrivals, is the buffer.
    # After its last loss the pacer's bursts come slower than the path drains them, and the
    # round's later packets wait less: read up to the last loss (and at least three), the
    # wait is the buffer within a fifth; over the whole round after the first loss, 0.83.
    truth, analysis = _sweep_pair("paced_cubic_40m_5ms_initcwnd40")
    doc = analysis.to_dict()
    (found,) = [f for f in doc["findings"] if f["kind"] == KIND and f["direction"] == "a2b"]
    ev = found["evidence"]
    path = truth["path"]
    assert ev["buffer_basis"] == "queue_wait"
    # The tbf's rate, which counts the same wire bytes.
    assert ev["bottleneck_bps"] == pytest.approx(path["bottleneck_rate_bps"], rel=0.05)
    configured = path["bottleneck_buffer_bytes"]
    assert configured / 1.2 <= ev["buffer_estimate_bytes"] <= configured * 1.2
    off = abs(np.log(ev["buffer_estimate_bytes"] / configured))
    assert off < abs(np.log(ev["buffer_eq1_bytes"] / configured))


def test_with_both_captures_the_queue_ahead_is_read_on_the_way_there() -> None:
    # A 1.4 ms path with a buffer of four and a half packets: the ACK of the overrun burst's
    # first packet came milliseconds late (the receiving host's own delay of it), read as
    # tens of kB already queued. Its one-way delay says the queue was about the buffer.
    truth, analysis = _sweep_pair("bbr_76m_1ms_rcvbuf_60k")
    doc = analysis.to_dict()
    (found,) = [f for f in doc["findings"] if f["kind"] == KIND and f["direction"] == "a2b"]
    configured = truth["path"]["bottleneck_buffer_bytes"]
    assert found["evidence"]["queue_at_start_bytes"] <= configured * 1.5
    assert configured / 1.5 <= found["evidence"]["buffer_estimate_bytes"] <= configured * 1.5


@pytest.mark.parametrize(
    "name",
    [
        "overrun_reno_30m_50ms",
        "overrun_reno_10m_10ms",
        "initcwnd40_reno_0.1bdp",
        "buffer_reno_0.1bdp",
    ],
)
def test_a_lost_packet_met_a_full_queue(name: str) -> None:
    # A tbf drops a packet only when its queue is full: the queue a packet lost between the
    # captures met is the configured buffer. It is read from the last packet before it that
    # arrived (its one-way delay over the least, less the gap between the two departures), as
    # an overrun burst whose first packet was lost needs it (a burst longer than the round
    # trip meets the queue the round before left).
    from tracekit.detectors.slow_start_overrun import _one_way_wait_s

    truth, analysis = _sweep_pair(name)
    assert analysis.merge is not None
    sent = analysis.merge.transmissions_of(0, 0)
    lost = np.flatnonzero(sent["fate"].astype(str).to_numpy() == "network_drop")
    assert lost.size == truth["drops"]["network"]
    rate, buffer = truth["path"]["bottleneck_rate_bps"], truth["path"]["bottleneck_buffer_bytes"]
    for row in lost:
        wait = _one_way_wait_s(sent, float(sent["sender_t_s"].iloc[row]))
        assert wait is not None
        assert buffer / 1.5 <= wait * rate / 8 <= buffer * 1.5


def test_the_initial_trains_overflow_is_one_block_across_the_rounds(tmp_path: Path) -> None:
    # 10 packets at 100 Mbit/s into 30 Mbit/s with room for 5 waiting: the initial window
    # queues 7 and loses 2; its first ACKs come back 1 ms later, while its queue still drains,
    # and release packets into the same full queue. Every one of those was lost before the
    # sender could know of any loss: one overflow, the initial train's (eq. 1, N_b = 10).
    pkts, dropped, round_of = simulate(
        s_bps=30e6, f_bps=100e6, buffer_packets=5, rtt_s=1e-3, max_segments=300
    )
    by_round = lost_by_round(dropped, round_of)
    assert 0 < by_round[0] < SlowStartOverrun.Config().min_lost_packets <= by_round[1]
    (f,) = detect(pkts, tmp_path / "first.pcap")
    assert f.evidence["round"] == 0
    assert f.evidence["lost_packets"] == by_round[0]
    assert 6 * WIRE / 1.5 <= f.evidence["buffer_estimate_bytes"] <= 6 * WIRE * 1.5


def test_an_initial_window_longer_than_the_round_trip_is_one_train(tmp_path: Path) -> None:
    # An initial window of 40 packets leaving at 127 Mbit/s takes 3.8 ms, three round trips of
    # a 1.2 ms path: its first ACKs come back while it is still leaving, and what they release
    # follows it without a pause. Into 51 Mbit/s with room for 14 waiting, the window alone
    # queues 24 (eq. 1, N_b (f - s) / f) and overflows at its own 25th packet, after the first
    # ACK: the initial train's overrun, however the capture's first ACK divides its rounds.
    pkts, dropped, round_of = simulate(
        s_bps=51e6, f_bps=127e6, buffer_packets=14, rtt_s=1.2e-3, iw=40, max_segments=400
    )
    by_round = lost_by_round(dropped, round_of)
    assert by_round[0] >= SlowStartOverrun.Config().min_lost_packets
    (f,) = detect(pkts, tmp_path / "train.pcap")
    assert f.evidence["round"] == 0
    assert f.evidence["overrun_round_packets"] >= 40
    assert f.evidence["lost_packets"] >= by_round[0]
    assert 15 * WIRE / 1.5 <= f.evidence["buffer_estimate_bytes"] <= 15 * WIRE * 1.5


def test_a_pause_before_the_first_ack_does_not_end_the_initial_train(tmp_path: Path) -> None:
    # 10 packets at 100 Mbit/s into 11 Mbit/s with room for 3 waiting, the second a
    # millisecond late (the NIC's watchdog): the first ACK comes back after the fifth, and the
    # initial window's last five, already let out, meet the queue the four before them built
    # and are lost. Before any ACK the sender had nothing to wait for: the pause was its
    # device's, and the overrun is the initial train's (eq. 1, N_b = 10), not the next round's.
    pkts, dropped, round_of = simulate(
        s_bps=11e6, f_bps=100e6, buffer_packets=3, rtt_s=0.5e-3, max_segments=300,
        first_pause_s=1e-3,
    )  # fmt: skip
    by_round = lost_by_round(dropped, round_of)
    assert by_round[0] >= SlowStartOverrun.Config().min_lost_packets
    (f,) = detect(pkts, tmp_path / "pause.pcap")
    assert f.evidence["round"] == 0
    assert f.evidence["lost_packets"] >= by_round[0]


def test_a_first_round_overrun_in_the_sweep_is_the_initial_windows() -> None:
    # Eq. 1 with the configured rates and buffer: the initial window of 10 frames leaving at
    # the sender's NIC rate queues more than the tbf holds, so its own tail overflows, and the
    # next round's first packets meet the queue it left.
    truth, analysis = _sweep_pair("overrun_reno_30m_10ms")
    path = truth["path"]
    f_bps, s_bps = path["sender_nic_rate_bps"], path["bottleneck_rate_bps"]
    configured = path["bottleneck_buffer_bytes"]
    assert 10 * (f_bps - s_bps) / f_bps * (path["mtu_bytes"] + 14) > configured
    doc = analysis.to_dict()
    (found,) = [f for f in doc["findings"] if f["kind"] == KIND]
    ev = found["evidence"]
    assert ev["round"] == 0
    assert 1 <= ev["lost_packets"] <= truth["drops"]["network"]
    assert configured / 1.5 <= ev["buffer_estimate_bytes"] <= configured * 1.5


def test_the_bottleneck_rate_is_read_from_arrivals_only_where_one_rate_served_them() -> None:
    # Twelve 1514-byte packets sent 10 us apart reach the receiver 121.12 us apart: a queue
    # served at 100 Mbit/s. Merged by GRO into records of three (one frame number each), their
    # times are the merge's, not the wire's; spaced unevenly, no one rate served them.
    sent = np.arange(12) * 10e-6
    gap = 1514 * 8 / 100e6
    arrived = 0.01 + np.arange(12) * gap
    mine = pd.DataFrame(
        {"sender_t_s": sent, "receiver_t_s": arrived, "receiver_frame": np.arange(12) + 1}
    )
    assert _arrival_rate_bps(mine, sent, 1514) == pytest.approx(100e6)
    merged = mine.assign(receiver_frame=np.arange(12) // 3 + 1)
    assert _arrival_rate_bps(merged, sent, 1514) is None
    uneven = mine.assign(receiver_t_s=0.01 + np.cumsum(np.tile([gap, 4 * gap], 6)))
    assert _arrival_rate_bps(uneven, sent, 1514) is None
    # A packet dropped at the bottleneck's queue takes none of its time: the others still
    # leave it one packet time apart.
    kept = np.arange(12) != 5
    lost = mine.assign(receiver_t_s=np.where(kept, 0.01 + (np.cumsum(kept) - 1) * gap, np.nan))
    assert _arrival_rate_bps(lost, sent, 1514) == pytest.approx(100e6)
