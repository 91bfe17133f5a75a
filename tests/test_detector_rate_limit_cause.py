"""rate_limit_cause: one verdict per direction, its shares scored against the kernel's account.

The lab records the sender's TCP_INFO at the end of each transfer: tcpi_busy_time,
tcpi_rwnd_limited and tcpi_sndbuf_limited (Linux's tcp_chrono). The verdict's shares of the
time must be within 10 points of the kernel's, and its class the one the kernel gives most time.
"""

from __future__ import annotations

import functools
import itertools
import json
from pathlib import Path
from typing import Any

import numpy as np
import numpy.typing as npt
import pytest

from tests.helpers.crafting import C_ISN as C
from tests.helpers.crafting import CLIENT, SERVER, tcp, write
from tests.helpers.crafting import S_ISN as S
from tests.helpers.independent import tshark_initial_rtt_s
from tests.helpers.lab_captures import CAPTURES, context, lab_findings, truth
from tracekit.capture import read_capture
from tracekit.detectors import run_detectors
from tracekit.detectors._limits import _longest_holds, _queue_limit, smoothed_rtt_at
from tracekit.detectors._measure import (
    data_directions,
    rtt_phases,
    segment_size_bytes,
    serialisation_s,
)
from tracekit.detectors.rate_limit_cause import (
    KERNEL_CLASSES,
    LABELS,
    RateLimitCause,
    _burst_starts,
    _opened_by_ack,
    _window_edges,
)
from tracekit.findings import Finding, Severity
from tracekit.pipeline import analyze

SWEEP_DIR = Path(__file__).resolve().parents[1] / "fixtures" / "sweep"

TCP_SCENARIOS = sorted(
    p.name for p in CAPTURES.iterdir() if (p / "truth.json").exists() and p.name != "udp_loss"
)


def verdict(name: str) -> Finding:
    found = [f for f in lab_findings(name, RateLimitCause) if f.direction == "a2b"]
    assert len(found) == 1, name
    return found[0]


def kernel_shares(name: str) -> dict[str, float]:
    """The sender kernel's account of its time (tcp_chrono), as shares of the transfer."""
    sender = truth(name)["transfer"]["sender"]
    info, elapsed = sender["tcp_info"], sender["elapsed_s"]
    busy = info["busy_time"] / 1e6
    rwnd = info["rwnd_limited"] / 1e6
    # A send buffer's stall is busy time, as the verdict counts it (tcpi_sndbuf_limited stays
    # 0 for a blocking writer in these runs).
    return {
        "application": max(elapsed - busy, 0.0) / elapsed,
        "receive_window": rwnd / elapsed,
        "network": (busy - rwnd) / elapsed,
    }


@pytest.mark.parametrize("name", TCP_SCENARIOS)
def test_the_shares_are_the_kernels_within_ten_points(name: str) -> None:
    f = verdict(name)
    kernel = kernel_shares(name)
    for cls in KERNEL_CLASSES:
        assert f.evidence[f"{cls}_fraction"] == pytest.approx(kernel[cls], abs=0.10), cls
    assert f.evidence["limit_class"] == max(kernel, key=lambda c: kernel[c])


@pytest.mark.parametrize("name", TCP_SCENARIOS)
def test_one_verdict_whose_phases_tile_the_transfer(name: str) -> None:
    f = verdict(name)
    assert f.severity is Severity.INFO
    assert f.evidence["cause"] in LABELS
    shares = [f.evidence[f"{c}_fraction"] for c in KERNEL_CLASSES]
    assert sum(shares) == pytest.approx(1.0)
    starts, ends = f.evidence["phase_starts_s"], f.evidence["phase_ends_s"]
    codes = f.evidence["phase_cause_codes"]
    assert starts[0] == pytest.approx(f.start_s) and ends[-1] == pytest.approx(f.end_s)
    for end, start in zip(ends[:-1], starts[1:], strict=True):
        assert end == pytest.approx(start)
    # Neighbours differ (they would have merged), and none but the last is shorter than a
    # few round trips (the last may be cut by the transfer's end).
    assert all(x != y for x, y in itertools.pairwise(codes))
    rtt = f.evidence["rtt_s"]
    assert all(b - a >= 2.9 * rtt for a, b in list(zip(starts, ends, strict=True))[:-1])


def test_small_receive_buffer_is_the_receive_window() -> None:
    f = verdict("window_limited")
    assert f.evidence["cause"] == "receive_window"
    assert f.summary.startswith("a2b limited by receive window")


def test_slow_reader_is_the_receive_window() -> None:
    assert verdict("window_oscillation").evidence["cause"] == "receive_window"


def test_buffer_overrun_starts_in_slow_start_then_meets_congestion() -> None:
    f = verdict("slow_start_overrun")
    codes = [LABELS[c] for c in f.evidence["phase_cause_codes"]]
    assert codes[0] == "slow_start"
    assert "congestion" in codes
    assert f.evidence["limit_class"] == "network"


def test_a_paced_sender_is_limited_by_its_pacing() -> None:
    # SO_MAX_PACING_RATE at 80% of the bottleneck: segments leave on the pacing timer, not
    # in answer to ACKs, below the path's rate (the build of the paced_sender capture).
    f = verdict("paced_sender")
    assert f.evidence["cause"] == "pacing"
    assert f.evidence["rate_bps"] < f.evidence["path_rate_bps"]


@pytest.mark.parametrize("name", ["bursty_sender", "slow_start_overrun", "network_drops"])
def test_ack_clocked_senders_are_not_called_paced(name: str) -> None:
    assert verdict(name).evidence["pacing_fraction"] < 0.1


# CUBIC under a window below the path's BDP, on paths of 1 ms, 10 ms and 50 ms; a pacer at 60%
# of a 25 ms path with the window open (the kernel: never the window's).
WINDOW_HELD_OR_NOT = ("rtt_1ms", "window_64k_10ms", "rate_50m", "base", "paced_reno_90m_25ms")


@pytest.mark.parametrize("name", WINDOW_HELD_OR_NOT)
def test_the_starts_the_window_held_follow_the_kernels_account(name: str) -> None:
    # The capture is taken after the sending host's queue, which holds what TCP small queues
    # let wait there: a window the kernel found shut shows that much room at the capture. The
    # starts after an ACK that the window held until that ACK are about as many, of all those
    # starts, as the kernel's receive-window share of its busy time.
    folder = SWEEP_DIR / name
    limits = json.loads((folder / "truth.json").read_text())["kernel_limits"]
    ctx = context(folder / "sender.pcap.zst")
    ((_, _, d),) = list(data_directions(ctx))
    mss = segment_size_bytes(d.segments)
    rtt = float(rtt_phases(ctx, d).rtt_s.min())
    t, ack_t = d.data["t_s"].to_numpy(), d.acks["t_s"].to_numpy()
    after, _, _ = _burst_starts(t, ack_t, 2 * (serialisation_s(t) or 0.0))
    smoothed = smoothed_rtt_at(d, ack_t, rtt)
    opened = _opened_by_ack(t, ack_t, after, _window_edges(d.data, d.acks, mss, smoothed))
    assert opened.mean() == pytest.approx(limits["rwnd_limited_share"], abs=0.15)


@pytest.mark.parametrize(
    "name",
    [
        # CUBIC paced at 80% of the bottleneck: pairs on the pacer's timer, an ACK landing
        # between the two segments of each pair.
        "paced_cubic_0.1bdp",
        # Paced at 80 Mbit/s: bursts of 1 ms of the pacing rate, back to back within.
        "paced_100m_10ms",
        "bbr_100m_10ms",
        # A pacer whose two-segment interval outlasts the round trip and the ACKs' spacing:
        # no ACK releases a burst, and its bursts keep the timer's interval.
        "paced_reno_6m_5ms",
        # Under three segments per round trip: a window of a few round trips holds a few
        # bursts, judged with the windows after it.
        "bbr_8m_4ms",
        # BBR at about the rate its 60 kB window allows on a 1.4 ms path: each burst answers
        # an ACK, yet the pacer's holds fill most of the time.
        "bbr_76m_1ms_rcvbuf_60k",
        # Unpaced: an ACK clock on a 10 ms path, and a LAN whose host answers its ACKs (8 us
        # apart) in batches tens of microseconds later.
        "base",
        "lan_stall",
    ],
)
def test_paced_departures_where_the_lab_paced_the_sender(name: str) -> None:
    # The lab's truth lists "paced" for a sender under BBR or SO_MAX_PACING_RATE and rules it
    # out for every other; bench/accuracy.py finds it when half the busy time left paced.
    folder = Path(__file__).resolve().parents[1] / "fixtures" / "sweep" / name
    labels = json.loads((folder / "truth.json").read_text())
    paced = "paced" in labels["labels"]
    assert paced or "paced" in labels["absent_labels"]
    doc = analyze(
        read_capture(folder / "sender.pcap.zst"), read_capture(folder / "receiver.pcap.zst")
    ).to_dict()
    (found,) = [
        f for f in doc["findings"] if f["kind"] == "rate_limit_cause" and f["direction"] == "a2b"
    ]
    assert (found["evidence"]["paced_departures_fraction"] >= 0.5) == paced


@pytest.mark.parametrize(
    "name",
    [
        # Reno and CUBIC paced at 80% of the path: in recovery and in slow start the
        # congestion window, not the pacer, holds them part of each round trip.
        "paced_reno_200ms",
        "paced_cubic_0.1bdp",
        "paced_cubic_1bdp",
        # (Not `bursty_writes_paced`: its samples, every 50.1 ms, alias its writes every 50 ms,
        # so they give one point of the write cycle, not its share: `samples_alias_writes`.)
        # A pacer whose path's RTT doubles: the window holds it while its flight catches up.
        "delay_step_300_600ms",
    ],
)
def test_the_paced_share_is_the_time_the_pacer_held_the_sender(name: str) -> None:
    # The sender's TCP_INFO samples every 50 ms say whether its pacer held it: data waiting
    # while both windows had room (fixtures.lab.sweep.pacer_held). The share of busy time
    # whose departures the pacer's timer held is that share, within two standard errors of
    # the samples' proportion; a window whose bursts answer their ACKs at once part of each
    # round trip is not the pacer's for all of its time.
    from fixtures.lab.sweep import pacer_held

    _, doc = _sweep_kernel(name)
    counted = pacer_held(doc)
    assert counted is not None
    held, busy = counted
    share = held / busy
    band = 2 * np.sqrt(max(share * (1 - share), 1 / busy) / busy)
    found = _sweep_verdict(name)["evidence"]["paced_departures_fraction"]
    assert found == pytest.approx(share, abs=band)


def test_quiet_without_round_trips(tmp_path: Path) -> None:
    # Data one way and no ACK at all: no RTT, so no phase can be sized or judged.
    packets = [tcp(i * 0.001, CLIENT, SERVER, 40000, 80, "A", 1 + 1000 * i, 7, 1000)
               for i in range(40)]  # fmt: skip
    ctx = context(write(tmp_path / "oneway.pcap", packets))
    assert run_detectors(ctx, [RateLimitCause]) == []


def test_units_follow_the_value() -> None:
    # A path of tens of Mbit/s and an RTT of tens of ms read as such, never "0.0 ms".
    summary = verdict("clean").summary
    assert " Mbit/s" in summary and " ms" in summary


def _sweep_direction(name: str):  # type: ignore[no-untyped-def]
    from tracekit.capture import read_capture
    from tracekit.connections import build_connections
    from tracekit.series import build_series

    root = Path(__file__).resolve().parents[1] / "fixtures" / "sweep" / name
    series = build_series(build_connections(read_capture(root / "sender.pcap.zst")))
    conn, direction = max(series.with_data(), key=lambda cd: series.data_segments(*cd))
    return series.of(conn, direction)


@pytest.mark.parametrize("name", ["lan_reno", "lan_offloads_on", "app_16k_100ms_20ms"])
def test_a_pause_within_the_senders_turnaround_is_not_the_applications(name: str) -> None:
    # A sender with data queued answers an ACK within its turnaround; a pause no longer than
    # that says nothing about an empty queue. On a LAN (RTT of microseconds) such pauses are
    # many; an application that writes every 100 ms pauses far longer.
    from tracekit.detectors._limits import APPLICATION, limit_states, turnaround_s
    from tracekit.detectors._measure import min_rtt_s, segment_size_bytes

    d = _sweep_direction(name)
    turnaround = turnaround_s(d)
    assert 0 < turnaround < 1e-3  # the host's time: microseconds, on any path
    start, end, state = limit_states(d, segment_size_bytes(d.segments), True, min_rtt_s(d))
    data_t = d.data["t_s"].to_numpy()
    app = np.flatnonzero(state == APPLICATION)
    assert app.size
    # Each application run ends when the sender sends again; the pause it is part of began
    # no later than the run and ended with that departure.
    resumed = data_t[np.minimum(np.searchsorted(data_t, end[app] - 1e-12), data_t.size - 1)]
    assert np.all(resumed - start[app] > turnaround)


@pytest.mark.parametrize(
    "name",
    ["app_16k_100ms_20ms", "app_64k_40ms_10ms", "bursty_writes_big_buffer", "bursty_writes_paced"],
)
def test_a_writes_short_tail_says_the_queue_emptied(name: str) -> None:
    # The lab's writer hands the socket the same number of bytes each time. A write that
    # leaves before the next one comes ends in a segment short of the MSS, so the new data
    # after such a tail starts a write: at a whole multiple of the write's size from the
    # first byte. No segment inside a write follows a short tail.
    from tracekit.detectors._limits import after_short_tail, wire_segment_bytes

    d = _sweep_direction(name)
    _, doc = _sweep_kernel(name)
    write = doc["scenario_config"]["write_chunk_bytes"]
    length = d.data["len"].to_numpy()
    seq = d.data["seq_rel"].to_numpy().astype(np.int64)
    end = d.data["end_rel"].to_numpy().astype(np.int64)
    bits = after_short_tail(end, length, wire_segment_bytes(length, d.peer_mss))
    flagged = np.unpackbits(bits, bitorder="little", count=end.size).astype(bool)
    # New data only: retransmissions start below the highest byte sent before them.
    new = seq >= np.r_[seq[0], np.maximum.accumulate(end)[:-1]]
    first = int(seq.min())
    starts = seq[flagged & new & (length > 0)] - first
    assert starts.size >= 5
    assert np.all(starts % write == 0)


@pytest.mark.parametrize("seed", range(6))
def test_short_tail_bits_follow_the_rule_across_blocks(
    seed: int, monkeypatch: pytest.MonkeyPatch
) -> None:
    # The flags are made a block at a time and kept a bit a segment; cut into blocks of 8 and
    # 16 rows, they must be the rule written out a segment at a time: a segment is flagged
    # when the last segment before it that reached the highest byte sent was short of a
    # whole segment. Retransmissions (ends below the highest) are not new data.
    from tracekit.detectors import _limits

    rng = np.random.default_rng(seed)
    n = int(rng.integers(2, 90))
    segment = 1000
    length = rng.choice([segment, segment, segment, 300, 0], size=n).astype(np.int64)
    end = np.cumsum(length) - rng.choice([0, 0, 0, 5000], size=n)
    expected = np.zeros(n, dtype=bool)
    high, last_short = -(2**62), False
    for j in range(n):
        expected[j] = last_short if j else False
        if end[j] >= high:
            high = int(end[j])
            last_short = length[j] % segment != 0
    for rows in (8, 16, 1 << 20):
        monkeypatch.setattr(_limits, "_BLOCK_ROWS", rows)
        bits = _limits.after_short_tail(end, length, segment)
        assert bits.size == (n + 7) // 8
        got = _limits.bit_at(bits, np.arange(n))
        np.testing.assert_array_equal(got, expected)


@pytest.mark.parametrize("name", ["app_16k_100ms_20ms", "app_64k_40ms_10ms"])
def test_a_writers_pauses_are_not_a_pacers_holds(name: str) -> None:
    # An unpaced CUBIC sender whose application writes on its own timer: each write leaves
    # after the last one's short tail was acknowledged, its queue empty. Those pauses are the
    # writer's; read as a timer's, they would make a pacer of a steady writer.
    from tracekit.detectors._limits import EMPTIED, pacer_bursts, pacer_held
    from tracekit.detectors._measure import min_rtt_s, segment_size_bytes

    _, doc = _sweep_kernel(name)
    assert "paced" in doc["absent_labels"]
    writes = doc["transfer"]["sender"]["writes"]
    d = _sweep_direction(name)
    mss, rtt = segment_size_bytes(d.segments), min_rtt_s(d)
    bursts = pacer_bursts(d, mss, rtt)
    assert bursts is not None
    # Each write but the first starts a burst from an empty queue (a few may join the last
    # write's flight while its ACKs are still coming).
    assert int(((bursts.flags & EMPTIED) > 0).sum()) >= 0.75 * (writes - 1)
    _, held = pacer_held(d, mss, rtt)
    assert held.sum() == 0


@pytest.mark.parametrize(
    "name", ["base_snap54", "base_midstream", "window_64k_300ms_midstream", "stall_2500ms_snap54"]
)
def test_the_least_shift_never_passes_the_handshakes(name: str) -> None:
    # Without the handshake the flight bounds the window scale shift from below; the shift
    # the receiver really used (its kernel's tcpi_snd_wscale, as the sender saw it) is never
    # smaller.
    import json

    from tracekit.detectors._limits import least_shift
    from tracekit.detectors._measure import segment_size_bytes

    d = _sweep_direction(name)
    root = Path(__file__).resolve().parents[1] / "fixtures" / "sweep" / name
    true_shift = json.loads((root / "truth.json").read_text())["kernel_limits"]["snd_wscale"]
    least = least_shift(d, segment_size_bytes(d.segments))
    assert least <= true_shift
    # These transfers filled the receiver's window at times, so the bound reaches the shift.
    assert least == true_shift


# The sweep's relay delay steps: 6x both ways paced, 6x up under CUBIC, 2x up at a
# satellite's scale, 2x up under Reno through a BDP of buffer.
DELAY_STEPS = [
    "delay_step_20_120ms",
    "delay_step_120_20ms",
    "delay_step_cubic_20_120ms",
    "delay_step_300_600ms",
    "delay_step_reno_50_100ms",
]


@pytest.mark.parametrize("receiver", [True, False], ids=["both_captures", "sender_alone"])
@pytest.mark.parametrize("name", DELAY_STEPS)
def test_each_path_phase_quotes_its_own_rtt(name: str, receiver: bool) -> None:
    # The relay's delay steps 6x both ways mid-transfer: the verdict counts its windows in
    # round trips of each phase and quotes each phase's RTT, within 5% of the relay's, from
    # both captures (the merge's phases) or the sender's alone (its RTT floor's steps).
    folder = Path(__file__).resolve().parents[1] / "fixtures" / "sweep" / name
    schedule = json.loads((folder / "truth.json").read_text())["path"]["delay_schedule"]
    (step,) = schedule["steps"]
    truth_rtts = (
        (schedule["initial_fwd_ms"] + schedule["initial_rev_ms"]) / 1e3,
        step["rtt_ms"] / 1e3,
    )
    receiver_capture = read_capture(folder / "receiver.pcap.zst") if receiver else None
    doc = analyze(read_capture(folder / "sender.pcap.zst"), receiver_capture).to_dict()
    (verdict,) = [f for f in doc["findings"] if f["kind"] == "rate_limit_cause"]
    assert verdict["evidence"]["path_phase_rtts_s"] == pytest.approx(truth_rtts, rel=0.05)


@pytest.mark.parametrize("receiver", [True, False], ids=["both_captures", "sender_alone"])
@pytest.mark.parametrize("name", DELAY_STEPS)
def test_no_verdict_phase_is_shorter_than_two_rtts_of_its_path_phase(
    name: str, receiver: bool
) -> None:
    # Windows start afresh at each path change, so no window mixes the two paths' round
    # trips, and every phase of the verdict lasts at least min_phase_rtts (3) round trips of
    # the path phase it starts in, the relay's 20 or 120 ms. (A cause that held across the
    # change is one phase of the verdict.)
    folder = Path(__file__).resolve().parents[1] / "fixtures" / "sweep" / name
    schedule = json.loads((folder / "truth.json").read_text())["path"]["delay_schedule"]
    (step,) = schedule["steps"]
    first_ms = schedule["initial_fwd_ms"] + schedule["initial_rev_ms"]
    receiver_capture = read_capture(folder / "receiver.pcap.zst") if receiver else None
    doc = analyze(read_capture(folder / "sender.pcap.zst"), receiver_capture).to_dict()
    (verdict,) = [f for f in doc["findings"] if f["kind"] == "rate_limit_cause"]
    ev = verdict["evidence"]
    (change,) = ev["path_phase_starts_s"]
    starts, ends = np.array(ev["phase_starts_s"]), np.array(ev["phase_ends_s"])
    rtt = np.where(starts < change, first_ms, step["rtt_ms"]) / 1e3
    assert ((ends - starts) >= 2 * rtt).all()


def _sweep_kernel(name: str) -> tuple[dict[str, float], dict[str, Any]]:
    """The sweep scenario's sender kernel account as shares of the transfer (tcp_chrono), and
    its truth."""
    root = Path(__file__).resolve().parents[1] / "fixtures" / "sweep" / name
    doc = json.loads((root / "truth.json").read_text())
    limits = doc["kernel_limits"]
    busy = limits["busy_time_us"] / 1e6
    elapsed = busy / limits["busy_share_of_transfer"]
    rwnd = limits["rwnd_limited_us"] / 1e6
    shares = {
        "application": max(elapsed - busy, 0.0) / elapsed,
        "receive_window": rwnd / elapsed,
        "network": max(busy - rwnd, 0.0) / elapsed,
    }
    return shares, doc


def _sweep_shares(name: str, tell_queued: bool = True) -> npt.NDArray[np.float64]:
    from tracekit.detectors._limits import limit_states, state_seconds
    from tracekit.detectors._measure import min_rtt_s, segment_size_bytes

    d = _sweep_direction(name)
    rtt = min_rtt_s(d)
    assert rtt is not None
    runs = limit_states(d, segment_size_bytes(d.segments), True, rtt, tell_queued=tell_queued)
    seconds = state_seconds(*runs)
    return seconds / seconds.sum()


@pytest.mark.parametrize(
    "name", ["lan_paced_on", "lan_offloads_on", "app_16k_100ms_20ms", "app_64k_1s_300ms"]
)
def test_only_an_empty_queue_is_the_applications(name: str) -> None:
    # A pacer at 800 Mbit/s on a veth pair waits on its timer with data queued (its TCP_INFO
    # shows unsent bytes in nearly every sample), and a CPU-bound writer copies each 64 KiB
    # write in while every byte sent is acknowledged: the kernel counts both busy. Writers of
    # 16 kB every 100 ms and 64 kB every second leave the queue empty three quarters and half
    # of the time. The application's share is the kernel's within 10 points; left to the
    # application, the pauses the capture cannot tell make the most that share can be.
    from tracekit.detectors._limits import APPLICATION

    kernel, _ = _sweep_kernel(name)
    shares = _sweep_shares(name)
    assert shares[APPLICATION] == pytest.approx(kernel["application"], abs=0.10)
    assert _sweep_shares(name, tell_queued=False)[APPLICATION] >= shares[APPLICATION]


@pytest.mark.parametrize("name", ["lan_paced_on", "lan_offloads_on", "lan_reno", "base"])
def test_the_wire_segment_is_the_senders_mss(name: str) -> None:
    # With segmentation offload the capture holds super-segments of whole MSS, the MSS itself
    # rarely: their common divisor is the sender's MSS (its TCP_INFO snd_mss), or a multiple
    # of it where a pacer sends the same number of segments each time (lan_paced_on), which
    # the receiver's MSS option brings back to the MSS.
    from tracekit.detectors._limits import wire_segment_bytes

    _, doc = _sweep_kernel(name)
    d = _sweep_direction(name)
    length = d.data["len"].to_numpy().astype(np.int64)
    snd_mss = doc["transfer"]["sender"]["tcp_info"]["snd_mss"]
    assert wire_segment_bytes(length, d.peer_mss) == snd_mss


@pytest.mark.parametrize(
    "name", ["rtt_1ms", "wscale_off_30m_1ms", "ack_drops_3of4", "reno_105m_2ms"]
)
def test_the_window_holds_the_sender_as_the_kernel_counts_it(name: str) -> None:
    # A 64 KiB window on a 1 ms path: while the congestion window is below it the room left
    # passes a third of the window, and Linux sends into it (the kernel: 10% not the
    # window's). Three of four ACKs dropped: each ACK releases four times as much, more than
    # TCP small queues let into the device at once, and the rest waits busy (the kernel: 23%).
    # An ACK clock on a 2 ms path whose device cuts a few of its releases: no pacer holds it,
    # and the window holds it all but a percent of the time (the kernel: 99%).
    from tracekit.detectors._limits import RECEIVE_WINDOW

    kernel, _ = _sweep_kernel(name)
    shares = _sweep_shares(name)
    assert shares[RECEIVE_WINDOW] == pytest.approx(kernel["receive_window"], abs=0.10)


PACED_UNDER_A_WINDOW = ["bbr_rcvbuf_24k_10ms", "bbr_rcvbuf_24k_50ms", "paced_reno_rcvbuf_24k_50ms"]


def _paced_readings(name: str) -> tuple[npt.NDArray[np.float64], npt.NDArray[np.float64]]:
    """The pacer's intervals read off the sender's capture where the timer released a burst
    (seconds per byte, with Linux's credit for a late burst), and the kernel's pacing rate
    (TCP_INFO, sampled every RTT) at each."""
    from tracekit.detectors._limits import ANSWERED, LATE_CREDIT, pacer_bursts
    from tracekit.detectors._measure import min_rtt_s, segment_size_bytes

    d = _sweep_direction(name)
    _, doc = _sweep_kernel(name)
    rtt = min_rtt_s(d)
    assert rtt is not None
    bursts = pacer_bursts(d, segment_size_bytes(d.segments), rtt)
    assert bursts is not None
    start, size, flags = bursts.start, bursts.size, bursts.flags
    credit = np.where(flags[:-1] & ANSWERED, LATE_CREDIT, 1.0)
    timer = (flags[1:] & ANSWERED) == 0
    per_byte = (np.diff(start) / (size[:-1] * credit))[timer]
    samples = doc["tcp_info_samples"]
    col = {f: i for i, f in enumerate(samples["fields"])}
    # The samples' clock starts at connect; the capture's at its first record.
    offset = samples["t0_epoch_s"] - doc["capture"]["counts"]["sender"]["first_epoch_s"]
    at = np.array([offset + r[col["t_ms"]] / 1000 for r in samples["rows"]])
    rate = np.array([r[col["pacing_rate"]] for r in samples["rows"]], dtype=np.float64)
    where = np.clip(np.searchsorted(at, start[:-1][timer]), 0, rate.size - 1)
    return per_byte, rate[where]


@pytest.mark.parametrize("name", PACED_UNDER_A_WINDOW)
def test_the_pacers_interval_is_read_where_its_timer_released_a_burst(name: str) -> None:
    # BBR and SO_MAX_PACING_RATE hold the sender B/P after a burst of B bytes (half that after
    # a burst sent late: Linux's credit for it). Where the next burst waited on the timer, its
    # start reads that interval: times the kernel's pacing rate, 1 at the median.
    per_byte, rate = _paced_readings(name)
    assert per_byte.size >= 8
    assert np.median(per_byte * rate) == pytest.approx(1.0, abs=0.1)


@pytest.mark.parametrize(
    ("name", "paced"),
    [(n, True) for n in PACED_UNDER_A_WINDOW]
    # Unpaced: CUBIC under a window, and under windows of 256 kB and 1 MB whose hosts answer
    # a few ACKs later than their turnaround (10 to 14 exact readings), each after an ACK.
    # And senders whose device (the lab's NIC shaper, whose watchdog fires late) cut the
    # ACKs' releases with no ACK between: 10 to 18 such waits each, most after a single
    # segment or, at 200 Mbit/s, after less than half of what a pacer at the delivery rate
    # lets go a turn; without those, fewer than 8 waits are left. At 105 Mbit/s on a path of
    # 2 ms the shaper cuts a few percent of the releases after 5 to 11 segments: fewer waits
    # than the host's tail, and of every size, where a pacer's turns are of one.
    + [("base", False), ("rtt_100ms", False), ("rcvbuf_256k", False), ("rcvbuf_1000k", False)]
    + [
        ("ack_drops_3of4", False),
        ("delay_step_cubic_20_120ms", False),
        ("delay_step_reno_50_100ms", False),
        ("rate_200m", False),
        ("reno_105m_2ms", False),
    ],
)
def test_the_window_waits_behind_the_pacer(name: str, paced: bool) -> None:
    # With the receive window far below the BDP, the window has no room after every burst,
    # but Linux asks its pacer first: the kernel counts the pacer's hold busy, and its
    # rwnd_limited share is well short of the window's time. Without a pacer (CUBIC unpaced)
    # no hold is told. Of the pacer's time (the window's whole time, less the kernel's
    # rwnd_limited), the holds give back at least half, and all within 10 points where the
    # pacer's rate held still (Reno's, at its SO_MAX_PACING_RATE); BBR's moves with its
    # gains and its estimate, and the holds read at one rate stand for those at another.
    from tracekit.detectors._limits import RECEIVE_WINDOW, pacer_holds
    from tracekit.detectors._measure import min_rtt_s, segment_size_bytes

    d = _sweep_direction(name)
    rtt = min_rtt_s(d)
    assert rtt is not None
    holds, _, _ = pacer_holds(d, segment_size_bytes(d.segments), rtt)
    assert (holds.size > 0) == paced
    if not paced:
        return
    kernel, doc = _sweep_kernel(name)
    shares = _sweep_shares(name)
    window_alone = 1.0 - kernel["application"]  # the window had no room all the busy time
    pacer = window_alone - kernel["receive_window"]
    assert abs(shares[RECEIVE_WINDOW] - kernel["receive_window"]) < pacer / 2
    if doc["sender"]["so_max_pacing_rate_bytes_per_s"]:
        assert shares[RECEIVE_WINDOW] == pytest.approx(kernel["receive_window"], abs=0.10)


@pytest.mark.parametrize(
    ("name", "timed"),
    [("bbr_56m_4ms", True), ("base", False), ("rtt_100ms", False), ("rate_200m", False)],
)
def test_a_pacer_in_step_with_its_acks_is_told_by_its_spacing(name: str, timed: bool) -> None:
    # BBR at the path's rate on a path of 4 ms lets a burst go every 0.86 ms, whatever its
    # size (2**-10 s of its rate), at a phase of its own against ACKs that come back in step
    # with it: the delays from the ACKs spread over their spacing, and their tail, the
    # turnaround, reads that phase. The starts keep their spacing tighter than the delays,
    # and the host's answer is its floor: a burst later than that after its ACK is the
    # timer's. The kernel (TCP_INFO) counted the receive window 4% of the time; the window
    # alone, had every burst answered an ACK, held the sender nearly all of it. Unpaced
    # Reno and CUBIC, ACK-clocked, keep no such spacing: their release stays the turnaround.
    from tracekit.detectors._limits import RECEIVE_WINDOW, pacer_bursts
    from tracekit.detectors._measure import min_rtt_s, segment_size_bytes, turnaround_s

    d = _sweep_direction(name)
    rtt = min_rtt_s(d)
    assert rtt is not None
    bursts = pacer_bursts(d, segment_size_bytes(d.segments), rtt)
    assert bursts is not None
    if not timed:
        assert bursts.release >= turnaround_s(d)
        return
    assert bursts.release < turnaround_s(d) / 2
    kernel, _ = _sweep_kernel(name)
    shares = _sweep_shares(name)
    assert shares[RECEIVE_WINDOW] == pytest.approx(kernel["receive_window"], abs=0.10)


def test_a_pacer_between_two_acks_is_read_at_its_rate() -> None:
    # A reader that takes 16 kB every 24.5 ms opens the window once per read: one ACK, and
    # BBR, pacing at the reader's rate, sends the 16 kB as two-segment bursts over the whole
    # cycle with no ACK between them. Those waits are many times what the device could still
    # have had to send, and each reads the kernel's pacing rate (TCP_INFO); the window had
    # room behind the pacer, and the kernel counted the receive window a quarter of the time,
    # not the half that the window's time alone would say.
    from tracekit.detectors._limits import RECEIVE_WINDOW

    name = "reader_16k_25ms_3ms"
    per_byte, rate = _paced_readings(name)
    # Past slow start BBR paces at under 1 MB/s here, against 2 MB/s of path: waits of
    # milliseconds that read that rate.
    slow = rate < 1e6
    assert slow.sum() >= 100
    assert np.median(per_byte[slow] * rate[slow]) == pytest.approx(1.0, abs=0.1)
    kernel, _ = _sweep_kernel(name)
    shares = _sweep_shares(name, tell_queued=False)
    assert shares[RECEIVE_WINDOW] == pytest.approx(kernel["receive_window"], abs=0.10)
    f = _sweep_verdict(name)
    assert f["evidence"]["receive_window_fraction"] == pytest.approx(
        kernel["receive_window"], abs=0.10
    )
    assert f["evidence"]["limit_class"] == "network"


def test_a_window_with_room_for_a_segment_did_not_hold_the_sender() -> None:
    # Slow start doubles CUBIC's congestion window each round against a 120 kB window: the
    # round of 80 segments leaves the window three segments of room. Linux asks its congestion
    # window first, and the kernel's samples (TCP_INFO every 50 ms) show it full, every
    # segment it allows unacknowledged, while the rwnd-limited clock stands still. The
    # capture's account gives the window none of those intervals either.
    intervals = _window_seconds_while_the_cwnd_held("window_97k_125m_200ms")
    assert len(intervals) >= 4
    for lo, hi, seconds in intervals:
        assert seconds <= 0.1 * (hi - lo), (lo, hi)


@pytest.mark.parametrize(
    "name", ["initcwnd40_reno_200ms", "rtt_300ms", "window_64k_600ms", "wscale_off_30m_600ms"]
)
def test_the_first_round_is_the_congestion_windows(name: str) -> None:
    # The receiver's first window is sized for the sender's initial one (10 segments, or the
    # lab's initrwnd 40 with initcwnd 40): the first flight fills both. Linux asks its
    # congestion window first, and the kernel's samples in the first round show the flight at
    # the congestion window while the rwnd-limited clock stands still. The capture's account
    # gives the window none of that round either.
    intervals = _window_seconds_while_the_cwnd_held(name, first_round=True)
    assert len(intervals) >= 2
    for lo, hi, seconds in intervals:
        assert seconds <= 0.1 * (hi - lo), (lo, hi)


def _window_seconds_while_the_cwnd_held(
    name: str, first_round: bool = False
) -> list[tuple[float, float, float]]:
    """The intervals between two of the sweep scenario's TCP_INFO samples that show the flight
    at the congestion window while the rwnd-limited clock stood still (only before any data
    was acknowledged, with `first_round`), each with the receive window's seconds in it as the
    capture's account (`limit_states`) gives them."""
    from tracekit.detectors._limits import RECEIVE_WINDOW, limit_states
    from tracekit.detectors._measure import min_rtt_s, segment_size_bytes

    _, doc = _sweep_kernel(name)
    samples = doc["tcp_info_samples"]
    col = {f: i for i, f in enumerate(samples["fields"])}
    rows = np.array(samples["rows"], dtype=np.float64)
    offset = samples["t0_epoch_s"] - doc["capture"]["counts"]["sender"]["first_epoch_s"]
    at = offset + rows[:, col["t_ms"]] / 1000
    cwnd_full = rows[:, col["snd_cwnd"]] == rows[:, col["unacked"]]
    still = np.diff(rows[:, col["rwnd_limited"]]) == 0
    chosen = cwnd_full[:-1] & cwnd_full[1:] & still & (rows[:-1, col["unacked"]] > 0)
    if first_round:
        chosen &= rows[1:, col["bytes_acked"]] <= 1  # the SYN's byte only
    d = _sweep_direction(name)
    rtt = min_rtt_s(d)
    assert rtt is not None
    start, end, state = limit_states(d, segment_size_bytes(d.segments), True, rtt)
    window = state == RECEIVE_WINDOW
    out = []
    for k in np.flatnonzero(chosen):
        lo, hi = float(at[k]), float(at[k + 1])
        seconds = np.clip(end[window], lo, hi) - np.clip(start[window], lo, hi)
        out.append((lo, hi, float(seconds.sum())))
    return out


@functools.cache
def _sweep_verdict(name: str) -> dict[str, Any]:
    """The verdict on the sweep scenario's transfer, from its sender and receiver captures
    (once per scenario: several tests read the same one, none changes it)."""
    folder = SWEEP_DIR / name
    doc = analyze(
        read_capture(folder / "sender.pcap.zst"), read_capture(folder / "receiver.pcap.zst")
    ).to_dict()
    (found,) = [
        f for f in doc["findings"] if f["kind"] == "rate_limit_cause" and f["direction"] == "a2b"
    ]
    return found


@pytest.mark.parametrize(
    "name", ["sndbuf_16k", "sndbuf_48k", "bursty_writes_big_buffer", "rcvbuf_64k"]
)
def test_a_writer_blocked_on_its_send_buffer_is_the_sender_buffer(name: str) -> None:
    # The sender kernel's account says when its writer waited on a full send buffer
    # (tcpi_sndbuf_limited): for most of the busy time with SO_SNDBUF 16 or 48 kB on a 50 ms
    # path, never for a writer of 64 kB every 50 ms into a large buffer or a flight pinned by
    # a 64 kB receive buffer. The verdict names the send buffer exactly when the kernel does.
    folder = Path(__file__).resolve().parents[1] / "fixtures" / "sweep" / name
    limits = json.loads((folder / "truth.json").read_text())["kernel_limits"]
    blocked = limits["sndbuf_limited_share"] >= 0.5
    doc = analyze(
        read_capture(folder / "sender.pcap.zst"), read_capture(folder / "receiver.pcap.zst")
    ).to_dict()
    (found,) = [f for f in doc["findings"] if f["kind"] == "rate_limit_cause"]
    assert (found["evidence"]["cause"] == "sender_buffer") == blocked
    if blocked:
        # The kernel counts the blocked writer's time as busy: the class is the network's.
        assert found["evidence"]["limit_class"] == "network"


@pytest.mark.parametrize(
    ("name", "untold"),
    [("lan_offloads_on_bbr", True), ("lan_reno_offloads_on", True), ("paced_cubic_1bdp", False)],
)
def test_it_says_where_it_cannot_tell_a_pacer(name: str, untold: bool) -> None:
    # BBR paces on the LAN too (its kernel's samples say the timer held it), but the host
    # answers an ACK in some microseconds and the round trip is one: the next ACKs come before
    # it has answered the first, and whose clock the departures kept cannot be told there.
    # Nor where the host, never idle, starts a super-segment every 17 us with a turnaround of
    # 9 us (Reno, no pacer): its own pace is as regular as a timer's. At 24 Mbit/s over 50 ms
    # the round trip is thousands of the host's answers long.
    found = _sweep_verdict(name)
    assert (found["evidence"]["paced_untold_fraction"] >= 0.5) == untold
    assert ("could not be told" in found["explanation"]) == untold


SWEEP = Path(__file__).resolve().parent.parent / "fixtures" / "sweep"


def _data_verdict(capture: Path) -> Finding:
    """The verdict of the transfer's data direction (b2a when the capture starts with the
    receiver's ACK, which then is side a)."""
    found = [f for f in analyze(read_capture(capture)).findings if f.kind == "rate_limit_cause"]
    assert found, capture
    return max(found, key=lambda f: f.evidence["rate_bps"])


@pytest.mark.parametrize("name", ["rtt_1ms", "base", "window_64k_600ms"])
def test_the_handshake_tells_which_end_the_capture_was_taken_at(name: str) -> None:
    # The lab captures on the sender's veth (s0) and on the receiver's (r0), on paths of 1 to
    # 600 ms: the sender's capture gets the account of its time, the receiver's says it
    # cannot give one, and quotes the handshake's round trip as tshark measures it.
    doc = json.loads((SWEEP / name / "truth.json").read_text())
    assert "veth s0" in doc["capture"]["sender"] and "veth r0" in doc["capture"]["receiver"]
    at_sender = _data_verdict(SWEEP / name / "sender.pcap.zst")
    assert at_sender.evidence["capture_end"] == "sender"
    assert at_sender.evidence["limit_class"] in KERNEL_CLASSES
    at_receiver = _data_verdict(SWEEP / name / "receiver.pcap.zst")
    assert at_receiver.evidence["capture_end"] == "receiver"
    assert "limit_class" not in at_receiver.evidence and "cause" not in at_receiver.evidence
    irtt = tshark_initial_rtt_s(SWEEP / name / "receiver.pcap.zst")
    assert at_receiver.evidence["rtt_s"] == pytest.approx(irtt, abs=2e-6)
    assert "captured at its receiver" in at_receiver.summary


def test_no_end_is_told_on_a_lan() -> None:
    # A veth pair straight from host to host: both parts of the round trip are the hosts' own
    # answers. The verdict is the sender's account, with no end claimed.
    for role in ("sender", "receiver"):
        f = _data_verdict(SWEEP / "lan_reno" / f"{role}.pcap.zst")
        assert "capture_end" not in f.evidence
        assert f.evidence["limit_class"] in KERNEL_CLASSES


@pytest.mark.parametrize("name", ["base_midstream", "window_64k_300ms_midstream"])
def test_without_the_handshake_the_timestamps_tell_the_end(name: str) -> None:
    # The lab's copies that start half a second into the transfer: no handshake, but every
    # segment carries timestamps, and each end echoes the other's at once only at its own end.
    at_sender = _data_verdict(SWEEP / name / "sender.pcap.zst")
    assert (at_sender.evidence["capture_end"], at_sender.evidence["capture_end_from"]) == (
        "sender",
        "timestamps",
    )
    at_receiver = _data_verdict(SWEEP / name / "receiver.pcap.zst")
    assert (at_receiver.evidence["capture_end"], at_receiver.evidence["capture_end_from"]) == (
        "receiver",
        "timestamps",
    )
    assert "limit_class" not in at_receiver.evidence


def test_a_sender_whose_writes_come_far_apart_is_not_taken_for_the_receiver(
    tmp_path: Path,
) -> None:
    # At the sender, without the handshake: one segment a second, each acknowledged 40 ms
    # later (a 10 ms path and a delayed ACK). The receiver echoes the sender's timestamps
    # 40 ms on, the sender echoes the receiver's only with its next write, 960 ms on: split
    # as a receiver's capture would be. Yet a segment stays in flight for the round trip, far
    # more than the rate keeps there at a receiver: the sender's end, or none, never the
    # receiver's.
    packets = []
    for i in range(30):
        t = float(i)
        mine, theirs = 1000 + 1000 * i, 5000 + 1000 * i
        seq = C + 1 + 1000 * i
        packets.append(
            tcp(
                t,
                CLIENT,
                SERVER,
                40000,
                80,
                "PA",
                seq,
                S + 1,
                1000,
                [("Timestamp", (mine, theirs - 960))],
            )
        )
        packets.append(
            tcp(
                t + 0.04,
                SERVER,
                CLIENT,
                80,
                40000,
                "A",
                S + 1,
                seq + 1000,
                0,
                [("Timestamp", (theirs, mine))],
            )
        )
    found = [
        f
        for f in analyze(read_capture(write(tmp_path / "trickle.pcap", packets))).findings
        if f.kind == "rate_limit_cause"
    ]
    assert len(found) == 1
    assert found[0].evidence.get("capture_end") != "receiver"
    assert found[0].evidence["limit_class"] in KERNEL_CLASSES


def test_the_report_quotes_the_handshake_where_the_capture_is_the_receivers() -> None:
    from tracekit.report.build import build_report

    capture = SWEEP / "rtt_100ms" / "receiver.pcap.zst"
    report = build_report(analyze(read_capture(capture)), (str(capture),))
    facts = dict(report.connections[0].facts)
    irtt = tshark_initial_rtt_s(capture)
    assert facts["median RTT"].endswith(f"(the receiving host's answer); path {irtt * 1e3:.0f} ms")
    assert "captured at its receiver" in facts["what held it back"]


def _burst_starts_by_definition(
    t: npt.NDArray[np.float64], ack_t: npt.NDArray[np.float64], gap: float
) -> tuple[list[bool], list[float], list[float]]:
    """`_burst_starts` as its docstring defines it, one segment at a time."""
    after, delay, between = [], [], []
    previous = np.nan
    for i, x in enumerate(t.tolist()):
        before = t[i - 1] if i else -np.inf
        start = x - before > gap
        acks = ack_t[ack_t <= x]
        answered = start and acks.size > 0 and acks[-1] > before
        after.append(bool(answered))
        if answered:
            delay.append(x - acks[-1])
            between.append(x - previous)
        if start:
            previous = x
    return after, delay, between


@pytest.mark.parametrize("backwards", [False, True])
def test_burst_starts_as_defined_even_where_the_clock_runs_back(backwards: bool) -> None:
    from tracekit.detectors import rate_limit_cause

    rng = np.random.default_rng(7)
    # Bursts of back-to-back segments after each of a few ACKs; with `backwards`, the clock
    # steps back often, so that more starts follow an ACK than there are ACKs.
    t = np.cumsum(rng.choice([1e-6, 1e-6, 1e-6, 5e-4], size=3000))
    if backwards:
        t[::3] -= 2e-3
    ack_t = np.sort(rng.uniform(t.min(), t.max(), size=40))
    after, delay, between = rate_limit_cause._burst_starts(t, ack_t, 1e-5)
    want_after, want_delay, want_between = _burst_starts_by_definition(t, ack_t, 1e-5)
    assert after.tolist() == np.flatnonzero(want_after).tolist()
    assert delay.tolist() == want_delay
    assert np.allclose(between, want_between, equal_nan=True)
    if backwards:
        assert len(want_delay) > ack_t.size  # the case where the ACKs do not bound the starts


@pytest.mark.parametrize("size", [0, 1, 2, 3, 102, 5000, 700_000])
def test_the_serialisation_time_is_numpys_percentile_of_the_positive_gaps(size: int) -> None:
    from tracekit.detectors._measure import serialisation_s

    rng = np.random.default_rng(size)
    # Back-to-back segments (ties at a few serialisation times), pauses, repeated times and
    # a clock that steps back: more than one block of the compiled-free steps.
    steps = rng.choice([0.0, 1.2e-6, 1.2e-6, 2.4e-6, 3e-4, -1e-3], size=size)
    t = np.cumsum(steps)
    gaps = np.diff(t)
    positive = gaps[gaps > 0]
    want = float(np.percentile(positive, 1)) if positive.size else None
    assert serialisation_s(t) == want


@pytest.mark.parametrize(("resend_after", "read"), [(0.025, False), (0.0025, True)])
def test_a_loss_timers_wait_is_not_the_pacers_hold(
    tmp_path: Path, resend_after: float, read: bool
) -> None:
    # A pacer sends two segments every 10 ms on a 5 ms path, each pair 5 ms after the ACK of
    # the one before: the timer, not the ACK, released each, and its 10 ms holds are read.
    # The last pair is lost whole. Resent 25 ms later (five round trips, with no ACK since:
    # the tail loss probe's two smoothed RTTs and more), the wait was the loss timer's, and no
    # hold of the pacer is read from it. Resent half a round trip later, sooner than any loss
    # timer fires, it was the pacer's, in recovery as ever.
    from tests.helpers.crafting import OPTS, c2s, s2c
    from tracekit.detectors._limits import pacer_held
    from tracekit.detectors._measure import min_rtt_s, segment_size_bytes

    packets = [
        tcp(0.0, CLIENT, SERVER, 40000, 80, "S", C, 0, 0, OPTS),
        tcp(0.005, SERVER, CLIENT, 80, 40000, "SA", S, C + 1, 0, OPTS),
        c2s(0.006, "A", 1),
    ]
    pairs = 31
    for k in range(pairs):
        t, rel = 0.1 + 0.010 * k, 1 + 2000 * k
        packets += [c2s(t, "A", rel, 1000), c2s(t + 0.0001, "A", rel + 1000, 1000)]
        if k < pairs - 1:
            packets.append(s2c(t + 0.005, rel + 2000))
    last = 0.1 + 0.010 * (pairs - 1)
    packets.append(c2s(last + resend_after, "A", 1 + 2000 * (pairs - 1), 1000))
    packets.append(s2c(last + resend_after + 0.005, 1 + 2000 * pairs))
    ctx = context(write(tmp_path / "tail.pcap", packets))
    ((conn, direction),) = list(ctx.series.with_data())
    d = ctx.series.of(conn, direction)
    rtt = min_rtt_s(d)
    assert rtt == pytest.approx(0.005, abs=0.0002)
    start, held = pacer_held(d, segment_size_bytes(d.segments), rtt)
    assert start.size == pairs + 1
    # The pacer's 10 ms between the pairs, read where its timer released each.
    assert np.median(held[1:-2]) == pytest.approx(0.010, abs=0.0005)
    assert held[pairs - 1] == pytest.approx(resend_after if read else 0.0, abs=0.0005)


def test_a_windows_round_trip_is_not_a_pacers_hold(tmp_path: Path) -> None:
    # Unpaced Reno under a 24-segment receive window on a 50 ms path: each round trip twelve
    # ACKs come 300 us apart, each freeing two segments, and the host answers each in 30 us,
    # but the first after the wait in 200 us (a host woken from idle; one answer in twelve,
    # outside the 90% its turnaround covers). That answer leaves later than the host's
    # turnaround, as a timer's release would, 50 ms after the burst before: a pacer would have
    # held the sender 50 ms after 2 kB, a rate of 40 kB/s, where the ACKs delivered 480 kB/s.
    # No pacer waits so long; the full window held the sender.
    from tests.helpers.crafting import OPTS, c2s, s2c

    mss, acks, rtt = 1000, 12, 0.05
    window = 2 * acks * mss
    packets = [
        tcp(0.0, CLIENT, SERVER, 40000, 80, "S", C, 0, 0, OPTS),
        tcp(rtt, SERVER, CLIENT, 80, 40000, "SA", S, C + 1, 0, OPTS, window),
        c2s(rtt + 0.0001, "A", 1),
    ]
    rel, t = 1, 0.1
    for i in range(2 * acks):  # the first round: the window, back to back
        packets.append(c2s(t + 12e-6 * i, "A", rel, mss))
        rel += mss
    acked = 1
    for _ in range(30):
        t += rtt
        for k in range(acks):  # each ACK answered with the two segments it freed
            acked += 2 * mss
            ack_at = t + 300e-6 * k
            packets.append(s2c(ack_at, acked, window=window))
            answer = ack_at + (200e-6 if k == 0 else 30e-6)
            packets += [c2s(answer, "A", rel, mss), c2s(answer + 12e-6, "A", rel + mss, mss)]
            rel += 2 * mss
    for k in range(acks):
        acked += 2 * mss
        packets.append(s2c(t + rtt + 300e-6 * k, acked, window=window))
    packets.sort(key=lambda p: float(p.time))  # type: ignore[attr-defined]
    ctx = context(write(tmp_path / "window.pcap", packets))
    (found,) = [f for f in run_detectors(ctx, [RateLimitCause]) if f.direction == "a2b"]
    # The window was full from each round trip's last answer to the next round's first ACK,
    # 46.7 ms of every 50 (the first round's wait aside: a first flight as large as the
    # initial window is the congestion window's, which Linux asks first).
    assert found.evidence["receive_window_fraction"] > 0.85
    assert found.evidence["paced_departures_fraction"] < 0.1


def _pacer_under_a_window(path: Path, gains: list[float], seed: int) -> tuple[Path, float]:
    """A sender paced two segments at a time under a receive window of 20, on a 100 ms path,
    its pacing gain cycling one value per round trip (BBR's cycle is 1.25, 0.75, then 1 six
    times); each burst's ACK comes back 100 ms later. A burst leaves once the ACK of the burst
    a window before it has come (the host answering in 50 to 250 us) and its pacer's interval
    since the last has passed, whichever is later. Returns the capture and the share of the
    busy time the pacer held the sender by the simulation's own state: with room in the window
    (the ACK had come) and the pacer's interval still running."""
    from tests.helpers.crafting import OPTS, c2s, s2c

    rng = np.random.default_rng(seed)
    mss, window, rtt = 1000, 20, 0.1
    per_round = window // 2
    # The window allows one burst per tenth of a round trip; the pacer, gain times that.
    window_interval = rtt / per_round
    packets = [
        tcp(0.0, CLIENT, SERVER, 40000, 80, "S", C, 0, 0, OPTS),
        tcp(0.1, SERVER, CLIENT, 80, 40000, "SA", S, C + 1, 0, OPTS, window * mss),
        c2s(0.1001, "A", 1),
    ]
    left: list[float] = []
    acked: list[float] = []
    held = 0.0
    for j in range(30 * per_round):
        interval = window_interval / gains[(j // per_round) % len(gains)]
        if j == 0:
            at = 0.2
        elif j < per_round:
            # The first round: the window has room for all of it, the pacer spaces it.
            at = left[-1] + interval
            held += interval
        else:
            answer = acked[j - per_round] + rng.uniform(50e-6, 250e-6)
            slot = left[-1] + interval
            at = max(answer, slot)
            if slot > answer:
                held += at - max(acked[j - per_round], left[-1])
        left.append(at)
        acked.append(at + rtt + rng.uniform(0.0, 100e-6))
        rel = 1 + 2 * mss * j
        packets.append(c2s(at, "A", rel, mss))
        packets.append(c2s(at + 12e-6, "A", rel + mss, mss))
        packets.append(s2c(acked[-1], rel + 2 * mss, window=window * mss))
    packets.sort(key=lambda p: float(p.time))  # type: ignore[attr-defined]
    return write(path, packets), held / (acked[-1] - left[0])


@pytest.mark.parametrize(
    "gains",
    [
        # Faster than the window: it fills the window early in each round trip, and the ACKs,
        # back in the pacer's spacing, let every later burst out at once.
        [1.25],
        # BBR's cycle: the window holds it most of the time, the pacer while it runs at 0.75.
        [1.25, 0.75, 1, 1, 1, 1, 1, 1],
        # Slower than the window: the pacer holds it throughout.
        [0.8],
    ],
)
def test_a_full_windows_wait_is_not_the_pacers_hold(tmp_path: Path, gains: list[float]) -> None:
    capture, share = _pacer_under_a_window(tmp_path / "paced.pcap", gains, seed=len(gains))
    ctx = context(capture)
    (found,) = [f for f in run_detectors(ctx, [RateLimitCause]) if f.direction == "a2b"]
    # The capture reads the pacer's holds to within a few percent of the busy time: the
    # host's answers and the first round's ACKs are the only time it cannot place exactly.
    assert found.evidence["paced_departures_fraction"] == pytest.approx(share, abs=0.05)


def test_a_writers_clock_is_not_a_pacers(tmp_path: Path) -> None:
    # An application writes ten segments every 30 ms on a 100 ms path, each write while the
    # last ones are still in flight: its segments leave back to back at the host's pace, 130
    # us apart, the first 20 ms after the last ACK. A pacer at the 333 kB/s the transfer keeps
    # would let out two segments and wait 6 ms; none waits 30 ms and then sends ten. The
    # writer's clock released each write, not a pacer's timer.
    from tests.helpers.crafting import OPTS, c2s, s2c

    packets = [
        tcp(0.0, CLIENT, SERVER, 40000, 80, "S", C, 0, 0, OPTS),
        tcp(0.1, SERVER, CLIENT, 80, 40000, "SA", S, C + 1, 0, OPTS),
        c2s(0.1001, "A", 1),
    ]
    writes, per_write, rtt = 60, 10, 0.1
    for k in range(writes):
        for i in range(per_write):
            t, rel = 0.2 + 0.030 * k + 0.00013 * i, 1 + 1000 * (per_write * k + i)
            packets.append(c2s(t, "A", rel, 1000))
            packets.append(s2c(t + rtt, rel + 1000))
    packets.sort(key=lambda p: float(p.time))  # type: ignore[attr-defined]
    ctx = context(write(tmp_path / "writer.pcap", packets))
    (found,) = [f for f in run_detectors(ctx, [RateLimitCause]) if f.direction == "a2b"]
    assert found.evidence["paced_departures_fraction"] < 0.5
    assert found.evidence["cause"] != "pacing"


def test_a_pacer_holds_nothing_while_its_application_has_written_nothing(
    tmp_path: Path,
) -> None:
    # A paced sender (BBR's, say) whose application writes 40.5 segments every 400 ms on a
    # 20 ms path: the pacer lets each write out two segments at a time, 2 ms apart, keeping
    # its interval while the ACKs of the first pairs come back. The sender is busy (the
    # kernel's clock: data unacknowledged) from the write until its last ACK, 60 ms, and the
    # pacer held the write's later pairs back for 40 of them. From the write's short tail on
    # nothing is queued, and the round trip its last ACKs take is no pacer's: the kernel's
    # samples find nothing waiting then.
    from tests.helpers.crafting import OPTS, c2s, s2c

    mss, rtt, interval, period = 1000, 0.02, 0.002, 0.4
    per_write = 40_500
    packets = [
        tcp(0.0, CLIENT, SERVER, 40000, 80, "S", C, 0, 0, OPTS),
        tcp(rtt, SERVER, CLIENT, 80, 40000, "SA", S, C + 1, 0, OPTS),
        c2s(rtt + 0.0001, "A", 1),
    ]
    rng = np.random.default_rng(7)
    held = busy = 0.0
    rel = 1
    for k in range(20):
        start = 0.1 + period * k
        sizes = [mss] * (per_write // mss) + [per_write % mss]
        at = start
        for i in range(0, len(sizes), 2):
            if i:
                at += interval
                held += interval
            for j, size in enumerate(sizes[i : i + 2]):
                packets.append(c2s(at + 12e-6 * j, "A", rel, size))
                rel += size
            packets.append(s2c(at + rtt + rng.uniform(0.0, 100e-6), rel))
        busy += at + rtt - start
    packets.sort(key=lambda p: float(p.time))  # type: ignore[attr-defined]
    ctx = context(write(tmp_path / "paced-writes.pcap", packets))
    (found,) = [f for f in run_detectors(ctx, [RateLimitCause]) if f.direction == "a2b"]
    assert held / busy == pytest.approx(2 / 3, abs=0.01)
    assert found.evidence["paced_departures_fraction"] == pytest.approx(held / busy, abs=0.05)


def test_a_host_slower_than_a_quarter_of_its_acks_spacing_is_no_pacer(tmp_path: Path) -> None:
    # An ACK-clocked sender on a fast path: an ACK of two segments every 90 us, each answered
    # with the next two, back to back, after the host's own 40-75 us (interrupt, socket lock,
    # scheduling). No answer comes within a quarter of the ACKs' spacing, yet every one comes
    # as soon as this host answers anything: its ACKs, not a timer, release the data.
    from tests.helpers.crafting import OPTS, c2s, s2c

    rng = np.random.default_rng(3)
    size, rtt, spacing, serial = 1000, 0.0018, 90e-6, 12e-6
    packets = [
        tcp(0.0, CLIENT, SERVER, 40000, 80, "S", C, 0, 0, OPTS),
        tcp(0.1, SERVER, CLIENT, 80, 40000, "SA", S, C + 1, 0, OPTS),
        c2s(0.1001, "A", 1),
    ]
    first = 40  # the flight the ACKs keep, in segments: a round trip of them
    for i in range(first):
        packets.append(c2s(0.2 + serial * i, "A", 1 + size * i, size))
    sent = first
    for k in range(600):
        at = 0.2 + rtt + spacing * k
        packets.append(s2c(at, 1 + size * 2 * (k + 1)))
        answer = at + rng.uniform(40e-6, 75e-6)
        for i in range(2):
            packets.append(c2s(answer + serial * i, "A", 1 + size * sent, size))
            sent += 1
    packets.sort(key=lambda p: float(p.time))  # type: ignore[attr-defined]
    ctx = context(write(tmp_path / "acked.pcap", packets))
    (found,) = [f for f in run_detectors(ctx, [RateLimitCause]) if f.direction == "a2b"]
    assert found.evidence["paced_untold_fraction"] < 0.5
    assert found.evidence["paced_departures_fraction"] < 0.5
    assert found.evidence["cause"] != "pacing"


def _lan_hosts_set_the_rate(name: str) -> bool:
    """Whether the lab's truth says a veth pair's hosts set the rate: a direct veth (no
    bottleneck, no delay), no retransmission (the kernel's counter), no pacer configured, and
    the kernel's account giving its busy time, not the receive window or the application, the
    most of the transfer."""
    doc = json.loads((SWEEP_DIR / name / "truth.json").read_text())
    config, limits = doc["scenario_config"], doc["kernel_limits"]
    if not config["path"]["direct"] or limits["total_retrans"] != 0:
        return False
    if config["pacing_bytes_per_s"] is not None or config["congestion"] == "bbr":
        return False
    busy = limits["busy_share_of_transfer"]
    network = busy * (1 - limits["rwnd_limited_share"])
    return network > max(1 - busy, busy * limits["rwnd_limited_share"])


LAN_HOST_ROWS = sorted(
    p.name
    for p in SWEEP_DIR.iterdir()
    if (p / "truth.json").exists() and _lan_hosts_set_the_rate(p.name)
)


@pytest.mark.parametrize("name", LAN_HOST_ROWS)
def test_a_lossless_lan_transfer_is_held_by_its_host_not_a_congestion_window(name: str) -> None:
    # On a veth pair the round trip is a few microseconds, and the sender answers its ACKs
    # later than that: with no loss its congestion window is never filled, and no window or
    # path held it. The verdict names the host (and says what it measured), not congestion.
    found = _sweep_verdict(name)
    assert found["evidence"]["cause"] == "host"
    assert found["evidence"]["limit_class"] == "network"
    assert "the sending host" in found["summary"]
    assert "answered its ACKs within" in found["explanation"]


OFFLOADED_LAN_ROWS = [
    n
    for n in LAN_HOST_ROWS
    if json.loads((SWEEP_DIR / n / "truth.json").read_text())["scenario_config"]["offloads"]
]


@pytest.mark.parametrize("name", OFFLOADED_LAN_ROWS)
def test_a_lan_flight_of_a_few_super_segments_is_no_send_buffer(name: str) -> None:
    # With offloads on, the sender hands its capture 64 kB super-segments, three or four in
    # flight: the flight sits near its highest level by granularity, and TSO's deferral drains
    # it by a third before each send as a blocked writer's would. Where the kernel counted no
    # time on a full send buffer, no phase is the send buffer's.
    doc = json.loads((SWEEP_DIR / name / "truth.json").read_text())
    if doc["kernel_limits"]["sndbuf_limited_share"] > 0:
        pytest.skip("the kernel counted time on a full send buffer")
    found = _sweep_verdict(name)
    assert found["evidence"]["sender_buffer_fraction"] == 0
    assert LABELS.index("sender_buffer") not in found["evidence"]["phase_cause_codes"]


def test_the_lan_rows_cover_both_offloads() -> None:
    offloads = {
        json.loads((SWEEP_DIR / n / "truth.json").read_text())["scenario_config"]["offloads"]
        for n in LAN_HOST_ROWS
    }
    assert offloads == {True, False}


@pytest.mark.parametrize("name", ["rtt_1ms", "rtt_5ms", "base"])
def test_over_a_wan_an_unpaced_hosts_answer_never_outlasts_the_round_trip(name: str) -> None:
    # A host answers an ACK in microseconds; a round trip of 1 ms and more is hundreds of
    # those, so an unpaced sender over a WAN path is never the host's.
    assert _sweep_verdict(name)["evidence"]["cause"] != "host"


@pytest.mark.parametrize("name", LAN_HOST_ROWS)
def test_slow_start_on_a_lossless_lan_comes_only_when_the_kernel_grew_its_window(name: str) -> None:
    # Slow start only raises the congestion window, and with no loss (the kernel's counter)
    # nothing lowers it: the flight it lets out reaches new heights, in the first round trips
    # and again only where the flight catches up with the window and Linux grows it on (its
    # TCP_INFO samples show each step of snd_cwnd). The host's own pace dipping and coming
    # back is not slow start: there are no more slow-start phases than the first and one per
    # step of the kernel's window.
    found = _sweep_verdict(name)
    codes = [LABELS[c] for c in found["evidence"]["phase_cause_codes"]]
    samples = json.loads((SWEEP_DIR / name / "truth.json").read_text())["tcp_info_samples"]
    cwnd = [row[samples["fields"].index("snd_cwnd")] for row in samples["rows"]]
    steps = sum(b > a for a, b in itertools.pairwise(cwnd))
    assert codes.count("slow_start") <= 1 + steps, (codes, cwnd)


@pytest.mark.parametrize(
    "name",
    ["bbr_8m_4ms", "reader_16k_25ms_3ms", "lan_offloads_on_receiver_drops", "lan_offloads_on_bbr"],
)
def test_a_regime_that_cycles_is_one_phase_of_the_timeline(name: str) -> None:
    # BBR's gain cycle at 8 Mbit/s, a slow reader's window shutting and reopening under BBR's
    # pacer, a LAN host's pace beside losses at the receiver's backlog: each half of the cycle
    # lasts a few round trips, and the timeline gives the cycle once, both labels named, while
    # the shares keep each label's own time.
    found = _sweep_verdict(name)
    e = found["evidence"]
    codes, others = e["phase_cause_codes"], e["phase_other_codes"]
    assert len(codes) == len(others) == len(e["phase_starts_s"]) == len(e["phase_ends_s"])
    # No two labels take turns for four phases or more.
    for k in range(len(codes) - 3):
        window = codes[k : k + 4]
        assert not (window[0] == window[2] and window[1] == window[3]), codes
    # The phases tile the verdict's span.
    assert e["phase_starts_s"][0] == pytest.approx(found["start_s"])
    assert e["phase_ends_s"][-1] == pytest.approx(found["end_s"])
    spans = list(zip(e["phase_starts_s"], e["phase_ends_s"], strict=True))
    for before, after in itertools.pairwise(spans):
        assert before[1] == pytest.approx(after[0])
    merged = [(LABELS[c], LABELS[o]) for c, o in zip(codes, others, strict=True) if o >= 0]
    assert merged, codes
    for own, other in merged:
        assert own != other
        # The shares keep each label's own time.
        assert e[f"{own}_fraction"] > 0 and e[f"{other}_fraction"] > 0
        assert (
            f"{own.replace('_', ' ')} taking turns with {other.replace('_', ' ')}"
            in (found["explanation"])
        )


@pytest.mark.parametrize("in_order", [True, False])
def test_the_spread_within_each_window_is_numpys_interquartile_range(in_order: bool) -> None:
    # Windows in time order are sorted run by run, others as a whole: either way each window's
    # spread is np.percentile's 75th less its 25th, NaN below two values.
    from tracekit.detectors.rate_limit_cause import _window_iqr

    rng = np.random.default_rng(11)
    for _ in range(100):
        n_windows = int(rng.integers(1, 12))
        w = rng.integers(0, n_windows, int(rng.integers(0, 120)))
        if in_order:
            w = np.sort(w)
        # Ties too: intervals of whole microseconds.
        x = np.round(rng.exponential(1e-3, w.size), 6)
        expected = np.full(n_windows, np.nan)
        for k in range(n_windows):
            if np.count_nonzero(w == k) >= 2:
                mine = x[w == k]
                expected[k] = np.percentile(mine, 75) - np.percentile(mine, 25)
        got = _window_iqr(w.astype(np.int64), x, n_windows)
        assert np.allclose(got, expected, equal_nan=True, rtol=1e-12, atol=0)


def test_the_pacer_s_schedule_earns_linux_s_credit_for_a_late_burst() -> None:
    # tcp_update_skb_after_send, worked by hand at 1 MB/s for bursts of 2,896 bytes (2.896 ms
    # each): a burst on time holds the next its whole interval; one sent late holds it the
    # interval less its lateness, down to half; one the capture shows leaving before its time
    # was let go by then, and starts the schedule afresh.
    from tracekit.detectors._limits import _linux_schedule

    interval = 2896 / 1e6
    start = np.array([0.0, interval, 0.010, 0.011448 + 0.000052, 0.012])
    size = np.full(start.size, 2896.0)
    holds = _linux_schedule(start, size, np.full(start.size, 1e6))
    expected = [interval, interval, interval / 2, interval - 0.000052, interval]
    assert holds == pytest.approx(expected, abs=1e-9)
    # Where no rate is read, no hold is given, and the schedule goes on at the rates there are.
    rate = np.array([1e6, np.nan, 1e6, 1e6, 1e6])
    unknown = _linux_schedule(start, size, rate)
    assert np.isnan(unknown[1])
    assert unknown[[0, 2, 3, 4]] == pytest.approx(np.array(expected)[[0, 2, 3, 4]], abs=1e-9)


def test_a_pacing_rate_is_read_within_two_round_trips_of_each_burst() -> None:
    # Readings in round trips 0 and 10 of a 10 ms path; bursts in round trips 0 to 12. Each
    # burst takes the upper quartile of the readings within two round trips of its own, and
    # none where there is no reading that near.
    from tracekit.detectors._limits import RATE_QUANTILE, RATE_SPAN_RTTS, _rates_near

    read_t = np.array([0.001, 0.002, 0.003, 0.004, 0.101, 0.102])
    read = np.array([1.0, 2.0, 3.0, 4.0, 10.0, 20.0])
    t = np.array([0.0, 0.015, 0.025, 0.035, 0.075, 0.085, 0.115, 0.125])
    rates = _rates_near(read_t, read, t, 0.010, RATE_SPAN_RTTS, RATE_QUANTILE)
    early = np.quantile(read[:4], RATE_QUANTILE)
    late = np.quantile(read[4:], RATE_QUANTILE)
    assert rates[:3] == pytest.approx([early] * 3)
    assert np.isnan(rates[3:5]).all()
    assert rates[5:] == pytest.approx([late] * 3)


def test_a_long_paths_slow_start_without_a_pacer_is_slow_start() -> None:
    # Reno with no pacer (the lab's configuration: no SO_MAX_PACING_RATE, no fq, Reno never
    # asks for pacing) over 545 ms: each round of its slow start sends its flight in answer to
    # a train of ACKs and waits the rest of the round trip for the next, and the NIC's shaper
    # delays some answers past the host's turnaround. A wait of a round trip after a train of
    # segments is no pacer's hold, and no phase is the pacer's.
    name = "slow_start_reno_52m_545ms"
    truth = json.loads((SWEEP_DIR / name / "truth.json").read_text())
    assert truth["scenario_config"]["congestion"] == "reno"
    assert truth["scenario_config"]["pacing_bytes_per_s"] is None
    found = _sweep_verdict(name)["evidence"]
    codes = [LABELS[c] for c in found["phase_cause_codes"]]
    assert codes[0] == "slow_start"
    assert "pacing" not in codes
    assert found["paced_departures_fraction"] < 0.5


@pytest.mark.parametrize(
    ("size_segments", "least_ms", "longest_ms"),
    [
        # On a 545 ms path a turn is 2**-10 s of the pacing rate: a burst of 30 segments left
        # at once was a rate of at least 30 segments per 2**-10 s, held that long at most;
        # twice that for a delivery rate read over bunched ACKs.
        (30, 545.0, 2 * 1000 / 1024),
        # At a least RTT of 1.4 ms (1.4 ms less a timestamp tick: 400 us >> 9 = 0) a turn adds
        # 64 KiB, more than 16 segments: no bound from the burst's size.
        (16, 1.4, np.inf),
        # At 3.2 ms (2200 us >> 9 = 4: 4 KiB) a burst of 7 segments (10,136 bytes) was a rate
        # of at least 6,040 bytes per 2**-10 s.
        (7, 3.2, 2 * 10136 / 6040 * 1000 / 1024),
        # Two segments are any pacer's least turn: no bound.
        (2, 545.0, np.inf),
    ],
)
def test_a_pacer_holds_the_sender_a_turn_s_time_at_most(
    size_segments: int, least_ms: float, longest_ms: float
) -> None:
    # Linux lets go one turn at a time (tcp_tso_autosize: pacing rate >> 10, plus 64 KiB >>
    # (min_rtt_us >> 9), at least two segments) and waits that turn's bytes at its rate after
    # it (tcp_update_skb_after_send). With no delivery rate read, the burst's own size bounds
    # the rate; the kernel's least RTT may read a timestamp tick (1 ms) short of the capture's.
    size = np.array([size_segments * 1448.0])
    longest = _longest_holds(size, np.zeros(1), 1448.0, least_ms / 1000)
    assert longest[0] * 1000 == pytest.approx(longest_ms, rel=1e-6)


@pytest.mark.parametrize(
    ("least_us", "allowance"),
    # gso_max_size >> (min_rtt_us >> tcp_tso_rtt_log), by hand: 300 >> 9 = 0, 1300 >> 9 = 2,
    # 2200 >> 9 = 4, 3500 >> 9 = 6; from 16384 us the shift passes 31 and adds nothing.
    [(300, 65536), (1300, 16384), (2200, 4096), (3500, 1024), (16400, 0), (600_000, 0)],
)
def test_tcp_small_queues_count_the_short_paths_share_of_a_gso_burst(
    least_us: int, allowance: int
) -> None:
    # Linux sizes each skb as 2**-10 s of its pacing rate (1.2 windows per smoothed RTT) plus
    # gso_max_size (64 KiB) >> (min_rtt_us >> tcp_tso_rtt_log, 9 by default), at most one
    # GSO burst (tcp_tso_autosize, Linux 5.18 on), and TCP small queues let a socket hold
    # twice an skb's truesize (tcp_small_queue_check): the limit is twice that turn.
    window, mss, smoothed = 60_000.0, 1448, 0.01
    paced = 1.2 * window / smoothed / 1024
    turn = min(paced + allowance, max(paced, 65536))
    assert _queue_limit(window, mss, smoothed, least_us * 1e-6) == pytest.approx(
        2 * max(turn, 2 * mss)
    )


@pytest.mark.parametrize(
    ("name", "queued"), [("cubic_8m_3ms_standing_queue", True), ("ack_drops_3of4", False)]
)
def test_the_smoothed_rtt_read_from_the_capture_is_the_kernel_s(name: str, queued: bool) -> None:
    # Linux paces by its smoothed RTT (tcpi_rtt), sampled by the lab every few ms: behind a
    # standing queue it is many times the least RTT, and with three ACKs in four dropped on
    # the way back each sample spans more of the flight. The capture's own samples, smoothed
    # as RFC 6298 smooths them, give it within a tenth at the median sample.
    from tracekit.detectors._limits import smoothed_rtt_at
    from tracekit.detectors._measure import min_rtt_s

    d = _sweep_direction(name)
    _, doc = _sweep_kernel(name)
    samples = doc["tcp_info_samples"]
    col = {f: i for i, f in enumerate(samples["fields"])}
    first = doc["capture"]["counts"]["sender"]["first_epoch_s"]
    at = np.array([samples["t0_epoch_s"] + r[col["t_ms"]] / 1000 - first for r in samples["rows"]])
    kernel = np.array([r[col["rtt"]] / 1e6 for r in samples["rows"]])
    least = min_rtt_s(d)
    ours = smoothed_rtt_at(d, at, least)
    assert (np.median(kernel) > 4 * least) == queued
    assert np.median(np.abs(ours / kernel - 1)) < 0.1
    assert (ours >= least).all()
