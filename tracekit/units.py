"""Numbers for people: a rate, a duration or a size with the prefix that suits its value.

A LAN's RTT is tens of microseconds and a satellite's hundreds of milliseconds; a rate spans
kbit/s to Gbit/s. Fixed units print "RTT 0.0 ms" or "12704.46 Mbit/s"; these keep three
significant digits in the unit where the value is at or above 1.
"""

from __future__ import annotations

import math


def _digits(value: float) -> str:
    """Three significant digits, no exponent, thousands separated past 9,999."""
    if abs(value) >= 1e4:
        return f"{value:,.0f}"
    if abs(value) >= 100:
        return f"{value:.0f}"
    return f"{value:.3g}"


def _scaled(value: float, units: tuple[tuple[float, str], ...], base: str) -> str:
    """The value in the largest unit that keeps it at or above 1, after rounding to three
    significant digits (so 999.9 Mbit/s reads 1 Gbit/s, not 1000 Mbit/s)."""
    rounded = float(f"{value:.3g}")
    for scale, unit in units:
        if abs(rounded) >= scale:
            return f"{_digits(rounded / scale)} {unit}"
    return f"{_digits(rounded)} {base}"


def rate(bps: float) -> str:
    """A bit rate: `940 Mbit/s`, `12.7 Gbit/s`, `56.3 kbit/s`."""
    if not math.isfinite(bps):
        return "unlimited" if bps > 0 else "unknown"
    units = ((1e12, "Tbit/s"), (1e9, "Gbit/s"), (1e6, "Mbit/s"), (1e3, "kbit/s"))
    return _scaled(bps, units, "bit/s")


def duration(seconds: float) -> str:
    """A duration: `2.5 s`, `50.1 ms`, `45 us`."""
    if not math.isfinite(seconds):
        return "unknown"
    if seconds == 0:
        return "0 s"
    return _scaled(seconds * 1e9, ((1e9, "s"), (1e6, "ms"), (1e3, "us")), "ns")


def size(count: float) -> str:
    """A byte count with a decimal prefix (kB = 1,000 bytes): `187 kB`, `9.1 MB`."""
    if not math.isfinite(count):
        return "unknown"
    return _scaled(count, ((1e9, "GB"), (1e6, "MB"), (1e3, "kB")), "bytes")
