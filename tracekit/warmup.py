"""A small made-up transfer, analysed once in a process that forks workers, so that each of
them starts with what a first analysis loads (the stages' numba functions, read from numba's
cache at their first call: over a second per process) already in memory.

Its packets are built here, not read from a fixture: an installed tracekit has no fixtures.
One connection with the options the stages look at (MSS, window scale, SACK, timestamps), a
segment lost between the two capture points and resent, SACK blocks for the hole, and a FIN.
"""

from __future__ import annotations

import contextlib
import struct
import tempfile
from pathlib import Path

from tracekit.inputs import CaptureInput, analyze_input

_A, _B = bytes([10, 0, 0, 1]), bytes([10, 0, 0, 2])
_A_PORT, _B_PORT = 40000, 5201
_MSS = 1000
_SEGMENTS = 40
_LOST = 10  # the segment the receiver's capture never sees, resent after its SACKs


def _packet(
    t_us: int, a2b: bool, flags: int, seq: int, ack: int, payload: int, opts: bytes
) -> bytes:
    src, dst = (_A, _B) if a2b else (_B, _A)
    sport, dport = (_A_PORT, _B_PORT) if a2b else (_B_PORT, _A_PORT)
    opts += b"\x01" * (-len(opts) % 4)
    tcp = struct.pack(
        "!HHIIBBHHH", sport, dport, seq, ack, (20 + len(opts)) // 4 << 4, flags, 8192, 0, 0
    )
    ip_len = 20 + len(tcp) + len(opts) + payload
    ip = struct.pack("!BBHHHBBH4s4s", 0x45, 0, ip_len, 0, 0x4000, 64, 6, 0, src, dst)
    frame = b"\x02" * 6 + b"\x04" * 6 + b"\x08\x00" + ip + tcp + opts + b"\x00" * payload
    return struct.pack("<IIII", t_us // 1_000_000, t_us % 1_000_000, len(frame), len(frame)) + frame


def _timestamps(value: int, echo: int) -> bytes:
    return struct.pack("!BBII", 8, 10, value, echo)


def _capture(receiver: bool) -> bytes:
    syn_opts = struct.pack("!BBH", 2, 4, _MSS) + b"\x04\x02" + b"\x01\x03\x03\x07"
    isn_a, isn_b = 1_000_000, 5_000_000
    out = [struct.pack("<IHHiIII", 0xA1B2C3D4, 2, 4, 0, 0, 65535, 1)]
    t = 1_000_000 + (300 if receiver else 0)
    out.append(_packet(t, True, 0x02, isn_a, 0, 0, syn_opts + _timestamps(1, 0)))
    out.append(_packet(t + 20_000, False, 0x12, isn_b, isn_a + 1, 0, syn_opts + _timestamps(7, 1)))
    t += 40_000
    out.append(_packet(t, True, 0x10, isn_a + 1, isn_b + 1, 0, _timestamps(2, 7)))
    highest_acked = 0
    for i in range(_SEGMENTS):
        t += 1_000
        if not (receiver and i == _LOST):
            seq = isn_a + 1 + i * _MSS
            out.append(_packet(t, True, 0x18, seq, isn_b + 1, _MSS, _timestamps(3 + i, 7)))
        if i % 2 or i >= _LOST:
            # Below the hole ACKs advance; above it they repeat, with a SACK block for what came.
            highest_acked = min(i + 1, _LOST)
            sack = b""
            if i > _LOST:
                left, right = isn_a + 1 + (_LOST + 1) * _MSS, isn_a + 1 + (i + 1) * _MSS
                sack = struct.pack("!BBII", 5, 10, left, right)
            ack = isn_a + 1 + highest_acked * _MSS
            out.append(
                _packet(
                    t + 20_000, False, 0x10, isn_b + 1, ack, 0, sack + _timestamps(8 + i, 3 + i)
                )
            )
    t += 30_000
    resent = isn_a + 1 + _LOST * _MSS
    out.append(_packet(t, True, 0x18, resent, isn_b + 1, _MSS, _timestamps(100, 60)))
    end = isn_a + 1 + _SEGMENTS * _MSS
    out.append(_packet(t + 20_000, False, 0x10, isn_b + 1, end, 0, _timestamps(101, 100)))
    out.append(_packet(t + 21_000, True, 0x11, end, isn_b + 1, 0, _timestamps(102, 101)))
    out.append(_packet(t + 41_000, False, 0x11, isn_b + 1, end + 1, 0, _timestamps(103, 102)))
    out.append(_packet(t + 61_000, True, 0x10, end + 1, isn_b + 2, 0, _timestamps(104, 103)))
    return b"".join(out)


def warm_up() -> None:
    """Analyse the made-up pair once in this process. Speed only: a failure is let be (the
    workers then pay their own first analysis)."""
    with tempfile.TemporaryDirectory(prefix="tracekit-warm-") as folder:
        sender, receiver = Path(folder) / "sender.pcap", Path(folder) / "receiver.pcap"
        sender.write_bytes(_capture(receiver=False))
        receiver.write_bytes(_capture(receiver=True))
        with contextlib.suppress(Exception):
            analyze_input(CaptureInput("warm-up", sender, receiver))
