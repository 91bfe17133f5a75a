"""path_change: a step of the path's base RTT, from both captures or from the sender's alone.

The lab's relay changed its delay mid-transfer on a schedule its truth records; every other
sweep row ran on a relay whose delay held, whatever queue the transfer built.
"""

from __future__ import annotations

import json
import struct
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import zstandard
from click.testing import CliRunner
from tracekit.cli.main import cli

from tests.helpers.exchange import lan_stepped_path, stepped_path
from tracekit.capture import read_capture
from tracekit.detectors._rtt_steps import rtt_steps, too_short
from tracekit.pipeline import analyze

SWEEP = Path(__file__).resolve().parents[1] / "fixtures" / "sweep"
STEPS = [
    "delay_step_20_120ms",
    "delay_step_120_20ms",
    "delay_step_cubic_20_120ms",
    "delay_step_300_600ms",
    "delay_step_reno_50_100ms",
]


def _findings(name: str, receiver: bool) -> tuple[list[dict[str, Any]], dict[str, Any]]:
    folder = SWEEP / name
    rcv = read_capture(folder / "receiver.pcap.zst") if receiver else None
    doc = analyze(read_capture(folder / "sender.pcap.zst"), rcv).to_dict()
    truth = json.loads((folder / "truth.json").read_text())
    return [f for f in doc["findings"] if f["kind"] == "path_change"], truth


@pytest.mark.parametrize("receiver", [False, True], ids=["sender_alone", "both_captures"])
@pytest.mark.parametrize("name", STEPS)
def test_a_relay_delay_step_is_found_with_each_phase_rtt(name: str, receiver: bool) -> None:
    found, truth = _findings(name, receiver)
    (f,) = found
    ev = f["evidence"]
    (step,) = truth["path"]["delay_schedule"]["steps"]
    true_rtts = [truth["path"]["rtt_ms"] / 1e3, step["rtt_ms"] / 1e3]
    assert ev["steps_count"] == 1
    # Each phase's base RTT within 5% of the relay's (its serialisation adds well under that).
    for ours, true in zip(ev["phase_rtts_s"], true_rtts, strict=True):
        assert abs(ours - true) <= 0.05 * true
    # The step's time: the relay's schedule counts from the SYN, the sender's first packet. The
    # floors are read in bins of four round trips of the shorter phase, and a bin that holds
    # the step holds samples of the old path too: it is placed at the edge of a bin after it,
    # within two bins.
    assert abs(ev["step_times_s"][0] - step["at_s"]) <= 8 * min(true_rtts)
    assert ev["measured_where"] == (
        "both directions' delays (two captures)"
        if receiver
        else "the RTT floor at the sender (one capture)"
    )
    if not receiver:
        assert "another flow's standing queue" in f["explanation"]


@pytest.mark.parametrize(
    "name",
    [
        # The transfer's own queue raised its RTT floor several-fold (1 ms paths with a buffer
        # of many RTTs; a buffer of 3 BDP; BBR probing for bandwidth), or a stall left only a
        # few samples on one side, or raised the floor of the span before the window reopened
        # but not of the phase before it: no path change, the relay's delay held.
        "rtt_1ms",
        "buffer_reno_3bdp",
        "buffer_cubic_3bdp",
        "bbr_100m_10ms",
        "stall_2500ms",
        "stall_1650ms_51m_11ms",
        "lan_stall",
        "lan_reno",
    ],
)
def test_a_transfer_s_own_queue_is_no_path_change(name: str) -> None:
    found, truth = _findings(name, receiver=False)
    assert not truth["path"].get("delay_schedule")
    assert found == []


def test_a_path_that_shortened_under_a_standing_window_quotes_the_path_s_rtts(
    tmp_path: Path,
) -> None:
    # A crafted pair: the path's RTT falls 334 -> 134 ms at 2.2 s of a 7.6 s transfer while a
    # window sized for the longer path stands 200 ms deep in the queue until the last second.
    # The sender's RTT samples of the second phase sit on that queue; the finding quotes the
    # path's floors, the relay-like construction's 334 and 134 ms.
    sender, receiver = stepped_path(
        tmp_path,
        rtt_s=(0.334, 0.134),
        step_s=2.2,
        end_s=7.6,
        offset_s=3.7,
        skew_ppm=-30.0,
        standing_s=0.200,
    )
    doc = analyze(read_capture(sender), read_capture(receiver)).to_dict()
    (f,) = [f for f in doc["findings"] if f["kind"] == "path_change"]
    assert f["evidence"]["phase_rtts_s"] == pytest.approx([0.334, 0.134], abs=100e-6)
    # The data's floor falls only as the queue drains at the end: the two directions' slopes
    # over the second phase disagree by far more than two clocks could, and analyze says why.
    out = CliRunner().invoke(cli, ["analyze", str(sender), "--receiver", str(receiver)]).output
    (clock_line,) = [line for line in out.splitlines() if line.startswith("receiver clock:")]
    assert "a queue's trend, no clock drifts so fast" in clock_line
    assert "path change at" in out


def _lone_late_ack() -> tuple[list[np.ndarray], np.ndarray]:
    """A standing queue at 24 Mbit/s with one lone segment's late ACK (below): the samples'
    departures, RTTs and flights, and whether each one's ACK was owed at once."""
    rate = 3e6  # bytes per second
    departure, rtt, flight, owed = [], [], [], []
    for i in range(20):  # the first round: one segment in flight, queue-free at 1 ms
        departure.append(i * 0.25e-3)
        rtt.append(1e-3)
        flight.append(1448)
        owed.append(True)
    lone = 0.59
    for t in np.arange(5e-3, 1.0, 0.5e-3):
        if lone - 0.004 <= t < lone + 0.008:
            continue
        bytes_in_flight = 20_000 + 5_000 * ((t % 0.1) / 0.1) if t < lone else 15_000
        departure.append(float(t))
        rtt.append(bytes_in_flight / rate)
        flight.append(int(bytes_in_flight))
        owed.append(True)
    departure.append(lone)
    rtt.append(1.12 * 24_616 / rate)
    flight.append(24_616)
    owed.append(False)
    order = np.argsort(departure)
    return [np.asarray(x)[order] for x in (departure, rtt, flight)], np.asarray(owed)[order]


def test_a_lone_segments_late_ack_is_no_evidence_of_the_paths_round_trip() -> None:
    # A standing queue at 24 Mbit/s: every sample's RTT is its flight over the rate (no
    # sample is queue-free), its flight climbing 20 to 25 kB, cut to 15 kB by a loss. The one
    # sample just before the loss is a lone segment's ACK that waited (the segment after it
    # was lost, or the delayed-ACK timer ran): 12% over its flight's drain time, the only
    # sample of its bin. Taken as the path's round trip it makes the fall of the floor to the
    # cut window's queue a path change; an ACK not owed at once is no such evidence.
    args, at_once = _lone_late_ack()
    rate = 3e6
    # Taken as owed at once, the lone sample reads as a longer path, and a fall is called.
    assert rtt_steps(*args, rate * 8, 0.0)
    assert rtt_steps(*args, rate * 8, 0.0, at_once) == ()


def test_samples_too_few_for_a_step_each_side_are_told_before_the_path_is_measured() -> None:
    # `too_short` lets a direction skip measuring its path's rate and its host's time (a load
    # test's thousands of short connections): it must say so only where no step can be found
    # whatever those are. The samples above hold a step (taken as all owed at once); every
    # prefix of them too short for a span of bins each side of a step finds none, at any rate.
    (departure, rtt, flight), _ = _lone_late_ack()
    assert not too_short(departure, rtt)
    assert rtt_steps(departure, rtt, flight, 3e6 * 8, 0.0)
    short = 0
    for n in range(0, departure.size, 7):
        if too_short(departure[:n], rtt[:n]):
            short += 1
            for bps in (1e5, 2.4e7, 1e10):
                assert rtt_steps(departure[:n], rtt[:n], flight[:n], bps, 0.0) == ()
    assert short > 5


@pytest.mark.parametrize(("step_s", "called"), [(10e-6, False), (200e-6, True)])
def test_a_step_between_the_captures_smaller_than_the_senders_answer_is_the_hosts(
    tmp_path: Path, step_s: float, called: bool
) -> None:
    # A LAN: 5 us each way between the two capture points, a sender that answers each ACK in
    # 40 us. Both captures show the delays between them step by 10 us for the second half:
    # the merge sees it, but the sender adds four times that to every round trip itself (a
    # veth pair's floor stepped by 2.9 us for 190 ms under a host that answered in 39 us), and
    # no window or rate of the transfer's moves with it. A step of 200 us, five turnarounds,
    # is the path's, and analyze says so.
    sender, receiver = lan_stepped_path(tmp_path, step_s=step_s, turnaround_s=40e-6)
    result = analyze(read_capture(sender), read_capture(receiver))
    assert result.merge is not None and result.merge.clock is not None
    assert len(result.merge.clock.phases) == 2
    steps = [f for f in result.findings if f.kind == "path_change"]
    assert bool(steps) is called
    (verdict,) = [f for f in result.findings if f.kind == "rate_limit_cause"]
    assert ("then" in verdict.summary) is called
    out = CliRunner().invoke(cli, ["analyze", str(sender), "--receiver", str(receiver)]).output
    assert ("path change at" in out) is called


UNDER_QUEUE = "delay_step_under_queue_cubic_1.5_7ms"
WAY_BACK = "the ACKs' one-way delay against the receiving host's TCP clock (timestamps)"


def _rewrite(
    name: str, out: Path, shift_after_s: float = np.inf, wrap_after_ticks: int | None = None
) -> Path:
    """The sweep row's sender capture, its records rewritten: those stamped `shift_after_s`
    or more after the first moved 10 ms later (the capture's clock stepped by NTP), and the
    receiver's TCP timestamp values moved (modulo 2**32) so that its counter wraps
    `wrap_after_ticks` after its first value."""
    raw = (
        zstandard.ZstdDecompressor()
        .decompressobj()
        .decompress((SWEEP / name / "sender.pcap.zst").read_bytes())
    )
    head, body = bytearray(raw[:24]), bytearray(raw[24:])
    assert raw[:4] == b"\xd4\xc3\xb2\xa1"  # little-endian microseconds
    at, first, offset = 0, None, None
    while at + 16 <= len(body):
        sec, usec, caplen, _ = struct.unpack_from("<IIII", body, at)
        t = sec + usec / 1e6
        first = t if first is None else first
        if t - first >= shift_after_s:
            usec += 10_000
            sec, usec = sec + usec // 1_000_000, usec % 1_000_000
            struct.pack_into("<II", body, at, sec, usec)
        frame = at + 16
        ip = frame + 14
        if wrap_after_ticks is not None and body[ip + 12 : ip + 16] == bytes([10, 77, 0, 2]):
            tcp = ip + (body[ip] & 0x0F) * 4
            end, o = tcp + (body[tcp + 12] >> 4) * 4, tcp + 20
            while o < min(end, frame + caplen):
                kind = body[o]
                if kind == 0:
                    break
                if kind == 1:
                    o += 1
                    continue
                if kind == 8:
                    (value,) = struct.unpack_from(">I", body, o + 2)
                    if offset is None:
                        offset = (1 << 32) - value - wrap_after_ticks
                    struct.pack_into(">I", body, o + 2, (value + offset) % (1 << 32))
                o += body[o + 1]
        at = frame + caplen
    path = out / f"{name}.pcap"
    path.write_bytes(bytes(head + body))
    return path


def test_a_step_under_a_standing_queue_is_told_by_the_way_back() -> None:
    # CUBIC's window, capped below a buffer of about a BDP, keeps a standing queue of 16 ms on
    # a path of 1.5 ms: when the relay's RTT steps to 7 ms at 2.2 s, the queue takes up the
    # change and the sender's RTT floor stays at 17.9 ms either side. The ACKs' one-way delay,
    # read against the receiving host's TCP timestamps, steps by the relay's 2.75 ms (its step
    # split evenly both ways); the sending host's against its own capture does not.
    found, truth = _findings(UNDER_QUEUE, receiver=False)
    (f,) = found
    ev = f["evidence"]
    (step,) = truth["path"]["delay_schedule"]["steps"]
    assert ev["measured_where"] == WAY_BACK
    assert ev["steps_count"] == 1
    assert abs(ev["step_times_s"][0] - step["at_s"]) <= 0.05
    rev_change_s = (step["rev_ms"] - truth["path"]["delay_schedule"]["initial_rev_ms"]) / 1e3
    assert ev["way_back_changes_s"][0] == pytest.approx(rev_change_s, abs=0.5e-3)
    # The round trip's floor on both sides is the standing queue's, not the path's.
    before, after = ev["round_trip_floors_s"]
    assert after == pytest.approx(before, rel=0.05)
    assert before > 5 * truth["path"]["rtt_ms"] / 1e3
    assert "phase_rtts_s" not in ev


def test_a_receivers_tcp_clock_that_wraps_still_tells_the_way_back(tmp_path: Path) -> None:
    # The receiving host's timestamp counter passes 2**32 a second into the transfer (RFC
    # 7323 5.2: values are read modulo 2**32): the step is found as before.
    path = _rewrite(UNDER_QUEUE, tmp_path, wrap_after_ticks=1000)
    values = [p["tsval"] for p in read_capture(path).packets.to_pylist() if p["tsval"]]
    assert max(values) > 0xFFFF0000 and min(values) < 0x0000FFFF
    doc = analyze(read_capture(path)).to_dict()
    (f,) = [f for f in doc["findings"] if f["kind"] == "path_change"]
    assert f["evidence"]["measured_where"] == WAY_BACK
    assert f["evidence"]["way_back_changes_s"][0] == pytest.approx(2.75e-3, abs=0.5e-3)


@pytest.mark.parametrize("name", ["base", "rtt_5ms"])
def test_a_capture_clock_stepped_by_ntp_is_no_path_change(name: str, tmp_path: Path) -> None:
    # The sender's capture clock jumps 10 ms ahead 2 s into the transfer: the ACKs' arrivals
    # against the receiver's timestamps step by 10 ms, and the data's departures against the
    # sender's own timestamps step with them. The relay's delay held: no path change.
    assert not json.loads((SWEEP / name / "truth.json").read_text())["path"].get("delay_schedule")
    path = _rewrite(name, tmp_path, shift_after_s=2.0)
    doc = analyze(read_capture(path)).to_dict()
    assert [f for f in doc["findings"] if f["kind"] == "path_change"] == []
