import math
from collections.abc import Callable

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tracekit import physics
from tracekit.errors import TracekitError

MB = 1e6  # Antony et al. count memory in decimal megabytes


def test_eq3_buffer_for_622_mbps_behind_1_gbps_at_100_ms() -> None:
    # Antony sec. 2: f = 1 Gbit/s, s = 622 Mbit/s, R = 100 ms.
    # By hand: (1000 - 622) / 1000 * 622e6 bit/s * 0.1 s = 23,511,600 bit = 2,938,950 bytes.
    # The paper prints "3.1 MBytes"; its own eq. 3 gives 2.94 MB.
    m = physics.buffer_needed_bytes(622e6, 1e9, 0.1)
    assert m == pytest.approx(2_938_950)


def test_eq1_memory_of_the_tdm_switch_from_the_udp_burst() -> None:
    # Antony sec. 2: 1,500 packets of 1,000 bytes got through at f ~ 900 Mbit/s, s = 622 Mbit/s,
    # no drops. By hand: 1000 * 1500 * (900 - 622) / 900 = 463,333 bytes; the paper says ~0.5 MB.
    m = physics.buffer_from_burst_bytes(1500, 0, 900e6, 622e6, 1000)
    assert m == pytest.approx(463_333.3, rel=1e-6)
    assert round(m / MB, 2) == 0.46


def test_eq1_drops_beyond_the_longest_loss_free_burst() -> None:
    # Past the 1,500th packet about one in three is lost (the paper: "ratio agrees with the
    # bandwidth ratio", 278/900 = 0.309); 900 more packets lose 900 * 278 / 900 = 278.
    m = 1000 * 1500 * 278 / 900
    assert physics.slow_start_drops_packets(2400, 900e6, 622e6, m, 1000) == pytest.approx(278)
    assert physics.slow_start_drops_packets(1000, 900e6, 622e6, m, 1000) == 0.0
    assert physics.largest_loss_free_burst_packets(m, 900e6, 622e6, 1000) == pytest.approx(1500)


def test_no_queue_when_ingress_is_not_faster_than_bottleneck() -> None:
    assert physics.slow_start_drops_packets(10_000, 1e9, 1e9, 0, 1500) == 0.0
    assert physics.buffer_needed_bytes(1e9, 622e6, 0.1) == 0.0
    assert physics.loss_free_rate_bps(0, 622e6, 1e9, 0.1) == math.inf
    assert physics.largest_loss_free_burst_packets(0, 622e6, 1e9, 1500) == math.inf
    with pytest.raises(physics.PhysicsError):
        physics.buffer_from_burst_bytes(100, 0, 1e9, 1e9, 1500)


def test_eq2_loss_free_rate_with_half_a_megabyte() -> None:
    # By hand: f / (f - s) * M / R = 1000 / 378 * 4e6 bit / 0.1 s = 105.82 Mbit/s.
    b = physics.loss_free_rate_bps(0.5 * MB, 1e9, 622e6, 0.1)
    assert b == pytest.approx(1000 / 378 * 40e6)


def test_eq2_at_the_eq3_buffer_gives_back_the_bottleneck_rate() -> None:
    m = physics.buffer_needed_bytes(622e6, 1e9, 0.1)
    assert physics.loss_free_rate_bps(m, 1e9, 622e6, 0.1) == pytest.approx(622e6)


def test_corrected_eq4_for_the_150_ms_example() -> None:
    # Antony sec. 2: M = 0.5 MB, f = 1 Gbit/s, R = 150 ms, "the end-to-end throughput will be about
    # 45 Mbps". By hand: 4 M / (f R) = 4 * 4e6 / 1.5e8 = 0.10667, sqrt(0.89333) = 0.94516,
    # s = 500 Mbit/s * (1 -/+ 0.94516) = 27.42 and 972.58 Mbit/s. So the corrected eq. 4 gives
    # 27.4 Mbit/s, not 45: the paper's figure is not reproduced by its own equations (45 Mbit/s
    # needs 0.955 * 45e6 * R = 4e6 bit, i.e. R = 93 ms for this memory). Nor does eq. 2 give it:
    # for s = 622 Mbit/s it says 1000/378 * 4e6 / 0.15 = 70.5 Mbit/s.
    low, high = physics.loss_free_bottleneck_bounds_bps(0.5 * MB, 1e9, 0.15)
    assert low == pytest.approx(27.42e6, rel=1e-3)
    assert high == pytest.approx(972.58e6, rel=1e-4)
    assert physics.loss_free_rate_bps(0.5 * MB, 1e9, 622e6, 0.15) == pytest.approx(
        70.55e6, rel=1e-3
    )


def test_eq4_roots_need_exactly_the_given_buffer() -> None:
    low, high = physics.loss_free_bottleneck_bounds_bps(0.5 * MB, 1e9, 0.15)
    assert physics.buffer_needed_bytes(low, 1e9, 0.15) == pytest.approx(0.5 * MB)
    assert physics.buffer_needed_bytes(high, 1e9, 0.15) == pytest.approx(0.5 * MB)


def test_eq4_has_no_root_when_the_buffer_covers_every_rate() -> None:
    # 4 M > f R: M = 4 MB = 32e6 bit, f R = 1e9 * 0.1 = 1e8 bit, 4 M = 1.28e8 > 1e8.
    low, high = physics.loss_free_bottleneck_bounds_bps(4 * MB, 1e9, 0.1)
    assert math.isnan(low) and math.isnan(high)


def test_bdp_and_shift_for_the_acts_satellite_hybrid() -> None:
    # Coop3D: 135 Mbit/s x 539 ms = 72,765,000 bit = 9,095,625 bytes; "a window shift of 8":
    # 65535 << 7 = 8,388,480 is too small, 65535 << 8 = 16,776,960 suffices.
    bdp = physics.bdp_bytes(135e6, 0.539)
    assert bdp == pytest.approx(9_095_625)
    assert physics.window_scale_shift(bdp) == 8


def test_64k_window_over_3_1_ms_caps_near_20_mbyte_per_s() -> None:
    # Haas 4.1: a 64 Kbyte window with RTT = 3.1 ms gives "almost constant at 20 Mbyte/s".
    # By hand: 65,535 bytes / 3.1 ms = 21.14e6 bytes/s = 20.2 MiB/s.
    rate = physics.window_limited_rate_bps(65_535, 3.1e-3)
    assert rate / 8 == pytest.approx(21.14e6, rel=1e-3)
    assert rate / 8 / 2**20 == pytest.approx(20.2, abs=0.05)


@pytest.mark.parametrize(
    ("window", "shift"),
    [
        (0, 0),
        (65_535, 0),
        (65_536, 1),
        (131_070, 1),
        (131_071, 2),
        (65_535 << 13, 13),
        ((65_535 << 13) + 1, 14),
        (65_535 << 14, 14),
    ],
)
def test_window_scale_shift_edges(window: int, shift: int) -> None:
    assert physics.window_scale_shift(window) == shift


def test_window_scale_shift_refuses_a_window_beyond_rfc_7323() -> None:
    with pytest.raises(physics.PhysicsError, match="1,073,725,440"):
        physics.window_scale_shift((65_535 << 14) + 1)


@settings(derandomize=True, max_examples=300)
@given(st.integers(min_value=0, max_value=65_535 << 14))
def test_window_scale_shift_is_the_smallest_that_fits(window: int) -> None:
    shift = physics.window_scale_shift(window)
    assert 65_535 << shift >= window
    assert shift == 0 or 65_535 << (shift - 1) < window


def test_functions_broadcast_over_arrays() -> None:
    rtt = np.array([0.05, 0.1, 0.15])
    m = physics.buffer_needed_bytes(622e6, 1e9, rtt)
    assert isinstance(m, np.ndarray)
    np.testing.assert_allclose(m, 2_938_950 * rtt / 0.1)
    shifts = physics.window_scale_shift(np.array([1, 70_000, 9_095_625]))
    assert shifts.tolist() == [0, 1, 8]


@pytest.mark.parametrize(
    "call",
    [
        lambda: physics.bdp_bytes(-1, 0.1),
        lambda: physics.bdp_bytes(1e9, 0),
        lambda: physics.loss_free_rate_bps(-5, 1e9, 622e6, 0.1),
        lambda: physics.buffer_needed_bytes(float("nan"), 1e9, 0.1),
        lambda: physics.window_limited_rate_bps(65_535, np.array([0.1, -0.1])),
        lambda: physics.plan_path(1e9, 0.1, mss_bytes=0),
    ],
)
def test_meaningless_inputs_raise_a_tracekit_error(call: Callable[[], object]) -> None:
    with pytest.raises(TracekitError):
        call()


def test_plan_path_for_the_transatlantic_lambda() -> None:
    plan = physics.plan_path(622e6, 0.1, ingress_bps=1e9, buffer_bytes=0.5 * MB)
    # 622e6 * 0.1 / 8 = 7,775,000 bytes; 65535 << 6 = 4,194,240 < 7,775,000 <= 65535 << 7.
    assert plan.bdp_bytes == pytest.approx(7_775_000)
    assert plan.window_scale_shift == 7
    assert plan.scaled_window_bytes == 8_388_480
    assert plan.packet_bytes == 1500
    assert plan.buffer_needed_bytes == pytest.approx(2_938_950)
    assert plan.buffer_suffices is False
    # Eq. 1 with N_d = 0: 500,000 / 1500 * 1000 / 378 = 881.8 packets.
    assert plan.largest_loss_free_burst_packets == pytest.approx(881.83, rel=1e-4)
    # 622 Mbit/s lies inside the forbidden band of 0.5 MB at 100 ms: 1 - 0.16 = 0.84,
    # 500 * (1 -/+ 0.916515) = 41.74 and 958.26 Mbit/s.
    assert plan.forbidden_low_bps == pytest.approx(41.74e6, rel=1e-3)
    assert plan.forbidden_high_bps == pytest.approx(958.26e6, rel=1e-4)


def test_plan_path_without_ingress_leaves_buffer_answers_empty() -> None:
    plan = physics.plan_path(100e9, 1.0)
    # 12.5 GB in flight is beyond any TCP window: no shift can announce it.
    assert plan.window_scale_shift is None
    assert plan.buffer_needed_bytes is None and plan.loss_free_rate_bps is None
    d = plan.to_dict()
    assert d["window_scale_shift"] is None and d["buffer_suffices"] is None
