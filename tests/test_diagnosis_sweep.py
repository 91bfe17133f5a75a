"""The diagnosis on a representative subset of the lab sweep, scored as bench/accuracy.py scores
the whole of it: every label the subset is scored on is right, and the verdict's shares of the
time are within 10 points of the sender kernel's own account (TCP_INFO), class included.

The subset covers each symptom the detectors were reworked for, each case with its truth
(fixtures/sweep/<name>/truth.json, made by `python -m fixtures.lab sweep`): a first round that
overruns (initial window 40), start/stop with small reopenings, a window scale unknown (a
snaplen-54 copy, a copy that starts mid-connection), receiver drops in slow start, a 2.5 s stall,
the RTT from 1 ms to 600 ms, the rate from 5 to 200 Mbit/s, and applications that write less than
the path carries (idle three quarters and half of the time), a LAN whose CPU-bound hosts pause
between writes with data queued, and paths that change or are shared: an RTT step (one under a
standing queue), cross traffic, GRO at the receiver, trains at twice the bottleneck's rate, a
reverse path that drops three of every four pure ACKs, a pacer that holds the sender under a
window too small for the path, one whose flight stands below the BDP with the window open, one
at the path's rate whose ACKs come back in step with its timer, and one that paces a slow
reader's rate between its ACKs.
"""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "bench"))
from accuracy import SWEEP, score_one  # noqa: E402

SUBSET = (
    "base",
    "base_midstream",
    "base_snap54",
    "initcwnd40_reno_0.1bdp",
    "initcwnd40_reno_200ms",
    "overrun_reno_100m_50ms",
    "reader_4k_5ms",
    "receiver_drops_30m_50ms",
    "both_drops",
    "stall_2500ms",
    "rtt_1ms",
    "rtt_5ms",
    "rtt_600ms",
    "rate_5m",
    "rate_200m",
    "window_64k_600ms",
    "wscale_off_30m_600ms",
    "app_16k_100ms_20ms",
    "app_64k_1s_300ms",
    # Idle a third of the time, in pauses shorter than a write takes at the path's rate.
    "app_64k_40ms_10ms",
    "stall_2500ms_snap54",
    # The path beside the bottleneck: an RTT that steps 6x up, and down after an overrun,
    # another host's traffic through the bottleneck, GRO's stretch ACKs, line-rate trains
    # into a bottleneck at half the access rate, and a reverse path that drops pure ACKs.
    "delay_step_cubic_20_120ms",
    "delay_step_down_reno_100_40ms",
    # A step the standing queue hides from the round trip: the way back's delay shows it.
    "delay_step_under_queue_cubic_1.5_7ms",
    "cross_udp_tcp_20m",
    "gro_receiver_50m",
    "bursty_writes_50m_half",
    "ack_drops_3of4",
    # A veth pair: RTTs of microseconds, 64 KiB writes copied in between the ACKs.
    "lan_offloads_on",
    # A pacer under a receive window far below the BDP: the kernel counts its holds busy.
    "paced_reno_rcvbuf_24k_50ms",
    # BBR under such a window: its answers to ACKs come late, and earn Linux's credit.
    "bbr_rcvbuf_24k_50ms",
    # A window far above a path's BDP of 3 kB, held in its buffer: the RTT Linux paces by is
    # the standing queue's, some 25 times the least.
    "cubic_8m_3ms_standing_queue",
    # A pacer at 60% of a path of 25 ms, its flight below the BDP as a window's would be.
    "paced_reno_90m_25ms",
    # BBR at the path's rate under a window with little room, its ACKs in step with its
    # timer: the starts keep the timer's spacing, not the ACKs'.
    "bbr_56m_4ms",
    # BBR pacing at a slow reader's rate, its receiver acknowledging once per read: the timer
    # shows itself between two ACKs, and holds the sender where the window has room.
    "reader_16k_25ms_3ms",
    # Reno with no pacer over 545 ms: its slow start waits out each round trip for its ACKs,
    # which no pacer's hold after a train of segments lasts.
    "slow_start_reno_52m_545ms",
    # A reader far slower than a path of a millisecond, whose receiver holds each reopened
    # window's ACK for its delayed-ACK timer: the flight stands while the path idles.
    "reader_6k_23ms_1ms",
    # An ACK clock on a path of 2 ms whose NIC shaper cuts a few of its releases with no ACK
    # between: the waits of a device, not of a pacer, and the window held it nearly always.
    "reno_105m_2ms",
)
# Where the capture cannot show the receive window's share (its window scale is unknown), the
# verdict says so and is not scored on its shares.
SCALE_UNKNOWN = {"base_midstream", "base_snap54", "stall_2500ms_snap54"}


@pytest.fixture(scope="module", params=SUBSET)
def row(request: pytest.FixtureRequest) -> dict[str, object]:
    return score_one(SWEEP / request.param)


def test_every_scored_label_is_right(row: dict) -> None:
    assert "error" not in row
    wrong = {k: v for k, v in row["labels"].items() if v["expected"] != v["found"]}
    assert not wrong, wrong


def test_the_verdict_is_the_kernels_or_says_it_cannot_tell(row: dict) -> None:
    v = row["verdict"]
    if row["scenario"] in SCALE_UNKNOWN:
        # The handshake's window scale is not in the capture: the verdict says it cannot
        # count the window's share rather than read raw windows as bytes.
        assert v["window_scale_known"] is False
        # It gives the window's share as a range instead: from zero windows alone up to the
        # least shift the flight allows. The kernel's share lies in it.
        low, high = v["rwnd_range"]
        assert low - 0.10 <= v["kernel"]["receive_window"] <= high + 0.10, v
        return
    assert v["window_scale_known"] is True
    assert v["class"] == v["kernel_class"]
    assert v["max_error"] <= 0.10, v


def test_the_buffer_estimate_is_within_one_and_a_half_times() -> None:
    for name in ("initcwnd40_reno_0.1bdp", "overrun_reno_100m_50ms", "both_drops"):
        ratio = score_one(SWEEP / name)["buffer_ratio"]
        assert 1 / 1.5 <= ratio <= 1.5, (name, ratio)


def test_drop_counts_equal_the_counters() -> None:
    row = score_one(SWEEP / "both_drops")
    for counter in ("network", "receiver"):
        assert row[f"{counter}_drops"]["found"] == row[f"{counter}_drops"]["counter"]
