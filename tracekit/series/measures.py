"""Measures over one direction's series tables, for the detectors and the report: which segments
carry data and of what kind, rates per time bin, line-rate trains, rounds of one window each,
and which resends the receiver already held (SACK or D-SACK).
"""

from __future__ import annotations

from collections.abc import Iterator

import numpy as np
import pandas as pd

from tracekit.core.groups import segment_starts
from tracekit.core.kernels import jit
from tracekit.core.search import search_sorted
from tracekit.schema import RATE_COLUMNS, ROUND_COLUMNS, TRAIN_COLUMNS, empty_frame, frame


def with_data(segments: pd.DataFrame) -> pd.DataFrame:
    """The rows of a segments table that carry payload: the table itself when all do."""
    has_data = segments["len"].to_numpy() > 0
    return segments if has_data.all() else segments[has_data]


def kind_mask(segments: pd.DataFrame, *kinds: str) -> np.ndarray:
    """Which rows of a segments table are of one of `kinds` (by the category codes: turning
    the kind column into strings costs more than the rest of a detector on a big capture)."""
    column = segments["kind"]
    if not isinstance(column.dtype, pd.CategoricalDtype):  # a table made by hand
        return column.isin(kinds).to_numpy()
    codes = column.cat.codes.to_numpy()
    categories = list(column.cat.categories)
    mask = np.zeros(codes.size, dtype=bool)
    for kind in kinds:
        if kind in categories:
            mask |= codes == categories.index(kind)
    return mask


def rate(segments: pd.DataFrame, acks: pd.DataFrame, window_s: float) -> pd.DataFrame:
    """Throughput of one direction over time, averaged over windows of `window_s` seconds.

    sent_bps counts every data byte sent (retransmissions included); acked_bps counts the
    advance of the ACK line (goodput as the receiver confirmed it).

    Windows are laid from the first packet on, as np.histogram's equal-width bins would be,
    but only those that hold a packet and their two neighbours are rows: a window without a
    packet carries exactly zero bytes, so one empty row on each side of a gap draws the same
    line as every empty window in it. The rows are then at most three per packet, whatever
    the span: an idle keep-alive connection captured for a day, or one ACK whose clock
    stepped by years, would otherwise ask for a row per RTT of the whole span.
    """
    if window_s <= 0:
        raise ValueError("window_s must be positive")
    seg_t = segments["t_s"].to_numpy()
    ack_t = acks["t_s"].to_numpy()
    if seg_t.size + ack_t.size == 0:
        return empty_frame(RATE_COLUMNS)
    lo = float(min(seg_t.min(initial=np.inf), ack_t.min(initial=np.inf)))
    hi = float(max(seg_t.max(initial=-np.inf), ack_t.max(initial=-np.inf)))
    # The last window as np.histogram's edges `lo + window_s * arange(ceil(span / w) + 2)` end.
    last = int(np.ceil((hi - lo) / window_s))

    def bins(t: np.ndarray) -> Iterator[tuple[slice, np.ndarray]]:
        # A block of rows at a time: no column of windows as long as the table is held.
        for at in range(0, t.size, _RATE_BLOCK_ROWS):
            block = slice(at, at + _RATE_BLOCK_ROWS)
            yield block, _bin_of(t[block], lo, window_s, last)

    none = [np.zeros(0, dtype=np.int64)]
    held = _distinct(
        np.concatenate(none + [_distinct(b) for t in (seg_t, ack_t) for _, b in bins(t)])
    )
    shown = _distinct(np.concatenate([held - 1, held, held + 1]))
    shown = shown[(shown >= 0) & (shown <= last)]
    # Bytes are whole numbers: summed a block at a time as floats, they come out exact, the
    # same as summed at once, below 2**53 bytes in a window (any transfer's).
    length = segments["len"].to_numpy()
    sent = np.zeros(shown.size)
    for block, b in bins(seg_t):
        weights = length[block].astype(np.float64)
        sent += np.bincount(search_sorted(shown, b), weights=weights, minlength=shown.size)
    line = acks["ack_rel"].to_numpy()
    acked = np.zeros(shown.size)
    top = line[0] if line.size else 0  # the ACK line before each block: the first ACK's
    for block, b in bins(ack_t):
        reached = np.maximum.accumulate(line[block])
        np.maximum(reached, top, out=reached)
        gain = np.diff(reached, prepend=top).astype(np.float64)
        top = reached[-1]
        acked += np.bincount(search_sorted(shown, b), weights=gain, minlength=shown.size)
    return frame(
        RATE_COLUMNS,
        {
            "t_s": lo + window_s * shown + window_s / 2,
            "sent_bps": sent * 8 / window_s,
            "acked_bps": acked * 8 / window_s,
        },
    )


def _distinct(b: np.ndarray) -> np.ndarray:
    """np.unique(b) of whole numbers that come in a few sorted runs (windows of packets in
    time order, blocks of them one after another): a stable sort merges the runs (timsort, a
    pass each), and the first of each run of equal values is kept. numpy's unique hashes every
    value instead, and sorts what is left: a LAN's millions of windows of one packet each."""
    heads = np.sort(b[segment_starts(b)], kind="stable")
    return heads[segment_starts(heads)]


# Rows whose windows are found at once: a few megabytes, however long the table.
_RATE_BLOCK_ROWS = 1 << 18


@jit
def _bin_of(t: np.ndarray, lo: float, width: float, last: int) -> np.ndarray:  # pragma: no cover
    """The window of each time, windows [lo + width * i, lo + width * (i + 1)) for i in
    0..last, each edge computed as np.histogram's would be (so a time on an edge falls where
    it places it), without an array of edges."""
    out = np.empty(t.size, dtype=np.int64)
    for k in range(t.size):
        x = t[k]
        i = min(max(np.int64((x - lo) / width), np.int64(0)), np.int64(last))
        while i > 0 and x < lo + width * i:
            i -= 1
        while i < last and x >= lo + width * (i + 1):
            i += 1
        out[k] = i
    return out


def trains(segments: pd.DataFrame, gap_s: float, min_packets: int = 2) -> pd.DataFrame:
    """Packet trains of one direction: runs of data segments with no idle gap over `gap_s`.

    rate_bps is the instantaneous rate inside the train (the Antony paper's fig. 6: 512
    packets in about 4 ms is about 1 Gbit/s): the bytes before the last packet over the time
    from first to last departure.
    """
    # Only the two columns read, of the rows that carry payload: not a copy of the table.
    t = segments["t_s"].to_numpy()
    size = segments["len"].to_numpy()
    has_data = size > 0
    if not has_data.all():
        t, size = t[has_data], size[has_data]
    if t.size == 0:
        return empty_frame(TRAIN_COLUMNS)
    first, last, total = train_rows(t, size, gap_s, min_packets)
    packets = last - first + 1
    span = t[last] - t[first]
    with np.errstate(divide="ignore", invalid="ignore"):
        rate_bps = np.where(span > 0, (total - size[last]) * 8 / span, np.nan)
    return frame(
        TRAIN_COLUMNS,
        {
            "start_s": t[first],
            "end_s": t[last],
            "packets": packets,
            "bytes": total,
            "rate_bps": rate_bps,
        },
    )


def train_rows(
    t: np.ndarray, size: np.ndarray, gap_s: float, min_packets: int = 2
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """The trains of `trains` as positions in its data segments (`t` their times and `size`
    their payload lengths, in capture order): each train's first and last segment, and its
    bytes. A capture's clock may step back, so a train's times do not find its rows."""
    return _trains(t, size, gap_s, min_packets)


@jit
def _trains(
    t: np.ndarray, size: np.ndarray, gap_s: float, min_packets: int
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:  # pragma: no cover - compiled
    # Each train of min_packets or more: its first and last segment and its bytes, in one pass
    # (a shorter train's row is taken by the next).
    first = np.empty(t.size, dtype=np.int64)
    last = np.empty(t.size, dtype=np.int64)
    total = np.empty(t.size, dtype=np.int64)
    n = 0
    for i in range(t.size + 1):
        if i == t.size or i == 0 or t[i] - t[i - 1] > gap_s:
            if n:
                last[n - 1] = i - 1
                if i - first[n - 1] < min_packets:
                    n -= 1
            if i == t.size:
                break
            first[n] = i
            total[n] = 0
            n += 1
        total[n - 1] += size[i]
    return first[:n].copy(), last[:n].copy(), total[:n].copy()


# Segments per step of `_highs_before`: the highest byte sent before any segment is found from
# the step's mark and at most this many segments, with an eighth of a byte per segment held.
_HIGH_STEP = 64


def _highs_before(end: np.ndarray) -> np.ndarray:
    """The highest `end` before each step of _HIGH_STEP segments: [i] is max(end[:i * step])
    (the least int64 for none), one entry per step and one for the end."""
    least = np.array([np.iinfo(np.int64).min], dtype=np.int64)
    if end.size == 0:
        return least
    steps = np.maximum.reduceat(end, np.arange(0, end.size, _HIGH_STEP))
    return np.concatenate([least, np.maximum.accumulate(steps)])


@jit
def _round_starts(
    t: np.ndarray,
    end: np.ndarray,
    highs: np.ndarray,
    ack_t: np.ndarray,
    line: np.ndarray,
    first_mark: int,
) -> tuple[np.ndarray, np.ndarray]:  # pragma: no cover - compiled
    # Each round after the first starts at an ACK later than the one before (k grows by one
    # at least), so there are at most ack_t.size + 1 rounds. Not t.size + 1: a capture that
    # missed data segments holds ACKs above every byte it saw, and each of them starts a round.
    starts = np.empty(ack_t.size + 1, dtype=np.float64)
    marks = np.empty(ack_t.size + 1, dtype=np.int64)
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
        if before > 0:
            # The highest byte sent before this ACK: its step's mark, then the rest of the step.
            step = before // _HIGH_STEP
            high = highs[step]
            for i in range(step * _HIGH_STEP, before):
                high = max(high, end[i])
            marks[n] = high
        else:
            marks[n] = marks[n - 1]
        n += 1
    return starts[:n].copy(), marks[:n].copy()


def rounds(segments: pd.DataFrame, acks: pd.DataFrame) -> pd.DataFrame:
    """Round trips of one direction as its sender saw them, the way Linux counts them.

    Round 0 starts with the first data segment. Round r + 1 starts at the first ACK beyond
    every byte sent before round r started, as HyStart marks its rounds (tcp_cubic.c: a new
    round when `after(ack, end_seq)`, `end_seq = snd_nxt` at the round's start): round r's ACKs
    are those of round r - 1's data, and they clock out its segments, so in slow start a round
    is one flight, about twice the one before. Columns: tracekit.schema.ROUND_COLUMNS. A
    compiled loop over rounds, two searches each.
    """
    data = with_data(segments)
    t = data["t_s"].to_numpy()
    if t.size == 0:
        return empty_frame(ROUND_COLUMNS)
    end = data["end_rel"].to_numpy()
    ack_t = acks["t_s"].to_numpy()
    line = np.maximum.accumulate(acks["ack_rel"].to_numpy()) if ack_t.size else ack_t
    start_s, marks = _round_starts(
        t,
        end,
        _highs_before(end),
        ack_t,
        line.astype(np.int64, copy=False),
        int(data["seq_rel"].iloc[0]),
    )
    packets, sent = _round_totals(start_s, t, data["len"].to_numpy())
    n = start_s.size
    return frame(
        ROUND_COLUMNS,
        {
            "round": np.arange(n),
            "start_s": start_s,
            "end_s": np.r_[start_s[1:], t[-1]],
            "mark_rel": marks,
            "packets": packets,
            "bytes": sent,
        },
    )


@jit
def _round_totals(
    start_s: np.ndarray, t: np.ndarray, size: np.ndarray
) -> tuple[np.ndarray, np.ndarray]:  # pragma: no cover - compiled
    """Segments and bytes sent in each round: the last round started at or before each one."""
    packets = np.zeros(start_s.size, dtype=np.int64)
    sent = np.zeros(start_s.size, dtype=np.int64)
    for k in range(t.size):
        # Clamped: a segment stamped before the first (a capture clock stepping back) is round 0.
        r = max(np.searchsorted(start_s, t[k], side="right") - 1, 0)
        packets[r] += 1
        sent[r] += size[k]
    return packets, sent


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
    return _overlaps(block_left, block_right, lo, hi)


@jit
def _overlaps(
    block_left: np.ndarray, block_right: np.ndarray, lo: np.ndarray, hi: np.ndarray
) -> np.ndarray:  # pragma: no cover - compiled
    # The last block starting below hi is the only one that can reach past lo.
    out = np.zeros(lo.size, dtype=np.bool_)
    for i in range(lo.size):
        j = np.searchsorted(block_left, hi[i]) - 1
        out[i] = j >= 0 and block_right[j] > lo[i]
    return out


def resent(segments: pd.DataFrame, sacks: pd.DataFrame) -> pd.DataFrame:
    """Which segments of one direction the sender had to send again, and which needlessly.

    Aligned with `segments`: `resent` is True where a later retransmission (full or partial)
    covers some of a first copy's bytes (False on the retransmissions themselves); `dsacked`
    where a D-SACK block (RFC 2883) reports some of a segment's bytes received twice, so the
    first copy arrived and the resend was spurious. A first copy that was resent and not
    D-SACKed was lost (or so delayed that the sender gave up on it).
    """
    is_again = kind_mask(segments, "retransmission", "partial_retransmission")
    again = segments[is_again]
    lo = segments["seq_rel"].to_numpy()
    hi = segments["end_rel"].to_numpy()
    dsack = sacks[sacks["dsack"].to_numpy(dtype=bool)] if len(sacks) else sacks
    # Each column made once and narrowed in place: a mask per segment is the most held beside.
    carries = hi > lo
    again_covers = _covered(again["seq_rel"].to_numpy(), again["end_rel"].to_numpy(), lo, hi)
    again_covers &= carries
    again_covers[is_again] = False
    del again, is_again
    dsacked = _covered(
        dsack["left_rel"].to_numpy(np.int64), dsack["right_rel"].to_numpy(np.int64), lo, hi
    )
    dsacked &= carries
    return pd.DataFrame(
        {"resent": again_covers, "dsacked": dsacked}, index=segments.index, copy=False
    )
