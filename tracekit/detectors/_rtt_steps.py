"""Steps of the path's round trip seen from the sender's capture alone.

A path's base RTT moves when the route changes, a satellite hands over, or a link's
propagation delay changes. From one capture the RTT samples show it as a step of their floor
(the least RTT over many rounds). A floor also rises when this transfer builds a standing queue
at its bottleneck, and falls as that queue drains: the two must be told apart.

Little's law tells them apart. A queue at the bottleneck holds some of the bytes in flight, and
a segment waits behind at most all of them, so a segment that met a queue came back within
`flight / rate` of leaving (the bytes in flight when it left, at the bottleneck's rate): the
pipe and the queue are both made of those bytes. A segment whose RTT is well above
`flight / rate` met no queue of this transfer's making, and its RTT is the path's (plus the
receiver's ACK delay, which a floor over many ACKs removes). Such a sample is *queue-free*, if
its ACK was owed at once: a lone segment's ACK may wait for the delayed-ACK timer, and a bin
whose floor is such an ACK's holds that wait.

- A rise of the floor is a path step when the first rounds after it are queue-free: the bytes
  in flight could not have filled the new round trip, so the extra delay is not theirs.
- A fall of the floor is a path step when the rounds before it were queue-free: the old floor
  was the path's own, and no queue's draining can take the RTT below it.

What this cannot tell: another flow's standing queue at the bottleneck looks like a longer
path (the bytes ahead are not in this transfer's flight). The merge of a receiver's capture
sees the other flows (`competing_traffic`) and tells a step of both directions' delays from a
queue in one (`tracekit.merge.clock.path_steps`); with the sender's capture alone the finding
says that either may be the cause. And a step down from a phase that kept a standing queue
throughout is not called: that phase's floor was never the path's.

Bins, spans and the noise test are the merge's (`tracekit.merge.clock`), so both vantages call
a step on the same evidence.
"""

from __future__ import annotations

import itertools
from dataclasses import dataclass

import numpy as np
import numpy.typing as npt
from numpy.lib.stride_tricks import sliding_window_view

from tracekit.merge.clock import (
    MAX_STEP_BINS,
    STEP_BIN_PACKETS,
    STEP_BIN_RTTS,
    STEP_MIN_RTT_FRACTION,
    STEP_NOISE_FACTOR,
    STEP_SPAN_BINS,
    floor_wobble,
    windowed_min,
)

# A sample is queue-free when its RTT exceeds `flight / rate` by a tenth: the path rate is
# measured to about that (`path_rate_bps`: the median packet-pair sample, held up by the
# sustained delivery rate), so a queue's samples, which sit at `flight / rate`, stay below it.
# A sender pacing at up to 90% of the path's rate keeps its samples queue-free, on any path:
# the ratio is one of times, the same at 50 us and at 600 ms.
QUEUE_FREE_MARGIN = 1.1
# A rise is judged on the first two bins after it (8 base RTTs): long enough to hold ACKs that
# were not delayed, short enough that a congestion window has not yet grown into the new path
# (Reno adds a segment per RTT, CUBIC's growth is slower still right after a step; slow start
# doubles, and a rise within slow start is judged on the same two bins).
NEAR_BINS = 2
# Each side of a step holds packets in at least half its bins: a floor over a window that is
# mostly empty (a stall, the capture's last rounds) is a handful of samples, not a phase.
MIN_FILLED_BINS = STEP_SPAN_BINS // 2


@dataclass(frozen=True)
class RttStep:
    """One step of the RTT's floor that this transfer's queue cannot explain."""

    at_s: float  # a bin edge after the step, within two bins of its first departure
    rtt_before_s: float  # the floor over the span before the step
    rtt_after_s: float  # the floor over the span after it


def queue_free(
    rtt_s: npt.NDArray[np.float64],
    flight_bytes: npt.NDArray[np.int64],
    path_bps: float,
    margin: float = QUEUE_FREE_MARGIN,
) -> npt.NDArray[np.bool_]:
    """Whether each RTT sample is longer than any queue of its own flight could make it."""
    return np.asarray(rtt_s > margin * flight_bytes * 8.0 / path_bps)


def _bin_floors(
    t: npt.NDArray[np.float64], y: npt.NDArray[np.float64], lo: float, width: float, n: int
) -> npt.NDArray[np.int64]:
    """The index of the least y in each of n bins of `width` from lo (-1 where a bin is empty)."""
    k = np.minimum(((t - lo) / width).astype(np.int64), n - 1)
    order = np.lexsort((y, k))
    first = np.r_[True, np.diff(k[order]) != 0]
    out = np.full(n, -1, dtype=np.int64)
    out[k[order][first]] = order[first]
    return out


def too_short(departure_s: npt.NDArray[np.float64], rtt_s: npt.NDArray[np.float64]) -> bool:
    """Whether the samples span too few bins for a step to be told on either side of it: then
    `rtt_steps` finds none, whatever the flight, the path's rate and the host's time, and those
    need not be measured (a load test's thousands of short connections)."""
    ok = _usable(departure_s, rtt_s)
    return _bins(departure_s[ok], rtt_s[ok]) is None


def _usable(
    departure_s: npt.NDArray[np.float64], rtt_s: npt.NDArray[np.float64]
) -> npt.NDArray[np.bool_]:
    return np.asarray(np.isfinite(departure_s) & np.isfinite(rtt_s) & (rtt_s > 0))


def _bins(
    t: npt.NDArray[np.float64], rtt: npt.NDArray[np.float64]
) -> tuple[float, float, int] | None:
    """The first bin's start, the bins' width and their count over usable samples; None where
    they are too few for a span of bins on each side of a step."""
    if t.size < 2:
        return None
    lo, span = float(t.min()), float(t.max() - t.min())
    if span <= 0:
        return None
    base = float(rtt.min())
    width = max(STEP_BIN_RTTS * base, span * STEP_BIN_PACKETS / t.size, span / MAX_STEP_BINS)
    n = int(span / width) + 1
    return None if n < 2 * STEP_SPAN_BINS else (lo, width, n)


def rtt_steps(
    departure_s: npt.NDArray[np.float64],
    rtt_s: npt.NDArray[np.float64],
    flight_bytes: npt.NDArray[np.int64],
    path_bps: float | None,
    host_s: float = 0.0,
    owed: npt.NDArray[np.bool_] | None = None,
) -> tuple[RttStep, ...]:
    """The steps of one direction's RTT floor that are the path's, oldest first.

    `departure_s` is when each sampled segment left (its ACK's time minus its RTT), sorted or
    not; `flight_bytes` the bytes in flight just after it left; `path_bps` the bottleneck's
    payload rate (None: no step can be told from a queue, and none is called); `host_s` the
    sender's own time to answer an ACK (`turnaround_s`). A round trip is taken as no shorter
    than that, and a step as no smaller: on a LAN of microseconds the hosts' scheduling moves
    the RTT floor by as much as the path's whole round trip, and is no path change. Where the
    least RTT is below that time, no step is called: the receiving host, which also hands the
    data to its reader, answers no faster than the sender, and a backlog of arrivals it has
    not yet taken holds its ACKs back by many such round trips for milliseconds at a time, as
    a longer path would. The floor is then the hosts', not the path's; the receiver's capture
    tells the two apart (`tracekit.merge.clock.path_steps`). On a WAN path the least RTT is
    many turnarounds, and the rule never applies. `owed` says per sample whether its ACK was
    owed at once (None: every one was); only those are evidence of the path's round trip.
    """
    ok = _usable(departure_s, rtt_s)
    t, rtt, flight = departure_s[ok], rtt_s[ok], flight_bytes[ok]
    at_once = np.ones(t.size, dtype=bool) if owed is None else owed[ok]
    if path_bps is None or not path_bps > 0:
        return ()
    bins = _bins(t, rtt)
    if bins is None or float(rtt.min()) < host_s:
        return ()
    lo, width, n = bins
    at = _bin_floors(t, rtt, lo, width, n)
    filled = at >= 0
    floor = np.where(filled, rtt[np.maximum(at, 0)], np.inf)
    # A floor is queue-free evidence of the path's round trip only where its ACK was owed at
    # once: a delayed ACK's wait is no path's.
    free = filled & queue_free(rtt[np.maximum(at, 0)], flight[np.maximum(at, 0)], path_bps)
    free &= at_once[np.maximum(at, 0)]
    # Where a bin's floor is queue-free it is the path's RTT there; elsewhere it only bounds it
    # from above.
    lower = np.where(free, floor, -np.inf)
    before, after = windowed_min(floor, STEP_SPAN_BINS)
    # Boundary p lies between bins p and k = p + 1; each window below is read at k.
    k = np.arange(1, n)
    pad = np.zeros(STEP_SPAN_BINS)
    filled_count = sliding_window_view(np.r_[pad, filled, pad], STEP_SPAN_BINS).sum(axis=1)
    n_before, n_after = filled_count[k], filled_count[k + STEP_SPAN_BINS]
    # The path's RTT is at least any queue-free floor: of the span before a boundary (for a
    # fall), of the first bins after it (for a rise).
    none = np.full(STEP_SPAN_BINS, -np.inf)
    free_before = sliding_window_view(np.r_[none, lower], STEP_SPAN_BINS).max(axis=1)[k]
    free_after = sliding_window_view(np.r_[lower, none[:NEAR_BINS]], NEAR_BINS).max(axis=1)[k]
    with np.errstate(invalid="ignore"):
        jump = after - before
        # A quarter of the shorter side's floor, as the merge asks of its steps: the RTT of
        # the phase it would split, not the capture's least sample, which on a LAN is one
        # lucky ACK of a few microseconds.
        threshold = np.maximum(STEP_MIN_RTT_FRACTION * np.minimum(before, after), host_s)
    seen = np.isfinite(jump) & (np.minimum(n_before, n_after) >= MIN_FILLED_BINS)
    rise = seen & (jump >= threshold) & (free_after >= before + threshold)
    fall = seen & (-jump >= threshold) & (after <= free_before - threshold)
    return tuple(
        RttStep(
            at_s=lo + (p + 1) * width,
            rtt_before_s=float(before[p]),
            rtt_after_s=float(after[p]),
        )
        for p in _phases_moved(step_boundaries(rise | fall, jump, floor), floor, host_s)
    )


def _phases_moved(positions: list[int], floor: npt.NDArray[np.float64], host_s: float) -> list[int]:
    """Of the step boundaries (p: between bins p and p + 1), those across which the floor over
    each whole phase moved by as much as a step must (a quarter of the lesser, and the host's
    turnaround), each judged against its neighbours as joined so far.

    A step is judged on the spans of bins either side of it; the phases it splits are longer.
    A span's floor can sit above its phase's where the span's samples are few and none is the
    path's: a stall's, whose persist probes and the window updates after it time the
    receiver's reading, not the path. A path step moves the floor of every round trip on its
    far side, so the whole phases' floors move with it; where they did not, the step was the
    span's, and the phases are one. The ratio and the turnaround are the step rule's own, the
    same on a LAN as on a satellite hop."""
    kept = list(positions)
    while kept:
        edges = [0, *(p + 1 for p in kept), floor.size]
        lows = [float(floor[a:b].min()) for a, b in itertools.pairwise(edges)]
        still = [
            i
            for i in range(len(kept))
            if abs(lows[i + 1] - lows[i])
            < max(STEP_MIN_RTT_FRACTION * min(lows[i], lows[i + 1]), host_s)
        ]
        if not still:
            break
        del kept[still[0]]
    return kept


def step_boundaries(
    step: npt.NDArray[np.bool_], jump: npt.NDArray[np.float64], floor: npt.NDArray[np.float64]
) -> list[int]:
    """The boundary (p: between bins p and p + 1) of each step: of the candidate boundaries
    `step`, those whose `jump` (the floor after less before) stands out of the per-bin
    `floor`s' own noise on either side (as the merge asks), one per run of boundaries of one
    sign. A rise at bin s shows at the boundaries before the first bins after it, a fall at the
    last boundaries before it: the first of a rising run and the last of a falling one."""
    step = step.copy()
    for p in np.flatnonzero(step):
        wobble = max(
            floor_wobble(floor[max(p + 1 - STEP_SPAN_BINS, 0) : p + 1]),
            floor_wobble(floor[p + 1 : p + 1 + STEP_SPAN_BINS]),
        )
        step[p] = abs(jump[p]) >= STEP_NOISE_FACTOR * wobble
    positions = np.flatnonzero(step)
    if positions.size == 0:
        return []
    sign = np.sign(jump[positions])
    breaks = np.flatnonzero((np.diff(positions) > 1) | (np.diff(sign) != 0)) + 1
    return [int(r[0] if jump[r[0]] > 0 else r[-1]) for r in np.split(positions, breaks)]
