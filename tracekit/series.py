"""Connections -> per-direction series: segments, ACKs, SACK blocks, RTT samples, flight, rates.

A direction is named by the data it carries: series (conn, 0) is a's data and b's ACKs of it.
Every packet of a connection is put on one timeline per direction, twice over: once as the
data side of its own direction, once (if it carries an ACK) as the ACK side of the other.
Sorted by (connection, direction, capture order), every quantity is a grouped running max,
forward fill or search over whole columns (tracekit.groups): no loop over packets.

Times are seconds since the capture's first packet. Sequence numbers are the relative 64-bit
ones of the connections stage.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING

import numpy as np
import pandas as pd
from numba import njit

from tracekit.groups import (
    WRAP,
    ffill_index,
    segment_starts,
    segmented_cummax,
    segmented_cummax_prev,
    segmented_cumsum,
)
from tracekit.schema import OPT_TS, PROTO_TCP, TH_ACK, TH_FIN, TH_RST, TH_SYN
from tracekit.segments import KIND_CODE, KINDS, band, classify_data

if TYPE_CHECKING:
    from tracekit.connections import Connections


@dataclass(frozen=True)
class Direction:
    """The series of one direction of one connection (views into `Series`' tables)."""

    conn: int
    direction: int
    segments: pd.DataFrame
    acks: pd.DataFrame
    sacks: pd.DataFrame
    rtt: pd.DataFrame
    flight: pd.DataFrame


@dataclass(frozen=True)
class Series:
    """All series of a capture, one table each, with `conn` and `dir` columns.

    - `segments`: data segments and ACK-only probes: t_s, seq_rel, end_rel, len, kind, frame.
      kind is one of KINDS; a retransmission resends bytes sent before (Karn's rule excludes
      them and the segments they resend from RTT samples).
    - `acks`: the other side's ACKs of this direction's data: t_s, ack_rel, win_bytes,
      edge_rel (ack + scaled window: the right edge of the receive window), dupack,
      dupack_run (1, 2, 3... within a run of duplicates), advance, frame.
    - `sacks`: SACK blocks (RFC 2018) on those ACKs: t_s, left_rel, right_rel, dsack (RFC 2883).
    - `rtt`: samples: t_s, rtt_s, source ("seq": first ACK covering a segment sent once;
      "ts": TSecr echo of an ACK that advanced the ACK line, RFC 7323 4.1).
    - `flight`: at each data segment sent: t_s, flight_bytes (highest byte sent minus the ACK
      line), rwnd_bytes (last advertised window, -1 before any).
    Every table is sorted by (conn, dir), in capture order within a direction.
    `window_known` says per (conn, dir) whether windows are true byte counts: False where the
    window scale is unknown (handshake not captured), so the raw window field is shown.
    """

    t0_ns: int
    segments: pd.DataFrame
    acks: pd.DataFrame
    sacks: pd.DataFrame
    rtt: pd.DataFrame
    flight: pd.DataFrame
    window_known: dict[tuple[int, int], bool] = field(default_factory=dict)

    def of(self, conn: int, direction: int) -> Direction:
        """The series of one direction of one connection."""

        # Every table is sorted by (conn, dir): a direction is one contiguous slice.
        target = 2 * conn + direction

        def pick(df: pd.DataFrame) -> pd.DataFrame:
            key = df["conn"].to_numpy().astype(np.int64) * 2 + df["dir"].to_numpy()
            lo, hi = np.searchsorted(key, [target, target + 1])
            return df.iloc[lo:hi].reset_index(drop=True)

        return Direction(
            conn=conn,
            direction=direction,
            segments=pick(self.segments),
            acks=pick(self.acks),
            sacks=pick(self.sacks),
            rtt=pick(self.rtt),
            flight=pick(self.flight),
        )


def build_series(conns: Connections) -> Series:
    """Build every direction's series of every TCP connection in one pass over the columns."""
    pk = conns.packets
    tcp = pk.column("proto").to_numpy() == PROTO_TCP
    rows_tcp = np.flatnonzero(tcp)

    def col(name: str) -> np.ndarray:
        return pk.column(name).to_numpy()[rows_tcp]

    ts_ns = pk.column("ts_ns").to_numpy()
    t0 = int(ts_ns.min()) if ts_ns.size else 0
    conn = col("conn").astype(np.int64)
    pdir = col("dir").astype(np.int64)
    flags = col("tcp_flags")
    payload = col("payload_bytes").astype(np.int64)
    seq = col("seq_rel")
    ack = col("ack_rel")
    t = (ts_ns[rows_tcp] - t0) / 1e9
    frame = col("frame")
    opts = col("opts")
    tsval = col("tsval").astype(np.int64)
    tsecr = col("tsecr").astype(np.int64)

    # Scaled windows: the shift a side announced applies to the windows it sends, never to a
    # SYN's own window (RFC 7323 2.2); unknown shifts leave the raw window (window_scaled).
    table = conns.table
    ws = np.stack(
        [table.column("ws_a").to_numpy(), table.column("ws_b").to_numpy()], axis=1
    ).astype(np.int64)
    ws_state = table.column("ws_state").to_pylist()
    shift = np.where(ws[conn, pdir] > 0, ws[conn, pdir], 0) if conn.size else conn
    is_syn = (flags & TH_SYN) != 0
    win = col("win_raw").astype(np.int64) << np.where(is_syn, 0, shift)

    # The two roles of each packet on the per-direction timelines.
    has_ack = (flags & TH_ACK) != 0
    n = conn.size
    ack_pos = np.flatnonzero(has_ack)
    key = np.concatenate([2 * conn + pdir, 2 * conn[ack_pos] + (1 - pdir[ack_pos])])
    src = np.concatenate([np.arange(n), ack_pos])  # index into the tcp-packet columns
    role_ack = np.concatenate([np.zeros(n, dtype=bool), np.ones(ack_pos.size, dtype=bool)])
    # One argsort of a combined key: lexsort over two columns is several times slower.
    order = np.argsort(key * max(n, 1) + src)
    key, src, role_ack = key[order], src[order], role_ack[order]
    role_data = ~role_ack
    starts = segment_starts(key)
    e_t = t[src]
    e_seq = seq[src]
    e_ack = ack[src]
    e_pay = payload[src]
    e_flags = flags[src]
    e_win = win[src]

    # The data side: the highest sequence number sent so far (SYN and FIN take one each).
    consumes = ((e_flags & TH_SYN) != 0).astype(np.int64) + ((e_flags & TH_FIN) != 0)
    seg_end = e_seq + e_pay + consumes
    snd_nxt = segmented_cummax(np.where(role_data, seg_end, -1), starts)
    data = role_data & (e_pay > 0)
    # The ACK side: the ACK line and the last advertised window, as the sender knew them.
    snd_una = segmented_cummax(np.where(role_ack, e_ack, -1), starts)
    last_ack_idx = ffill_index(role_ack, starts)
    has_win = last_ack_idx >= 0
    last_win = np.where(has_win, e_win[np.maximum(last_ack_idx, 0)], -1)
    last_edge = np.where(has_win, e_ack[np.maximum(last_ack_idx, 0)] + last_win, -1)

    kind = _classify(key, e_seq, e_pay, e_flags, data, role_data, snd_una, last_win)
    in_segments = kind >= 0
    # The window a probe tests is the one before it; a data probe goes past a zero window.
    probe_data = data & (last_win == 0) & (e_seq >= last_edge)
    kind = np.where(probe_data, KIND_CODE["window_probe"], kind)

    group_conn = (key // 2).astype(np.int32)
    group_dir = (key % 2).astype(np.uint8)
    kinds = pd.Categorical.from_codes(kind[in_segments], categories=list(KINDS))
    segments = pd.DataFrame(
        {
            "conn": group_conn[in_segments],
            "dir": group_dir[in_segments],
            "t_s": e_t[in_segments],
            "seq_rel": e_seq[in_segments],
            "end_rel": e_seq[in_segments] + e_pay[in_segments],
            "len": e_pay[in_segments].astype(np.uint16),
            "kind": kinds,
            "frame": frame[src[in_segments]],
        }
    )

    acks = _acks(key, starts, src, role_ack, e_t, e_ack, e_win, e_pay, e_flags, snd_nxt, frame)
    flight = pd.DataFrame(
        {
            "conn": group_conn[data],
            "dir": group_dir[data],
            "t_s": e_t[data],
            "flight_bytes": np.maximum(snd_nxt[data] - np.maximum(snd_una[data], 0), 0),
            "rwnd_bytes": last_win[data],
        }
    )
    rtt = _rtt(
        key,
        starts,
        src,
        role_ack,
        data,
        kind,
        e_t,
        e_seq,
        e_pay,
        e_ack,
        snd_una,
        opts,
        tsval,
        tsecr,
    )
    sacks = _sacks(conns, rows_tcp, t, conn, pdir, ack)
    # Known or absent scaling gives true windows; unknown leaves them raw (never guessed).
    scaled = {(c, d): state != "unknown" for c, state in enumerate(ws_state) for d in (0, 1)}
    return Series(
        t0_ns=t0,
        segments=segments,
        acks=acks,
        sacks=sacks,
        rtt=rtt,
        flight=flight,
        window_known=scaled,
    )


def _classify(
    key: np.ndarray,
    seq: np.ndarray,
    pay: np.ndarray,
    flags: np.ndarray,
    data: np.ndarray,
    role_data: np.ndarray,
    snd_una: np.ndarray,
    last_win: np.ndarray,
) -> np.ndarray:
    """Kind code per timeline event (-1: not a segment of the series)."""
    kind = classify_data(key, seq, pay, data)

    # Linux probes a zero window with an ACK-only segment one byte below the ACK line
    # (tcp_xmit_probe_skb); the same segment with the window open is a keepalive.
    plain = role_data & (pay == 0) & ((flags & (TH_SYN | TH_FIN | TH_RST)) == 0)
    below = plain & (snd_una > 0) & (seq == snd_una - 1)
    kind[below & (last_win == 0)] = KIND_CODE["window_probe"]
    kind[below & (last_win != 0)] = KIND_CODE["keepalive"]
    return kind


def _acks(
    key: np.ndarray,
    starts: np.ndarray,
    src: np.ndarray,
    role_ack: np.ndarray,
    t: np.ndarray,
    ack: np.ndarray,
    win: np.ndarray,
    pay: np.ndarray,
    flags: np.ndarray,
    snd_nxt: np.ndarray,
    frame: np.ndarray,
) -> pd.DataFrame:
    # The previous ACK on the same timeline.
    last = ffill_index(role_ack, starts)
    prev = np.full(key.size, -1, dtype=np.int64)
    prev[1:] = last[:-1]
    prev[starts] = -1
    p = np.maximum(prev, 0)
    # RFC 5681 2: a duplicate ACK carries no data, no SYN/FIN, the same ACK number and window
    # as the one before, while data is outstanding.
    dup = (
        role_ack
        & (prev >= 0)
        & (pay == 0)
        & ((flags & (TH_SYN | TH_FIN | TH_RST)) == 0)
        & (ack == ack[p])
        & (win == win[p])
        & (snd_nxt > ack)
    )
    advance = role_ack & (
        (prev < 0) | (ack > segmented_cummax_prev(np.where(role_ack, ack, -1), starts))
    )
    sel = role_ack
    d = dup[sel]
    # Runs of duplicates restart at every other ACK: the third in a row triggers fast
    # retransmit (RFC 5681 3.2).
    run = segmented_cumsum(d.astype(np.int64), segment_starts(key[sel]) | ~d)
    return pd.DataFrame(
        {
            "conn": (key[sel] // 2).astype(np.int32),
            "dir": (key[sel] % 2).astype(np.uint8),
            "t_s": t[sel],
            "ack_rel": ack[sel],
            "win_bytes": win[sel],
            "edge_rel": ack[sel] + win[sel],
            "dupack": d,
            "dupack_run": np.where(d, run, 0).astype(np.int32),
            "advance": advance[sel],
            "frame": frame[src[sel]],
        }
    )


def _rtt(
    key: np.ndarray,
    starts: np.ndarray,
    src: np.ndarray,
    role_ack: np.ndarray,
    data: np.ndarray,
    kind: np.ndarray,
    t: np.ndarray,
    seq: np.ndarray,
    pay: np.ndarray,
    ack: np.ndarray,
    snd_una: np.ndarray,
    opts: np.ndarray,
    tsval: np.ndarray,
    tsecr: np.ndarray,
) -> pd.DataFrame:
    end = seq + pay
    fresh = np.flatnonzero(data & (kind == KIND_CODE["new"]))
    # The first ACK on the same timeline whose ACK line covers the segment's end.
    line = np.where(snd_una < 0, 0, snd_una)
    line_enc = band(key, line)  # non-decreasing: groups ascend, the line is a running max
    q = np.searchsorted(line_enc, band(key[fresh], end[fresh]), side="left")
    q = np.maximum(q, fresh + 1)
    qq = np.minimum(q, key.size - 1)
    # As tcptrace does, only the ACK of exactly the segment's last byte dates it: an ACK that
    # covers it later (delayed, or after a hole was filled) would inflate the sample.
    ok = (q < key.size) & (key[qq] == key[fresh]) & role_ack[qq] & (ack[qq] == end[fresh])

    # Karn's rule: no sample when the segment's bytes were resent before that ACK came. New
    # segments ascend in sequence within a direction, so the ones a resend overlaps are a
    # short run found by two searches.
    resent = np.flatnonzero(
        (kind == KIND_CODE["retransmission"]) | (kind == KIND_CODE["partial_retransmission"])
    )
    if resent.size and fresh.size:
        lo = np.searchsorted(
            band(key[fresh], end[fresh]), band(key[resent], seq[resent]), side="right"
        )
        hi = np.searchsorted(
            band(key[fresh], seq[fresh]), band(key[resent], end[resent]), side="left"
        )
        count = np.maximum(hi - lo, 0)
        covered = np.repeat(lo - np.cumsum(count) + count, count) + np.arange(count.sum())
        first_resend = np.full(fresh.size, np.iinfo(np.int64).max, dtype=np.int64)
        np.minimum.at(first_resend, covered, np.repeat(resent, count))
        ok &= first_resend > qq
    seq_samples = (fresh[ok], qq[ok])

    # Timestamp echoes: an ACK that advances the line echoes the TSval of the segment that
    # caused it; the first data segment to carry that TSval dates the sample.
    has_ts = (opts[src] & OPT_TS) != 0
    sent = np.flatnonzero(data & has_ts)
    sent_enc = key[sent].astype(np.int64) * WRAP + tsval[src[sent]]
    u_enc, u_first = np.unique(sent_enc, return_index=True)
    prev_line = segmented_cummax_prev(np.where(role_ack, ack, -1), starts)
    adv = np.flatnonzero(role_ack & has_ts & (ack > prev_line) & (prev_line >= 0))
    ts_pairs: tuple[np.ndarray, np.ndarray] = (np.zeros(0, np.int64), np.zeros(0, np.int64))
    if u_enc.size and adv.size:
        a_enc = key[adv].astype(np.int64) * WRAP + tsecr[src[adv]]
        j = np.searchsorted(u_enc, a_enc)
        jj = np.minimum(j, u_enc.size - 1)
        hit = (j < u_enc.size) & (u_enc[jj] == a_enc)
        ts_pairs = (sent[u_first[jj[hit]]], adv[hit])

    frames = []
    for (seg_i, ack_i), source in ((seq_samples, "seq"), (ts_pairs, "ts")):
        rtt = t[ack_i] - t[seg_i]
        good = rtt >= 0
        frames.append(
            pd.DataFrame(
                {
                    "conn": (key[ack_i[good]] // 2).astype(np.int32),
                    "dir": (key[ack_i[good]] % 2).astype(np.uint8),
                    "t_s": t[ack_i[good]],
                    "rtt_s": rtt[good],
                    "source": pd.Categorical([source] * int(good.sum()), categories=["seq", "ts"]),
                }
            )
        )
    return pd.concat(frames, ignore_index=True).sort_values(
        ["conn", "dir", "t_s"], ignore_index=True
    )


def _sacks(
    conns: Connections,
    rows_tcp: np.ndarray,
    t: np.ndarray,
    conn: np.ndarray,
    pdir: np.ndarray,
    ack: np.ndarray,
) -> pd.DataFrame:
    sack = conns.capture.sack
    empty = pd.DataFrame(
        {
            "conn": np.zeros(0, np.int32),
            "dir": np.zeros(0, np.uint8),
            "t_s": np.zeros(0),
            "left_rel": np.zeros(0, np.int64),
            "right_rel": np.zeros(0, np.int64),
            "dsack": np.zeros(0, bool),
        }
    )
    if sack.num_rows == 0:
        return empty
    row = sack.column("row").to_numpy().astype(np.int64)
    # Position among the tcp packets (SACK only rides on TCP).
    i = np.searchsorted(rows_tcp, row)
    c, d = conn[i], 1 - pdir[i]  # the blocks describe the other direction's data
    isn = np.stack(
        [conns.table.column("isn_a").to_numpy(), conns.table.column("isn_b").to_numpy()], axis=1
    ).astype(np.int64)
    base = isn[c, d]
    left_raw = sack.column("left").to_numpy().astype(np.int64)
    right_raw = sack.column("right").to_numpy().astype(np.int64)
    # Place each edge on the 64-bit line next to the ACK number that carried it.
    delta = (left_raw - base) % WRAP
    left = delta + np.round((ack[i] - delta) / WRAP).astype(np.int64) * WRAP
    right = left + (right_raw - left_raw) % WRAP
    # RFC 2883 4: a D-SACK is the first block, below the ACK number or inside the second block.
    first = segment_starts(row)
    nxt = np.minimum(np.arange(row.size) + 1, row.size - 1)
    second_same = (nxt != np.arange(row.size)) & (row[nxt] == row)
    inside_second = second_same & (left >= left[nxt]) & (right <= right[nxt])
    dsack = first & ((left < ack[i]) | inside_second)
    blocks = pd.DataFrame(
        {
            "conn": c.astype(np.int32),
            "dir": d.astype(np.uint8),
            "t_s": t[i],
            "left_rel": left,
            "right_rel": right,
            "dsack": dsack,
        }
    )
    # Like every table of the series, sorted by (conn, dir), capture order within.
    return blocks.sort_values(["conn", "dir"], kind="stable", ignore_index=True)


def rate(segments: pd.DataFrame, acks: pd.DataFrame, window_s: float) -> pd.DataFrame:
    """Throughput of one direction over time, averaged over windows of `window_s` seconds.

    sent_bps counts every data byte sent (retransmissions included); acked_bps counts the
    advance of the ACK line (goodput as the receiver confirmed it).
    """
    if window_s <= 0:
        raise ValueError("window_s must be positive")
    times = np.concatenate([segments["t_s"].to_numpy(), acks["t_s"].to_numpy()])
    if times.size == 0:
        return pd.DataFrame({"t_s": [], "sent_bps": [], "acked_bps": []})
    lo = times.min()
    edges = lo + window_s * np.arange(int(np.ceil((times.max() - lo) / window_s)) + 2)
    sent, _ = np.histogram(segments["t_s"], bins=edges, weights=segments["len"].astype(float))
    line = acks["ack_rel"].to_numpy()
    gain = np.diff(np.maximum.accumulate(line), prepend=line[0] if line.size else 0)
    acked, _ = np.histogram(acks["t_s"], bins=edges, weights=gain.astype(float))
    return pd.DataFrame(
        {
            "t_s": edges[:-1] + window_s / 2,
            "sent_bps": sent * 8 / window_s,
            "acked_bps": acked * 8 / window_s,
        }
    )


def trains(segments: pd.DataFrame, gap_s: float, min_packets: int = 2) -> pd.DataFrame:
    """Packet trains of one direction: runs of data segments with no idle gap over `gap_s`.

    rate_bps is the instantaneous rate inside the train (the Antony paper's fig. 6: 512
    packets in about 4 ms is about 1 Gbit/s): the bytes before the last packet over the time
    from first to last departure.
    """
    seg = segments[segments["len"] > 0]
    t = seg["t_s"].to_numpy()
    size = seg["len"].to_numpy().astype(np.int64)
    if t.size == 0:
        return pd.DataFrame(
            {"start_s": [], "end_s": [], "packets": [], "bytes": [], "rate_bps": []}
        )
    new_train = np.r_[True, np.diff(t) > gap_s]
    first = np.flatnonzero(new_train)
    last = np.r_[first[1:] - 1, t.size - 1]
    packets = last - first + 1
    total = np.add.reduceat(size, first)
    span = t[last] - t[first]
    with np.errstate(divide="ignore", invalid="ignore"):
        rate_bps = np.where(span > 0, (total - size[last]) * 8 / span, np.nan)
    out = pd.DataFrame(
        {
            "start_s": t[first],
            "end_s": t[last],
            "packets": packets,
            "bytes": total,
            "rate_bps": rate_bps,
        }
    )
    return out[out["packets"] >= min_packets].reset_index(drop=True)


@njit(cache=True)
def _round_starts(
    t: np.ndarray, sent_high: np.ndarray, ack_t: np.ndarray, line: np.ndarray, first_mark: int
) -> tuple[np.ndarray, np.ndarray]:  # pragma: no cover - compiled
    starts = np.empty(t.size + 1, dtype=np.float64)
    marks = np.empty(t.size + 1, dtype=np.int64)
    starts[0] = t[0]
    marks[0] = first_mark
    n = 1
    k = -1  # index of the ACK that started the current round (-1: round 0)
    while True:
        k = max(np.searchsorted(line, marks[n - 1], side="right"), k + 1)
        if k >= ack_t.size:
            break
        start = ack_t[k]
        before = np.searchsorted(t, start, side="left")
        if before >= t.size:
            break  # nothing is sent after this ACK: the transfer is over
        starts[n] = start
        marks[n] = sent_high[before - 1] if before > 0 else marks[n - 1]
        n += 1
    return starts[:n].copy(), marks[:n].copy()


def rounds(segments: pd.DataFrame, acks: pd.DataFrame) -> pd.DataFrame:
    """Round trips of one direction as its sender saw them, the way Linux counts them.

    Round 0 starts with the first data segment. Round r + 1 starts at the first ACK beyond
    every byte sent before round r started, as HyStart marks its rounds (tcp_cubic.c: a new
    round when `after(ack, end_seq)`, `end_seq = snd_nxt` at the round's start): round r's ACKs
    are those of round r - 1's data, and they clock out its segments, so in slow start a round
    is one flight, about twice the one before. Columns: round, start_s, end_s (the next round's
    start; the last data segment for the last round), mark_rel (snd_nxt at the round's start:
    the first ACK beyond it ends the round), packets and bytes (data segments sent in the round,
    retransmissions included). A compiled loop over rounds, two searches each.
    """
    data = segments[segments["len"] > 0]
    t = data["t_s"].to_numpy()
    empty = pd.DataFrame(
        {
            "round": np.zeros(0, np.int64),
            "start_s": np.zeros(0),
            "end_s": np.zeros(0),
            "mark_rel": np.zeros(0, np.int64),
            "packets": np.zeros(0, np.int64),
            "bytes": np.zeros(0, np.int64),
        }
    )
    if t.size == 0:
        return empty
    sent_high = np.maximum.accumulate(data["end_rel"].to_numpy())
    ack_t = acks["t_s"].to_numpy()
    line = np.maximum.accumulate(acks["ack_rel"].to_numpy()) if ack_t.size else ack_t
    start_s, marks = _round_starts(
        t, sent_high, ack_t, line.astype(np.int64), int(data["seq_rel"].iloc[0])
    )
    segment_round = np.searchsorted(start_s, t, side="right") - 1
    n = start_s.size
    return pd.DataFrame(
        {
            "round": np.arange(n),
            "start_s": start_s,
            "end_s": np.r_[start_s[1:], t[-1]],
            "mark_rel": marks,
            "packets": np.bincount(segment_round, minlength=n),
            "bytes": np.bincount(
                segment_round, weights=data["len"].to_numpy().astype(float), minlength=n
            ).astype(np.int64),
        }
    )


def _covered(left: np.ndarray, right: np.ndarray, lo: np.ndarray, hi: np.ndarray) -> np.ndarray:
    """Whether [lo, hi) overlaps any of the ranges [left, right)."""
    if left.size == 0:
        return np.zeros(lo.size, dtype=bool)
    order = np.argsort(left, kind="stable")
    left, right = left[order], np.maximum.accumulate(right[order])
    # Merge overlapping ranges: a range starts a new block past the reach of all before it.
    new_block = np.r_[True, left[1:] > right[:-1]]
    block_left = left[new_block]
    block_right = np.r_[right[np.flatnonzero(new_block)[1:] - 1], right[-1]]
    j = np.searchsorted(block_left, hi, side="left") - 1
    return (j >= 0) & (block_right[np.maximum(j, 0)] > lo)


def resent(segments: pd.DataFrame, sacks: pd.DataFrame) -> pd.DataFrame:
    """Which segments of one direction the sender had to send again, and which needlessly.

    Aligned with `segments`: `resent` is True where a later retransmission (full or partial)
    covers some of a first copy's bytes (False on the retransmissions themselves); `dsacked`
    where a D-SACK block (RFC 2883) reports some of a segment's bytes received twice, so the
    first copy arrived and the resend was spurious. A first copy that was resent and not
    D-SACKed was lost (or so delayed that the sender gave up on it).
    """
    kind = segments["kind"].to_numpy()
    is_again = (kind == "retransmission") | (kind == "partial_retransmission")
    again = segments[is_again]
    lo = segments["seq_rel"].to_numpy()
    hi = segments["end_rel"].to_numpy()
    dsack = sacks[sacks["dsack"].to_numpy(dtype=bool)] if len(sacks) else sacks
    return pd.DataFrame(
        {
            "resent": _covered(again["seq_rel"].to_numpy(), again["end_rel"].to_numpy(), lo, hi)
            & (hi > lo)
            & ~is_again,
            "dsacked": _covered(
                dsack["left_rel"].to_numpy(np.int64), dsack["right_rel"].to_numpy(np.int64), lo, hi
            )
            & (hi > lo),
        },
        index=segments.index,
    )
