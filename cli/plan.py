"""`tracekit plan`: the window, socket buffer and bottleneck memory a path needs."""

from __future__ import annotations

import json
import math
import re
import textwrap
from typing import Any

import click

from tracekit import physics

_NUMBER = re.compile(r"\s*([+-]?[0-9]*\.?[0-9]+(?:[eE][+-]?[0-9]+)?)\s*(\S*)\s*")

# Rates are bit/s with decimal prefixes, case-insensitive as iperf3 reads them (100m = 100M).
_RATE_PREFIX = {"": 1.0, "k": 1e3, "m": 1e6, "g": 1e9, "t": 1e12}
_RATE_UNIT = re.compile(r"([kmgt]?)(bit/s|bits/s|b/s|bps|bit)?")
_TIME_UNIT = {"s": 1.0, "ms": 1e-3, "us": 1e-6, "µs": 1e-6}
# Bytes: k, M, G are decimal (MB = 10**6 bytes, as Antony et al. count memory); binary sizes need
# the IEC names (KiB = 1024). K and KB are read as decimal too, never silently as 1024.
_BYTE_UNIT = {
    "": 1,
    "B": 1,
    "k": 10**3,
    "K": 10**3,
    "kB": 10**3,
    "KB": 10**3,
    "M": 10**6,
    "MB": 10**6,
    "G": 10**9,
    "GB": 10**9,
    "KiB": 2**10,
    "MiB": 2**20,
    "GiB": 2**30,
}


def _split(value: str) -> tuple[float, str] | None:
    match = _NUMBER.fullmatch(value)
    return None if match is None else (float(match[1]), match[2])


class RateType(click.ParamType):
    name = "RATE"

    def convert(self, value: Any, param: click.Parameter | None, ctx: click.Context | None) -> Any:
        if isinstance(value, float):
            return value
        parts = _split(str(value))
        unit = None if parts is None else _RATE_UNIT.fullmatch(parts[1].lower())
        if parts is None or unit is None or "B" in parts[1]:
            self.fail(
                f"{value!r} is not a rate: write bit/s with an optional k, M, G or T "
                "(622M, 1G, 100 Mbit/s); for bytes per second multiply by 8",
                param,
                ctx,
            )
        rate = parts[0] * _RATE_PREFIX[unit[1]]
        if rate <= 0:
            self.fail(f"{value!r}: a rate must be above 0", param, ctx)
        return rate


class DurationType(click.ParamType):
    name = "TIME"

    def convert(self, value: Any, param: click.Parameter | None, ctx: click.Context | None) -> Any:
        if isinstance(value, float):
            return value
        parts = _split(str(value))
        scale = None if parts is None else _TIME_UNIT.get(parts[1].lower())
        if parts is None or scale is None:
            self.fail(f"{value!r} is not a time: give a unit, s, ms or us (100ms)", param, ctx)
        seconds = parts[0] * scale
        if seconds <= 0:
            self.fail(f"{value!r}: a round-trip time must be above 0", param, ctx)
        return seconds


class SizeType(click.ParamType):
    name = "BYTES"

    def convert(self, value: Any, param: click.Parameter | None, ctx: click.Context | None) -> Any:
        if isinstance(value, float):
            return value
        parts = _split(str(value))
        scale = None if parts is None else _BYTE_UNIT.get(parts[1])
        if parts is None or scale is None:
            self.fail(
                f"{value!r} is not a size: bytes with an optional kB, MB, GB (10**3, 10**6, "
                "10**9) or KiB, MiB, GiB (2**10, 2**20, 2**30)",
                param,
                ctx,
            )
        if parts[0] < 0:
            self.fail(f"{value!r}: a size cannot be negative", param, ctx)
        return parts[0] * scale


RATE = RateType()
DURATION = DurationType()
SIZE = SizeType()


def _num(value: float) -> str:
    return f"{value:.4g}" if abs(value) < 1e4 else f"{value:,.0f}"


def format_rate(bps: float) -> str:
    """A rate with the largest decimal prefix that keeps it at or above 1."""
    if math.isinf(bps):
        return "unlimited"
    for scale, unit in ((1e12, "Tbit/s"), (1e9, "Gbit/s"), (1e6, "Mbit/s"), (1e3, "kbit/s")):
        if bps >= scale:
            return f"{_num(bps / scale)} {unit}"
    return f"{_num(bps)} bit/s"


def format_size(size: float) -> str:
    """A byte count with a decimal prefix (MB = 10**6 bytes)."""
    for scale, unit in ((1e9, "GB"), (1e6, "MB"), (1e3, "kB")):
        if size >= scale:
            return f"{_num(size / scale)} {unit}"
    return f"{_num(size)} B"


def format_time(seconds: float) -> str:
    """A duration in s, ms or us."""
    for scale, unit in ((1.0, "s"), (1e-3, "ms")):
        if seconds >= scale:
            return f"{_num(seconds / scale)} {unit}"
    return f"{_num(seconds / 1e-6)} us"


def _exact(size: float) -> str:
    return f"{math.ceil(size):,} B"


def _section(title: str, rows: list[tuple[str, str, str]]) -> list[str]:
    label_w = max(len(r[0]) for r in rows)
    value_w = max(len(r[1]) for r in rows)
    lines = [title]
    lines += [f"  {a:<{label_w}}  {b:>{value_w}}  {c}".rstrip() for a, b, c in rows]
    return [*lines, ""]


def render_text(plan: physics.PathPlan) -> str:
    """The plan as aligned text, for a person."""
    head = [f"bottleneck {format_rate(plan.rate_bps)}", f"RTT {format_time(plan.rtt_s)}"]
    if plan.ingress_bps is not None:
        head.append(f"ingress {format_rate(plan.ingress_bps)}")
    if plan.buffer_bytes is not None:
        head.append(f"bottleneck buffer {format_size(plan.buffer_bytes)}")
    head.append(f"MSS {plan.mss_bytes} B")
    lines = ["Path: " + ", ".join(head), ""]

    if plan.window_scale_shift is None:
        shift = ("none fits", f"above 65535 << 14 = {physics.MAX_WINDOW_BYTES:,} B, RFC 7323 2.3")
    else:
        shift = (
            str(plan.window_scale_shift),
            f"65535 << {plan.window_scale_shift} = {plan.scaled_window_bytes:,} B (RFC 7323)",
        )
    rows = [
        (
            "bandwidth-delay product",
            _exact(plan.bdp_bytes),
            f"{format_size(plan.bdp_bytes)}, {plan.bdp_segments:,.0f} segments of "
            f"{plan.mss_bytes} B",
        ),
        ("socket buffer needed", _exact(plan.bdp_bytes), "send buffer and receive buffer, each"),
        ("window scale shift needed", *shift),
        (
            "rate without window scaling",
            format_rate(plan.unscaled_rate_bps),
            f"65,535 B per {format_time(plan.rtt_s)}",
        ),
    ]
    if plan.window_bytes is not None and plan.window_rate_bps is not None:
        rows.append(
            (
                f"rate with a {_exact(plan.window_bytes)} window",
                format_rate(plan.window_rate_bps),
                "one window per round trip",
            )
        )
    lines += _section("Window: TCP sends at most one window per round trip", rows)

    if plan.ingress_bps is None:
        lines.append(
            "Bottleneck buffer: give --ingress (and --buffer) to size it (Antony eqs. 1-4)."
        )
        return "\n".join(lines) + "\n"
    f, s = format_rate(plan.ingress_bps), format_rate(plan.rate_bps)
    title = f"Bottleneck buffer: slow start bursts at {f} into {s} (Antony et al. 2003)"
    if plan.ingress_bps <= plan.rate_bps:
        lines += [
            title,
            f"  ingress {f} is no faster than {s}: no queue builds, nothing to size.",
            "",
        ]
        return "\n".join(lines) + "\n"
    needed = plan.buffer_needed_bytes or 0.0
    rows = [("buffer for loss-free slow start", _exact(needed), "eq. 3: M = (f - s)/f * s * R")]
    if plan.buffer_bytes is None:
        lines += _section(title, rows)
        lines.append("Give --buffer to see what a given bottleneck memory allows.")
        return "\n".join(lines) + "\n"
    assert plan.loss_free_rate_bps is not None
    assert plan.largest_loss_free_burst_packets is not None
    rows += [
        (
            "longest loss-free burst",
            f"{plan.largest_loss_free_burst_packets:,.0f} packets",
            f"eq. 1, N_d = 0, {plan.packet_bytes} B packets",
        ),
        (
            f"loss-free rate with {format_size(plan.buffer_bytes)}",
            format_rate(plan.loss_free_rate_bps),
            "eq. 2: B = f/(f - s) * M/R" + (", above s: no limit" if plan.buffer_suffices else ""),
        ),
    ]
    low, high = plan.forbidden_low_bps, plan.forbidden_high_bps
    if low is not None and high is not None:
        band = f"{format_rate(low)} to {format_rate(high)}"
        rows.append(("lossy bottleneck rates", band, "eq. 3 solved for s, both roots"))
    lines += _section(title, rows)

    memory = format_size(plan.buffer_bytes)
    notes = []
    if plan.buffer_suffices:
        notes.append(
            f"Verdict: {memory} covers the {format_size(needed)} that {s} needs at this RTT: "
            "slow start can reach the bottleneck rate without loss."
        )
    else:
        notes.append(
            f"Verdict: {memory} is short of the {format_size(needed)} that {s} needs at this RTT: "
            f"slow start overruns the buffer near {format_rate(plan.loss_free_rate_bps)} and drops "
            "packets; pace the sender, limit slow start, or add bottleneck memory."
        )
    if low is not None and high is not None:
        notes.append(
            f"Roots: with {memory} at {format_time(plan.rtt_s)} and {f} ingress, a bottleneck "
            f"below {format_rate(low)} is slow enough for the buffer to absorb slow start's last "
            f"burst, one above {format_rate(high)} is nearly as fast as the ingress so little "
            "queues; between them slow start loses packets (the forbidden area of the paper's "
            "figure 4)."
        )
    else:
        notes.append(
            f"Roots: none: 4 M > f R, so {memory} absorbs slow start at every bottleneck rate "
            "for this RTT and ingress."
        )
    lines += [textwrap.fill(note, width=100, subsequent_indent="  ") for note in notes]
    return "\n".join(lines) + "\n"


@click.command()
@click.option("--rate", type=RATE, required=True, help="Bottleneck rate in bit/s: 622M, 1G.")
@click.option("--rtt", type=DURATION, required=True, help="Round-trip time: 100ms, 0.1s, 500us.")
@click.option(
    "--ingress",
    type=RATE,
    help="Rate the sender bursts at into the bottleneck, its line rate: 1G.",
)
@click.option("--buffer", type=SIZE, help="Bottleneck memory: 0.5MB (10**6), 512KiB (2**10).")
@click.option(
    "--mss",
    type=click.IntRange(1, 65_535),
    metavar="BYTES",
    default=1448,
    show_default=True,
    help="Segment payload in bytes; packets are MSS + 52 header bytes.",
)
@click.option("--window", type=SIZE, help="A window or socket buffer to check: 64KiB, 4MB.")
@click.option("--json", "as_json", is_flag=True, help="Print JSON for machines.")
def plan(
    rate: float,
    rtt: float,
    ingress: float | None,
    buffer: float | None,
    mss: int,
    window: float | None,
    as_json: bool,
) -> None:
    """Window, socket buffer and bottleneck memory a path needs, by the paper's equations.

    Equations 1-4 of Antony et al., Microscopic examination of TCP flows over transatlantic
    links (docs/commands/plan.md).
    """
    result = physics.plan_path(
        rate, rtt, mss_bytes=mss, ingress_bps=ingress, buffer_bytes=buffer, window_bytes=window
    )
    if as_json:
        click.echo(json.dumps(result.to_dict(), indent=2))
    else:
        click.echo(render_text(result), nl=False)
