"""Crafted transfers for the check and batch tests: their numbers are how they were built."""

from __future__ import annotations

from collections.abc import Collection
from pathlib import Path

from tests.helpers.crafting import CLIENT, SERVER, tcp, write

SPORT, DPORT = 40000, 5201


def transfer(
    path: Path,
    *,
    segments: int = 100,
    segment_bytes: int = 1000,
    duration_s: float = 1.0,
    resend: Collection[int] = (),
    twice: Collection[int] = (),
    omit: Collection[int] = (),
    sport: int = SPORT,
    t0: float = 1.0,
) -> Path:
    """One connection: handshake at t0, `segments` data segments a2b, the last packet at
    t0 + duration_s.

    Unique payload is segments * segment_bytes, so throughput_a2b_bps is that times 8 over
    duration_s. Segment i in `resend` is sent again after the last one (a retransmission);
    in `twice` it is captured twice in a row (a receiver's capture of a copy it will resend);
    in `omit` it is left out (lost before this capture point).
    """
    step = duration_s / (segments + len(resend) + 3)
    t = t0
    pkts = [tcp(t, CLIENT, SERVER, sport, DPORT, "S", 0)]
    pkts.append(tcp(t := t + step, SERVER, CLIENT, DPORT, sport, "SA", 0, 1))
    pkts.append(tcp(t := t + step, CLIENT, SERVER, sport, DPORT, "A", 1, 1))

    def segment(i: int, at: float) -> object:
        return tcp(at, CLIENT, SERVER, sport, DPORT, "PA", 1 + i * segment_bytes, 1, segment_bytes)

    for i in range(segments):
        t += step
        if i in omit:
            continue
        pkts.append(segment(i, t))
        if i in twice:
            pkts.append(segment(i, t + step / 10))
    for i in sorted(resend):
        t += step
        pkts.append(segment(i, t))
    end = t0 + duration_s
    pkts.append(tcp(end, SERVER, CLIENT, DPORT, sport, "A", 1, 1 + segments * segment_bytes))
    path.parent.mkdir(parents=True, exist_ok=True)
    return write(path, pkts)
