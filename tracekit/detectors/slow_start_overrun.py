"""Slow start overran the bottleneck buffer: one round lost a block of packets.

Antony et al. (2003) section 3.1 and fig. 5: slow start doubles the flight every round trip
until one flight no longer fits the bottleneck's memory; that round loses a block of packets.
Eq. 1 turns the round's size, its losses and the two rates into the bottleneck's buffer; eq. 3
gives the buffer a loss-free start needs, eq. 2 the rate the path supports without loss.

The bottleneck's rate s is the slope of the ACK line across the round
(`_measure.ack_line_rate_bps`), and the packet size l counts the headers a bottleneck queue
counts (`_measure.wire_overhead_bytes`), as in the line_rate_burst detector.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass

import numpy as np
import pandas as pd

from tracekit import physics, units
from tracekit.core.kernels import jit
from tracekit.detectors._measure import (
    ETHERNET_HEADER_BYTES,
    ack_line_rate_bps,
    lost_data,
    packet_basis,
    path_phases,
    path_rate_bps,
    queue_at_start_bytes,
    resend_counts,
    wire_directions,
)
from tracekit.detectors.base import AnalysisContext, Detector, Evidence
from tracekit.findings import DIRECTIONS, Finding, Severity
from tracekit.merge.clock import PathPhase, forward_floor_at
from tracekit.series import Direction, kind_mask, rounds

# Between a paced round (sent at its ACKs' rate, 1x) and slow start by ACK clock (1.5x with
# delayed ACKs, 2x without): a round sent faster than this over its ACKs' rate queued.
QUEUE_MARGIN = 1.25


@dataclass(frozen=True)
class _Round:
    """The slow-start round that overran, measured."""

    index: int
    flights: np.ndarray  # first-copy segments of each round's flight, rounds 0..index
    start_s: float
    end_s: float
    flight_t: np.ndarray  # departure times of the flight's segments, ascending
    previous_t: np.ndarray  # departure times of the round before's flight (empty for round 0)
    flight_end: np.ndarray  # their end_rel
    flight_lost: np.ndarray  # which of them were lost
    payload_bytes: int  # the flight's typical segment payload
    lost: int
    spurious: int
    lost_total: int
    block_end_s: float  # the block's losses are those sent from start_s to here
    # Round 0 only: the initial train ran on past the first ACK without a pause.
    past_first_ack: bool = False


@jit
def _round_flights(
    starts: np.ndarray,
    t: np.ndarray,
    first_copy: np.ndarray,
    again: np.ndarray,
    lost: np.ndarray,
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:  # pragma: no cover - compiled
    """Per round (the last start at or before each segment; round 0 before the first):
    when it first resent, and its flight: how many first copies it sent before that, and how
    many of those were lost."""
    n = starts.size
    first_again = np.full(n, np.inf)
    for i in range(t.size):
        if again[i]:
            w = max(np.searchsorted(starts, t[i], side="right") - 1, 0)
            first_again[w] = min(first_again[w], t[i])
    flights = np.zeros(n, dtype=np.int64)
    lost_per_round = np.zeros(n)
    for i in range(t.size):
        if first_copy[i]:
            w = max(np.searchsorted(starts, t[i], side="right") - 1, 0)
            if t[i] < first_again[w]:
                flights[w] += 1
                lost_per_round[w] += lost[i]
    return first_again, flights, lost_per_round


# A train pauses where a segment follows the one before by more than this many times the
# train's own spacing: the line's pace with its device's jitter (a shaper's tokens, an
# interrupt's batch) stays within it, and a pause for an ACK or the application is longer,
# at any line rate.
TRAIN_GAP_FACTOR = 2.0


# First copies looked at a block at a time for the train's first pause: a train is a few
# windows long, and no column as long as the transfer is made for it.
_TRAIN_BLOCK_ROWS = 1 << 14


def _initial_train_end(t: np.ndarray, first_copy: np.ndarray, starts: np.ndarray) -> float:
    """When the train that starts with the first data segment ends: the last of the first
    copies that follow the first round's last one within TRAIN_GAP_FACTOR times the train's
    spacing (the median gap of the first round's segments), up to the first pause after it.
    -inf where the first round holds fewer than three segments, two gaps, to time.

    A pause within the first round says nothing of where the train ends: before its first ACK
    the sender has nothing to wait for (its initial window is all let out at once), and a
    pause there is its device's or its host's. The train is judged from the round's edge on,
    where the first ACKs' segments join it or not."""
    if starts.size < 2:
        return -np.inf
    edge = int(np.searchsorted(t, starts[1]))
    in_round = t[:edge][first_copy[:edge]]
    if in_round.size < 3:
        return -np.inf
    spacing = float(np.median(np.diff(in_round)))
    if spacing <= 0:
        return -np.inf
    last = float(in_round[-1])
    for at in range(edge, t.size, _TRAIN_BLOCK_ROWS):
        block = t[at : at + _TRAIN_BLOCK_ROWS][first_copy[at : at + _TRAIN_BLOCK_ROWS]]
        if block.size == 0:
            continue
        pauses = np.flatnonzero(np.diff(np.r_[last, block]) > TRAIN_GAP_FACTOR * spacing)
        if pauses.size:
            return float(last if pauses[0] == 0 else block[pauses[0] - 1])
        last = float(block[-1])
    return last


class SlowStartOverrun(Detector):
    kind = "slow_start_overrun"
    per_connection = True
    title = "Slow start overran the bottleneck buffer"
    severity = Severity.WARNING
    evidence = (
        Evidence("round", "", "the overrun round (0 is the initial window)"),
        Evidence("round_packets", "packets", "every round's flight up to it"),
        Evidence("overrun_round_packets", "packets", "the overrun round's flight"),
        Evidence("previous_round_packets", "packets", "the round before's"),
        Evidence("lost_packets", "packets", "first copies of the round resent and not D-SACKed"),
        Evidence("spurious_resent_packets", "packets", "those D-SACKed"),
        Evidence(
            "lost_in_direction_packets",
            "packets",
            "lost first copies of the whole direction",
        ),
        Evidence("burst_packets", "packets", "N_b of eq. 1"),
        Evidence("burst_lost_packets", "packets", "N_d of eq. 1"),
        Evidence("ingress_bps", "bit/s", "f: the burst's rate at the sender"),
        Evidence(
            "bottleneck_bps",
            "bit/s",
            "s: the round's arrivals at the receiver, or the ACK line's advance across it",
        ),
        Evidence("bottleneck_acks_count", "", "the ACKs that rate was measured over"),
        Evidence("base_rtt_s", "s", "R: the smallest RTT sample before the round"),
        Evidence(
            "queue_at_start_bytes",
            "bytes",
            "what already waited at the bottleneck when the burst began",
        ),
        Evidence(
            "buffer_estimate_bytes",
            "bytes",
            "the buffer: the full queue's wait at s (receiver's capture), else M by eq. 1",
        ),
        Evidence("buffer_basis", "", "how the buffer was measured", values=("queue_wait", "eq1")),
        Evidence("buffer_eq1_bytes", "bytes", "M by eq. 1, plus queue_at_start_bytes"),
        Evidence(
            "buffer_needed_bytes",
            "bytes",
            "the buffer for a loss-free start up to s (eq. 3)",
        ),
        Evidence("loss_free_rate_bps", "bit/s", "the rate slow start reaches without loss (eq. 2)"),
        Evidence("largest_loss_free_burst_packets", "packets", "eq. 1 with no loss"),
        Evidence("packet_bytes", "bytes", "the packet size l of eq. 1, headers included"),
        Evidence("packet_size_basis", "", "how the packet size was measured"),
        Evidence("rate_basis", "", "which bytes the rates count"),
    )

    measures = frozenset({"lost_data", "path_rate"})

    @dataclass(frozen=True)
    class Config:
        # A block, not a random loss: eq. 1 needs a count, and one or two losses in a round
        # happen to paths with no overrun at all (a single overflow by the tbf's own burst).
        min_lost_packets: int = 3
        # Slow start doubles the flight per round (RFC 5681 3.1 with byte counting, RFC 3465,
        # as Linux does); counting ACKs with delayed ACKs gives 1.5. Below 1.4 it is not slow
        # start any more, and a loss there is congestion avoidance's, not an overrun.
        min_growth_factor: float = 1.4
        # The link header a bottleneck queue counts with each packet (Ethernet II, as Linux
        # counts it on an Ethernet or veth device); 0 for a raw IP link.
        link_header_bytes: int = ETHERNET_HEADER_BYTES

    config: Config

    def detect(self, ctx: AnalysisContext) -> Iterator[Finding]:
        # A lost segment is a first copy resent later (lost_data): a direction that resent
        # nothing (the connections table's count, from the same classification) cannot have
        # lost a block, and is skipped before its tables are sliced.
        resends = resend_counts(ctx.connections)
        for ser, overhead in wire_directions(ctx, self.config.link_header_bytes):
            if resends.get(ser.conn, (1, 1))[ser.direction] == 0:
                continue
            found = self._overrun(ser)
            if found is None:
                continue
            # The direction's transmissions in the merge of both captures (None without the
            # receiver's capture): where the block was lost, and the queue the burst met.
            merge = ctx.merge
            mine = None if merge is None else merge.transmissions_of(ser.conn, ser.direction)
            if not self._lost_in_the_receiver(mine, found):
                yield self._finding(ser, found, overhead, mine, _forward_floors(ctx, ser))

    def _lost_in_the_receiver(self, mine: pd.DataFrame | None, rnd: _Round) -> bool:
        """With the receiver's capture too (`mine`, the direction's transmissions), whether the
        round's block was lost inside the receiving host rather than on the path: then the
        bottleneck's buffer is not to blame (receiver_drop speaks), and eq. 1 does not apply."""
        if mine is None or mine.empty:
            return False
        t = mine["sender_t_s"].to_numpy(dtype=np.float64)
        in_round = (t >= rnd.start_s) & (t < max(rnd.block_end_s, rnd.start_s))
        on_path = int((mine["fate"].to_numpy()[in_round] == "network_drop").sum())
        return on_path < self.config.min_lost_packets

    def _overrun(self, ser: Direction) -> _Round | None:
        """The first slow-start round that lost a block, or None."""
        if len(ser.data) == 0:
            return None
        # The direction's data segments, shared: rounds() would otherwise copy them again.
        rnd = rounds(ser.data, ser.acks)
        if len(rnd) < 2:
            return None
        data = ser.data
        lost, spurious = lost_data(ser)
        t = data["t_s"].to_numpy()
        first_copy = kind_mask(data, "new")
        again = kind_mask(data, "retransmission", "partial_retransmission")
        starts = rnd["start_s"].to_numpy()
        # A round's flight: its first copies before its first retransmission. From there the
        # sender is in loss recovery and no longer sends what the ACK clock of slow start gives.
        first_again, flights, lost_per_round = _round_flights(starts, t, first_copy, again, lost)
        block = np.flatnonzero(lost_per_round >= self.config.min_lost_packets)
        # The initial window's train is eq. 1's burst from an empty queue; what it could not
        # queue is lost at its tail, and where the round trip is short beside the queue's
        # drain (N_b (f - s) / f packets at s), the next round's first packets, released by
        # its first ACKs, meet the same full queue. Every first copy lost before the sender
        # resent anything left before any loss could be known to it (a duplicate ACK takes a
        # round trip): one overflow, the initial train's, however the rounds divide it. It is
        # a block when that episode is, and the round that overran is the initial window.
        episode_end = float(first_again.min())
        # Where the first ACK comes back while the initial window is still leaving (a round
        # trip shorter than the window's train at the line rate), the wire does not pause at
        # the round's edge: the segments behind it were released with it, and what the first
        # ACKs add joins the same queue. The initial train is then the segments that follow
        # the first at the train's own spacing, up to its first pause.
        train_end = _initial_train_end(t, first_copy, starts)
        if (lost_per_round[0] > 0 or train_end >= starts[1]) and np.isfinite(episode_end):
            unknown = first_copy & (t < episode_end)
            if lost_per_round[0] == 0:
                unknown &= t <= train_end
            if int(lost[unknown].sum()) >= self.config.min_lost_packets:
                block = np.r_[0, block]
        else:
            train_end = -np.inf
        if block.size == 0:
            return None
        r = int(block[0])
        if r > 0 or lost_per_round[0] > 0:
            train_end = -np.inf
        # Growth over the largest flight before, not just the last: a round the application
        # left short (it had nothing to send) says nothing about the window. Round 0 is the
        # initial window, sent as one train before any ACK: when it alone overflows the buffer
        # (a large initcwnd into a small queue), it is eq. 1's burst N_b, with nothing before.
        next_start = starts[r + 1] if r + 1 < starts.size else np.inf
        growth = self.config.min_growth_factor
        if r > 0 and flights[r] < growth * flights[:r].max():
            # A round cut short by the sender's loss recovery, before it sent all its ACKs
            # released (a flight past the BDP returns its ACKs at the bottleneck's pace, over
            # more than a round trip): slow start shows in what each acknowledged byte let out,
            # two bytes (one replaced, one of growth; RFC 5681 3.1), where congestion
            # avoidance lets out one, on a path of any length. So only where the round before
            # was still slow start's (the initial window, or a flight that grew as much): a
            # window that stopped doubling does not start again without a timeout.
            still_slow = flights[r - 1] >= growth * flights[: r - 1].max() if r > 1 else True
            cut = min(float(first_again[r]), next_start)
            sent = float(data["len"].to_numpy()[first_copy & (t >= starts[r]) & (t < cut)].sum())
            acked = _acked_between(ser.acks, float(starts[r]), cut)
            if not still_slow or acked <= 0 or sent < growth * acked:
                return None
        members = first_copy & (t >= starts[r]) & (t < next_start) & (t < first_again[r])
        flights = flights[: r + 1].copy()
        if np.isfinite(train_end):
            # The initial train overran past the first round's edge: it is eq. 1's burst.
            members = first_copy & (t <= train_end) & (t < episode_end)
            flights[0] = int(members.sum())
        before = (
            first_copy & (t >= starts[r - 1]) & (t < starts[r]) & (t < first_again[r - 1])
            if r > 0
            else np.zeros(t.size, dtype=bool)
        )
        return _Round(
            index=r,
            flights=flights,
            start_s=float(starts[r]),
            end_s=float(rnd["end_s"].iloc[r]),
            flight_t=t[members],
            previous_t=t[before],
            flight_end=data["end_rel"].to_numpy()[members],
            flight_lost=lost[members],
            payload_bytes=int(np.median(data["len"].to_numpy()[members])),
            lost=int(lost[members].sum()),
            spurious=int(spurious[members].sum()),
            lost_total=int(lost.sum()),
            block_end_s=(
                episode_end
                if r == 0 and lost_per_round[0] < self.config.min_lost_packets
                else float(rnd["end_s"].iloc[r])
            ),
            past_first_ack=bool(np.isfinite(train_end)),
        )

    @staticmethod
    def _queued_before(rnd: _Round, size: int, s: float) -> bool:
        """Whether the round before reached the bottleneck faster than its ACKs came back, so
        that a queue kept the bottleneck busy and the ACK line across this round is its rate.

        Slow start by ACK clock sends each round at 1.5 to 2 times the rate its ACKs return
        (each ACK releases what it acknowledges plus as much again, RFC 5681 3.1 with byte
        counting, RFC 3465; 1.5 with delayed ACKs): such a round always queues. A round that
        left at no more than QUEUE_MARGIN times its ACKs' rate was paced at or below the
        bottleneck, whatever the path's RTT or rate. A round too short to time (fewer than
        three packets) is taken as ACK-clocked: its ACK line is then the only measure.
        """
        t = rnd.previous_t
        if t.size < 3 or not np.isfinite(s) or s <= 0:
            return True
        span = float(t[-1] - t[0])
        if span <= 0:
            return True
        sent = (t.size - 1) * size * 8 / span
        return bool(sent > QUEUE_MARGIN * s)

    @staticmethod
    def _burst(rnd: _Round, size: int, s: float) -> tuple[np.ndarray, int, int]:
        """The train of the flight that overran: its times, its first end_rel, its losses.

        Eq. 1 counts a burst from an empty queue. A flight that paused long enough for the
        bottleneck to drain (the application ran dry) restarts there, so the burst starts at
        the last packet before the first loss that found the queue empty. The queue is Lindley's
        recursion, Q_i = max(Q_{i-1} + l - s gap_i / 8, 0), in closed form over the flight's
        gaps (a running minimum of the running sum). Without s the flight is taken whole.
        """
        t, lost = rnd.flight_t, rnd.flight_lost
        lo = 0
        if np.isfinite(s) and s > 0 and t.size > 1:
            drained = s * np.diff(t) / 8  # bytes the bottleneck sends in each gap
            step = np.r_[size, size - drained]
            total = np.cumsum(step)
            queue = total - np.minimum(np.minimum.accumulate(total), 0.0)
            empty = np.r_[True, queue[:-1] - drained <= 0]
            first_lost = int(np.flatnonzero(lost)[0]) if lost.any() else t.size - 1
            lo = int(np.flatnonzero(empty[: first_lost + 1])[-1])
        return t[lo:], int(rnd.flight_end[lo]), int(lost[lo:].sum())

    def _finding(
        self,
        ser: Direction,
        rnd: _Round,
        overhead: int,
        mine: pd.DataFrame | None = None,
        phases: tuple[PathPhase, ...] | None = None,
    ) -> Finding:
        """The finding of an overrun round; `mine`: the direction's transmissions in the
        merge of both captures (None with the sender's capture alone), and `phases` the path's
        phases, each with its one-way delay's floor, where it stepped (`_forward_floors`)."""
        link = self.config.link_header_bytes
        size = rnd.payload_bytes + overhead  # l of eq. 1
        wire = size / rnd.payload_bytes  # wire bytes per payload byte
        n_round = int(rnd.flights[-1])
        n_prev = int(rnd.flights[-2]) if rnd.index > 0 else 0
        evidence: dict[str, object] = {
            "round": rnd.index,
            "round_packets": tuple(int(x) for x in rnd.flights),
            "overrun_round_packets": n_round,
            "previous_round_packets": n_prev,
            "lost_packets": rnd.lost,
            "spurious_resent_packets": rnd.spurious,
            "lost_in_direction_packets": rnd.lost_total,
            "packet_bytes": size,
            "packet_size_basis": packet_basis(rnd.payload_bytes, overhead, link),
        }
        # s: the ACK line across this round clocks the previous round's data, delivered while
        # that round's own queue kept the bottleneck busy (slow start sends each round at about
        # twice the rate its ACKs return); up to the first duplicate ACK, after which the line
        # stalls at the hole and shows nothing more.
        # Round 0 has no ACKs of its own (nothing was acknowledged before the initial window
        # left): its own ACKs come back in the round after it, spaced by the bottleneck while
        # its queue drains, and give s.
        if rnd.index == 0:
            span = max(rnd.end_s - rnd.start_s, 0.0)
            s_payload, acks_used = ack_line_rate_bps(ser.acks, rnd.end_s, rnd.end_s + span)
        else:
            s_payload, acks_used = ack_line_rate_bps(ser.acks, rnd.start_s, rnd.end_s)
        s = s_payload * wire
        s_basis = (
            "s from the ACK line's advance across the round (the bottleneck's delivery of the "
            "round before, until the first duplicate ACK)"
        )
        if rnd.index > 0 and not self._queued_before(rnd, size, s):
            # The round before left no faster than its ACKs came back, so no queue kept the
            # bottleneck busy and the ACK line shows the sender's own rate (a pacer's, BBR's
            # start-up), a floor of s. The direction's path rate (packet pairs, and what it
            # sustained) is the bottleneck's; without it the rates are not measured.
            path = path_rate_bps(ser)
            s = max(s, path * wire) if path is not None else float("nan")
            s_basis = (
                "s: the direction's path rate (packet pairs, and the rate sustained over a few "
                "RTTs), as the round before left no faster than its ACKs returned (paced): its "
                "ACK line showed the sender's rate, not the bottleneck's"
            )
        # With the receiver's capture the bottleneck's rate is read where it served the round:
        # a queue leaves the bottleneck back to back, one packet every l / s, so the round's
        # packets reach the receiver spaced by that (the median gap: the queue's own, whatever
        # the burst met before it). The ACK line is one step further: the receiver's ACK
        # policy and the way back space the ACKs too.
        arrived_s = _arrival_rate_bps(mine, rnd.flight_t, size)
        if arrived_s is not None:
            s = arrived_s
            s_basis = (
                "s from the spacing at which the round's packets reached the receiver (the "
                "bottleneck serves its queue back to back)"
            )
        rtt = ser.rtt[ser.rtt["t_s"] < rnd.start_s]["rtt_s"]
        if rtt.empty:
            rtt = ser.rtt["rtt_s"]
        base_rtt = float(rtt.min()) if len(rtt) else float("nan")
        burst_t, burst_end, n_d = self._burst(rnd, size, s)
        n_b = int(burst_t.size)
        # f: the burst's own rate at the sender, first to last departure (the bytes before
        # the last packet over that span, as `series.trains` measures a train).
        span = float(burst_t[-1] - burst_t[0])
        f = (n_b - 1) * size * 8 / span if span > 0 and n_b > 1 else float("nan")

        if rnd.index > 0:
            head = (
                f"Slow start round {rnd.index} sent {n_round} packets ({n_prev} in the round "
                f"before) and lost {rnd.lost}"
            )
            explanation = (
                f"Slow start grew the flight round by round ({', '.join(map(str, rnd.flights))} "
                f"packets) until round {rnd.index} no longer fitted the bottleneck: {rnd.lost} "
                f"of its {n_round} packets had to be sent again (not spurious: no D-SACK "
                "reported them received), the pattern of Antony et al. fig. 5. "
            )
        else:
            head = f"The initial window of {n_round} packets lost {rnd.lost}"
            first_flight = (
                f"The sender's first flight, {n_round} packets sent before any ACK came back"
            )
            if rnd.past_first_ack:
                head = f"The initial train of {n_round} packets lost {rnd.lost}"
                first_flight = (
                    f"The sender's first train, {n_round} packets that left without a pause "
                    "(the initial window was still leaving when the first ACKs came back, "
                    "and what they released joined the same queue)"
                )
            explanation = (
                f"{first_flight}, no longer fitted the bottleneck: {rnd.lost} of them had to be "
                "sent again (not spurious: no D-SACK reported them received). A large initial "
                "window (ip route ... initcwnd) leaves as one train, and a queue smaller than its "
                "excess over the bottleneck's rate overflows in the first round, as eq. 1 has "
                "it. "
            )
        measured = np.isfinite(f) and np.isfinite(s) and np.isfinite(base_rtt) and f > s
        if measured:
            evidence |= {
                "burst_packets": n_b,
                "burst_lost_packets": n_d,
                "ingress_bps": f,
                "bottleneck_bps": s,
                "bottleneck_acks_count": acks_used,
                "rate_basis": "wire bytes of l-byte packets: f over the burst at the sender, "
                + s_basis,
                "base_rtt_s": base_rtt,
            }
            if n_b < n_round:
                explanation += (
                    "The flight paused long enough within the round for the bottleneck's "
                    f"queue to drain, so the burst that overran is the train of {n_b} packets "
                    f"after that pause, {n_d} of them lost. "
                )
            queued = n_b * (f - s) / f
            # Eq. 1 assumes the burst met an empty queue; what still waited from before (its
            # first packet's RTT over the base RTT) took buffer the burst could not use.
            ahead = queue_at_start_bytes(
                float(burst_t[0]), burst_end, rnd.payload_bytes, ser.acks, base_rtt, s
            )
            # With the receiver's capture the wait is read on the way there alone: the first
            # packet's one-way delay over the floor. Its ACK's RTT also holds the receiver's
            # own delay of that ACK (delayed ACKs, RFC 9293 3.8.6.3) and the return path's,
            # which on a path of a millisecond or two outweigh a buffer of a few packets.
            forward = _one_way_wait_s(mine, float(burst_t[0]), phases)
            if forward is not None:
                ahead = forward * s / 8
            ahead = ahead if np.isfinite(ahead) else 0.0
            evidence["queue_at_start_bytes"] = ahead
            excess_bytes = float(physics.buffer_from_burst_bytes(n_b, 0, f, s, size))
            buffer = excess_bytes - n_d * size + ahead
            by_eq1 = buffer
            # With the receiver's capture the buffer is read, not inferred: after the burst's
            # first loss the queue stays full while the burst lasts (it arrives faster than s),
            # so each packet of it that got in waited behind a full buffer. Their wait (one-way
            # delay over the least, the median) at the bottleneck's rate is that buffer, less
            # the packet itself. Eq. 1 takes the burst's rate as even; a round of ACK-clocked
            # pairs, or a pacer's bursts of a few packets, reaches the bottleneck unevenly and
            # overflows it sooner than its mean rate says.
            full = _full_queue_bytes(mine, rnd, s, size, phases) if arrived_s is not None else None
            if full is not None:
                buffer = full
            if by_eq1 >= 0:
                evidence["buffer_eq1_bytes"] = by_eq1
            buffer = buffer if buffer >= 0 else float("nan")
            needed = float(physics.buffer_needed_bytes(s, f, base_rtt))
            evidence["buffer_needed_bytes"] = needed
            if np.isfinite(buffer):
                loss_free = float(physics.loss_free_rate_bps(buffer, f, s, base_rtt))
                largest = float(physics.largest_loss_free_burst_packets(buffer, f, s, size))
                evidence |= {
                    "buffer_estimate_bytes": buffer,
                    "buffer_basis": "eq1" if full is None else "queue_wait",
                    "loss_free_rate_bps": loss_free,
                    "largest_loss_free_burst_packets": largest,
                }
                waiting = f" behind {ahead:,.0f} bytes already waiting" if ahead else ""
                plus = ", plus those bytes" if ahead else ""
                if full is None:
                    basis = "eq. 1"
                    reading = (
                        f"The burst left at f = {units.rate(f)} into a bottleneck that "
                        f"delivered s = {units.rate(s)}, so {queued:.0f} of its {n_b} packets "
                        f"had to queue{waiting}; eq. 1, M = l (N_b (f - s) / f - N_d) with "
                        f"l = {size} bytes{plus}, puts the buffer at {buffer:,.0f} bytes, "
                        f"{buffer / size:.0f} packets. "
                    )
                else:
                    basis = "the queue its packets waited in"
                    eq1 = (
                        f"puts it at {by_eq1:,.0f} bytes, taking the burst's rate as even"
                        if by_eq1 >= 0
                        else "gives no buffer: more were lost than the burst's mean rate "
                        "queues, so it reached the bottleneck unevenly"
                    )
                    reading = (
                        f"The burst left at f = {units.rate(f)} into a bottleneck that "
                        f"delivered s = {units.rate(s)}. Its packets that got in after the "
                        "first loss waited "
                        f"{units.duration((buffer - size) * 8 / s)} in the queue (their one-way "
                        "delay over the least, the median, in the receiver's capture): a full "
                        f"buffer of {buffer:,.0f} bytes, {buffer / size:.0f} packets, at that "
                        f"rate. Eq. 1, M = l (N_b (f - s) / f - N_d) with l = {size} bytes, "
                        f"{eq1}. "
                    )
                summary = (
                    f"{head}: bottleneck buffer about {units.size(buffer)} ({basis}); a "
                    f"loss-free start to {units.rate(s)} needs {units.size(needed)} (eq. 3)"
                )
                explanation += reading + (
                    f"At "
                    f"this RTT ({units.duration(base_rtt)}) slow start stays loss-free only up to "
                    f"{units.rate(loss_free)} (eq. 2); reaching the bottleneck rate "
                    f"without loss takes {needed:,.0f} bytes of buffer (eq. 3)."
                )
            else:
                summary = (
                    f"{head}: more than the burst's excess over the bottleneck rate; a "
                    f"loss-free start to {units.rate(s)} needs {units.size(needed)} (eq. 3)"
                )
                explanation += (
                    f"The burst left at f = {units.rate(f)} into a bottleneck that "
                    f"delivered s = {units.rate(s)}, so only {queued:.0f} packets had to "
                    f"queue, fewer than the {n_d} lost: something besides this queue dropped "
                    "packets (a queue left over from the round before, or another flow), so "
                    "eq. 1 gives no buffer size."
                )
        else:
            summary = f"{head}: a block loss in slow start"
            explanation += (
                "The rates could not be measured (too few ACKs before the first duplicate, or "
                "the flight was no faster than its ACKs), so the buffer equations are not "
                "applied."
            )
        advice = (
            "Give the bottleneck queue at least the buffer of eq. 3 (`tracekit plan --rate "
            "--rtt --ingress` shows it), or keep the sender's flights below what it holds: "
            "pace the sender near the bottleneck rate (the fq qdisc with SO_MAX_PACING_RATE or "
            "`tc qdisc ... fq maxrate`), so f comes down to s and no queue builds; leave slow "
            "start early with HyStart (CUBIC's default) or limited slow start (RFC 3742); or "
            "cap the initial ssthresh below the largest loss-free burst (`ip route ... "
            "ssthresh`)."
        )
        return self.finding(
            conn=ser.conn,
            direction=DIRECTIONS[ser.direction],
            start_s=rnd.start_s,
            end_s=max(rnd.end_s, rnd.start_s),
            evidence=evidence,
            summary=summary,
            explanation=explanation,
            advice=advice,
        )


def _one_way_wait_s(
    mine: pd.DataFrame | None, sent_s: float, phases: tuple[PathPhase, ...] | None = None
) -> float | None:
    """How much longer than the floor (`_waits`) the packet sent at `sent_s` took to reach the
    receiver (both captures' times on one clock, `tracekit.merge`); None without the
    receiver's capture, or where neither that packet nor one sent before it arrived.

    Where that packet was lost (the queue it met was full), the last packet sent before it
    that arrived tells the queue instead: it waited behind the queue the burst met, less what
    the bottleneck drained between the two departures (at most their gap's time, while the
    sender added nothing that arrived), so that wait less the gap is the least the burst met.
    """
    waits = _waits(mine, phases)
    if waits is None:
        return None
    sent, wait, arrived = waits
    hit = np.flatnonzero(sent == sent_s)
    if hit.size == 0:
        return None
    if arrived[hit[0]]:
        return max(float(wait[hit[0]]), 0.0)
    before = np.flatnonzero(arrived & (sent < sent_s))
    if before.size == 0:
        return None
    last = before[np.argmax(sent[before])]
    return max(float(wait[last]) - (sent_s - float(sent[last])), 0.0)


def _forward_floors(ctx: AnalysisContext, ser: Direction) -> tuple[PathPhase, ...] | None:
    """The merge's path phases as the direction ran on them (`path_phases`), each with its
    one-way delay's floor, where the path stepped; None where it held (the direction's own
    least then serves).

    A path that steps (a reroute, a handover) changes the delay every packet takes: over the
    floor of another phase a packet's wait holds that step, not a queue. The merge's floors
    leave out the stretch where the step happened, whose packets took neither path's delay (a
    queue the old path left, a relay's order kept across a step down)."""
    phases = path_phases(ctx, ser)
    return phases if len(phases) >= 2 else None


def _waits(
    mine: pd.DataFrame | None, phases: tuple[PathPhase, ...] | None = None
) -> tuple[np.ndarray, np.ndarray, np.ndarray] | None:
    """Each transmission's departure, its one-way delay over the floor (both captures on one
    clock, `tracekit.merge`): the direction's least, or with `phases` that of the path phase
    it left in; and whether it arrived. None without the receiver's capture or an arrival."""
    if mine is None or mine.empty:
        return None
    sent = mine["sender_t_s"].to_numpy(dtype=np.float64)
    owd = mine["receiver_t_s"].to_numpy(dtype=np.float64) - sent
    arrived = np.isfinite(owd)
    if not arrived.any():
        return None
    if phases is None:
        return sent, owd - float(owd[arrived].min()), arrived
    return sent, owd - forward_floor_at(phases, sent), arrived


def _full_queue_bytes(
    mine: pd.DataFrame | None,
    rnd: _Round,
    s: float,
    size: int,
    phases: tuple[PathPhase, ...] | None = None,
) -> float | None:
    """The bottleneck buffer the overrun round filled, read from the receiver's capture: the
    median wait (one-way delay over the floor, `_waits`) of the round's packets that
    arrived after its first loss, up to its last (and at least three), at the bottleneck rate
    `s`, plus one packet. None without the receiver's capture, a loss, or three such packets."""
    waits = _waits(mine, phases)
    if waits is None or not rnd.flight_lost.any() or not s > 0:
        return None
    sent, wait, arrived = waits
    lost_t = rnd.flight_t[rnd.flight_lost]
    after = arrived & (sent > float(lost_t[0])) & (sent <= float(rnd.flight_t[-1]))
    # Three waits, so that the median is no single packet's (a capture clock's jitter).
    first = np.flatnonzero(after)[:3]
    if first.size < 3:
        return None
    # The queue is full at each loss, and nearly so for the packets that got in between the
    # first and the last; a round that slows below s after its last loss (a pacer's bursts
    # after a start at the line rate) drains it, and its later packets wait less. So the
    # packets up to the last loss, and at least the first three after the first.
    after &= sent <= max(float(lost_t[-1]), float(sent[first[-1]]))
    return max(float(np.median(wait[after])), 0.0) * s / 8 + size


def _arrival_rate_bps(mine: pd.DataFrame | None, flight_t: np.ndarray, size: int) -> float | None:
    """The bottleneck's rate in wire bits per second from the round's arrivals at the receiver
    (packets of `size` bytes sent from `flight_t[0]` to `flight_t[-1]`): one packet per median
    gap between consecutive arrivals. None without the receiver's capture, with fewer than four
    arrivals, where its capture merged packets into one record (GRO: their times are the
    merge's, not the wire's), or where the gaps disagree (their middle half spans more than
    half the median: no one rate served them)."""
    if mine is None or mine.empty or flight_t.size < 4:
        return None
    sent = mine["sender_t_s"].to_numpy(dtype=np.float64)
    got = mine["receiver_t_s"].to_numpy(dtype=np.float64)
    inside = (sent >= flight_t[0]) & (sent <= flight_t[-1]) & np.isfinite(got)
    if int(inside.sum()) < 4:
        return None
    frames = mine["receiver_frame"].to_numpy()[inside]
    if np.unique(frames).size < frames.size:
        return None
    gap = np.diff(np.sort(got[inside]))
    gap = gap[gap > 0]
    if gap.size < 3:
        return None
    q1, median, q3 = np.percentile(gap, [25, 50, 75])
    if not median > 0 or q3 - q1 > 0.5 * median:
        return None
    return float(size * 8 / median)


def _acked_between(acks: pd.DataFrame, start_s: float, end_s: float) -> float:
    """Bytes the ACK line advanced from `start_s` until `end_s`."""
    t = acks["t_s"].to_numpy()
    if t.size == 0:
        return 0.0
    line = np.maximum.accumulate(acks["ack_rel"].to_numpy())
    lo, hi = np.searchsorted(t, [start_s, end_s], side="left")
    before = float(line[lo - 1]) if lo > 0 else float(line[0])
    return float(line[hi - 1]) - before if hi > 0 else 0.0
