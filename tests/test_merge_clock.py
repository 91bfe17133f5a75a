"""Clock offset and skew: Moon et al.'s lower line, and the real lab captures re-clocked."""

from __future__ import annotations

import itertools
import json
import os
import struct
from pathlib import Path

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tests.helpers.exchange import stepped_path
from tracekit.capture import read_capture
from tracekit.connections import build_connections
from tracekit.merge import merge
from tracekit.merge.clock import _ties_by_y, fit_clocks, lower_line

LAB = Path(
    os.environ.get("TRACEKIT_LAB_CAPTURES", Path(__file__).parent.parent / "fixtures" / "captures")
)


def _brute_force(x: np.ndarray, y: np.ndarray) -> tuple[float, float]:
    """Moon et al.'s LP solved by enumeration: the optimum is a line through two points."""
    best = (np.inf, 0.0, 0.0)
    for i, j in itertools.combinations(range(x.size), 2):
        if x[i] == x[j]:
            continue
        a = (y[j] - y[i]) / (x[j] - x[i])
        b = y[i] - a * x[i]
        gap = y - (a * x + b)
        if gap.min() >= -1e-12 and gap.sum() < best[0]:
            best = (gap.sum(), a, b)
    return best[1], best[2]


def test_lower_line_is_the_lp_optimum() -> None:
    rng = np.random.default_rng(7)
    for _ in range(20):
        x = np.sort(rng.uniform(0, 10, 30))
        y = 0.02 + 3e-5 * x + rng.exponential(0.002, 30)
        line = lower_line(x, y)
        slope, intercept = _brute_force(x, y)
        assert line.slope == pytest.approx(slope, abs=1e-12)
        assert line.intercept == pytest.approx(intercept, abs=1e-12)
        assert (y - line.at(x)).min() >= -1e-15


def test_offset_and_skew_from_both_directions() -> None:
    rng = np.random.default_rng(11)
    t = np.sort(rng.uniform(0, 20, 4000))
    offset, skew = 3.7, 50e-6
    # Forward delays queue at a bottleneck; the ACKs come back through an idle path.
    fwd = 0.025 + rng.exponential(0.004, t.size)
    rev = 0.025 + rng.exponential(0.0002, t.size)
    fit = fit_clocks(t, fwd + offset + skew * t, t, rev - offset - skew * t)
    assert fit.offset_s == pytest.approx(offset, abs=2e-6)
    assert fit.skew_ppm == pytest.approx(50.0, abs=0.5)
    assert fit.offset_bound_s == pytest.approx(0.025, abs=1e-5)
    one_way = fit_clocks(t, fwd + offset + skew * t)
    assert not one_way.offset_known
    assert one_way.skew_ppm == 0.0


@pytest.mark.parametrize(("before_s", "after_s"), [(0.010, 0.060), (0.060, 0.010)])
def test_a_path_change_is_not_a_skew(before_s: float, after_s: float) -> None:
    # The path's one-way delays step 6x both ways at 3 s (a reroute, a relay's new delay);
    # the clocks run 50 ppm apart. The step must not pass for skew, whichever way it goes.
    rng = np.random.default_rng(5)
    t = np.sort(rng.uniform(0, 10, 20_000))
    owd = np.where(t < 3.0, before_s, after_s)
    offset, skew = 3.7, 50e-6
    fwd = owd + rng.exponential(0.003, t.size)
    rev = owd + rng.exponential(0.0002, t.size)
    fit = fit_clocks(t, fwd + offset + skew * t, t, rev - offset - skew * t)
    assert fit.skew_ppm == pytest.approx(50.0, abs=1.0)
    assert fit.offset_s == pytest.approx(offset, abs=1e-5)
    assert len(fit.phases) == 2
    first, second = fit.phases
    # Located within a bin of 4 base RTTs (80 ms) of the true step.
    assert second.start_s == pytest.approx(3.0, abs=0.08)
    assert first.rtt_s == pytest.approx(2 * before_s, rel=0.01)
    assert second.rtt_s == pytest.approx(2 * after_s, rel=0.01)
    # Queueing delay is measured above the floor of each phase.
    assert fit.floor_fwd_s([1.0, 9.0]) == pytest.approx([before_s, after_s], abs=1e-4)


def test_a_queue_that_grows_is_no_path_change() -> None:
    # Only the data direction's floor rises (a standing queue building at the bottleneck):
    # one phase, and no skew from it.
    rng = np.random.default_rng(3)
    t = np.sort(rng.uniform(0, 10, 20_000))
    fwd = 0.010 + 0.002 * t + rng.exponential(0.001, t.size)
    fit = fit_clocks(t, fwd, t, 0.010 + rng.exponential(0.0002, t.size))
    assert len(fit.phases) == 1
    assert abs(fit.skew_ppm) < 1.0


def restamp(src: Path, dst: Path, offset_s: float, skew_ppm: float) -> None:
    """Copy a classic pcap, moving every timestamp t to t0 + (t - t0)(1 + skew) + offset."""
    data = bytearray(src.read_bytes())
    magic = data[:4]
    order = "<" if magic in (b"\xd4\xc3\xb2\xa1", b"\x4d\x3c\xb2\xa1") else ">"
    unit = 1_000_000_000 if magic in (b"\x4d\x3c\xb2\xa1", b"\xa1\xb2\x3c\x4d") else 1_000_000
    rec = struct.Struct(order + "IIII")
    positions, stamps = [], []
    pos = 24
    while pos + 16 <= len(data):
        sec, frac, caplen, _ = rec.unpack_from(data, pos)
        positions.append(pos)
        stamps.append(sec * unit + frac)
        pos += 16 + caplen
    ts = np.array(stamps, dtype=np.int64)
    moved = ts[0] + np.round((ts - ts[0]) * (1 + skew_ppm * 1e-6) + offset_s * unit).astype(
        np.int64
    )
    for p, value in zip(positions, moved.tolist(), strict=True):
        struct.pack_into(order + "II", data, p, value // unit, value % unit)
    dst.write_bytes(bytes(data))


def _lab(name: str) -> Path:
    path = LAB / name
    if not (path / "truth.json").is_file():
        pytest.skip(f"lab capture {name} not made yet (python -m fixtures.lab {name})")
    return path


@pytest.mark.parametrize(
    "scenario", ["clean", "receiver_drops", "network_drops", "slow_start_overrun"]
)
def test_restamped_lab_capture(tmp_path: Path, scenario: str) -> None:
    # Both lab captures read one kernel clock: the true offset and skew are 0, so after the
    # shift the truth is exactly what was applied; the drop counts are the kernel's counters.
    lab = _lab(scenario)
    truth = json.loads((lab / "truth.json").read_text())
    restamp(lab / "receiver.pcap", tmp_path / "receiver.pcap", 3.7, 50.0)
    sender = build_connections(read_capture(lab / "sender.pcap"))
    as_made = merge(sender, build_connections(read_capture(lab / "receiver.pcap")))
    m = merge(sender, build_connections(read_capture(tmp_path / "receiver.pcap")))
    assert m.clock is not None and as_made.clock is not None
    assert abs(m.clock.offset_s - 3.7) < 100e-6
    # The fit moves with the clocks (the LP is equivariant under a linear shift). Rounding the
    # new stamps to the pcap's microseconds moves each hull point by up to 0.5 us, so a hull
    # edge about 1 s long can tilt by up to 1 us / 1 s = 1 ppm; 2 ppm leaves room for that.
    assert abs((m.clock.skew_ppm - as_made.clock.skew_ppm) - 50.0) < 2.0
    # ... and its own error, the lab relay's delay floor wandering by a few microseconds over
    # the transfer, stays within 5 ppm (0.5 us over 100 ms) on these captures of 1.7-4.2 s (the
    # floor of a 1 s capture wandered by 10 us: 10 ppm; docs/two-vantage.md lists every capture).
    assert abs(m.clock.skew_ppm - 50.0) < 5.0
    for fit in (m, as_made):
        counts = fit.counts()
        assert counts["network_drop"] == truth["drops"]["network"]
        assert counts["receiver_drop"] == truth["drops"]["receiver"]
    # Once the clocks agree, the one-way delay's floor is the relay's configured delay.
    floor = m.delay["owd_s"].min()
    assert floor == pytest.approx(truth["path"]["one_way_delay_fwd_ms"] / 1000, abs=200e-6)


@pytest.mark.parametrize(
    "name",
    [
        "delay_step_20_120ms",
        "delay_step_120_20ms",
        "delay_step_cubic_20_120ms",
        "delay_step_300_600ms",
        # Reno's standing queue in the data's direction drains as the path lengthens: that
        # direction's floor hardly moves at the step, the ACKs' and the round trip's do.
        "delay_step_reno_50_100ms",
    ],
)
def test_a_relay_delay_step_on_one_clock(name: str) -> None:
    # Both captures read one kernel clock while the relay's delay steps 2x to 6x both ways:
    # the truth is skew 0 and one path change, at the relay's step.
    folder = Path(__file__).resolve().parents[1] / "fixtures" / "sweep" / name
    truth = json.loads((folder / "truth.json").read_text())
    schedule = truth["path"]["delay_schedule"]
    (step,) = schedule["steps"]
    sender = build_connections(read_capture(folder / "sender.pcap.zst"))
    receiver = build_connections(read_capture(folder / "receiver.pcap.zst"))
    m = merge(sender, receiver)
    assert m.clock is not None
    assert abs(m.clock.skew_ppm) < 50.0
    before, after = m.clock.phases
    origin_s = sender.packets.column("ts_ns").to_numpy().min() / 1e9
    # The first frame that waited the new delays left the relay toward the receiver then.
    stepped_s = step["first_frames"]["m0->m1"]["received_epoch_s"] - origin_s
    # Floors are read in bins of 4 base RTTs, and a bin that holds the step holds samples of
    # the old path too: the step is placed at the edge of a bin after it, within two bins.
    assert after.start_s == pytest.approx(stepped_s, abs=8 * min(before.rtt_s, after.rtt_s))
    rtt_before = (schedule["initial_fwd_ms"] + schedule["initial_rev_ms"]) / 1e3
    assert before.rtt_s == pytest.approx(rtt_before, rel=0.05)
    assert after.rtt_s == pytest.approx(step["rtt_ms"] / 1e3, rel=0.05)


@pytest.mark.parametrize(
    ("rtt_s", "step_s", "end_s", "standing_s"),
    [
        # A satellite path lengthened by half, 30 round trips in all.
        ((0.400, 0.600), 2.5, 12.0, 0.0),
        # A path that shortened by 200 ms while a window sized for the longer one stood in a
        # queue of as much: the round trip's floor comes down only as the transfer ends.
        ((0.334, 0.134), 2.2, 7.6, 0.200),
    ],
)
def test_a_path_change_in_a_short_transfer_is_not_a_skew(
    tmp_path: Path,
    rtt_s: tuple[float, float],
    step_s: float,
    end_s: float,
    standing_s: float,
) -> None:
    # Fewer than 64 base round trips, the floors' two windows: the step still splits the
    # phases, and neither passes for a skew of thousands of ppm.
    offset_s, skew_ppm = 3.7, -30.0
    sender, receiver = stepped_path(
        tmp_path,
        rtt_s=rtt_s,
        step_s=step_s,
        end_s=end_s,
        offset_s=offset_s,
        skew_ppm=skew_ppm,
        standing_s=standing_s,
    )
    m = merge(build_connections(read_capture(sender)), build_connections(read_capture(receiver)))
    assert m.clock is not None
    # Microsecond stamps over a stretch of 2-9 s: a hull edge tilts by at most 1 us / 2 s.
    assert m.clock.skew_ppm == pytest.approx(skew_ppm, abs=2.0)
    # Symmetric delays: the offset is half the two floors' difference, each floor the least of
    # its queue's exponential waits (2 ms over the 100 segments of the last second, about 20 us)
    # and the stamps' microsecond.
    assert m.clock.offset_s == pytest.approx(offset_s, abs=50e-6)
    before, after = m.clock.phases
    assert before.rtt_s == pytest.approx(rtt_s[0], abs=100e-6)
    assert after.rtt_s == pytest.approx(rtt_s[1], abs=100e-6)
    # The step is placed at a bin's edge, bins of 4 base RTTs: within two bins.
    assert after.start_s == pytest.approx(step_s, abs=8 * min(rtt_s))


def test_floors_that_slope_faster_than_any_clock_give_a_bounded_skew() -> None:
    # Both directions' floors lengthen by 5 ms/s together (a mobile path's delay drifting with
    # its radio, no step to find): the floors' slopes are 5000 ppm the same way, which no clock
    # makes (skew moves them opposite ways, and by at most 500 ppm, RFC 5905). The clocks' own
    # 20 ppm cannot be told from such a drift; the skew is Moon et al.'s LP under that bound.
    rng = np.random.default_rng(9)
    t = np.sort(rng.uniform(0, 10, 20_000))
    owd = 0.050 + 0.005 * t
    skew = 20e-6
    fwd = owd + rng.exponential(0.001, t.size) + skew * t
    rev = owd + rng.exponential(0.0001, t.size) - skew * t
    fit = fit_clocks(t, fwd, t, rev)
    assert abs(fit.skew_ppm) <= 500.0
    assert fit.skew_disagreement_ppm == pytest.approx(2 * 5000.0, rel=0.05)


@settings(max_examples=200, deadline=None)
@given(n=st.integers(1, 300), seed=st.integers(0, 2**16), back=st.booleans())
def test_times_that_never_step_back_sort_as_lexsort_does(n: int, seed: int, back: bool) -> None:
    # A microsecond clock at a gigabit stamps runs of packets alike: within each run the
    # delays are ordered, stably, as np.lexsort orders (time, delay); a clock that steps back
    # is left to np.lexsort.
    rng = np.random.default_rng(seed)
    x = np.sort(rng.integers(0, max(n // 3, 1), n)).astype(np.float64)
    y = rng.integers(0, 4, n).astype(np.float64)
    if back and n > 1:
        x[n // 2] = x[0] - 1.0
    got = _ties_by_y(x, y)
    if back and n > 1:
        assert got.size == 0
    else:
        assert got.tolist() == np.lexsort((y, x)).tolist()
