"""A simulated transfer as the series stage would give it, drawn by the report's real builders.

The transfer is the one Antony et al. measured across the Atlantic: a long fat path whose
bottleneck buffer is far smaller than the bandwidth-delay product. Slow start sends each window
as one line-rate burst; the burst that outgrows the buffer loses most of its tail; congestion
avoidance then climbs one segment per round trip and saws on further losses; midway the
receiving application stops reading, the window closes, and the sender probes it until it
reopens. Everything is computed per round trip with numpy (a few thousand rounds for five
million packets), never per packet.

`simulate` gives the transfer as both capture points would see it; `view` one capture point's
packets; `direction` that view as the series stage's tables (the columns and dtypes of
`tracekit.series.build_series`); `simulated_report` a report whose plots are drawn by
`tracekit.report.build`. `tests.helpers.simulated_capture` writes a view as a pcap file.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pandas as pd

from tracekit import __version__
from tracekit.connections.segments import KIND_CODE, KINDS
from tracekit.report.build import ReportConfig, direction_plots, tsg_plot
from tracekit.report.model import ConnectionView, Report, Shade, Table
from tracekit.series import Direction


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
    sack_lo_seg: np.ndarray  # the ACK's SACK block, first segment (0 when it has none)
    sack_hi_seg: np.ndarray  # the ACK's SACK block, one past its last segment (0: none)
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
    # The first SACK block holds the segment that arrived last (RFC 2018 4), or, when that one
    # filled a hole, the highest held; it reaches down to the nearest hole still open below it.
    held = np.where(out_of_order[acks], arr_seg[acks], high)
    holes = np.unique(seg[lost])
    below = np.searchsorted(holes, held) - 1
    hole = holes[np.maximum(below, 0)] if len(holes) else np.zeros(len(held), np.int64)
    still_open = (below >= 0) & (first_delivery[hole] > ack_recv_t)
    sack_lo = np.maximum(np.where(still_open, hole + 1, ack_seg), ack_seg)
    has_sack = high >= ack_seg
    sack_lo = np.where(has_sack, sack_lo, 0)
    sack_hi = np.where(has_sack, held + 1, 0)
    # The application reads again at reopen - owd (receiver clock), and says so with a window
    # update; until then the edge cannot pass stall_seg, where it froze.
    reopen_r = reopen - owd
    update_at = np.searchsorted(ack_recv_t, reopen_r)
    ack_recv_t = np.insert(ack_recv_t, update_at, reopen_r)
    ack_seg = np.insert(ack_seg, update_at, np.searchsorted(in_order_by, reopen_r, side="right"))
    sack_lo = np.insert(sack_lo, update_at, 0)
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
        sack_lo_seg=sack_lo,
        sack_hi_seg=sack_hi,
        stall=stall,
        overrun=overrun,
    )


@dataclass(frozen=True)
class View:
    """The packets of one simulated transfer as one capture point saw them, in bytes.

    Sequence numbers are relative (the first data byte is 1, as after a handshake); a probe is
    Linux's: an empty segment one byte below the ACK line. ACKs come from the receiver; the
    first is the SYN-ACK's, at time 0, before any data.
    """

    data_t: np.ndarray
    seq_rel: np.ndarray  # int64
    len_bytes: np.ndarray  # int64, 0 for a probe
    data_kind: np.ndarray  # int8 codes of tracekit.connections.segments.KINDS
    ack_t: np.ndarray
    ack_rel: np.ndarray  # int64
    win_bytes: np.ndarray  # int64
    sack_left: np.ndarray  # int64, 0 when the ACK carries no block
    sack_right: np.ndarray


def view(tr: Transfer, path: Scenario, at_receiver: bool = False) -> View:
    """The sender's capture of the transfer, or the receiver's."""
    mss = path.mss_bytes
    if at_receiver:
        got = ~np.isnan(tr.recv_t)
        order = np.flatnonzero(got)[np.argsort(tr.recv_t[got], kind="stable")]
        data_t, ack_t = tr.recv_t[order], tr.ack_recv_t
    else:
        order = np.argsort(tr.send_t, kind="stable")
        data_t, ack_t = tr.send_t[order], tr.ack_t
    seg, probe = tr.seg[order], tr.probe[order]
    seq_rel = 1 + seg * mss - probe
    length = np.where(probe, 0, mss).astype(np.int64)
    if at_receiver:
        # At the receiver, the resend of a segment lost on the way is the first copy of bytes
        # the sequence jumped over: out of order, as tracekit.connections.segments says.
        high = np.maximum.accumulate(np.where(probe, 0, seq_rel + length))
        above = seq_rel >= np.r_[0, high[:-1]]
        kind = np.where(above, KIND_CODE["new"], KIND_CODE["out_of_order"])
    else:
        kind = np.where(tr.retx[order], KIND_CODE["retransmission"], KIND_CODE["new"])
    kind = np.where(probe, KIND_CODE["window_probe"], kind).astype(np.int8)
    rwnd = path.rwnd_bytes // mss * mss
    has_sack = tr.sack_hi_seg > 0
    return View(
        data_t=data_t,
        seq_rel=seq_rel.astype(np.int64),
        len_bytes=length,
        data_kind=kind,
        ack_t=np.r_[0.0, ack_t],
        ack_rel=np.r_[1, 1 + tr.ack_seg * mss].astype(np.int64),
        win_bytes=np.r_[rwnd, (tr.edge_seg - tr.ack_seg) * mss].astype(np.int64),
        sack_left=np.r_[0, np.where(has_sack, 1 + tr.sack_lo_seg * mss, 0)].astype(np.int64),
        sack_right=np.r_[0, np.where(has_sack, 1 + tr.sack_hi_seg * mss, 0)].astype(np.int64),
    )


def direction(v: View, conn: int = 0) -> Direction:
    """The view as the series stage's tables of direction a2b: segments, acks, sacks, rtt and
    flight, with build_series' columns and dtypes (frames numbered in time order, a packet
    table row each)."""
    n_data, n_ack = len(v.data_t), len(v.ack_t)
    # One timeline for both sides, ACKs first at a tie (the SYN-ACK precedes the first data).
    order = np.argsort(np.r_[v.ack_t, v.data_t], kind="stable")
    frame = np.empty(n_data + n_ack, np.uint32)
    frame[order] = np.arange(1, n_data + n_ack + 1, dtype=np.uint32)
    ack_frame, data_frame = frame[:n_ack], frame[n_ack:]
    end = v.seq_rel + v.len_bytes

    def keys(n: int) -> dict[str, np.ndarray]:
        return {"conn": np.full(n, conn, np.int32), "dir": np.zeros(n, np.uint8)}

    segments = pd.DataFrame(
        {
            **keys(n_data),
            "t_s": v.data_t.astype(np.float64),
            "seq_rel": v.seq_rel,
            "end_rel": end,
            "len": v.len_bytes.astype(np.uint32),
            "kind": pd.Categorical.from_codes(v.data_kind, categories=list(KINDS)),
            "frame": data_frame,
            "row": data_frame - 1,
        }
    )

    # RFC 5681 2: a duplicate ACK repeats the ACK number and window while data is outstanding.
    sent_by_ack = np.searchsorted(v.data_t, v.ack_t, side="right")
    highest = np.r_[1, np.maximum.accumulate(end)]
    outstanding = highest[sent_by_ack] > v.ack_rel
    same = np.r_[False, (v.ack_rel[1:] == v.ack_rel[:-1]) & (v.win_bytes[1:] == v.win_bytes[:-1])]
    dup = same & outstanding
    idx = np.arange(n_ack)
    run = np.where(dup, idx - np.maximum.accumulate(np.where(dup, -1, idx)), 0)
    line_before = np.r_[-1, np.maximum.accumulate(v.ack_rel)[:-1]]
    acks = pd.DataFrame(
        {
            **keys(n_ack),
            "t_s": v.ack_t.astype(np.float64),
            "ack_rel": v.ack_rel,
            "win_bytes": v.win_bytes,
            "edge_rel": v.ack_rel + v.win_bytes,
            "dupack": dup,
            "dupack_run": run.astype(np.int32),
            "advance": (idx == 0) | (v.ack_rel > line_before),
            "frame": ack_frame,
            "row": ack_frame - 1,
        }
    )

    blocks = np.flatnonzero(v.sack_right > 0)
    sacks = pd.DataFrame(
        {
            **keys(len(blocks)),
            "t_s": v.ack_t[blocks].astype(np.float64),
            "left_rel": v.sack_left[blocks],
            "right_rel": v.sack_right[blocks],
            "dsack": np.zeros(len(blocks), bool),
            "frame": ack_frame[blocks],
        }
    )

    # Karn's rule (RFC 6298 3): an ACK that advances the line to the end of a new segment,
    # whose bytes were never resent, dates that segment.
    data = v.len_bytes > 0
    new = np.flatnonzero(data & (v.data_kind == KIND_CODE["new"]))
    resent_ends = end[data & (v.data_kind == KIND_CODE["retransmission"])]
    j = np.minimum(np.searchsorted(end[new], v.ack_rel), max(len(new) - 1, 0))
    dated = (
        acks["advance"].to_numpy() & (end[new][j] == v.ack_rel) & ~np.isin(v.ack_rel, resent_ends)
        if len(new)
        else np.zeros(n_ack, bool)
    )
    at_ack, of_seg = np.flatnonzero(dated), new[j[dated]] if len(new) else new
    rtt_s = v.ack_t[at_ack] - v.data_t[of_seg]
    good = rtt_s >= 0
    rtt = pd.DataFrame(
        {
            **keys(int(good.sum())),
            "t_s": v.ack_t[at_ack][good].astype(np.float64),
            "rtt_s": rtt_s[good].astype(np.float64),
            "source": pd.Categorical.from_codes(
                np.zeros(int(good.sum()), np.int8), categories=["seq", "ts"]
            ),
        }
    )

    # At each segment with payload: the highest byte sent minus the ACK line, and the window
    # last advertised (-1 before any).
    rows = np.flatnonzero(data)
    last_ack = np.searchsorted(v.ack_t, v.data_t[rows], side="right") - 1
    line = np.where(last_ack >= 0, v.ack_rel[np.maximum(last_ack, 0)], 0)
    flight = pd.DataFrame(
        {
            **keys(len(rows)),
            "t_s": v.data_t[rows].astype(np.float64),
            "flight_bytes": np.maximum(np.maximum.accumulate(end)[rows] - line, 0).astype(np.int64),
            "rwnd_bytes": np.where(last_ack >= 0, v.win_bytes[np.maximum(last_ack, 0)], -1),
        }
    )
    return Direction(conn, 0, segments, acks, sacks, rtt, flight)


def connection_view(tr: Transfer, path: Scenario, title: str) -> ConnectionView:
    """The plots of one simulated transfer, drawn by the report's builders: the sender's view,
    and the receiver's TSG beside its own (both captures share the simulation's clock)."""
    shades = (
        Shade(*tr.overrun, "slow-start overrun"),
        Shade(*tr.stall, "receive window closed"),
    )
    sender = direction(view(tr, path))
    receiver = direction(view(tr, path, at_receiver=True))
    plots = direction_plots(
        sender, "Time-sequence graph, sender's view", shades, ReportConfig(), True
    )
    receiver_tsg = tsg_plot(receiver, shades, "Time-sequence graph, receiver's view")
    facts = (
        ("data segments", f"{len(tr.send_t):,}"),
        ("retransmitted", f"{int(tr.retx.sum()):,}"),
        ("lost at bottleneck", f"{int(tr.lost.sum()):,}"),
        ("bottleneck", f"{path.bottleneck_bps / 1e6:.0f} Mbit/s, {path.buffer_packets} pkt buffer"),
    )
    return ConnectionView(title, facts, plots, (receiver_tsg,))


def simulated_report(
    n_packets: int = 3_000, n_connections: int = 1, path: Scenario = Scenario(), seed: int = 1
) -> Report:
    """A report of `n_connections` simulated transfers of `n_packets` data segments each."""
    views, rows = [], []
    for i in range(n_connections):
        tr = simulate(n_packets, path, seed + i)
        client, server = f"192.0.2.{10 + i}:{40000 + i}", "198.51.100.7:5001"
        views.append(connection_view(tr, path, f"{client} -> {server}"))
        rows.append((i, client, server, int(tr.retx.sum())))
    return Report(
        title="simulated transfer",
        overview=Table(("#", "a", "b", "retransmitted"), tuple(rows), tuple(range(n_connections))),
        findings=Table((), ()),
        connections=tuple(views),
        inputs=("simulated",),
        version=__version__,
    )
