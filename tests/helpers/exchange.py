"""A crafted TCP exchange seen from both ends: segments and ACKs with their times, written as a
sender capture and a receiver capture (scapy), with NAT between the two when asked."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import numpy as np
from scapy.layers.inet import IP, TCP
from scapy.layers.l2 import Ether
from scapy.utils import wrpcap

CLIENT, SERVER, NAT = "10.1.0.1", "10.1.0.2", "192.0.2.7"
ISN_C, ISN_S = 1000, 50000
DELAY_S = 0.025


@dataclass(frozen=True)
class Seg:
    """A data segment the client sends at t (sender clock), and where it was captured."""

    t: float
    seq: int  # relative: first data byte is 1
    length: int
    ip_id: int
    at_sender: bool = True
    at_receiver: bool = True
    pieces: int = 1  # > 1: the receiver's capture shows it split (TSO at the sender)
    late: float = 0.0  # extra seconds on the way: arrives after later segments (reordering)


@dataclass(frozen=True)
class Ack:
    """An ACK the server sends at t (sender clock), with SACK blocks (relative numbers)."""

    t: float
    ack: int
    ip_id: int
    sack: tuple[tuple[int, int], ...] = ()


def _tcp(
    t: float,
    src: str,
    dst: str,
    sport: int,
    dport: int,
    flags: str,
    seq: int,
    ack: int,
    ip_id: int,
    payload: int = 0,
    sack: tuple[tuple[int, int], ...] = (),
    sent: float = 0.0,
) -> Ether:
    # TSval is the sending host's millisecond clock (RFC 7323 5.4), the same in both captures.
    opts: list[tuple[str, object]] = [("Timestamp", (int(sent * 1000) + 1, 0))]
    if "S" in flags:
        opts = [("MSS", 1460), ("SAckOK", b""), *opts]
    if sack:
        opts.append(("SAck", tuple(x for block in sack for x in block)))
    pkt = (
        Ether()
        / IP(src=src, dst=dst, id=ip_id)
        / TCP(sport=sport, dport=dport, flags=flags, seq=seq % 2**32, ack=ack % 2**32, options=opts)
        / (b"x" * payload)
    )
    pkt.time = t
    return pkt


def exchange(
    tmp: Path,
    segs: list[Seg],
    acks: list[Ack],
    *,
    offset_s: float = 2.0,
    skew_ppm: float = 0.0,
    client_at_receiver: str = CLIENT,
) -> tuple[Path, Path]:
    """Write sender.pcap (at the client) and receiver.pcap (at the server, its own clock).

    Every packet takes DELAY_S one way; the server's clock reads t + offset + skew * t. The
    handshake and the ACKs are seen at both ends.
    """

    def rclock(t: float) -> float:
        return t + offset_s + skew_ppm * 1e-6 * t

    snd: list[Ether] = []
    rcv: list[Ether] = []
    cport, sport = 40000, 5001
    rc = client_at_receiver

    def c2s(
        t: float,
        flags: str,
        seq: int,
        ack: int,
        ip_id: int,
        n: int = 0,
        sender: bool = True,
        receiver: bool = True,
        pieces: int = 1,
        late: float = 0.0,
    ) -> None:
        if sender:
            snd.append(_tcp(t, CLIENT, SERVER, cport, sport, flags, seq, ack, ip_id, n, sent=t))
        if receiver:
            step = n // pieces
            for k in range(pieces):
                size = step if k < pieces - 1 else n - step * (pieces - 1)
                rcv.append(
                    _tcp(
                        rclock(t + DELAY_S + late) + k * 1e-5,
                        rc,
                        SERVER,
                        cport,
                        sport,
                        flags,
                        seq + k * step,
                        ack,
                        ip_id,
                        size,
                        sent=t,
                    )
                )

    def s2c(t: float, flags: str, seq: int, ack: int, ip_id: int, sack=()) -> None:  # type: ignore[no-untyped-def]
        rcv.append(_tcp(rclock(t), SERVER, rc, sport, cport, flags, seq, ack, ip_id, 0, sack, t))
        snd.append(
            _tcp(t + DELAY_S, SERVER, CLIENT, sport, cport, flags, seq, ack, ip_id, 0, sack, t)
        )

    c2s(0.0, "S", ISN_C, 0, 1)
    s2c(DELAY_S, "SA", ISN_S, ISN_C + 1, 1)
    c2s(2 * DELAY_S, "A", ISN_C + 1, ISN_S + 1, 2)
    for s in segs:
        c2s(
            s.t,
            "A",
            ISN_C + s.seq,
            ISN_S + 1,
            s.ip_id,
            s.length,
            s.at_sender,
            s.at_receiver,
            s.pieces,
            s.late,
        )
    for a in acks:
        sack = tuple((ISN_C + lo, ISN_C + hi) for lo, hi in a.sack)
        s2c(a.t, "A", ISN_S + 1, ISN_C + a.ack, a.ip_id, sack)
    snd.sort(key=lambda p: float(p.time))
    rcv.sort(key=lambda p: float(p.time))
    sp, rp = tmp / "sender.pcap", tmp / "receiver.pcap"
    wrpcap(str(sp), snd)
    wrpcap(str(rp), rcv)
    return sp, rp


def clean(n: int = 6) -> tuple[list[Seg], list[Ack]]:
    segs = [Seg(0.1 + 0.001 * i, 1 + 1000 * i, 1000, 10 + i) for i in range(n)]
    acks = [Ack(0.1 + 0.001 * i + DELAY_S + 0.0005, 1001 + 1000 * i, 100 + i) for i in range(n)]
    return segs, acks


def stepped_path(
    tmp: Path,
    *,
    rtt_s: tuple[float, float],
    step_s: float,
    end_s: float,
    offset_s: float,
    skew_ppm: float,
    standing_s: float = 0.0,
) -> tuple[Path, Path]:
    """A crafted bulk transfer, one segment every 10 ms, each acknowledged on arrival, over a
    path whose one-way delays are half of rtt_s[0] both ways until step_s and half of
    rtt_s[1] after; with `standing_s`, the data also wait that long in a queue after the step
    until the last second (a window sized for the longer path standing in a shorter one). The
    receiver's clock reads t + offset + skew * t; both hops are first in, first out."""
    rng = np.random.default_rng(20)

    def one_way(t: np.ndarray) -> np.ndarray:
        return np.where(t < step_s, rtt_s[0], rtt_s[1]) / 2

    def fifo(sent: np.ndarray, delay: np.ndarray) -> np.ndarray:
        return np.maximum.accumulate(sent + delay)

    sent = np.arange(rtt_s[0], end_s, 0.010)
    queue = rng.exponential(0.002, sent.size)
    queue += np.where((sent >= step_s) & (sent < end_s - 1.0), standing_s, 0.0)
    arrived = fifo(sent, one_way(sent) + queue)
    acked = arrived + 100e-6
    returned = fifo(acked, one_way(acked) + rng.exponential(50e-6, sent.size))

    def rclock(t: float) -> float:
        return t + offset_s + skew_ppm * 1e-6 * t

    c, s, cp, sp = CLIENT, SERVER, 40000, 5001
    d0 = rtt_s[0] / 2
    snd = [
        _tcp(0.0, c, s, cp, sp, "S", ISN_C, 0, 1),
        _tcp(2 * d0, s, c, sp, cp, "SA", ISN_S, ISN_C + 1, 1),
        _tcp(2 * d0, c, s, cp, sp, "A", ISN_C + 1, ISN_S + 1, 2),
    ]
    rcv = [
        _tcp(rclock(d0), c, s, cp, sp, "S", ISN_C, 0, 1),
        _tcp(rclock(d0), s, c, sp, cp, "SA", ISN_S, ISN_C + 1, 1),
        _tcp(rclock(3 * d0), c, s, cp, sp, "A", ISN_C + 1, ISN_S + 1, 2),
    ]
    for k in range(sent.size):
        seq, ack, ip_id = ISN_C + 1 + 1000 * k, ISN_C + 1001 + 1000 * k, 10 + k
        snd.append(_tcp(sent[k], c, s, cp, sp, "A", seq, ISN_S + 1, ip_id, 1000, sent=sent[k]))
        rcv.append(_tcp(rclock(arrived[k]), c, s, cp, sp, "A", seq, ISN_S + 1, ip_id, 1000))
        rcv.append(_tcp(rclock(acked[k]), s, c, sp, cp, "A", ISN_S + 1, ack, ip_id))
        snd.append(_tcp(returned[k], s, c, sp, cp, "A", ISN_S + 1, ack, ip_id))
    snd.sort(key=lambda p: float(p.time))
    rcv.sort(key=lambda p: float(p.time))
    wrpcap(str(tmp / "sender.pcap"), snd)
    wrpcap(str(tmp / "receiver.pcap"), rcv)
    return tmp / "sender.pcap", tmp / "receiver.pcap"


def lan_stepped_path(
    tmp: Path, *, step_s: float, turnaround_s: float = 40e-6, acks: int = 1200
) -> tuple[Path, Path]:
    """A crafted LAN bulk transfer between two hosts 5 us apart each way: eight segments in
    flight, the receiver acknowledging every second one 5 us after it arrived, and the sender
    answering each ACK with two more `turnaround_s` after it came (its host's own time); each
    way adds up to a few us of the hosts' jitter. From the middle on, each way takes `step_s` /
    2 longer. Both clocks are one."""
    rng = np.random.default_rng(21)
    one_way, answer = 5e-6, 5e-6
    c, s, cp, sp = CLIENT, SERVER, 40000, 5001
    snd = [
        _tcp(0.0, c, s, cp, sp, "S", ISN_C, 0, 1),
        _tcp(2 * one_way, s, c, sp, cp, "SA", ISN_S, ISN_C + 1, 1),
        _tcp(2 * one_way, c, s, cp, sp, "A", ISN_C + 1, ISN_S + 1, 2),
    ]
    rcv = [
        _tcp(one_way, c, s, cp, sp, "S", ISN_C, 0, 1),
        _tcp(one_way, s, c, sp, cp, "SA", ISN_S, ISN_C + 1, 1),
        _tcp(3 * one_way, c, s, cp, sp, "A", ISN_C + 1, ISN_S + 1, 2),
    ]
    size = 1000
    # Each segment's departure; the first eight leave 1 us apart, then two per ACK.
    sent = list(10e-6 + 1e-6 * np.arange(8))
    arrivals: list[float] = []
    k = 0  # next segment to acknowledge: segments k, k + 1 per ACK
    ack_times: list[tuple[float, float, int]] = []  # (receiver send, sender arrival, ack)
    middle = None
    while len(ack_times) < acks:
        # The receiver's ACK of segments k and k + 1, and the sender's two answers.
        now = sent[k + 1]
        if middle is None and len(ack_times) == acks // 2:
            middle = now
        delay = one_way + (step_s / 2 if middle is not None else 0.0)
        jitter = rng.exponential(1e-6, 3)
        arrived = max(sent[k] + delay + jitter[0], arrivals[-1] if arrivals else 0.0)
        arrivals += [arrived, max(sent[k + 1] + delay + jitter[1], arrived)]
        acked = arrivals[-1] + answer
        back = acked + delay + jitter[2]
        ack_times.append((acked, back, k + 2))
        sent += [back + turnaround_s, back + turnaround_s + 1e-6]
        k += 2
    for j in range(k):
        seq = ISN_C + 1 + size * j
        ip_id = (10 + j) % 65536
        snd.append(_tcp(sent[j], c, s, cp, sp, "A", seq, ISN_S + 1, ip_id, size, sent=sent[j]))
        rcv.append(_tcp(arrivals[j], c, s, cp, sp, "A", seq, ISN_S + 1, ip_id, size))
    for j, (acked, back, upto) in enumerate(ack_times):
        ack, ip_id = ISN_C + 1 + size * upto, (20_000 + j) % 65536
        rcv.append(_tcp(acked, s, c, sp, cp, "A", ISN_S + 1, ack, ip_id))
        snd.append(_tcp(back, s, c, sp, cp, "A", ISN_S + 1, ack, ip_id))
    snd.sort(key=lambda p: float(p.time))
    rcv.sort(key=lambda p: float(p.time))
    wrpcap(str(tmp / "sender.pcap"), snd)
    wrpcap(str(tmp / "receiver.pcap"), rcv)
    return tmp / "sender.pcap", tmp / "receiver.pcap"
