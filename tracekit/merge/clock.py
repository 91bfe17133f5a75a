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

from dataclasses import dataclass

import numpy as np
import numpy.typing as npt
from numba import njit

FloatArray = npt.NDArray[np.float64]


@njit(cache=True)
def _lower_hull(x: np.ndarray, y: np.ndarray) -> np.ndarray:  # pragma: no cover - numba
    """Indices of the lower convex hull of points sorted by x (Andrew's monotone chain)."""
    n = x.size
    hull = np.empty(n, dtype=np.int64)
    k = 0
    for i in range(n):
        # Of points with equal x only the lowest can be on the lower hull.
        if k > 0 and x[hull[k - 1]] == x[i]:
            if y[i] < y[hull[k - 1]]:
                k -= 1
            else:
                continue
        while k >= 2:
            a = hull[k - 2]
            b = hull[k - 1]
            cross = (x[b] - x[a]) * (y[i] - y[a]) - (y[b] - y[a]) * (x[i] - x[a])
            if cross <= 0.0:  # b is on or above the chord a-i: not a lower hull vertex
                k -= 1
            else:
                break
        hull[k] = i
        k += 1
    return hull[:k]


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
    order = np.lexsort((ys, xs))
    xs, ys = xs[order], ys[order]
    hull = _lower_hull(xs, ys)
    hx, hy = xs[hull], ys[hull]
    if hull.size == 1:
        return LowerLine(slope=0.0, intercept=float(hy[0]), samples=int(xs.size))
    mean_x = float(xs.mean())
    edge = int(np.clip(np.searchsorted(hx, mean_x, side="right") - 1, 0, hull.size - 2))
    slope = float((hy[edge + 1] - hy[edge]) / (hx[edge + 1] - hx[edge]))
    return LowerLine(
        slope=slope, intercept=float(hy[edge] - slope * hx[edge]), samples=int(xs.size)
    )


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

    def to_sender_s(self, receiver_s: npt.ArrayLike) -> FloatArray:
        """Receiver-clock times (s since the sender capture's origin) on the sender's clock."""
        r = np.asarray(receiver_s, dtype=np.float64)
        return (r - self.offset_s) / (1.0 + self.skew_ppm * 1e-6)

    def to_dict(self) -> dict[str, float | bool | None]:
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
    fwd = lower_line(fwd_t_s, fwd_delay_s)
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
        )
    # Placed at their sender-clock arrival time, the reverse delays are min_rev (1 + skew) -
    # offset - skew * t: the receiver-clock send time would carry the offset into the slope's
    # lever arm (50 ppm times a 3.7 s offset is 185 us), the arrival time only a delay's worth.
    rx, ry = np.asarray(rev_t_s, dtype=np.float64), np.asarray(rev_delay_s, dtype=np.float64)
    rev = lower_line(rx, ry)
    fx, fy = np.asarray(fwd_t_s, dtype=np.float64), np.asarray(fwd_delay_s, dtype=np.float64)
    # The skew comes from the direction whose floor is better defined: the smaller mean height
    # of its samples above its line. The data direction queues at the bottleneck for the whole
    # transfer when it is short; averaging both slopes would carry that queue's growth into
    # the skew (50 ppm on the lab's clean capture), the ACK direction rarely queues.
    fwd_height = float(np.mean(fy - fwd.at(fx)))
    rev_height = float(np.mean(ry - rev.at(rx)))
    skew = fwd.slope if fwd_height <= rev_height else -rev.slope
    # Both floors again at that slope: the highest line of that slope under each direction.
    fwd_floor = float(np.min(fy - skew * fx))
    rev_floor = float(np.min(ry + skew * rx))
    offset = (fwd_floor - rev_floor) / 2
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
    )
