"""receiver_coalescing: arrivals bunched far tighter than the packets left the sender.

A path can only spread packets out: a bottleneck serializes them, so each arrives no sooner
after the one before than it left the sender (or than the bottleneck could carry it). Arrivals
much closer than their departures were held back and released together after the receiver's
link, by interrupt coalescing or batched receive in the receiver's NIC and driver (Antony et al.
fig. 7: "the inter packet delay is very small at the receiving process"). The capture's
timestamps then show the batches, not the wire.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass

import numpy as np

from tracekit import units
from tracekit.core.kernels import jit
from tracekit.detectors._two_vantage import rows_where
from tracekit.detectors.base import AnalysisContext, Detector, Evidence
from tracekit.findings import DIRECTIONS, Finding, Severity
from tracekit.merge import fate_is


class ReceiverCoalescing(Detector):
    kind = "receiver_coalescing"
    title = "Arrivals at the receiver are bunched: interrupt coalescing"
    severity = Severity.INFO
    evidence = (
        Evidence(
            "bunched_packets",
            "packets",
            "consecutive arrivals closer than a quarter of their departure gap",
        ),
        Evidence(
            "spaced_packets",
            "packets",
            "consecutive departures at least 20 us apart (the pairs judged)",
        ),
        Evidence("bunched_ratio", "", "the bunched over the spaced"),
        Evidence("median_sender_gap_s", "s", "median departure gap of the bunched pairs"),
        Evidence("median_receiver_gap_s", "s", "median arrival gap of the bunched pairs"),
        Evidence(
            "median_bunch_packets",
            "packets",
            "median number of packets handed over together",
        ),
    )

    @dataclass(frozen=True)
    class Config:
        # An arrival gap under a quarter of the departure gap: no queue or link compresses
        # spacing (a FIFO bottleneck only widens it), so this much is the receiving host's doing.
        compression_ratio: float = 0.25
        # Departures closer than 20 us are back to back at 1 Gbit/s and above: their arrival
        # gap says nothing about the receiver.
        min_sender_gap_s: float = 20e-6
        # A few bunched pairs happen by timestamping jitter; a fifth of all pairs is a pattern.
        min_bunched_fraction: float = 0.2
        # Below this many pairs the fraction is noise.
        min_bunched_packets: int = 20

    config: Config

    def detect(self, ctx: AnalysisContext) -> Iterator[Finding]:
        if ctx.merge is None:
            return
        tx = ctx.merge.transmissions
        if tx.empty:
            return
        # The three columns it reads, each once; the rows of each direction by position.
        sent_all = tx["sender_t_s"].to_numpy(dtype=np.float64)
        got_all = tx["receiver_t_s"].to_numpy(dtype=np.float64)
        ok = fate_is(tx, "delivered", "reordered") & ~np.isnan(sent_all)
        for conn, direction, rows, _ in rows_where(ctx.merge, ok):
            if rows.size < 2:
                continue
            # Sent in order already (distinct times sort one way only): no sorted copies.
            order = (
                rows
                if _increasing(sent_all, rows)
                else rows[np.argsort(sent_all[rows], kind="quicksort")]
            )
            n_spaced, where, send_gap, recv_gap = _bunched(
                sent_all,
                got_all,
                order,
                self.config.min_sender_gap_s,
                self.config.compression_ratio,
            )
            n_bunched = int(where.size)
            if n_spaced == 0 or n_bunched < self.config.min_bunched_packets:
                continue
            fraction = n_bunched / n_spaced
            if fraction < self.config.min_bunched_fraction:
                continue
            # Bunch sizes: runs of consecutive bunched pairs, plus the packet that opens each.
            breaks = np.flatnonzero(np.diff(where) != 1)
            runs = np.diff(np.concatenate([[-1], breaks, [where.size - 1]])) + 1
            yield self.finding(
                conn=int(conn),
                direction=DIRECTIONS[int(direction)],
                start_s=float(sent_all[order[where[0]]]),
                end_s=float(sent_all[order[where[-1] + 1]]),
                evidence={
                    "bunched_packets": n_bunched,
                    "spaced_packets": n_spaced,
                    "bunched_ratio": fraction,
                    "median_sender_gap_s": float(np.median(send_gap)),
                    "median_receiver_gap_s": float(np.median(recv_gap)),
                    "median_bunch_packets": float(np.median(runs)),
                },
                summary=(
                    f"{n_bunched} of {n_spaced} arrivals came in bunches, "
                    f"{units.duration(np.median(recv_gap))} apart after leaving "
                    f"{units.duration(np.median(send_gap))} apart"
                ),
                explanation=(
                    "Packets that left the sender spaced out reached the receiver's capture "
                    "point in tight bunches. No network queue does that: a bottleneck keeps or "
                    "widens spacing. The receiving host held them and handed them over in "
                    "batches (interrupt coalescing, NAPI polling, GRO), as Antony et al. "
                    "describe for fig. 7. It adds latency, makes ACKs bursty (so the sender "
                    "sends bursts), and hides the bottleneck's spacing from this capture."
                ),
                advice=(
                    "Check the receiving NIC's coalescing (`ethtool -c`): lower rx-usecs / "
                    "rx-frames or turn adaptive-rx off to see the wire's timing, or capture "
                    "on a tap or switch mirror port before the host. For throughput, keep "
                    "coalescing and pace the sender instead."
                ),
            )


@jit
def _increasing(values: np.ndarray, rows: np.ndarray) -> bool:  # pragma: no cover
    """Whether values[rows] strictly increase."""
    rising = True
    for k in range(1, rows.size):
        if not values[rows[k]] > values[rows[k - 1]]:
            rising = False
            break
    return rising


@jit
def _bunched(
    sent: np.ndarray, got: np.ndarray, order: np.ndarray, min_gap_s: float, ratio: float
) -> tuple[int, np.ndarray, np.ndarray, np.ndarray]:  # pragma: no cover
    """Along `order` (by departure): how many consecutive pairs left at least `min_gap_s`
    apart, and of those that arrived less than `ratio` times as far apart, the place of the
    pair's first packet in `order` and the two gaps. Counted first, so every output is sized
    exactly."""
    n_spaced = n_bunched = 0
    for k in range(order.size - 1):
        send_gap = sent[order[k + 1]] - sent[order[k]]
        if send_gap >= min_gap_s:
            n_spaced += 1
            if got[order[k + 1]] - got[order[k]] < ratio * send_gap:
                n_bunched += 1
    where = np.empty(n_bunched, dtype=np.int64)
    send = np.empty(n_bunched)
    recv = np.empty(n_bunched)
    n = 0
    for k in range(order.size - 1):
        send_gap = sent[order[k + 1]] - sent[order[k]]
        recv_gap = got[order[k + 1]] - got[order[k]]
        if send_gap >= min_gap_s and recv_gap < ratio * send_gap:
            where[n] = k
            send[n] = send_gap
            recv[n] = recv_gap
            n += 1
    return n_spaced, where, send, recv
