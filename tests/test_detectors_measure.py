"""The detectors' shared measurements (tracekit.detectors._measure) on inputs built by hand."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import pytest
from scapy.layers.inet import IP, UDP
from scapy.layers.l2 import Ether

from tests.helpers.crafting import CLIENT, OPTS, SERVER, tcp, write
from tracekit.capture import read_capture
from tracekit.detectors._measure import (
    ETHERNET_HEADER_BYTES,
    AckLine,
    achieved_rate_bps,
    ack_line_rate_bps,
    ack_line_rates_bps,
    data_directions,
    findings_per_direction,
    flight_levels,
    min_rtt_s,
    packet_basis,
    packet_pair_rate_samples_bps,
    path_rate_bps,
    queue_at_start_bytes,
    queues_at_start_bytes,
    segment_size_bytes,
    wire_directions,
    wire_overhead_bytes,
)
from tracekit.detectors.base import AnalysisContext
from tracekit.pipeline import vantage
from tracekit.series import Direction

MSS = 1000


def direction(
    segments: dict[str, Any] | None = None,
    acks: dict[str, Any] | None = None,
    sacks: dict[str, Any] | None = None,
    rtt: dict[str, Any] | None = None,
    flight: dict[str, Any] | None = None,
) -> Direction:
    """A Direction of the given columns; tables left out are empty."""

    def table(columns: dict[str, Any] | None, names: list[str]) -> pd.DataFrame:
        return pd.DataFrame(columns if columns is not None else {n: [] for n in names})

    return Direction(
        conn=0,
        direction=0,
        segments=table(segments, ["t_s", "seq_rel", "end_rel", "len", "kind", "frame"]),
        acks=table(acks, ["t_s", "ack_rel", "dupack", "advance", "frame"]),
        sacks=table(sacks, ["t_s", "left_rel", "right_rel", "dsack"]),
        rtt=table(rtt, ["t_s", "rtt_s"]),
        flight=table(flight, ["t_s", "flight_bytes", "rwnd_bytes"]),
    )


def context(path: Path) -> AnalysisContext:
    v = vantage(read_capture(path))
    return AnalysisContext(
        connections=v.connections.frame(), packets=v.connections.packets, series=v.series
    )


# --- which directions -----------------------------------------------------------------------


def three_connections(tmp_path: Path) -> AnalysisContext:
    """Connection 0 carries data from the client, 1 both ways, 2 none."""
    packets = [
        # Connection 0: data from the client only, ACKs back.
        tcp(0.0, CLIENT, SERVER, 40000, 80, "A", 1, 1, 100),
        tcp(0.1, SERVER, CLIENT, 80, 40000, "A", 1, 101),
        # Connection 1: data both ways.
        tcp(0.2, CLIENT, SERVER, 40001, 80, "A", 1, 1, 100),
        tcp(0.3, SERVER, CLIENT, 80, 40001, "A", 1, 101, 50),
        tcp(0.4, CLIENT, SERVER, 40001, 80, "A", 101, 51),
        # Connection 2: pure ACKs, no data either way.
        tcp(0.5, CLIENT, SERVER, 40002, 80, "A", 1, 1),
        tcp(0.6, SERVER, CLIENT, 80, 40002, "A", 1, 1),
    ]
    return context(write(tmp_path / "three.pcap", packets))


def test_data_directions_are_those_that_carried_data_in_connection_order(tmp_path: Path) -> None:
    ctx = three_connections(tmp_path)
    found = [(conn, d, (ser.conn, ser.direction)) for conn, d, ser in data_directions(ctx)]
    assert found == [(0, 0, (0, 0)), (1, 0, (1, 0)), (1, 1, (1, 1))]


def test_findings_per_direction_keeps_what_the_judge_found(tmp_path: Path) -> None:
    ctx = three_connections(tmp_path)
    asked = []

    def judge(c: AnalysisContext, conn: int, direction: int, d: Direction) -> Any:
        asked.append((conn, direction, d.conn, d.direction))
        return None if direction == 1 else f"finding {conn}"

    assert list(findings_per_direction(ctx, judge)) == ["finding 0", "finding 1"]
    assert asked == [(0, 0, 0, 0), (1, 0, 1, 0), (1, 1, 1, 1)]


def test_wire_directions_are_the_data_directions_of_tcp_connections(tmp_path: Path) -> None:
    client6, server6 = "fd00::1", "fd00::2"
    packets = [
        # Connection 0: IPv4, both SYNs carry timestamps.
        tcp(0.0, CLIENT, SERVER, 40000, 80, "S", 0, 0, 0, OPTS),
        tcp(0.1, SERVER, CLIENT, 80, 40000, "SA", 0, 1, 0, OPTS),
        tcp(0.2, CLIENT, SERVER, 40000, 80, "A", 1, 1, 100, [("Timestamp", (1, 1))]),
        # Connection 1: IPv6 without options, data from the client only.
        tcp(0.3, client6, server6, 40001, 80, "S", 0),
        tcp(0.4, server6, client6, 80, 40001, "SA", 0, 1),
        tcp(0.5, client6, server6, 40001, 80, "A", 1, 1, 100),
        # A UDP datagram: not TCP, no direction of it.
        Ether() / IP(src=CLIENT, dst=SERVER) / UDP(sport=5000, dport=5001) / (b"x" * 8),
    ]
    packets[-1].time = 0.6
    ctx = context(write(tmp_path / "two.pcap", packets))
    found = [(d.conn, d.direction, overhead) for d, overhead in wire_directions(ctx, 14)]
    # Only the clients sent data (b2a directions are left out, unsliced).
    # 14 Ethernet + 20 IPv4 + 20 TCP + 12 timestamps; 14 Ethernet + 40 IPv6 + 20 TCP.
    assert found == [(0, 0, 66), (1, 0, 74)]
    assert [overhead for _, overhead in wire_directions(ctx, 0)] == [52, 60]


# --- sizes ----------------------------------------------------------------------------------


def test_segment_size_is_the_most_common_payload() -> None:
    # Pure ACKs (length 0) are the most common lengths here, and do not count.
    sizes = [0, 0, 0, 0, 1448, 1448, 1448, 500, 2896, 0]
    assert segment_size_bytes(pd.DataFrame({"len": sizes})) == 1448


def test_segment_size_tie_goes_to_the_larger() -> None:
    assert segment_size_bytes(pd.DataFrame({"len": [536, 536, 1448, 1448, 100]})) == 1448


def test_segment_size_without_data_is_zero() -> None:
    assert segment_size_bytes(pd.DataFrame({"len": [0, 0]})) == 0
    assert segment_size_bytes(pd.DataFrame({"len": []})) == 0


def test_wire_overhead_counts_what_a_qdisc_counts() -> None:
    assert ETHERNET_HEADER_BYTES == 14
    assert wire_overhead_bytes(4, True, 14) == 14 + 20 + 20 + 12
    assert wire_overhead_bytes(4, False, 14) == 14 + 20 + 20
    assert wire_overhead_bytes(6, True, 0) == 40 + 20 + 12
    assert wire_overhead_bytes(6, False, 0) == 40 + 20


def test_packet_basis_names_each_part_of_l() -> None:
    text = packet_basis(1448, 66, 14)
    assert text.startswith("l = 1448 payload + 52 IP/TCP header + 14 link header bytes: ")


# --- time -----------------------------------------------------------------------------------


def test_min_rtt_skips_zero_samples() -> None:
    assert min_rtt_s(direction(rtt={"t_s": [1, 2, 3, 4], "rtt_s": [0.05, 0.0, 0.03, 0.04]})) == 0.03
    assert min_rtt_s(direction()) is None


# --- rates from the ACKs --------------------------------------------------------------------


def pairs(
    n: int = 10, sent_gap_s: float = 1e-4, ack_gap_s: float = 1e-3, stall: int = -1
) -> Direction:
    """n segments of MSS bytes sent sent_gap_s apart, each ACKed alone, ack_gap_s apart.

    With stall >= 0 the ACKs from that one on come 10 ms later (a stall before it).
    """
    i = np.arange(n)
    ack_t = 0.1 + i * ack_gap_s + np.where(i >= stall, 0.01, 0.0) * (stall >= 0)
    return direction(
        segments={
            "t_s": i * sent_gap_s,
            "seq_rel": i * MSS,
            "end_rel": (i + 1) * MSS,
            "len": np.full(n, MSS),
            "kind": ["new"] * n,
            "frame": 2 * i,
        },
        acks={
            "t_s": ack_t,
            "ack_rel": (i + 1) * MSS,
            "dupack": np.zeros(n, bool),
            "advance": np.ones(n, bool),
            "frame": 2 * i + 1,
        },
    )


def test_packet_pairs_measure_the_ack_spacing_of_compressed_segments() -> None:
    # One MSS per ms comes back: 8 Mbit/s. Spans of 4 ACKs over 10 ACKs: 6 samples.
    samples = packet_pair_rate_samples_bps(pairs())
    np.testing.assert_allclose(samples, np.full(6, MSS * 8 / 1e-3))
    assert path_rate_bps(pairs()) == pytest.approx(8e6)


def test_packet_pairs_need_the_sender_faster_than_the_acks() -> None:
    # Sent as fast as the ACKs return: the sender, not the path, may have spaced them.
    assert packet_pair_rate_samples_bps(pairs(sent_gap_s=1e-3)).size == 0
    assert path_rate_bps(pairs(sent_gap_s=1e-3)) is None


def test_packet_pairs_leave_out_spans_with_a_stall() -> None:
    # A 10 ms stall before ACK 5 spoils the four spans across it (ACKs 1-5 to 4-8): the spans
    # of ACKs 0-4 and 5-9 are left, too few for the median's default of 3.
    d = pairs(stall=5)
    np.testing.assert_allclose(packet_pair_rate_samples_bps(d), [8e6, 8e6])
    assert path_rate_bps(d) is None
    assert path_rate_bps(d, min_samples_count=2) == pytest.approx(8e6)


def test_packet_pairs_leave_out_sacked_and_duplicate_acks() -> None:
    d = pairs()
    dup = d.acks["dupack"].to_numpy().copy()
    dup[9] = True  # the last ACK a duplicate: the span ending on it goes
    d.acks["dupack"] = dup
    sacked = direction(segments=d.segments, acks=d.acks, sacks={"t_s": [d.acks["t_s"][0]]})
    # ACK 0 carrying a SACK block as well: the span that starts on it goes too.
    assert packet_pair_rate_samples_bps(d).size == 5
    assert packet_pair_rate_samples_bps(sacked).size == 4


def line(t_s: list[float], ack_rel: list[int], dupack: list[bool] | None = None) -> pd.DataFrame:
    """ACKs at t_s with ACK numbers ack_rel; each advances the line unless it repeats one."""
    dup = dupack if dupack is not None else [False] * len(t_s)
    advance = [i == 0 or ack_rel[i] > ack_rel[i - 1] for i in range(len(ack_rel))]
    return pd.DataFrame({"t_s": t_s, "ack_rel": ack_rel, "dupack": dup, "advance": advance})


def test_ack_line_rate_is_the_slope_from_the_first_to_the_last_ack() -> None:
    acks = line([0.000, 0.001, 0.002, 0.003, 0.004], [1000, 2000, 3000, 4000, 5000])
    # 4000 bytes from the first ACK to the last in 4 ms: 8 Mbit/s, over all five ACKs.
    assert ack_line_rate_bps(acks, 0.0) == (pytest.approx(8e6), 5)
    # The interval picks ACKs by time, [start_s, stop_s), and by ACK number, (above, up_to].
    assert ack_line_rate_bps(acks, 0.001, stop_s=0.0045) == (pytest.approx(8e6), 4)
    assert ack_line_rate_bps(acks, 0.0, above_rel=1000, up_to_rel=5000) == (
        pytest.approx(8e6),
        4,
    )


def test_ack_line_rate_stops_at_the_first_duplicate() -> None:
    acks = line(
        [0.000, 0.001, 0.002, 0.003, 0.004, 0.005, 0.006],
        [1000, 2000, 3000, 4000, 5000, 5000, 9000],
        [False, False, False, False, False, True, False],
    )
    # The jump to 9000 after the hole does not count: 4000 bytes in 4 ms.
    assert ack_line_rate_bps(acks, 0.0) == (pytest.approx(8e6), 5)
    # Fewer than four ACKs before the duplicate: no rate.
    rate, used = ack_line_rate_bps(acks, 0.002)
    assert np.isnan(rate) and used == 3


def _ack_line_rate_by_masks(
    acks: pd.DataFrame, start_s: float, stop_s: float, above_rel: float, up_to_rel: float
) -> tuple[float, int]:
    """The ACK-line rate as whole-table masks: the reference the compiled scan must match."""
    t = acks["t_s"].to_numpy()
    ack = acks["ack_rel"].to_numpy()
    pick = np.flatnonzero((t >= start_s) & (t < stop_s) & (ack > above_rel) & (ack <= up_to_rel))
    dup = np.flatnonzero(acks["dupack"].to_numpy()[pick])
    if dup.size:
        pick = pick[: dup[0]]
    pick = pick[acks["advance"].to_numpy()[pick]]
    if pick.size < 4:
        return float("nan"), int(pick.size)
    span = t[pick[-1]] - t[pick[0]]
    if span <= 0:
        return float("nan"), int(pick.size)
    return float((ack[pick[-1]] - ack[pick[0]]) * 8 / span), int(pick.size)


@pytest.mark.parametrize("seed", range(5))
def test_ack_line_rates_match_the_masks_interval_by_interval(seed: int) -> None:
    rng = np.random.default_rng(seed)
    n = 400
    t = np.cumsum(rng.exponential(1e-3, n))
    ack = np.cumsum(rng.choice([0, 1000, 2000], n, p=[0.1, 0.6, 0.3]))
    # Reordered ACKs: some times and ACK numbers step back, which the scan's bounds must allow.
    swap = rng.choice(n - 1, 20, replace=False)
    t[swap], t[swap + 1] = t[swap + 1].copy(), t[swap].copy()
    ack[swap[:10]] -= 5000
    acks = pd.DataFrame(
        {
            "t_s": t,
            "ack_rel": ack,
            "dupack": rng.random(n) < 0.02,
            "advance": rng.random(n) < 0.9,
        }
    )
    m = 200
    start = rng.uniform(0, t.max(), m)
    stop = np.where(rng.random(m) < 0.5, np.inf, start + rng.uniform(0, 0.1, m))
    above = rng.uniform(-1000, ack.max(), m).round()
    up_to = np.where(rng.random(m) < 0.2, np.inf, above + rng.uniform(0, 50_000, m).round())
    rates, used = ack_line_rates_bps(AckLine.of(acks), start, stop, above, up_to)
    for i in range(m):
        want = _ack_line_rate_by_masks(acks, start[i], stop[i], above[i], up_to[i])
        assert (rates[i], used[i]) == want or (np.isnan(rates[i]) and np.isnan(want[0]))
        assert used[i] == want[1]


def test_queues_at_start_are_queue_at_start_segment_by_segment() -> None:
    acks = line([0.10, 0.12, 0.15, 0.30], [1000, 2000, 3000, 8000])
    sent = np.array([0.0, 0.05, 0.0, 0.0, 0.01])
    end = np.array([2000, 2000, 4000, 9000, 1000])
    queued = queues_at_start_bytes(sent, end, 1000, AckLine.of(acks), 0.1, 8e6)
    for i in range(sent.size):
        one = queue_at_start_bytes(float(sent[i]), int(end[i]), 1000, acks, 0.1, 8e6)
        assert queued[i] == one or (np.isnan(queued[i]) and np.isnan(one))
    assert np.isnan(queues_at_start_bytes(sent, end, 1000, AckLine.of(acks), 0.1, np.nan)).all()


def test_queue_at_start_is_the_wait_beyond_the_base_rtt_at_the_rate() -> None:
    acks = line([0.10, 0.12, 0.15], [1000, 2000, 3000])
    # Sent at 0, ACKed at 0.12 with a base RTT of 0.1: 20 ms behind a queue drained at 8 Mbit/s.
    assert queue_at_start_bytes(0.0, 2000, 1000, acks, 0.1, 8e6) == pytest.approx(20_000)
    # An ACK faster than the base RTT means no queue, not a negative one.
    assert queue_at_start_bytes(0.05, 2000, 1000, acks, 0.1, 8e6) == 0.0


def test_queue_at_start_is_unknown_after_a_hole_or_without_rates() -> None:
    # The first ACK covering byte 1500 covers 3500 more: a hole was filled, NaN.
    hole = line([0.10, 0.30], [1000, 5000])
    assert np.isnan(queue_at_start_bytes(0.0, 1500, 1000, hole, 0.1, 8e6))
    # Two segments more (a delayed ACK) are still this segment's ACK.
    assert queue_at_start_bytes(0.0, 3000, 1000, hole, 0.1, 8e6) == pytest.approx(200_000)
    acks = line([0.10, 0.12], [1000, 2000])
    assert np.isnan(queue_at_start_bytes(0.0, 3000, 1000, acks, 0.1, 8e6))  # never ACKed
    assert np.isnan(queue_at_start_bytes(0.0, 2000, 1000, acks, float("nan"), 8e6))
    assert np.isnan(queue_at_start_bytes(0.0, 2000, 1000, acks, 0.1, float("nan")))


def test_achieved_rate_is_the_ack_line_over_the_transfer() -> None:
    d = direction(
        segments={
            "t_s": [0.5, 1.0, 1.1],
            "seq_rel": [0, 0, 5000],
            "len": [0, 5000, 5000],  # the first is a pure ACK: it starts nothing
        },
        # The line reaches 10000 at 2.0 s; the duplicate after it does not stretch the time.
        acks={"t_s": [1.2, 2.0, 2.5], "ack_rel": [5000, 10000, 10000]},
    )
    assert achieved_rate_bps(d) == pytest.approx(10000 * 8 / (2.0 - 1.0))
    assert achieved_rate_bps(direction()) == 0.0


# --- the flight -----------------------------------------------------------------------------


def test_flight_levels_take_the_top_of_each_burst_where_the_window_is_known() -> None:
    # ACKs at frames 10 and 20 split the data into bursts [5, 6], [11, 12, 13], [21].
    d = direction(
        segments={"len": [MSS] * 6, "frame": [5, 6, 11, 12, 13, 21]},
        acks={"frame": [10, 20]},
        flight={
            "flight_bytes": [1000, 2000, 1500, 2500, 3500, 3000],
            "rwnd_bytes": [-1, -1, 4000, 4000, 4000, 5000],  # none advertised before frame 10
        },
    )
    top, rwnd, known = flight_levels(d)
    np.testing.assert_array_equal(top, [3500, 3500, 3500, 3000])
    np.testing.assert_array_equal(rwnd, [4000, 4000, 4000, 5000])
    np.testing.assert_array_equal(known, [False, False, True, True, True, True])
