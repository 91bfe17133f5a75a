"""A synthetic transfer drawn as a report: for the docs screenshot, the tests and the size budget.

The transfer is the one Antony et al. measured across the Atlantic (shared/papers,
antony-microscopic-tcp-transatlantic): a long fat path whose bottleneck buffer is far smaller
than the bandwidth-delay product. Slow start sends each window as one line-rate burst; the burst
that outgrows the buffer loses most of its tail; congestion avoidance then climbs one segment
per round trip and saws on further losses; midway the receiving application stops reading, the
window closes, and the sender probes it until it reopens. Everything is computed per round trip
with numpy (a few thousand rounds for five million packets), never per packet.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from tracekit import __version__
from tracekit.report.model import (
    TSG_PALETTE,
    ConnectionView,
    Kind,
    Plot,
    Report,
    Shade,
    Table,
    Trace,
)

P = TSG_PALETTE


@dataclass(frozen=True)
class Scenario:
    """The simulated network path and hosts."""

    mss_bytes: int = 1448
    rtt_s: float = 0.080  # transatlantic round trip, as in the paper
    bottleneck_bps: float = 1e9
    nic_bps: float = 10e9  # the sender's line rate: a slow-start burst leaves at this rate
    buffer_packets: int = 400  # far below the BDP (about 6900 packets): the paper's problem
    initial_window: int = 10  # RFC 6928
    rwnd_bytes: int = 2 << 20  # below the BDP too: congestion avoidance ends window-limited
    loss_per_round: float = 0.01  # random single losses in congestion avoidance
    stall_at: float = 0.55  # the receiver stops reading after this share of the segments
    stall_s: float = 0.9
    persist_s: float = 0.2  # first zero-window probe after this, then doubling (RFC 9293 3.8.6.1)


@dataclass(frozen=True)
class Transfer:
    """Per-packet arrays of one simulated transfer, as both captures would show them."""

    send_t: np.ndarray  # sender capture: time each data segment left, s
    seg: np.ndarray  # segment number (sequence = seg * mss)
    retx: np.ndarray  # bool: a retransmission
    lost: np.ndarray  # bool: dropped at the bottleneck, never reached the receiver
    probe: np.ndarray  # bool: a zero-window probe
    recv_t: np.ndarray  # receiver capture: arrival time, NaN when lost
    ack_recv_t: np.ndarray  # receiver capture: time each ACK left
    ack_t: np.ndarray  # sender capture: time each ACK arrived
    ack_seg: np.ndarray  # cumulative ACK, in segments
    edge_seg: np.ndarray  # window edge (ACK + window), in segments
    sack_hi_seg: np.ndarray  # highest segment held above a hole (0 when none)
    stall: tuple[float, float]
    overrun: tuple[float, float]


def simulate(n_packets: int, path: Scenario = Scenario(), seed: int = 1) -> Transfer:
    """Simulate a bulk transfer of about `n_packets` data segments."""
    rng = np.random.default_rng(seed)
    nic_gap = path.mss_bytes * 8 / path.nic_bps
    service = path.mss_bytes * 8 / path.bottleneck_bps
    bdp = int(path.rtt_s / service)
    owd = path.rtt_s / 2
    rwnd_segs = path.rwnd_bytes // path.mss_bytes
    stall_seg = int(n_packets * path.stall_at)

    parts: dict[str, list[np.ndarray]] = {
        k: [] for k in ("t", "seg", "retx", "lost", "probe", "rt")
    }
    t, next_seg, window = 0.0, 0, path.initial_window
    slow_start, stalled_done = True, False
    retx_due = np.zeros(0, dtype=np.int64)
    overrun, reopen = (0.0, 0.0), 0.0

    def emit(*columns: np.ndarray) -> None:
        for key, value in zip(parts, columns, strict=True):
            parts[key].append(value)

    while next_seg < n_packets:
        if not stalled_done and next_seg >= stall_seg:
            # The receiving application stopped reading, so the window edge froze at stall_seg
            # and the sender has caught up with it. It sends zero-window probes, spaced by a
            # doubling persist timer, until the application reads again.
            stalled_done = True
            reopen = t + path.stall_s
            offsets = path.persist_s * (2.0 ** np.arange(8))
            probe_t = t + offsets[offsets < path.stall_s]
            k = len(probe_t)
            no = np.zeros(k, bool)
            emit(probe_t, np.full(k, next_seg), no, no, ~no, probe_t + owd)
            t = reopen
        limit = n_packets if stalled_done else stall_seg
        new = max(0, min(window - len(retx_due), limit - next_seg))
        segs = np.r_[retx_due, np.arange(next_seg, next_seg + new)]
        count = len(segs)
        gap = nic_gap if slow_start else path.rtt_s / max(window, 1)
        times = t + np.arange(count) * gap
        is_retx = np.r_[np.ones(len(retx_due), bool), np.zeros(new, bool)]
        lost = np.zeros(count, bool)
        if slow_start:
            # The burst arrives nic/bottleneck times faster than it drains; once the buffer is
            # full only one packet in that ratio finds room (drop-tail).
            ratio = round(path.nic_bps / path.bottleneck_bps)
            fits = int(path.buffer_packets * ratio / (ratio - 1))
            idx = np.arange(count)
            lost = (idx >= fits) & (idx % ratio != 0)
            queue_rank = np.cumsum(~lost) - 1
            arrive = t + owd + queue_rank * service
        else:
            arrive = times + owd + rng.uniform(0, service, count)
            if count and (window > bdp + path.buffer_packets or rng.random() < path.loss_per_round):
                lost[rng.integers(count // 4, count)] = True
        arrive = np.where(lost, np.nan, arrive)
        emit(times, segs, is_retx, lost, np.zeros(count, bool), arrive)
        next_seg += new
        retx_due = segs[lost]
        if lost.any():
            if slow_start:
                overrun = (t, t + 2 * path.rtt_s)
            slow_start = False
            window = max(window // 2, 2)
        elif slow_start:
            window *= 2
        else:
            # Congestion avoidance: one segment per round trip, up to the receive window.
            window = min(window + 1, rwnd_segs)
        t += path.rtt_s

    send_t = np.concatenate(parts["t"])
    seg = np.concatenate(parts["seg"]).astype(np.int64)
    retx = np.concatenate(parts["retx"])
    lost = np.concatenate(parts["lost"])
    probe = np.concatenate(parts["probe"])
    recv_t = np.concatenate(parts["rt"])

    # The receiver acknowledges every second arrival, and at once any that leaves a hole or
    # fills one (RFC 5681 4.2), and every probe. The cumulative ACK after an arrival counts the
    # segments whose first delivery, and every earlier segment's, has happened: a prefix max.
    n_segs = int(seg.max()) + 1
    first_delivery = np.full(n_segs, np.inf)
    delivered = ~np.isnan(recv_t) & ~probe
    np.minimum.at(first_delivery, seg[delivered], recv_t[delivered])
    in_order_by = np.maximum.accumulate(first_delivery)
    arrived = ~np.isnan(recv_t)
    order = np.argsort(recv_t[arrived], kind="stable")
    arr_t = recv_t[arrived][order]
    arr_seg = seg[arrived][order]
    arr_probe = probe[arrived][order]
    cum = np.searchsorted(in_order_by, arr_t, side="right")
    out_of_order = arr_seg > cum
    filled = np.r_[False, cum[1:] > cum[:-1] + 1]
    acks = (np.arange(len(arr_t)) % 2 == 1) | out_of_order | filled | arr_probe
    acks[-1] = True  # the delayed-ACK timer acknowledges a last odd segment (RFC 1122 4.2.3.2)
    ack_recv_t = arr_t[acks]
    ack_seg = cum[acks]
    high = np.maximum.accumulate(np.where(arr_probe, 0, arr_seg))[acks]
    sack_hi = np.where(high >= ack_seg, high + 1, 0)
    # The application reads again at reopen - owd (receiver clock), and says so with a window
    # update; until then the edge cannot pass stall_seg, where it froze.
    reopen_r = reopen - owd
    update_at = np.searchsorted(ack_recv_t, reopen_r)
    ack_recv_t = np.insert(ack_recv_t, update_at, reopen_r)
    ack_seg = np.insert(ack_seg, update_at, np.searchsorted(in_order_by, reopen_r, side="right"))
    sack_hi = np.insert(sack_hi, update_at, 0)
    edge = ack_seg + rwnd_segs
    edge[:update_at] = np.minimum(edge[:update_at], stall_seg)
    zero = np.flatnonzero(edge == ack_seg)
    stall = (float(ack_recv_t[zero[0]] + owd) if len(zero) else reopen, reopen)
    return Transfer(
        send_t=send_t,
        seg=seg,
        retx=retx,
        lost=lost,
        probe=probe,
        recv_t=recv_t,
        ack_recv_t=ack_recv_t,
        ack_t=ack_recv_t + owd,
        ack_seg=ack_seg,
        edge_seg=edge,
        sack_hi_seg=sack_hi,
        stall=stall,
        overrun=overrun,
    )


def tsg_traces(
    data_t: np.ndarray,
    seq: np.ndarray,
    seg_bytes: int,
    retx: np.ndarray,
    probe: np.ndarray,
    ack_t: np.ndarray,
    ack: np.ndarray,
    edge: np.ndarray,
    sack_hi: np.ndarray,
    lost: np.ndarray | None = None,
) -> tuple[Trace, ...]:
    """The traces of one time-sequence graph, in tcptrace's colours, sequence in bytes."""
    plain = ~retx & ~probe
    dup = np.r_[False, ack[1:] == ack[:-1]]
    zero = edge == ack
    holes = sack_hi > ack
    traces = [
        Trace("data", Kind.SEGMENTS, data_t[plain], seq[plain], seq[plain] + seg_bytes),
        Trace(
            "retransmission",
            Kind.SEGMENTS,
            data_t[retx],
            seq[retx],
            seq[retx] + seg_bytes,
            color=P.retransmit,
            keep=np.ones(int(retx.sum()), bool),
            width=2.5,
        ),
        Trace("ACK", Kind.STEP, ack_t, ack, color=P.ack),
        Trace("window edge", Kind.STEP, ack_t, edge, color=P.window),
        Trace(
            "SACK block",
            Kind.SEGMENTS,
            ack_t[holes],
            ack[holes],
            sack_hi[holes],
            color=P.sack,
            width=2,
        ),
        Trace(
            "duplicate ACK",
            Kind.MARKERS,
            ack_t[dup],
            ack[dup],
            color=P.dup_ack,
            symbol="line-ew-open",
        ),
        Trace(
            "zero window",
            Kind.MARKERS,
            ack_t[zero],
            edge[zero],
            color=P.zero_window,
            symbol="square-open",
            keep=np.ones(int(zero.sum()), bool),
        ),
        Trace(
            "window probe",
            Kind.MARKERS,
            data_t[probe],
            seq[probe],
            color=P.probe,
            symbol="diamond",
            keep=np.ones(int(probe.sum()), bool),
        ),
    ]
    if lost is not None:
        traces.append(
            Trace(
                "lost (never received)",
                Kind.MARKERS,
                data_t[lost],
                seq[lost] + seg_bytes / 2,
                color=P.loss,
                symbol="x",
                keep=np.ones(int(lost.sum()), bool),
            )
        )
    return tuple(traces)


def _throughput(t: np.ndarray, nbytes: np.ndarray, span: float) -> tuple[np.ndarray, np.ndarray]:
    """Bytes per bin as Mbit/s, with a bin of a thousandth of the span (at least 1 ms)."""
    width = max(span / 1000, 1e-3)
    bins = (t / width).astype(np.int64)
    total = np.bincount(bins, weights=nbytes)
    return (np.arange(len(total)) + 0.5) * width, total * 8 / width / 1e6


def connection_view(tr: Transfer, path: Scenario, title: str) -> ConnectionView:
    """The plots of one simulated transfer, sender view and receiver view."""
    mss = path.mss_bytes
    seq = tr.seg * mss
    data_plots = tsg_traces(
        tr.send_t,
        seq,
        mss,
        tr.retx,
        tr.probe,
        tr.ack_t,
        tr.ack_seg * mss,
        tr.edge_seg * mss,
        tr.sack_hi_seg * mss,
        lost=tr.lost,
    )
    got = ~np.isnan(tr.recv_t)
    order = np.argsort(tr.recv_t[got], kind="stable")
    receiver = tsg_traces(
        tr.recv_t[got][order],
        seq[got][order],
        mss,
        tr.retx[got][order],
        tr.probe[got][order],
        tr.ack_recv_t,
        tr.ack_seg * mss,
        tr.edge_seg * mss,
        tr.sack_hi_seg * mss,
    )
    shades = (
        Shade(*tr.overrun, "slow-start overrun"),
        Shade(*tr.stall, "receive window closed"),
    )
    span = float(tr.ack_t[-1])
    sent_x, sent_y = _throughput(tr.send_t, np.full(len(tr.send_t), mss), span)
    acked = np.diff(np.r_[0, tr.ack_seg]) * mss
    good_x, good_y = _throughput(tr.ack_t, acked, span)

    # Karn's rule (RFC 6298 3): sample the RTT only from ACKs of segments sent once.
    first_send = np.full(int(tr.seg.max()) + 1, np.nan)
    once = ~tr.retx & ~tr.probe
    first_send[tr.seg[once]] = tr.send_t[once]
    resent = np.zeros(len(first_send), bool)
    resent[tr.seg[tr.retx]] = True
    newest = tr.ack_seg - 1
    advanced = np.r_[True, tr.ack_seg[1:] > tr.ack_seg[:-1]] & (newest >= 0)
    valid = advanced & ~resent[np.maximum(newest, 0)]
    rtt_ms = (tr.ack_t[valid] - first_send[newest[valid]]) * 1e3

    snd_nxt = np.maximum.accumulate(tr.seg + 1)[
        np.clip(np.searchsorted(tr.send_t, tr.ack_t, side="right") - 1, 0, None)
    ]
    flight = (snd_nxt - tr.ack_seg).clip(0) * mss
    rwnd = (tr.edge_seg - tr.ack_seg) * mss

    time_label = "time (s)"
    plots = (
        Plot("Time-sequence graph: sender", time_label, "sequence (bytes)", data_plots, shades),
        Plot(
            "Throughput",
            time_label,
            "rate (Mbit/s)",
            (
                Trace("sent", Kind.LINE, sent_x, sent_y, color=P.segment),
                Trace("acknowledged", Kind.LINE, good_x, good_y, color=P.ack),
            ),
            shades,
            height_px=240,
        ),
        Plot(
            "Round-trip time",
            time_label,
            "RTT (ms)",
            (
                Trace(
                    "RTT sample",
                    Kind.MARKERS,
                    tr.ack_t[valid],
                    rtt_ms,
                    color=P.receiver,
                    symbol="circle",
                ),
            ),
            shades,
            height_px=240,
        ),
        Plot(
            "Flight and window",
            time_label,
            "bytes",
            (
                Trace("in flight", Kind.STEP, tr.ack_t, flight.astype(np.float64), color=P.segment),
                Trace(
                    "receive window", Kind.STEP, tr.ack_t, rwnd.astype(np.float64), color=P.window
                ),
            ),
            shades,
            height_px=240,
        ),
    )
    receiver_plots = (
        Plot("Time-sequence graph: receiver", time_label, "sequence (bytes)", receiver, shades),
    )
    duration = float(tr.ack_t[-1] - tr.send_t[0])
    facts = (
        ("duration", f"{duration:.2f} s"),
        ("data segments", f"{len(tr.send_t):,}"),
        ("retransmitted", f"{int(tr.retx.sum()):,}"),
        ("lost at bottleneck", f"{int(tr.lost.sum()):,}"),
        ("min RTT", f"{np.nanmin(rtt_ms):.1f} ms"),
        ("bottleneck", f"{path.bottleneck_bps / 1e6:.0f} Mbit/s, {path.buffer_packets} pkt buffer"),
    )
    return ConnectionView(title, facts, plots, receiver_plots)


def synthetic_report(
    n_packets: int = 3_000, n_connections: int = 1, path: Scenario = Scenario(), seed: int = 1
) -> Report:
    """A report of `n_connections` simulated transfers of `n_packets` data segments each."""
    views, overview, findings = [], [], []
    for i in range(n_connections):
        tr = simulate(n_packets, path, seed + i)
        client, server = f"192.0.2.{10 + i}:{40000 + i}", "198.51.100.7:5001"
        views.append(connection_view(tr, path, f"{client} → {server}"))
        duration = float(tr.ack_t[-1] - tr.send_t[0])
        goodput = int(tr.ack_seg[-1]) * path.mss_bytes * 8 / duration / 1e6
        overview.append(
            (
                i + 1,
                client,
                server,
                round(duration, 3),
                int(tr.ack_seg[-1]) * path.mss_bytes,
                int(tr.retx.sum()),
                round(goodput, 1),
            )
        )
        findings.append(
            (
                i + 1,
                "slow-start overrun",
                f"{tr.overrun[0]:.3f}–{tr.overrun[1]:.3f} s",
                f"{int(tr.lost.sum()):,} segments lost where a line-rate burst outgrew the buffer",
            )
        )
        findings.append(
            (
                i + 1,
                "receive window closed",
                f"{tr.stall[0]:.3f}–{tr.stall[1]:.3f} s",
                "the receiver advertised a zero window; the sender probed until it reopened",
            )
        )
    links = tuple(range(n_connections))
    return Report(
        title="tracekit report: synthetic transatlantic transfer",
        overview=Table(
            (
                "#",
                "client",
                "server",
                "duration (s)",
                "bytes acked",
                "retransmits",
                "goodput (Mbit/s)",
            ),
            tuple(overview),
            links,
        ),
        findings=Table(
            ("#", "finding", "time", "evidence"),
            tuple(findings),
            tuple(i for i in range(n_connections) for _ in range(2)),
        ),
        connections=tuple(views),
        inputs=("synthetic: sender.pcap", "synthetic: receiver.pcap"),
        version=__version__,
        notes=("Synthetic data: a simulated transfer, not a capture.",),
    )
