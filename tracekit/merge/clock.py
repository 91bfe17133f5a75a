"""Clock offset and skew between two capture hosts, from one-way delays in both directions.

Model: the receiver's clock reads R(t) = t + offset + skew * t at sender-clock time t, with t
in seconds since the sender capture's first packet. A packet sent at t and stamped R on arrival
shows an observed delay R - t = delay + offset + skew * t: a line under the forward delays has
slope +skew and intercept min_delay_fwd + offset; a line under the reverse delays (stamped by
the receiver, then by the sender) has slope -skew and intercept min_delay_rev - offset.

Each line is Moon, Skelly and Towsley's linear program (INFOCOM 1999, "Estimation and removal
of clock skew from network delay measurements", eq. 7): the line below every point that
minimizes the sum of vertical distances to them. Its optimum is the edge of the points' lower
convex hull above the mean time, so it is found exactly in O(n log n) without an LP solver.

Two directions split skew from offset: the skew is the slope of the direction with the flatter
floor (the other's is reported as a check), the offset half the difference of the two floors
at that slope if the minimal delays are equal both ways (Paxson 1998,
"On calibrating measurements of packet transit times"). Nothing in the captures can tell path
asymmetry from offset: causality alone bounds the offset to [-min_rev, min_fwd], a band as wide
as the minimal round-trip time; that band is the offset's uncertainty.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

from tracekit.core.kernels import jit

FloatArray = npt.NDArray[np.float64]


@jit
def _lower_hull(x: np.ndarray, y: np.ndarray, order: np.ndarray) -> np.ndarray:  # pragma: no cover
    """Positions in `order` (the points sorted by x, then y) of the lower convex hull's
    vertices (Andrew's monotone chain)."""
    n = order.size
    hull = np.empty(n, dtype=np.int64)
    k = 0
    for i in range(n):
        xi = x[order[i]]
        yi = y[order[i]]
        # Of points with equal x only the lowest can be on the lower hull.
        if k > 0 and x[order[hull[k - 1]]] == xi:
            if yi < y[order[hull[k - 1]]]:
                k -= 1
            else:
                continue
        while k >= 2:
            a = order[hull[k - 2]]
            b = order[hull[k - 1]]
            cross = (x[b] - x[a]) * (yi - y[a]) - (y[b] - y[a]) * (xi - x[a])
            if cross <= 0.0:  # b is on or above the chord a-i: not a lower hull vertex
                k -= 1
            else:
                break
        hull[k] = i
        k += 1
    return hull[:k].copy()


@jit
def _ties_by_y(x: np.ndarray, y: np.ndarray) -> np.ndarray:  # pragma: no cover
    """np.lexsort((y, x)) where x never steps back and y is finite: 0, 1, ... with each run of
    equal x ordered by y (ties kept in place). Empty where x steps back or a value is NaN or
    infinite, which np.lexsort orders."""
    n = x.size
    fine = True
    for i in range(n):
        if not (np.isfinite(x[i]) and np.isfinite(y[i]) and (i == 0 or x[i] >= x[i - 1])):
            fine = False
            break
    if not fine:
        return np.empty(0, dtype=np.int64)
    order = np.arange(n)
    i = 0
    while i < n:
        j = i + 1
        while j < n and x[j] == x[i]:
            j += 1
        if j - i > 1:
            within = np.argsort(y[i:j], kind="mergesort")
            for k in range(j - i):
                order[i + k] = i + within[k]
        i = j
    return order


@dataclass(frozen=True)
class LowerLine:
    """The line y = slope * x + intercept under every (x, y), Moon et al.'s LP optimum."""

    slope: float
    intercept: float
    samples: int

    def at(self, x: npt.ArrayLike) -> FloatArray:
        """The line's value at x."""
        return self.slope * np.asarray(x, dtype=np.float64) + self.intercept


def lower_line(x: npt.ArrayLike, y: npt.ArrayLike) -> LowerLine:
    """The line under all points minimizing the summed vertical distance (Moon et al. eq. 7).

    The objective sum(y - a x - b) = n (mean(y) - a mean(x) - b) is smallest where the line is
    highest at mean(x); among lines under the points that is the lower hull's edge spanning
    mean(x). One point (or all at one x) gives a flat line through the lowest; none, ValueError.
    """
    xs = np.asarray(x, dtype=np.float64)
    ys = np.asarray(y, dtype=np.float64)
    if xs.size == 0:
        raise ValueError("no delay samples")
    # Sorted by x, then y. Times as captured never step back, and then only runs of equal
    # times (a microsecond clock at a gigabit) need sorting: no sort of millions of points.
    order = _ties_by_y(xs, ys)
    in_order = order.size == xs.size
    if not in_order:
        order = np.lexsort((ys, xs))
    hull = order[_lower_hull(xs, ys, order)]
    hx, hy = xs[hull], ys[hull]
    if hull.size == 1:
        return LowerLine(slope=0.0, intercept=float(hy[0]), samples=int(xs.size))
    # Summed in x order (within runs of equal x the values are equal: xs itself is in order).
    mean_x = float(xs.mean() if in_order else xs[order].mean())
    del order
    edge = int(np.clip(np.searchsorted(hx, mean_x, side="right") - 1, 0, hull.size - 2))
    slope = float((hy[edge + 1] - hy[edge]) / (hx[edge + 1] - hx[edge]))
    return LowerLine(
        slope=slope, intercept=float(hy[edge] - slope * hx[edge]), samples=int(xs.size)
    )


# Path changes. A change of route (a satellite handover, a reroute, a relay's new delay) steps
# the round trip's minimum; a skew moves the two directions' minimum one-way delays opposite
# ways by a slope (+skew forward, -skew reverse), never by a step; a queue moves only the
# direction it is in. So a step is called where the round trip's floor and the ACKs' direction's
# floor, each the least over several bins before and after, moved the same way by a good part
# of the round trip (see path_steps for why the data's own direction is not the witness).
# Bins of 4 base RTTs: each holds at least a round's worth of packets both ways, so its least
# delay is the floor of that round whatever the path's scale (a LAN's 50 us or a satellite's
# 600 ms).
STEP_BIN_RTTS = 4.0
# And at least 16 packets of each direction on average: the least of that many is a floor.
STEP_BIN_PACKETS = 16
# The floor before and after a candidate step is the least over up to 8 bins (32 base RTTs):
# long enough for a queue to drain at least once in slow start or congestion avoidance (Reno
# or CUBIC halve or cut the window at each loss, which empties a buffer of up to a BDP), short
# enough to see a step of a few seconds' phase on a path of 100 ms. At the capture's ends the
# windows hold what there is: a transfer shorter than 64 base RTTs (38 s on a 600 ms satellite
# path) still has its floors, and its start holds the handshake's, before any queue.
STEP_SPAN_BINS = 8
# The round trip's floor must move by a quarter of the base RTT or more: less changes no
# window or rate estimate by more than a quarter.
STEP_MIN_RTT_FRACTION = 0.25
# The ACKs' floor, the witness, must move the same way by its share of that: on a symmetric
# path each way carries half the round trip, so a step of the round trip by a quarter moves
# each way's floor by an eighth (a step of 400 -> 600 ms is 100 ms each way, a quarter of the
# round trip, not of one way).
STEP_MIN_WAY_FRACTION = STEP_MIN_RTT_FRACTION / 2
# Clock skew is bounded: a crystal oscillator drifts by tens of ppm, an NTP-disciplined clock
# by far less, and NTP itself assumes at most 500 ppm (RFC 5905, section 11.1: PHI is 15 ppm,
# the frequency tolerance MAXFREQ 500 ppm). A floor that moves faster than that between two
# times is not the clocks; skew moves the two directions' floors opposite ways by a slope, a
# path change moves them the same way by a step. The bound is a rate, so it holds at every
# scale: across the two windows of a step (at most 64 base RTTs) it is 0.032 RTT, a quarter of
# the ACKs' least step, whether the RTT is a LAN's 50 us or a satellite's 600 ms.
MAX_SKEW_PPM = 500.0
# A step is at least twice the wobble of the floors it separates (see path_steps).
STEP_NOISE_FACTOR = 2.0
# And at least this many ticks of the captures' clocks: a floor is a whole number of them, so
# a move of one or two is the clock's resolution, not the path.
STEP_MIN_TICKS = 4
# At most this many bins over a capture (a 10 s LAN transfer at 50 us would make 50,000): the
# bins then widen, which only makes a step's time coarser.
MAX_STEP_BINS = 20_000


@jit
def _bin_minima(
    t: np.ndarray, y: np.ndarray, t0: float, width: float, n: int
) -> np.ndarray:  # pragma: no cover - numba
    """The least y in each of n bins of `width` from t0 (inf where a bin is empty)."""
    out = np.full(n, np.inf)
    for i in range(t.size):
        k = int((t[i] - t0) / width)
        if 0 <= k < n and y[i] < out[k]:
            out[k] = y[i]
    return out


@dataclass(frozen=True)
class PathPhase:
    """A stretch of the capture over which the path's minimal delays held still."""

    start_s: float
    end_s: float
    min_delay_fwd_s: float
    min_delay_rev_s: float

    @property
    def rtt_s(self) -> float:
        """The phase's base round-trip time: the two minimal one-way delays."""
        return self.min_delay_fwd_s + self.min_delay_rev_s

    def to_dict(self) -> dict[str, float]:
        """Plain numbers for JSON."""
        return {
            "start_s": self.start_s,
            "end_s": self.end_s,
            "rtt_s": self.rtt_s,
            "min_delay_fwd_s": self.min_delay_fwd_s,
            "min_delay_rev_s": self.min_delay_rev_s,
        }


def joined_phases(
    phases: tuple[PathPhase, ...], keep: Callable[[PathPhase, PathPhase], bool]
) -> tuple[PathPhase, ...]:
    """The phases with the steps `keep(before, after)` refuses taken out: the phase before such
    a step runs on over the one after it, its minimal delays the least of both. Each step is
    judged against the phase before it as joined so far."""
    if not phases:
        return phases
    joined = [phases[0]]
    for phase in phases[1:]:
        last = joined[-1]
        if keep(last, phase):
            joined.append(phase)
            continue
        joined[-1] = PathPhase(
            start_s=last.start_s,
            end_s=phase.end_s,
            min_delay_fwd_s=min(last.min_delay_fwd_s, phase.min_delay_fwd_s),
            min_delay_rev_s=min(last.min_delay_rev_s, phase.min_delay_rev_s),
        )
    return tuple(joined)


def windowed_min(values: np.ndarray, span: int) -> tuple[np.ndarray, np.ndarray]:
    """At each boundary k between bins (1..n-1): the least value over the `span` bins before
    it and over the `span` bins from it (inf where none)."""
    n = values.size
    padded = np.r_[np.full(span, np.inf), values, np.full(span, np.inf)]
    windows = np.lib.stride_tricks.sliding_window_view(padded, span).min(axis=1)
    # windows[j] is the least of padded[j:j + span] = values[j - span: j].
    k = np.arange(1, n)
    return windows[k], windows[k + span]


def floor_wobble(bins: np.ndarray) -> float:
    """How far a stretch's per-bin floors sit above its least: their median minus their min."""
    seen = bins[np.isfinite(bins)]
    return float(np.median(seen) - seen.min()) if seen.size else np.inf


def _tick(delays: np.ndarray) -> float:
    """The captures' clock resolution as the delays show it: the least positive spacing of
    their distinct values (a microsecond for pcap, down to a nanosecond for pcapng)."""
    values = np.unique(delays[np.isfinite(delays)])
    gaps = np.diff(values)
    gaps = gaps[gaps > 1e-12]
    return float(gaps.min()) if gaps.size else 0.0


def path_steps(
    fx: np.ndarray, fy: np.ndarray, rx: np.ndarray, ry: np.ndarray
) -> tuple[np.ndarray, np.ndarray]:
    """Times (s) where the reverse direction's delay floor and the round trip's stepped the
    same way, and for each the bin it fell in (from, to), to be left out of either phase.

    Forward delays (fx, fy) and reverse delays (rx, ry) as fit_clocks takes them: whatever the
    offset and skew, a step of the path moves the round trip's floor, and the ACKs' floor
    steps with it where the transfer's own queue cannot blur it.
    """
    lo = float(min(fx.min(), rx.min()))
    span_s = float(max(fx.max(), rx.max())) - lo
    none = np.zeros(0), np.zeros((0, 2))
    if span_s <= 0:
        return none
    # The base RTT: the least sum of the two floors within coarse bins (offset and, within a
    # bin, skew cancel in the sum).
    coarse = max(span_s / 200, 1e-9)
    n = int(span_s / coarse) + 1
    rtt = _bin_minima(fx, fy, lo, coarse, n) + _bin_minima(rx, ry, lo, coarse, n)
    rtt = rtt[np.isfinite(rtt)]
    if rtt.size == 0 or rtt.min() <= 0:
        return none
    base = float(rtt.min())
    # A bin holds a floor only if it holds packets: on a LAN, where the RTT is shorter than a
    # host's turn to send, 4 RTTs may hold none, so bins also hold STEP_BIN_PACKETS of the
    # sparser direction on average.
    sparse = min(fx.size, rx.size)
    width = max(STEP_BIN_RTTS * base, span_s * STEP_BIN_PACKETS / sparse, span_s / MAX_STEP_BINS)
    n = int(span_s / width) + 1
    if n < 2:
        return none
    f_bins = _bin_minima(fx, fy, lo, width, n)
    r_bins = _bin_minima(rx, ry, lo, width, n)
    r_before, r_after = windowed_min(r_bins, STEP_SPAN_BINS)
    # The round trip's floor per bin: the two floors' sum, in which offset and skew cancel.
    s_before, s_after = windowed_min(f_bins + r_bins, STEP_SPAN_BINS)
    with np.errstate(invalid="ignore"):
        jr, js = r_after - r_before, s_after - s_before
    seen = np.isfinite(jr) & np.isfinite(js)
    jr, js = np.where(seen, jr, 0.0), np.where(seen, js, 0.0)
    sign = np.sign(jr)
    # The reverse floor and the round trip's moved the same way, the round trip's by a quarter
    # of the base RTT or more, the ACKs' by an eighth and by more than the clocks can drift
    # across the two windows; both by more than a few ticks of the captures' clocks (a floor is
    # a whole number of ticks: on a LAN captured in microseconds the base RTT itself is a tick
    # or two).
    ticks = STEP_MIN_TICKS * _tick(ry)
    drift = MAX_SKEW_PPM * 1e-6 * 2 * STEP_SPAN_BINS * width
    step = (sign != 0) & (sign == np.sign(js))
    step &= np.abs(js) >= max(STEP_MIN_RTT_FRACTION * base, ticks)
    step &= np.abs(jr) >= max(STEP_MIN_WAY_FRACTION * base, drift, ticks)
    # The witness is the reverse direction, the ACKs': the data's own direction carries the
    # transfer's queue, which a window-based sender builds and drains on its own schedule
    # (Reno or CUBIC through a buffer of a BDP grows it over tens of RTTs), so its floor
    # wobbles by up to the buffer's delay and a step there can be hidden by the queue draining
    # as the path lengthens (the same window fills a longer pipe). The ACKs hold none of that
    # queue, and clock skew moves them by a slope, not a step: a path change shows as a step
    # of their floor twice the wobble of their per-bin floors on either side (the floors'
    # median above their least), with the round trip's floor moving the same way.
    for p in np.flatnonzero(step):
        wobble = max(
            floor_wobble(r_bins[max(p + 1 - STEP_SPAN_BINS, 0) : p + 1]),
            floor_wobble(r_bins[p + 1 : p + 1 + STEP_SPAN_BINS]),
        )
        step[p] = abs(jr[p]) >= STEP_NOISE_FACTOR * wobble
    if not step.any():
        return none
    # Runs of boundaries that straddle one step: an upward step at bin s shows at boundaries
    # s..s+span-1 (the windows after it all above), a downward one at s-span+1..s.
    k = np.flatnonzero(step)
    breaks = np.flatnonzero((np.diff(k) > 1) | (np.diff(sign[k]) != 0)) + 1
    times, held = [], []
    for run in np.split(k, breaks):
        up = sign[run[0]] > 0
        at = lo + ((run[0] if up else run[-1]) + 1) * width  # p is the boundary before bin p + 1
        times.append(at)
        # Where the step fell: an upward one in the bin before the boundary (that bin's floor is
        # still the old one, the next's all new); a downward one in the bin after it (the first
        # to hold a packet on the shorter path; the packets queued behind the old delay that a
        # first-in, first-out hop still holds sit above the old floor, not below it).
        held.append((at - width, at) if up else (at, at + width))
    return np.asarray(times, dtype=np.float64), np.asarray(held, dtype=np.float64).reshape(-1, 2)


def forward_floor_at(phases: tuple[PathPhase, ...], t_s: npt.ArrayLike) -> FloatArray:
    """The minimal forward delay of the phase (of `phases`, at least one, in time order) each
    sender-clock time falls in."""
    starts = np.array([p.start_s for p in phases[1:]], dtype=np.float64)
    floors = np.array([p.min_delay_fwd_s for p in phases], dtype=np.float64)
    return floors[np.searchsorted(starts, np.asarray(t_s, dtype=np.float64), side="right")]


@dataclass(frozen=True)
class ClockFit:
    """The receiver's clock against the sender's, and how far to trust it.

    `offset_s` is receiver minus sender clock at the sender capture's first packet, `skew_ppm`
    the receiver's drift in parts per million. With both directions, `offset_bound_s` is the
    half-width of the causality band (half the minimal RTT) around the estimate, and
    `skew_disagreement_ppm` how far the two directions' slopes disagree (forward slope plus
    reverse slope, which would be 0 for a perfectly stable path). With the forward direction
    only (a UDP stream), skew is taken as 0 and the offset is set so the smallest delay is 0
    (`offset_known` False).
    """

    offset_s: float
    skew_ppm: float
    offset_known: bool
    offset_bound_s: float
    skew_disagreement_ppm: float
    min_delay_fwd_s: float
    min_delay_rev_s: float | None
    forward: LowerLine
    reverse: LowerLine | None
    # The stretches between path changes (path_steps), in time order; one when the path held.
    phases: tuple[PathPhase, ...] = ()

    def floor_fwd_s(self, t_s: npt.ArrayLike) -> FloatArray:
        """The minimal forward delay of the path phase each sender-clock time falls in."""
        t = np.asarray(t_s, dtype=np.float64)
        if len(self.phases) < 2:
            return np.full(t.shape, self.min_delay_fwd_s)
        return forward_floor_at(self.phases, t)

    def to_sender_s(self, receiver_s: npt.ArrayLike) -> FloatArray:
        """Receiver-clock times (s since the sender capture's origin) on the sender's clock."""
        r = np.asarray(receiver_s, dtype=np.float64)
        return (r - self.offset_s) / (1.0 + self.skew_ppm * 1e-6)

    def to_dict(self) -> dict[str, float | bool | list[dict[str, float]] | None]:
        """Plain numbers for JSON and the report."""
        return {
            "offset_s": self.offset_s,
            "skew_ppm": self.skew_ppm,
            "offset_known": self.offset_known,
            # Unbounded (one direction only) is unknown: JSON has no infinity.
            "offset_bound_s": self.offset_bound_s if np.isfinite(self.offset_bound_s) else None,
            "skew_disagreement_ppm": self.skew_disagreement_ppm,
            "min_delay_fwd_s": self.min_delay_fwd_s,
            "min_delay_rev_s": self.min_delay_rev_s,
            "forward_samples": self.forward.samples,
            "reverse_samples": self.reverse.samples if self.reverse else 0,
            "path_phases": [p.to_dict() for p in self.phases],
        }


def fit_clocks(
    fwd_t_s: npt.ArrayLike,
    fwd_delay_s: npt.ArrayLike,
    rev_t_s: npt.ArrayLike | None = None,
    rev_delay_s: npt.ArrayLike | None = None,
) -> ClockFit:
    """Offset and skew from observed one-way delays (receiver stamp minus sender stamp).

    `fwd_t_s`: sender-clock departure times of packets the sender sent; `fwd_delay_s`: their
    receiver stamp minus sender stamp. `rev_t_s`: sender-clock arrival times of packets the
    receiver sent; `rev_delay_s`: sender stamp minus receiver stamp. Times in seconds since the
    sender capture's first packet. Without reverse samples neither is known: the skew is taken
    as 0 and the offset as the smallest delay.
    """
    have_rev = rev_t_s is not None and rev_delay_s is not None and np.size(rev_t_s) > 0
    if not have_rev:
        # One direction cannot tell skew from a queue that grows for the whole capture (a UDP
        # test stream into a bottleneck does just that): no skew, and the smallest delay is 0.
        fx = np.asarray(fwd_t_s, dtype=np.float64)
        fy = np.asarray(fwd_delay_s, dtype=np.float64)
        return ClockFit(
            offset_s=float(fy.min()),
            skew_ppm=0.0,
            offset_known=False,
            offset_bound_s=float("inf"),
            skew_disagreement_ppm=0.0,
            min_delay_fwd_s=0.0,
            min_delay_rev_s=None,
            forward=LowerLine(slope=0.0, intercept=float(fy.min()), samples=int(fx.size)),
            reverse=None,
            phases=(),
        )
    # Placed at their sender-clock arrival time, the reverse delays are min_rev (1 + skew) -
    # offset - skew * t: the receiver-clock send time would carry the offset into the slope's
    # lever arm (50 ppm times a 3.7 s offset is 185 us), the arrival time only a delay's worth.
    rx, ry = np.asarray(rev_t_s, dtype=np.float64), np.asarray(rev_delay_s, dtype=np.float64)
    fx, fy = np.asarray(fwd_t_s, dtype=np.float64), np.asarray(fwd_delay_s, dtype=np.float64)
    steps, held = path_steps(fx, fy, rx, ry)
    # Each stretch between steps is fitted alone, clear of where each step fell; the clocks
    # are one, so the stretches' skews are one skew, each weighted by its span squared (a
    # slope's error falls as 1 / span). The ACKs' samples are clear of the bin their own floor
    # stepped in. The data's are stamped at departure, a one-way delay and its queue before the
    # hop that changed, up to a bin before the ACKs show it (a bin is 4 base RTTs; a lab buffer
    # of 3 BDP holds 3), and they keep a bin's width on both sides of the step.
    width = held[:, 1] - held[:, 0]
    r_from, r_to = np.r_[-np.inf, held[:, 1]], np.r_[held[:, 0], np.inf]
    f_from, f_to = np.r_[-np.inf, steps + width], np.r_[steps - width, np.inf]
    parts, kept = [], []
    for k in range(steps.size + 1):
        f = (fx >= f_from[k]) & (fx < f_to[k])
        r = (rx >= r_from[k]) & (rx < r_to[k])
        if f.sum() >= 2 and r.sum() >= 2:
            parts.append((*_where(f, fx, fy), *_where(r, rx, ry)))
            kept.append(k)
    if not parts:
        steps, parts, kept = np.zeros(0), [(fx, fy, rx, ry)], [0]
    fits = [_two_way(*part) for part in parts]
    spans = np.array([max(np.ptp(p[0]), np.ptp(p[2])) for p in parts])
    weights = spans**2 if spans.sum() > 0 else np.ones(len(parts))
    skew = float(np.average([fit[0] for fit in fits], weights=weights))
    # Both floors again at that skew: the highest line of that slope under each direction,
    # per stretch. The offset is the longest stretch's (a change that moves one direction only
    # is a change of asymmetry, which the captures cannot tell from an offset).
    floors = [(float(np.min(p[1] - skew * p[0])), float(np.min(p[3] + skew * p[2]))) for p in parts]
    main = int(np.argmax(spans))
    fwd_floor, rev_floor = floors[main]
    offset = (fwd_floor - rev_floor) / 2
    # A stretch too short to fit (fewer than two packets a way) is no phase of its own: the
    # phase before it runs on over it.
    bounds = np.r_[min(fx.min(), rx.min()), steps, max(fx.max(), rx.max())]
    ends = [*(bounds[k] for k in kept[1:]), bounds[-1]]
    phases = tuple(
        PathPhase(
            start_s=float(bounds[k] if i else bounds[0]),
            end_s=float(end),
            min_delay_fwd_s=ff - offset,
            min_delay_rev_s=rf + offset,
        )
        for i, (k, end, (ff, rf)) in enumerate(zip(kept, ends, floors, strict=True))
    )
    _, fwd, rev = fits[main]
    return ClockFit(
        offset_s=offset,
        skew_ppm=skew * 1e6,
        offset_known=True,
        offset_bound_s=max(fwd_floor + rev_floor, 0.0) / 2,
        skew_disagreement_ppm=(fwd.slope + rev.slope) * 1e6,
        min_delay_fwd_s=fwd_floor - offset,
        min_delay_rev_s=rev_floor + offset,
        forward=fwd,
        reverse=rev,
        phases=phases,
    )


def _where(mask: np.ndarray, x: np.ndarray, y: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """x and y where `mask` holds (themselves, not a copy, where it holds everywhere)."""
    return (x, y) if mask.all() else (x[mask], y[mask])


def _two_way(
    fx: np.ndarray, fy: np.ndarray, rx: np.ndarray, ry: np.ndarray
) -> tuple[float, LowerLine, LowerLine]:
    """The skew of one stretch of steady path, and its two lower lines."""
    fwd = lower_line(fx, fy)
    rev = lower_line(rx, ry)
    # The skew comes from the direction whose floor is better defined: the smaller mean height
    # of its samples above its line. The data direction queues at the bottleneck for the whole
    # transfer when it is short; averaging both slopes would carry that queue's growth into
    # the skew (50 ppm on the lab's clean capture), the ACK direction rarely queues.
    # A floor that slopes faster than any clock drifts (MAX_SKEW_PPM) is a queue's trend or a
    # path change too small to find, not the clocks: the other direction decides if its slope
    # is a clock's. With both out of bounds the skew is Moon et al.'s LP under that bound, whose
    # optimum is the unbounded slope clipped to it (the line's height at the mean time is a
    # minimum of functions linear in the slope, concave, so it falls away from its peak).
    bound = MAX_SKEW_PPM * 1e-6
    candidates = [
        (float(np.mean(fy - fwd.at(fx))), fwd.slope),
        (float(np.mean(ry - rev.at(rx))), -rev.slope),
    ]
    possible = [c for c in candidates if abs(c[1]) <= bound] or candidates
    _, skew = min(possible, key=lambda c: c[0])
    return float(np.clip(skew, -bound, bound)), fwd, rev
