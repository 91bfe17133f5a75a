"""window_limited: fires on the lab's small-window capture with numbers from its truth."""

from __future__ import annotations

import heapq
import json
from collections.abc import Callable
from pathlib import Path

import numpy as np
import pytest
from scapy.layers.inet import TCP
from scapy.utils import rdpcap, wrpcap

from tests.helpers.crafting import CLIENT, SERVER, tcp, write
from tests.helpers.lab_captures import CAPTURES, context, lab_context, lab_findings, truth
from tracekit.detectors import run_detectors
from tracekit.detectors._measure import data_directions, flight_levels, packet_pair_rate_samples_bps
from tracekit.detectors.window_limited import WindowLimited, _idles_each_round_trip
from tracekit.findings import Finding

# The tbf counts whole Ethernet frames (truth.json path.rate_counts); TCP moves 1448 payload
# bytes per 1514-byte frame on the lab's path.
PAYLOAD_PER_FRAME = 1448 / 1514


def findings(name: str, config: WindowLimited.Config | None = None) -> list[Finding]:
    if config is None:
        return lab_findings(name, WindowLimited)
    return run_detectors(lab_context(name), [WindowLimited], {"window_limited": config})


def test_fires_on_the_small_receive_buffer() -> None:
    t = truth("window_limited")
    (f,) = findings("window_limited")
    ev = f.evidence
    assert (f.conn, f.direction, ev["limited_by"]) == (0, "a2b", "receiver")
    # The window is part of the receive buffer the kernel granted (SO_RCVBUF doubled).
    assert 0 < ev["window_bytes"] <= t["receiver"]["so_rcvbuf_effective"]
    payload_rate = t["path"]["bottleneck_rate_bps"] * PAYLOAD_PER_FRAME
    assert ev["path_rate_bps"] == pytest.approx(payload_rate, rel=0.05)
    assert ev["rtt_s"] == pytest.approx(t["path"]["rtt_ms"] / 1000, abs=0.002)
    bdp = t["path"]["bdp_bytes"] * PAYLOAD_PER_FRAME
    assert ev["window_needed_bytes"] == pytest.approx(bdp, rel=0.07)
    # 65535 << 1 < about 179,000 bytes <= 65535 << 2.
    assert ev["window_scale_shift_needed"] == 2
    # The receiver announced shift 0 (truth: a 32 kB buffer needs none).
    assert ev["window_scale_shift_announced"] == 0
    # Goodput: the 1.5 MB transfer over its duration, bounded by one window per RTT.
    assert ev["achieved_rate_bps"] <= ev["window_rate_bps"] * 1.02
    assert ev["achieved_rate_bps"] < payload_rate / 3
    assert "SO_RCVBUF" in f.advice and "tcp_rmem" in f.advice


@pytest.mark.parametrize("name", ["clean", "slow_start_overrun", "network_drops", "paced_sender"])
def test_quiet_where_the_window_covers_the_path(name: str) -> None:
    assert "window_limited" in truth(name)["absent_labels"]
    assert findings(name) == []


def test_path_rate_from_ack_dispersion_on_a_busy_path() -> None:
    # On the clean capture the bottleneck is busy all along: every estimate is its rate.
    d = lab_context("clean").series.of(0, 0)
    payload_rate = truth("clean")["path"]["bottleneck_rate_bps"] * PAYLOAD_PER_FRAME
    samples = packet_pair_rate_samples_bps(d)
    assert samples.size > 50
    assert float(sorted(samples)[samples.size // 2]) == pytest.approx(payload_rate, rel=0.03)


def test_configured_path_rate_sets_the_window_needed() -> None:
    # Cooper et al.'s path: 135 Mbit/s; at the lab's 50 ms that is 843,750 bytes, shift 4.
    (f,) = findings("window_limited", WindowLimited.Config(path_rate_bps=135e6))
    ev = f.evidence
    assert ev["path_rate_source"] == "config"
    assert ev["window_needed_bytes"] == pytest.approx(135e6 * ev["rtt_s"] / 8)
    assert ev["window_scale_shift_needed"] == 4


def test_quiet_when_the_configured_path_is_slower_than_the_window() -> None:
    # 37,648 bytes per 50 ms is 6 Mbit/s: a 5 Mbit/s path is filled by that window.
    assert findings("window_limited", WindowLimited.Config(path_rate_bps=5e6)) == []


def test_quiet_when_the_window_scale_is_unknown(tmp_path: Path) -> None:
    # The same transfer without its handshake: the window field's scale is unknown (RFC 7323),
    # so no window claim is made.
    packets = [p for p in rdpcap(str(CAPTURES / "window_limited" / "sender.pcap"))]
    kept = [p for p in packets if not (p.haslayer(TCP) and p[TCP].flags & 0x02)]
    assert len(kept) == len(packets) - 2
    wrpcap(str(tmp_path / "no_syn.pcap"), kept)
    ctx = context(tmp_path / "no_syn.pcap")
    assert ctx.series.window_known[(0, 0)] is False
    assert run_detectors(ctx, [WindowLimited]) == []


def test_path_rate_from_the_arrivals_when_each_burst_gets_one_ack() -> None:
    # A reader draining a 16 kB buffer every 200 ms: each burst of a window is acknowledged
    # by one ACK, so no ACK spacing shows the path; the receiver's capture shows the burst
    # arriving at the bottleneck's rate (the lab's tbf, in payload bytes).
    from tracekit.capture import read_capture
    from tracekit.pipeline import analyze

    folder = Path(__file__).resolve().parents[1] / "fixtures" / "sweep" / "reader_all_200ms"
    t = json.loads((folder / "truth.json").read_text())
    doc = analyze(
        read_capture(folder / "sender.pcap.zst"), read_capture(folder / "receiver.pcap.zst")
    ).to_dict()
    (f,) = [x for x in doc["findings"] if x["kind"] == "window_limited"]
    ev = f["evidence"]
    assert (ev["limited_by"], ev["path_rate_source"]) == ("receiver", "arrival_dispersion")
    payload_rate = t["path"]["bottleneck_rate_bps"] * PAYLOAD_PER_FRAME
    assert ev["path_rate_bps"] == pytest.approx(payload_rate, rel=0.05)
    # The window offered is within the buffer the kernel granted; the path needs its BDP.
    assert 0 < ev["window_bytes"] <= t["receiver"]["so_rcvbuf_effective"]
    bdp = t["path"]["bdp_bytes"] * PAYLOAD_PER_FRAME
    assert ev["window_needed_bytes"] == pytest.approx(bdp, rel=0.07)


# The crafted bottleneck's payload rate: 1000 bytes a millisecond.
PATH_8M = WindowLimited.Config(path_rate_bps=8e6)


def _through_8m(
    path: Path,
    count: int,
    depart: Callable[[int, list[float], dict[int, float]], float],
    window: int = 65535,
) -> Path:
    """`count` segments of 1000 bytes through an 8 Mbit/s bottleneck (1 ms per segment) and
    50 ms of delay, segment k leaving at `depart(k, sent, acked)` (the departures before it,
    and the ACK times so far by the last segment each covers); the receiver acknowledges every
    second segment 0.5 ms after it arrives, offering `window` bytes."""
    c, srv = 1000, 5000
    opts = [("MSS", 1000)]
    pkts = [
        tcp(0.00, CLIENT, SERVER, 40000, 80, "S", c, options=opts),
        tcp(0.05, SERVER, CLIENT, 80, 40000, "SA", srv, c + 1, options=opts, window=window),
        tcp(0.05, CLIENT, SERVER, 40000, 80, "A", c + 1, srv + 1),
    ]
    sent: list[float] = []
    arrived: list[float] = []
    acked: dict[int, float] = {}
    for k in range(count):
        t = depart(k, sent, acked)
        sent.append(t)
        arrived.append(max(t + 0.025, arrived[-1] + 1e-3) if arrived else t + 0.025)
        if k % 2:
            acked[k] = arrived[k] + 0.5e-3 + 0.025
    for k, t in enumerate(sent):
        pkts.append(tcp(t, CLIENT, SERVER, 40000, 80, "A", c + 1 + k * 1000, srv + 1, 1000))
    for k, t in acked.items():
        ack = c + 1 + (k + 1) * 1000
        pkts.append(tcp(t, SERVER, CLIENT, 80, 40000, "A", srv + 1, ack, window=window))
    pkts.sort(key=lambda p: p.time)
    return write(path, pkts)


def _capped(tmp_path: Path, paced: bool) -> Path:
    """A sender whose flight holds at 20 segments under a 65,535-byte window (`_through_8m`):
    10 segments back to back, 10 more every 2.5 ms, then 800 more, each pair two segments after
    the ACK of the pair 20 before. Paced: one every 2.5 ms on the sender's own timer, 2 ms after
    the ACK that comes before it; else each pair 20 and 30 us after that ACK, as a sender with
    data ready answers it."""

    def depart(k: int, sent: list[float], acked: dict[int, float]) -> float:
        if k < 10:
            return 0.06 + k * 1e-4
        if k < 20 or paced:
            return sent[-1] + 2.5e-3
        # Segment k leaves after the ACK of segment k - 19 (k even) or k - 20 (k odd).
        return acked[k - 19] + 20e-6 if k % 2 == 0 else acked[k - 20] + 30e-6

    return _through_8m(tmp_path / "capped.pcap", 820, depart)


def test_a_cap_whose_acks_are_answered_at_once_is_the_senders(tmp_path: Path) -> None:
    ctx = context(_capped(tmp_path, paced=False))
    (f,) = run_detectors(ctx, [WindowLimited], {"window_limited": PATH_8M})
    assert f.evidence["limited_by"] == "sender"
    assert f.evidence["window_bytes"] == pytest.approx(20_000, abs=1000)


def test_quiet_on_a_writer_whose_tail_waits_for_the_first_ack(tmp_path: Path) -> None:
    # An application writes 20,500 bytes every 300 ms: 20 segments of 1000 bytes leave at once,
    # and the last 500 wait for the first ACK (Nagle, RFC 896: a short segment waits until the
    # data before it is acknowledged), which they answer 20 us after it comes. The flight holds
    # at 20 segments, under a 50-segment BDP, and the first ACK at that level is answered at
    # once each time, but by a write's tail with nothing behind it: the application, not a
    # socket buffer, held the flight there.
    c, srv = 1000, 5000
    opts = [("MSS", 1000)]
    pkts = [
        tcp(0.00, CLIENT, SERVER, 40000, 80, "S", c, options=opts),
        tcp(0.05, SERVER, CLIENT, 80, 40000, "SA", srv, c + 1, options=opts),
        tcp(0.05, CLIENT, SERVER, 40000, 80, "A", c + 1, srv + 1),
    ]
    seq = c + 1
    for w in range(12):
        start = 0.06 + w * 0.3
        for k in range(20):
            pkts.append(tcp(start + k * 1e-4, CLIENT, SERVER, 40000, 80, "A", seq, srv + 1, 1000))
            seq += 1000
            if k % 2:
                # Through the 8 Mbit/s bottleneck (1 ms a segment) and 50 ms of round trip.
                at = start + 0.05 + (k + 1) * 1e-3 + 0.5e-3
                pkts.append(tcp(at, SERVER, CLIENT, 80, 40000, "A", srv + 1, seq))
                if k == 1:
                    tail = at + 20e-6
        pkts.append(tcp(tail, CLIENT, SERVER, 40000, 80, "A", seq, srv + 1, 500))
        seq += 500
        pkts.append(tcp(start + 0.0715, SERVER, CLIENT, 80, 40000, "A", srv + 1, seq))
    pkts.sort(key=lambda p: p.time)
    ctx = context(write(tmp_path / "writer.pcap", pkts))
    assert run_detectors(ctx, [WindowLimited], {"window_limited": PATH_8M}) == []


def test_quiet_on_a_pacer_whose_flight_is_as_constant(tmp_path: Path) -> None:
    # The same flight of 20 segments, each leaving on the pacer's timer 2 ms after an ACK that
    # came every 5 ms: no socket buffer held it.
    ctx = context(_capped(tmp_path, paced=True))
    assert run_detectors(ctx, [WindowLimited], {"window_limited": PATH_8M}) == []


def test_quiet_on_a_pacer_whose_answers_come_as_soon_as_a_caps(tmp_path: Path) -> None:
    # A pacer letting out a segment every 2.419 ms (3.3 Mbit/s of the 8 Mbit/s path): its
    # flight holds at 21 segments, and each ACK, every 4.84 ms, comes 0.3 ms before one of its
    # departures, within a quarter of the ACKs' spacing, as soon as a sender with data ready
    # behind a cap answers. But it sends all round the round trip, where a cap of 21 segments
    # under a 50-segment BDP would leave the path idle more than half of each round trip.
    def depart(k: int, sent: list[float], acked: dict[int, float]) -> float:
        return 0.06 + k * 2.419e-3

    ctx = context(_through_8m(tmp_path / "paced.pcap", 820, depart))
    assert run_detectors(ctx, [WindowLimited], {"window_limited": PATH_8M}) == []


def _behind_a_host_queue(tmp_path: Path, lag_s: float, flight_segments: int) -> Path:
    """A sender under a 20,000-byte receive window (20 segments, `_through_8m`: a window of
    0.4 BDP). Each ACK frees two segments and the sender sends them at once up to
    `flight_segments` in flight, but they reach the capture point `lag_s` later, through a
    first-in first-out queue in the sending host: a lag past the next ACK (2 ms) keeps the
    captured flight two segments below what TCP has in flight, until the queue drains in the
    idle end of each round trip."""
    n = flight_segments

    def depart(k: int, sent: list[float], acked: dict[int, float]) -> float:
        if k < n:
            return 0.06 + k * 1e-4
        # The pair k, k + 1 (k - n even) is released by the ACK of segment k + 1 - n.
        released = k + 1 - n if (k - n) % 2 == 0 else k - n
        return max(acked[released] + lag_s, sent[-1] + 10e-6)

    return _through_8m(tmp_path / "behind.pcap", 1000, depart, window=20_000)


SWEEP = Path(__file__).resolve().parents[1] / "fixtures" / "sweep"


@pytest.mark.parametrize(
    ("name", "idles"),
    [
        # Reno paced at 60% of 90 Mbit/s over 25 ms: its flight stands at 0.65 BDP, but its
        # idle time comes in one gap per burst of 2**-10 s of its rate, under RTT / 20.
        ("paced_reno_90m_25ms", False),
        # A send buffer and a receive window far below the BDP: one wait a round trip.
        ("sndbuf_16k", True),
        ("sndbuf_48k", True),
        ("window_64k_100ms", True),
    ],
)
def test_a_window_idles_once_a_round_trip_and_a_pacer_between_its_bursts(
    name: str, idles: bool
) -> None:
    # The sender's departures against the BDP and RTT the lab configured, at the flight the
    # capture shows held.
    t = json.loads((SWEEP / name / "truth.json").read_text())
    rtt = t["path"]["rtt_ms"] / 1e3
    bdp = t["path"]["bottleneck_rate_bps"] * PAYLOAD_PER_FRAME / 8 * rtt
    ((_, _, d),) = [x for x in data_directions(context(SWEEP / name / "sender.pcap.zst"))]
    flight = float(np.median(flight_levels(d)[0]))
    assert flight < 0.8 * bdp
    assert _idles_each_round_trip(d.data["t_s"].to_numpy(), flight, bdp, rtt) is idles


def test_a_window_seen_behind_a_host_queue_is_pinned_by_the_round_trip(tmp_path: Path) -> None:
    # The captured flight reaches the window only in the last bursts of each round trip's
    # train, a fifth of the segments: every round trip is pinned whole.
    ctx = context(_behind_a_host_queue(tmp_path, lag_s=2.5e-3, flight_segments=20))
    (f,) = run_detectors(ctx, [WindowLimited], {"window_limited": PATH_8M})
    assert f.evidence["limited_by"] == "receiver"
    assert f.evidence["window_bytes"] == 20_000
    assert f.evidence["pinned_fraction"] >= 0.9


def test_a_flight_held_below_the_window_is_not_the_receivers(tmp_path: Path) -> None:
    # A cap of 18 segments under the 20-segment window, answered at once, no host queue: no
    # round trip shows the receive window binding, and the cap is the sender's.
    ctx = context(_behind_a_host_queue(tmp_path, lag_s=20e-6, flight_segments=18))
    (f,) = run_detectors(ctx, [WindowLimited], {"window_limited": PATH_8M})
    assert f.evidence["limited_by"] == "sender"
    assert f.evidence["window_bytes"] == 18_000


def _reader(path: Path, read_every_s: float, count: int = 450, write_every_s: float = 0.0) -> Path:
    """`count` segments of 1000 bytes through an 8 Mbit/s bottleneck (1 ms per segment) and
    25 ms each way to a receiver with a 45,000-byte buffer (0.9 of the 50,000-byte BDP) whose
    application reads all the buffer holds every `read_every_s` (0: as each segment arrives).
    The sender's application writes 90 segments every `write_every_s` (0: all at once).

    The receiver acknowledges every second segment, offering what its buffer has free, and
    sends a window update after each read; the sender sends what was written up to the
    window's right edge at once, 0.1 ms apart, whenever an ACK moves the edge or a write
    comes."""
    c, srv, buffer = 1000, 5000, 45_000
    opts = [("MSS", 1000)]
    pkts = [
        tcp(0.00, CLIENT, SERVER, 40000, 80, "S", c, options=opts),
        tcp(0.05, SERVER, CLIENT, 80, 40000, "SA", srv, c + 1, options=opts, window=buffer),
        tcp(0.05, CLIENT, SERVER, 40000, 80, "A", c + 1, srv + 1),
    ]
    events: list[tuple[float, int, str, int, int]] = [(0.06, 0, "ack", 0, buffer)]
    writes = int(count / 90 + 1) if write_every_s else 1
    for k in range(writes):
        events.append((0.06 + k * write_every_s, k + 1, "write", 0, 0))
    heapq.heapify(events)
    order = writes + 1
    sent = arrived = unread = written = 0
    edge = buffer
    last_departure, last_arrival = 0.0, 0.0
    while events:
        t, _, kind, acked, window = heapq.heappop(events)
        if kind in ("ack", "write"):
            if kind == "ack":
                edge = acked * 1000 + window
            else:
                written = min(count, written + (90 if write_every_s else count))
            # The sender sends what is written up to the window's right edge, back to back.
            while sent < written and (sent + 1) * 1000 <= edge:
                last_departure = max(t, last_departure + 1e-4)
                seq = c + 1 + sent * 1000
                pkts.append(tcp(last_departure, CLIENT, SERVER, 40000, 80, "A", seq, srv + 1, 1000))
                last_arrival = max(last_departure + 0.025, last_arrival + 1e-3)
                heapq.heappush(events, (last_arrival, order, "arrival", 0, 0))
                order += 1
                sent += 1
            continue
        if kind == "arrival":
            arrived += 1
            unread = 0 if read_every_s == 0 else unread + 1000
            if arrived % 2 and arrived < sent:
                continue
        elif kind == "read":
            if unread == 0:
                continue
            unread = 0
        ack_t = t + 0.5e-3 if kind == "arrival" else t
        ack = c + 1 + arrived * 1000
        pkts.append(
            tcp(ack_t + 0.025, SERVER, CLIENT, 80, 40000, "A", srv + 1, ack, window=buffer - unread)
        )
        heapq.heappush(events, (ack_t + 0.025, order, "ack", arrived, buffer - unread))
        order += 1
        if read_every_s and kind == "arrival" and not any(e[2] == "read" for e in events):
            heapq.heappush(events, ((t // read_every_s + 1) * read_every_s, order, "read", 0, 0))
            order += 1
    pkts.sort(key=lambda p: p.time)
    return write(path, pkts)


def test_a_window_a_slow_reader_reopens_in_bursts_limits_below_the_bdp(tmp_path: Path) -> None:
    # The reader empties its 45,000-byte buffer every 300 ms: the sender fills the window in
    # one burst, its ACKs come back within two round trips, and it waits, nothing in flight,
    # for the next read. The window is 0.9 of the BDP; the flight over its round trips, by
    # construction at most 45,000 bytes for 0.1 s of every 0.3 s, is at most a third of it.
    ctx = context(_reader(tmp_path / "reader.pcap", read_every_s=0.3))
    (f,) = run_detectors(ctx, [WindowLimited], {"window_limited": PATH_8M})
    ev = f.evidence
    assert (ev["limited_by"], ev["window_bytes"]) == ("receiver", 45_000)
    assert ev["window_bytes"] >= 0.8 * ev["window_needed_bytes"]
    assert 0 < ev["flight_mean_bytes"] <= 45_000 * 0.1 / 0.3
    assert "read" in f.advice


def test_quiet_on_the_same_window_a_reader_keeps_open(tmp_path: Path) -> None:
    # The same 45,000-byte buffer read as each segment arrives: every ACK moves the right edge
    # and the sender keeps the window in flight, 0.9 of the BDP: the window covers the path.
    ctx = context(_reader(tmp_path / "keeps_up.pcap", read_every_s=0.0))
    assert run_detectors(ctx, [WindowLimited], {"window_limited": PATH_8M}) == []


def test_quiet_on_the_same_window_an_application_leaves_idle(tmp_path: Path) -> None:
    # The reader keeps the 45,000-byte window open, and the sender's application writes 90
    # segments every 300 ms: each write fills the window, the ACK clock sends the rest, and
    # then nothing is sent with the window open until the next write. The wait is the
    # application's, not the window's: no window limit.
    ctx = context(_reader(tmp_path / "writer.pcap", read_every_s=0.0, write_every_s=0.3))
    assert run_detectors(ctx, [WindowLimited], {"window_limited": PATH_8M}) == []


def test_quiet_on_one_stall_under_a_window_that_covers_the_path() -> None:
    # The lab's reader stops once for 2.64 s under a window near twice the BDP (90 Mbit/s at
    # 28 ms): the window shut for the stall, which is the stall's (zero_window_stall), not the
    # window's size. Outside the stall the kernel counted the receive window's time as under a
    # quarter of the sender's busy time; a mean flight that counted the stall's wait would fall
    # far below the BDP.
    from tracekit.capture import read_capture
    from tracekit.pipeline import analyze

    folder = Path(__file__).resolve().parents[1] / "fixtures" / "sweep" / "stall_2640ms_90m_28ms"
    truth = json.loads((folder / "truth.json").read_text())
    kernel, stall_us = truth["kernel_limits"], truth["receiver"]["read_pause_ms"] * 1000
    outside = kernel["busy_time_us"] - stall_us
    assert 0 <= kernel["rwnd_limited_us"] - stall_us < 0.25 * outside
    doc = analyze(
        read_capture(folder / "sender.pcap.zst"), read_capture(folder / "receiver.pcap.zst")
    ).to_dict()
    assert not [f for f in doc["findings"] if f["kind"] == "window_limited"]


def test_a_flight_its_receiver_leaves_unacknowledged_carries_nothing() -> None:
    # The lab's reader takes 6 kB every 23.4 ms at RTT 1.1 ms: each read reopens a few
    # segments of window, the sender sends them, and the receiver, its buffer full again,
    # acknowledges them only when its delayed-ACK timer fires, tens of round trips later. The
    # flight stands at about the BDP the whole time while the path idles; the kernel counted
    # the receive window's time as most of the sender's busy time.
    from tracekit.capture import read_capture
    from tracekit.pipeline import analyze

    folder = Path(__file__).resolve().parents[1] / "fixtures" / "sweep" / "reader_6k_23ms_1ms"
    truth = json.loads((folder / "truth.json").read_text())
    kernel = truth["kernel_limits"]
    assert kernel["rwnd_limited_us"] > 0.5 * kernel["busy_time_us"]
    doc = analyze(
        read_capture(folder / "sender.pcap.zst"), read_capture(folder / "receiver.pcap.zst")
    ).to_dict()
    (f,) = [x for x in doc["findings"] if x["kind"] == "window_limited"]
    ev = f["evidence"]
    # What the path carried: the reads' bytes per round trip, a small share of the BDP that
    # the lab's relay and tbf set (payload bytes).
    bdp = truth["path"]["bdp_bytes"] * PAYLOAD_PER_FRAME
    reader = truth["receiver"]
    per_second = reader["read_bytes"] / (reader["read_interval_ms"] / 1e3)
    per_round_trip = per_second * truth["path"]["rtt_ms"] / 1e3
    assert ev["flight_mean_bytes"] < 0.5 * bdp
    assert ev["flight_mean_bytes"] < 4 * per_round_trip
