"""Path physics of a TCP transfer: window limits and the bottleneck-buffer equations.

The buffer equations are Antony et al., "Microscopic Examination of TCP flows over transatlantic
Links" (2003), section 2, eqs. 1-4, for a sender that bursts at ingress rate f into a bottleneck of
rate s < f with M bytes of memory. Rates are bit/s, times seconds, sizes bytes. Every function
takes floats or numpy arrays (broadcast together) and returns a float for scalar input, an array
otherwise; bad values raise `PhysicsError`.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Any

import numpy as np
import numpy.typing as npt

from tracekit.errors import TracekitError

Real = float | npt.NDArray[np.float64]

# RFC 9293 3.1: the window field has 16 bits.
MAX_UNSCALED_WINDOW_BYTES = 65_535
# RFC 7323 2.3: a shift above 14 is treated as 14, so the window tops out at 65535 << 14.
MAX_WINDOW_SCALE_SHIFT = 14
MAX_WINDOW_BYTES = MAX_UNSCALED_WINDOW_BYTES << MAX_WINDOW_SCALE_SHIFT
# IPv4 (20) + TCP (20) + timestamp option padded (12) headers, RFC 7323 3.2: with an MSS of 1448 a
# full segment is a 1500-byte IP packet, what Linux sends on an Ethernet path with timestamps on.
HEADER_BYTES = 52


class PhysicsError(TracekitError):
    """A physically meaningless input: a negative rate, a zero RTT, a NaN."""


def _array(name: str, value: npt.ArrayLike, *, positive: bool) -> npt.NDArray[np.float64]:
    arr = np.asarray(value, dtype=np.float64)
    bad = ~np.isfinite(arr) | ((arr <= 0) if positive else (arr < 0))
    if np.any(bad):
        need = "> 0" if positive else ">= 0"
        raise PhysicsError(f"{name} must be finite and {need}, got {arr[bad].flat[0]:g}")
    return arr


def _out(arr: npt.NDArray[np.float64]) -> Real:
    return float(arr) if arr.ndim == 0 else arr


def bdp_bytes(rate_bps: npt.ArrayLike, rtt_s: npt.ArrayLike) -> Real:
    """Bandwidth-delay product: the bytes in flight that keep a path of this rate and RTT full."""
    rate = _array("rate_bps", rate_bps, positive=True)
    rtt = _array("rtt_s", rtt_s, positive=True)
    return _out(rate * rtt / 8)


def window_limited_rate_bps(window_bytes: npt.ArrayLike, rtt_s: npt.ArrayLike) -> Real:
    """The most a window allows: one window per round trip (throughput <= window / RTT)."""
    window = _array("window_bytes", window_bytes, positive=False)
    rtt = _array("rtt_s", rtt_s, positive=True)
    return _out(window * 8 / rtt)


def window_scale_shift(window_bytes: npt.ArrayLike) -> int | npt.NDArray[np.int8]:
    """Smallest RFC 7323 shift with 65535 << shift >= window_bytes.

    Raises PhysicsError for a window above 65535 << 14 bytes, which no TCP shift can announce.
    """
    window = _array("window_bytes", window_bytes, positive=False)
    if np.any(window > MAX_WINDOW_BYTES):
        raise PhysicsError(
            f"a window of {window.max():,.0f} bytes exceeds TCP's largest, {MAX_WINDOW_BYTES:,} "
            f"bytes (65535 << {MAX_WINDOW_SCALE_SHIFT}, RFC 7323 2.3)"
        )
    # ceil(log2(window / 65535)), clipped at 0; log2 of a ratio just above a power of two can round
    # down, so step up wherever the shifted window still falls short.
    ratio = np.maximum(window / MAX_UNSCALED_WINDOW_BYTES, 1.0)
    shift = np.ceil(np.log2(ratio)).astype(np.int8)
    shift += (MAX_UNSCALED_WINDOW_BYTES * np.left_shift(1, shift.astype(np.int64)) < window).astype(
        np.int8
    )
    return int(shift) if shift.ndim == 0 else shift


def slow_start_drops_packets(
    burst_packets: npt.ArrayLike,
    ingress_bps: npt.ArrayLike,
    bottleneck_bps: npt.ArrayLike,
    buffer_bytes: npt.ArrayLike,
    packet_bytes: npt.ArrayLike,
) -> Real:
    """Packets a line-rate burst loses at the bottleneck, Antony eq. 1: N_b (f - s) / f - M / l.

    While the burst arrives at f the queue grows by (f - s) / f of each packet; what exceeds the
    M / l packets the buffer holds is dropped. Never below 0; 0 when f <= s (no queue builds).
    """
    burst = _array("burst_packets", burst_packets, positive=False)
    f = _array("ingress_bps", ingress_bps, positive=True)
    s = _array("bottleneck_bps", bottleneck_bps, positive=True)
    m = _array("buffer_bytes", buffer_bytes, positive=False)
    size = _array("packet_bytes", packet_bytes, positive=True)
    excess = np.maximum(f - s, 0.0) / f
    return _out(np.maximum(burst * excess - m / size, 0.0))


def buffer_from_burst_bytes(
    burst_packets: npt.ArrayLike,
    drops_packets: npt.ArrayLike,
    ingress_bps: npt.ArrayLike,
    bottleneck_bps: npt.ArrayLike,
    packet_bytes: npt.ArrayLike,
) -> Real:
    """Bottleneck memory inferred from a burst and its drops, Antony eq. 1 solved for M.

    M = l (N_b (f - s) / f - N_d). With N_d = 0 and N_b the longest burst that got through, this is
    how the paper estimates the TDM switch's memory. Raises PhysicsError when f <= s or when the
    drops exceed the burst's excess (no buffer fits the observation).
    """
    burst = _array("burst_packets", burst_packets, positive=False)
    drops = _array("drops_packets", drops_packets, positive=False)
    f = _array("ingress_bps", ingress_bps, positive=True)
    s = _array("bottleneck_bps", bottleneck_bps, positive=True)
    size = _array("packet_bytes", packet_bytes, positive=True)
    if np.any(f <= s):
        raise PhysicsError("ingress_bps must exceed bottleneck_bps for a queue to build")
    queued = burst * (f - s) / f - drops
    if np.any(queued < 0):
        raise PhysicsError("more drops than the burst's excess over the bottleneck rate")
    return _out(size * queued)


def largest_loss_free_burst_packets(
    buffer_bytes: npt.ArrayLike,
    ingress_bps: npt.ArrayLike,
    bottleneck_bps: npt.ArrayLike,
    packet_bytes: npt.ArrayLike,
) -> Real:
    """Longest line-rate burst the buffer absorbs, Antony eq. 1 with N_d = 0: (M / l) f / (f - s).

    Infinite when f <= s.
    """
    m = _array("buffer_bytes", buffer_bytes, positive=False)
    f = _array("ingress_bps", ingress_bps, positive=True)
    s = _array("bottleneck_bps", bottleneck_bps, positive=True)
    size = _array("packet_bytes", packet_bytes, positive=True)
    with np.errstate(divide="ignore", invalid="ignore"):
        return _out(np.where(f > s, m / size * f / np.maximum(f - s, 0.0), np.inf))


def loss_free_rate_bps(
    buffer_bytes: npt.ArrayLike,
    ingress_bps: npt.ArrayLike,
    bottleneck_bps: npt.ArrayLike,
    rtt_s: npt.ArrayLike,
) -> Real:
    """Rate slow start reaches before it overruns the buffer, Antony eq. 2: B = f / (f - s) M / R.

    To first order, slow start's last round sends a window of B R bytes at line rate f, and the
    buffer absorbs it when B R (f - s) / f <= M. When B >= s the bottleneck rate itself is
    loss-free. Infinite when f <= s.
    """
    m = _array("buffer_bytes", buffer_bytes, positive=False)
    f = _array("ingress_bps", ingress_bps, positive=True)
    s = _array("bottleneck_bps", bottleneck_bps, positive=True)
    rtt = _array("rtt_s", rtt_s, positive=True)
    with np.errstate(divide="ignore", invalid="ignore"):
        return _out(np.where(f > s, f / np.maximum(f - s, 0.0) * m * 8 / rtt, np.inf))


def buffer_needed_bytes(
    bottleneck_bps: npt.ArrayLike, ingress_bps: npt.ArrayLike, rtt_s: npt.ArrayLike
) -> Real:
    """Bottleneck memory for a loss-free slow start up to rate s, Antony eq. 3: (f - s) / f s R.

    Eq. 2 with B = s. 0 when f <= s.
    """
    s = _array("bottleneck_bps", bottleneck_bps, positive=True)
    f = _array("ingress_bps", ingress_bps, positive=True)
    rtt = _array("rtt_s", rtt_s, positive=True)
    return _out(np.maximum(f - s, 0.0) / f * s * rtt / 8)


def loss_free_bottleneck_bounds_bps(
    buffer_bytes: npt.ArrayLike, ingress_bps: npt.ArrayLike, rtt_s: npt.ArrayLike
) -> tuple[Real, Real]:
    """Both roots of eq. 3 solved for s: the edges of the paper's forbidden band (its fig. 4).

    s = f/2 (1 -/+ sqrt(1 - 4 M / (f R))), M in bits. This corrects the paper's eq. 4, which
    misplaces the square root and drops the minus root. Eq. 3's M(s) is a parabola peaking at
    f R / 4 for s = f / 2, so a bottleneck slower than the low root or faster than the high root
    needs less memory than M and slow start through it is loss-free; between the roots it overruns
    the buffer. When 4 M > f R there is no real root and every rate is loss-free: both come back
    NaN.
    """
    m_bits = _array("buffer_bytes", buffer_bytes, positive=False) * 8
    f = _array("ingress_bps", ingress_bps, positive=True)
    rtt = _array("rtt_s", rtt_s, positive=True)
    disc = 1 - 4 * m_bits / (f * rtt)
    root = np.sqrt(np.where(disc >= 0, disc, np.nan))
    return _out(f / 2 * (1 - root)), _out(f / 2 * (1 + root))


@dataclass(frozen=True)
class PathPlan:
    """What a path needs, as `tracekit plan` shows it; fields are None when an input is missing."""

    rate_bps: float
    rtt_s: float
    mss_bytes: int
    packet_bytes: int
    ingress_bps: float | None
    buffer_bytes: float | None
    window_bytes: float | None
    bdp_bytes: float
    bdp_segments: float
    window_scale_shift: int | None
    scaled_window_bytes: int | None
    unscaled_rate_bps: float
    window_rate_bps: float | None
    buffer_needed_bytes: float | None
    largest_loss_free_burst_packets: float | None
    loss_free_rate_bps: float | None
    forbidden_low_bps: float | None
    forbidden_high_bps: float | None

    @property
    def buffer_suffices(self) -> bool | None:
        """Eq. 3: the bottleneck buffer lets slow start reach the bottleneck rate without loss."""
        if self.buffer_bytes is None or self.buffer_needed_bytes is None:
            return None
        return self.buffer_bytes >= self.buffer_needed_bytes

    def to_dict(self) -> dict[str, Any]:
        """Plain JSON-ready values; infinities become None (JSON has none)."""
        out = asdict(self)
        out["buffer_suffices"] = self.buffer_suffices
        for key, value in out.items():
            if isinstance(value, float) and not np.isfinite(value):
                out[key] = None
        return out


def plan_path(
    rate_bps: float,
    rtt_s: float,
    *,
    mss_bytes: int = 1448,
    ingress_bps: float | None = None,
    buffer_bytes: float | None = None,
    window_bytes: float | None = None,
) -> PathPlan:
    """Window and buffer requirements of a bottleneck of rate_bps at round-trip time rtt_s."""
    if mss_bytes <= 0:
        raise PhysicsError(f"mss_bytes must be > 0, got {mss_bytes}")
    if ingress_bps is not None:
        _array("ingress_bps", ingress_bps, positive=True)
    for name, value in (("buffer_bytes", buffer_bytes), ("window_bytes", window_bytes)):
        if value is not None:
            _array(name, value, positive=False)
    packet = mss_bytes + HEADER_BYTES
    bdp = float(bdp_bytes(rate_bps, rtt_s))
    shift = int(window_scale_shift(bdp)) if bdp <= MAX_WINDOW_BYTES else None
    needed = burst = rate = low = high = None
    if ingress_bps is not None:
        needed = float(buffer_needed_bytes(rate_bps, ingress_bps, rtt_s))
    if ingress_bps is not None and buffer_bytes is not None:
        burst = float(largest_loss_free_burst_packets(buffer_bytes, ingress_bps, rate_bps, packet))
        rate = float(loss_free_rate_bps(buffer_bytes, ingress_bps, rate_bps, rtt_s))
        lo, hi = loss_free_bottleneck_bounds_bps(buffer_bytes, ingress_bps, rtt_s)
        if np.isfinite(lo):
            low, high = float(lo), float(hi)
    return PathPlan(
        rate_bps=float(rate_bps),
        rtt_s=float(rtt_s),
        mss_bytes=mss_bytes,
        packet_bytes=packet,
        ingress_bps=ingress_bps,
        buffer_bytes=buffer_bytes,
        window_bytes=window_bytes,
        bdp_bytes=bdp,
        bdp_segments=bdp / mss_bytes,
        window_scale_shift=shift,
        scaled_window_bytes=None if shift is None else MAX_UNSCALED_WINDOW_BYTES << shift,
        unscaled_rate_bps=float(window_limited_rate_bps(MAX_UNSCALED_WINDOW_BYTES, rtt_s)),
        window_rate_bps=(
            None if window_bytes is None else float(window_limited_rate_bps(window_bytes, rtt_s))
        ),
        buffer_needed_bytes=needed,
        largest_loss_free_burst_packets=burst,
        loss_free_rate_bps=rate,
        forbidden_low_bps=low,
        forbidden_high_bps=high,
    )
