"""retransmissions: every resent segment, with what made the sender resend it.

Each retransmission (a data segment that resends bytes sent before: kinds `retransmission` and
`partial_retransmission` of tracekit.series) gets one class and the reason behind it:

- `rto`: the retransmission timer fired (RFC 6298 5.4: the earliest unacknowledged segment
  after silence), or the sender was resending in slow start after such a timeout (RFC 5681
  3.1, go-back-N until the ACK line passes what was outstanding when the timer fired).
- `tail_loss_probe`: a probe timer fired and the sender resent its last segment (RFC 8985
  7.3) to provoke the ACK that starts fast recovery. It is a timer, but not the RTO: a fifth
  class, so that it can be checked against Linux's TCPLossProbes counter.
- `fast_retransmit`: an ACK triggered it: duplicate ACKs (RFC 5681 3.2), SACK blocks showing
  later data arrived (RFC 6675), or a partial ACK during recovery (RFC 6582).
- `spurious`: the original was not lost: it was already acknowledged when resent, or the
  receiver reported getting both copies (D-SACK, RFC 2883), or the ACK that covered the resend
  echoed the original's timestamp (Eifel detection, RFC 3522), after a timer fired.
- `reordering`: the same evidence of a needless resend, when duplicate ACKs or SACKs triggered
  it: a later segment overtook the original, which arrived after all (RFC 8985 2).

A timer-triggered retransmission is one preceded by silence (no packet of its direction's
timeline, either way) of at least half the smallest RTT: an ACK-triggered one leaves within
microseconds of the ACK that caused it, a timer fires no sooner than about two round trips
(RFC 8985 7.2) after the last ACK.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

import numpy as np
import numpy.typing as npt
import pandas as pd

from tracekit.detectors._measure import (
    data_directions,
    min_rtt_s,
    resend_counts,
    running_max_at,
)
from tracekit.detectors.base import AnalysisContext, Detector, Evidence
from tracekit.findings import DIRECTIONS, Finding, Severity
from tracekit.series import kind_mask

CLASSES = ("rto", "tail_loss_probe", "fast_retransmit", "spurious", "reordering")
REASONS = (
    "the retransmission timer fired: silence, then the earliest unacknowledged segment "
    "(RFC 6298 5.4)",
    "resent in slow start after a timeout, before the ACK line passed what was outstanding "
    "when the timer fired (RFC 5681 3.1)",
    "a probe timer fired: silence, then the last segment sent (tail loss probe, RFC 8985 7.3)",
    "three or more duplicate ACKs (RFC 5681 3.2)",
    "one or two duplicate ACKs whose SACK blocks showed later data arrived (RFC 6675 5)",
    "SACK blocks showed data above it arrived (RFC 6675)",
    "a partial ACK during recovery: the ACK line advanced but stopped short of the data sent "
    "before the loss (RFC 6582 3.2)",
    "already acknowledged when it was resent",
    "the receiver reported both copies arrived (D-SACK, RFC 2883)",
    "the ACK that covered it echoed the first copy's timestamp (Eifel detection, RFC 3522)",
)
# Reason codes, as indices into REASONS.
R_RTO, R_RTO_RECOVERY, R_TLP, R_DUPACKS, R_DUPACK_SACK, R_SACK, R_PARTIAL = range(7)
R_ACKED, R_DSACK, R_EIFEL = 7, 8, 9
C_RTO, C_TLP, C_FAST, C_SPURIOUS, C_REORDERING = range(5)


def _legend(names: tuple[str, ...]) -> str:
    return "; ".join(f"{i}: {name}" for i, name in enumerate(names))


def _last_before(sorted_rows: npt.NDArray[Any], rows: npt.NDArray[Any]) -> npt.NDArray[Any]:
    """Index of the last entry of sorted_rows below each row (-1 when none)."""
    return np.searchsorted(sorted_rows, rows, side="left") - 1


def _covered_by(
    left: npt.NDArray[np.int64],
    right: npt.NDArray[np.int64],
    lo: npt.NDArray[np.int64],
    hi: npt.NDArray[np.int64],
) -> npt.NDArray[np.bool_]:
    """Whether [lo, hi) overlaps any block [left, right)."""
    if left.size == 0:
        return np.zeros(lo.size, dtype=bool)
    order = np.argsort(left, kind="stable")
    left, reach = left[order], np.maximum.accumulate(right[order])
    j = np.searchsorted(left, hi, side="left") - 1
    return (j >= 0) & (reach[np.maximum(j, 0)] > lo)


def classify(
    direction: Any,
    tsval_by_row: Callable[[npt.NDArray[np.int64]], npt.NDArray[np.integer]] | None,
    tsecr_by_row: Callable[[npt.NDArray[np.int64]], npt.NDArray[np.integer]] | None,
    timer_rtt_ratio: float = 0.5,
    timer_floor_s: float = 0.005,
    rto_min_s: float = 0.2,
) -> pd.DataFrame:
    """Class and reason of every retransmission of one direction (see the module docstring).

    `tsval_by_row` and `tsecr_by_row` give the TCP timestamps of packets by their row in the
    packet table (None: no Eifel test).
    """
    seg = direction.segments
    acks = direction.acks
    is_re = kind_mask(seg, "retransmission", "partial_retransmission")
    idx = np.flatnonzero(is_re)
    re = seg.iloc[idx]
    # Packet rows, not frame numbers: one frame can hold several packets (an A-MSDU).
    f = re["row"].to_numpy().astype(np.int64)
    t = re["t_s"].to_numpy()
    lo = re["seq_rel"].to_numpy().astype(np.int64)
    hi = re["end_rel"].to_numpy().astype(np.int64)

    ack_row = acks["row"].to_numpy().astype(np.int64)
    ack_t = acks["t_s"].to_numpy()
    line = np.maximum.accumulate(acks["ack_rel"].to_numpy()) if len(acks) else ack_t
    k = _last_before(ack_row, f)
    kk = np.maximum(k, 0)
    has_ack = k >= 0
    line_at = np.where(has_ack, line[kk] if len(acks) else 0, -1)
    # The highest byte sent before each retransmission (the running maximum read where they
    # fall, never made whole: a column of the direction's length), and the previous segment's
    # time.
    end = seg["end_rel"].to_numpy().astype(np.int64, copy=False)
    prev_high = np.where(idx > 0, running_max_at(end, np.maximum(idx - 1, 0)), 0)
    seg_t = seg["t_s"].to_numpy()
    prev_seg_t = np.where(idx > 0, seg_t[np.maximum(idx - 1, 0)], -np.inf)
    prev_ack_t = np.where(has_ack, ack_t[kk] if len(acks) else 0.0, -np.inf)
    silence = t - np.maximum(prev_seg_t, prev_ack_t)
    silence = np.where(np.isfinite(silence), silence, 0.0)

    rtt = min_rtt_s(direction)
    threshold = max(timer_floor_s, timer_rtt_ratio * rtt) if rtt is not None else rto_min_s
    timer = silence >= threshold
    head = lo <= line_at
    tail = hi >= prev_high
    tlp = timer & tail & (~head | (silence < rto_min_s + (rtt or 0.0)))
    rto = timer & ~tlp

    # What the last ACK before it said: a duplicate-ACK run, SACK blocks above the resent bytes.
    dup_run = np.where(has_ack, acks["dupack_run"].to_numpy()[kk] if len(acks) else 0, 0)
    sacks = direction.sacks
    plain = sacks[~sacks["dsack"].to_numpy(dtype=bool)] if len(sacks) else sacks
    if len(plain) and len(acks):
        top = plain.groupby("t_s")["right_rel"].max()
        # Looked up at the resends' ACKs only, not laid out over every ACK of the direction.
        sack_top = top.reindex(ack_t[kk]).to_numpy()
        sack_above = has_ack & (np.nan_to_num(sack_top, nan=-1) > lo)
    else:
        sack_above = np.zeros(idx.size, dtype=bool)

    # Slow start after a timeout: ACK-clocked resends below the point outstanding at the RTO.
    recover = np.maximum.accumulate(np.where(rto, prev_high, -1)) if idx.size else prev_high
    after_rto = ~timer & (recover > line_at)

    reason = np.full(idx.size, R_PARTIAL, dtype=np.int64)
    reason[sack_above] = R_SACK
    reason[(dup_run >= 1) & sack_above] = R_DUPACK_SACK
    reason[dup_run >= 3] = R_DUPACKS
    reason[after_rto] = R_RTO_RECOVERY
    reason[tlp] = R_TLP
    reason[rto] = R_RTO
    cls = np.full(idx.size, C_FAST, dtype=np.int64)
    cls[after_rto | rto] = C_RTO
    cls[tlp] = C_TLP
    by_timer = cls != C_FAST

    # Needless resends: the first copy arrived after all.
    acked = hi <= line_at
    dsack = sacks[sacks["dsack"].to_numpy(dtype=bool)] if len(sacks) else sacks
    dsacked = _covered_by(
        dsack["left_rel"].to_numpy(np.int64) if len(dsack) else np.zeros(0, np.int64),
        dsack["right_rel"].to_numpy(np.int64) if len(dsack) else np.zeros(0, np.int64),
        lo,
        hi,
    )
    eifel = np.zeros(idx.size, dtype=bool)
    if tsval_by_row is not None and tsecr_by_row is not None and len(acks):
        # RFC 3522 2: the first ACK to cover the resend echoes the TSval of the copy that
        # made it; an echo older than the resend's own TSval means the first copy did.
        q = np.searchsorted(line, hi, side="left")
        q = np.maximum(q, k + 1)
        ok = q < len(acks)
        qq = np.minimum(q, len(acks) - 1)
        sent_ts = tsval_by_row(f).astype(np.int64)
        echo = tsecr_by_row(ack_row[qq]).astype(np.int64)
        eifel = ok & (sent_ts > 0) & (echo > 0) & (echo < sent_ts)
    needless = dsacked | eifel
    reason[needless & ~acked] = np.where(dsacked, R_DSACK, R_EIFEL)[needless & ~acked]
    cls[needless & by_timer] = C_SPURIOUS
    cls[needless & ~by_timer] = C_REORDERING
    reason[acked] = R_ACKED
    cls[acked] = C_SPURIOUS
    return pd.DataFrame(
        {
            "t_s": t,
            "seq_rel": lo,
            "len": hi - lo,
            "class_code": cls,
            "reason_code": reason,
            "silence_s": silence,
            "dupacks": dup_run,
        }
    )


class Retransmissions(Detector):
    kind = "retransmissions"
    per_connection = True
    title = "Segments were retransmitted"
    severity = Severity.WARNING
    evidence = (
        Evidence("retransmitted_segments", "segments", "segments resent"),
        Evidence("retransmitted_bytes", "bytes", "bytes resent"),
        Evidence("sent_bytes", "bytes", "data bytes sent, retransmissions included"),
        Evidence("retransmitted_ratio", "", "bytes resent over bytes sent"),
        Evidence("rto_count", "", "retransmissions after a retransmission timeout"),
        Evidence("tail_loss_probe_count", "", "tail loss probes"),
        Evidence("fast_retransmit_count", "", "fast retransmits"),
        Evidence(
            "spurious_count",
            "",
            "needless resends (D-SACKed, or the first copy was acknowledged)",
        ),
        Evidence("reordering_count", "", "needless resends that reordering triggered"),
        Evidence("class_legend", "", "the classes, in the order of their codes"),
        Evidence("reason_legend", "", "the reasons, in the order of their codes"),
        Evidence("listed_count", "", "retransmissions listed"),
        Evidence("listed_per_class_max_count", "", "the most listed per class"),
        Evidence("listed_t_s", "s", "when each listed one left"),
        Evidence("listed_seq_rel_bytes", "bytes", "its first byte, relative sequence number"),
        Evidence("listed_len_bytes", "bytes", "its length"),
        Evidence("listed_class_code", "", "its class, a code into class_legend"),
        Evidence("listed_reason_code", "", "its reason, a code into reason_legend"),
        Evidence("listed_silence_s", "s", "the silence before it"),
        Evidence("listed_dupacks_count", "", "the duplicate-ACK run it followed"),
    )

    @dataclass(frozen=True)
    class Config:
        # Silence of half the smallest RTT before a resend means a timer sent it: an ACK-clocked
        # resend follows its ACK within microseconds, the earliest timer (the tail loss probe)
        # waits about two smoothed RTTs (RFC 8985 7.2).
        timer_rtt_ratio: float = 0.5
        # Floor of that silence for paths of sub-millisecond RTT (Linux's probe timer floor is
        # 10 ms, tcp_output.c TCP_TIMEOUT_MIN*... half of it keeps a margin).
        timer_floor_s: float = 0.005
        # Linux's minimum RTO (TCP_RTO_MIN): a timer resend of the only outstanding segment
        # after less silence than this plus an RTT was the probe, not the RTO.
        rto_min_s: float = 0.2
        # The per-retransmission lists are bounded: the earliest this many of each class are
        # listed (counts always cover them all), so a huge capture gives a bounded finding.
        max_listed_per_class_count: int = 200

    config: Config

    def detect(self, ctx: AnalysisContext) -> Iterator[Finding]:
        cfg = self.config
        pk = ctx.packets

        def by_row(name: str) -> Callable[[npt.NDArray[np.int64]], npt.NDArray[np.integer]]:
            values = pk.column(name).to_numpy()
            return lambda rows: values[rows]

        # A direction that resent nothing is skipped before its tables are sliced.
        resends = resend_counts(ctx.connections)
        for conn, direction, d in data_directions(ctx):
            if resends.get(conn, (1, 1))[direction] == 0:
                continue
            if not kind_mask(d.segments, "retransmission", "partial_retransmission").any():
                continue
            table = classify(
                d,
                by_row("tsval"),
                by_row("tsecr"),
                cfg.timer_rtt_ratio,
                cfg.timer_floor_s,
                cfg.rto_min_s,
            )
            yield self._finding(conn, direction, d, table)

    def _finding(self, conn: int, direction: int, d: Any, table: pd.DataFrame) -> Finding:
        cfg = self.config
        name = DIRECTIONS[direction]
        counts = np.bincount(table["class_code"].to_numpy(), minlength=len(CLASSES))
        total = int(counts.sum())
        data = d.data
        resent_bytes = int(table["len"].sum())
        sent_bytes = int(data["len"].sum())
        # Bounded lists: the earliest max_listed_per_class_count of each class, by time.
        rank = table.groupby("class_code").cumcount()
        listed = table[rank < cfg.max_listed_per_class_count].sort_values("t_s", kind="stable")
        parts = [f"{int(n)} {CLASSES[c]}" for c, n in enumerate(counts) if n]
        summary = (
            f"{name}: {total} retransmission{'s' if total != 1 else ''} ({', '.join(parts)}), "
            f"{resent_bytes:,} of {sent_bytes:,} bytes sent ({resent_bytes / sent_bytes:.2%})"
        )
        main = int(np.argmax(counts))
        main_reason = table.loc[table["class_code"] == main, "reason_code"].mode().iloc[0]
        explanation = (
            f"The sender resent {total} segments. Each is classed by what made it resend: a "
            "timer after silence (rto, tail_loss_probe), an ACK that showed loss (duplicate "
            "ACKs or SACK: fast_retransmit), or evidence the first copy had arrived after all "
            "(spurious after a timer, reordering after duplicate ACKs). Most were "
            f"{CLASSES[main]}: {REASONS[int(main_reason)]}. "
            "Every loss costs throughput twice: the resend itself, and the congestion window "
            "the sender cuts in response (RFC 5681 3.2; a timeout drops it to one segment)."
        )
        advice = _advice(counts)
        return self.finding(
            conn=conn,
            direction=name,
            start_s=float(table["t_s"].min()),
            end_s=float(table["t_s"].max()),
            evidence={
                "retransmitted_segments": total,
                "retransmitted_bytes": resent_bytes,
                "sent_bytes": sent_bytes,
                "retransmitted_ratio": resent_bytes / sent_bytes if sent_bytes else 0.0,
                **{f"{c}_count": int(n) for c, n in zip(CLASSES, counts, strict=True)},
                "class_legend": _legend(CLASSES),
                "reason_legend": _legend(REASONS),
                "listed_count": len(listed),
                "listed_per_class_max_count": cfg.max_listed_per_class_count,
                "listed_t_s": listed["t_s"].to_numpy(),
                "listed_seq_rel_bytes": listed["seq_rel"].to_numpy(),
                "listed_len_bytes": listed["len"].to_numpy(),
                "listed_class_code": listed["class_code"].to_numpy(),
                "listed_reason_code": listed["reason_code"].to_numpy(),
                "listed_silence_s": listed["silence_s"].to_numpy(),
                "listed_dupacks_count": listed["dupacks"].to_numpy(),
            },
            summary=summary,
            explanation=explanation,
            advice=advice,
        )


def _advice(counts: npt.NDArray[np.int64]) -> str:
    parts = []
    if counts[C_FAST]:
        parts.append(
            "Fast retransmits mean packets were lost on the path or at the receiver: find where "
            "(a receiver capture tells the two apart), and if the bottleneck buffer overflows, "
            "pace the sender (fq qdisc, SO_MAX_PACING_RATE) or give the bottleneck a buffer of "
            "about one bandwidth-delay product."
        )
    if counts[C_RTO]:
        parts.append(
            "Timeouts stall the transfer for at least the minimum RTO (200 ms on Linux) and "
            "restart slow start: keep SACK on (net.ipv4.tcp_sack=1) and the flight large enough "
            "that losses show as duplicate ACKs rather than silence."
        )
    if counts[C_TLP]:
        parts.append(
            "Tail loss probes recovered losses at the end of a flight without a timeout; nothing "
            "to change unless they are many, which points at tail drops."
        )
    if counts[C_SPURIOUS]:
        parts.append(
            "Spurious timeouts mean the RTT spiked past the RTO: look for delay spikes (queues, "
            "link-layer retries) and keep timestamps and D-SACK on so the sender undoes them."
        )
    if counts[C_REORDERING]:
        parts.append(
            "Reordering made the sender resend data that was not lost: find the path that "
            "reorders (link aggregation, multipath); Linux adapts with RACK "
            "(net.ipv4.tcp_recovery=1) and net.ipv4.tcp_reordering."
        )
    return " ".join(parts)
