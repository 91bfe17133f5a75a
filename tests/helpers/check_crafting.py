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
    sack_acks: bool = False,
    host_drops: Collection[int] = (),
) -> Path:
    """One connection: handshake at t0, `segments` data segments a2b, the last packet at
    t0 + duration_s.

    Unique payload is segments * segment_bytes, so throughput_a2b_bps is that times 8 over
    duration_s. Segment i in `resend` is sent again after the last one (a retransmission);
    in `twice` it is captured twice in a row (a receiver's capture of a copy it will resend);
    in `omit` it is left out (lost before this capture point). With `sack_acks`, the receiver
    answers each data segment at once with an ACK and SACK blocks (RFC 2018) of what it holds:
    every arrival but the copies of a segment in `host_drops` before its resend (dropped by its
    host).
    """
    step = duration_s / (segments + len(resend) + 3)
    t = t0
    pkts = [tcp(t, CLIENT, SERVER, sport, DPORT, "S", 0)]
    pkts.append(tcp(t := t + step, SERVER, CLIENT, DPORT, sport, "SA", 0, 1))
    pkts.append(tcp(t := t + step, CLIENT, SERVER, sport, DPORT, "A", 1, 1))

    held: set[int] = set()

    def segment(i: int, at: float) -> object:
        return tcp(at, CLIENT, SERVER, sport, DPORT, "PA", 1 + i * segment_bytes, 1, segment_bytes)

    def answer(at: float) -> None:
        if not sack_acks:
            return
        cumulative = next(k for k in range(segments + 1) if k not in held)
        runs: list[tuple[int, int]] = []
        for k in sorted(held):
            if k > cumulative:
                if runs and runs[-1][1] == k:
                    runs[-1] = (runs[-1][0], k + 1)
                else:
                    runs.append((k, k + 1))
        blocks = [(1 + a * segment_bytes, 1 + b * segment_bytes) for a, b in runs[-3:]]
        ack = 1 + cumulative * segment_bytes
        options = [("SAck", tuple(x for block in blocks for x in block))] if blocks else None
        pkts.append(tcp(at, SERVER, CLIENT, DPORT, sport, "A", 1, ack, options=options))

    for i in range(segments):
        t += step
        if i in omit:
            continue
        pkts.append(segment(i, t))
        if i not in host_drops:
            held.add(i)
        if i in twice:
            pkts.append(segment(i, t + step / 10))
        answer(t + step / 2)
    for i in sorted(resend):
        t += step
        pkts.append(segment(i, t))
        held.add(i)
        answer(t + step / 2)
    end = t0 + duration_s
    pkts.append(tcp(end, SERVER, CLIENT, DPORT, sport, "A", 1, 1 + segments * segment_bytes))
    path.parent.mkdir(parents=True, exist_ok=True)
    return write(path, pkts)
