"""zero_window_stall: the receiver shut its window and kept it shut for many round trips.

A receiver whose application stops reading fills its buffer and advertises a window of zero;
the sender stops, and with no ACK clock left it probes the shut window on its persist timer
(RFC 9293 3.8.6.1: zero-window probes, backing off like the retransmission timer) until a
window update reopens it. The transfer stands still for the whole stall, whatever the path
could carry. This differs from start/stop mode (window_oscillation), where the window closes
and reopens every burst: here one closing lasts many round trips.

A stall runs from the first ACK whose window leaves no room for a segment to the first ACK after
it that reopens the window by at least one segment. A receiver may not move the window's right
edge back (RFC 9293 3.8.6: shrinking the window is strongly discouraged; Linux does not by
default), so a
buffer that fills offers the last few bytes of its old window, less than a segment, before it
offers zero; a sender avoiding silly windows sends nothing into them (RFC 9293 3.8.6.2.1: it
waits for a full segment's room), so the stall starts there. A stall reaches zero: a reader
that stopped leaves the remainder to the sender's persist timer, which fills it (RFC 9293
3.8.6.1), while a window that dips under a segment and reopens before zero was a reader that
caught up. With the window scale unknown a window field is no byte count, and only a zero
window (zero at any scale) counts as shut. It counts when it lasts `min_stall_rtts` smallest
RTTs or more, and outlasts the rhythm of the window's closings: a slow reader whose reads come
every few round trips shuts its window for several each cycle, and that is start/stop
(`_measure.reader_rhythm_s`). And the sender probed it at least once: its persist timer fires
one retransmission timeout after the window shut, so a window reopened before that never
stopped the sender's clock (a LAN reader descheduled for milliseconds, which is start/stop at
the hosts' pace).
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import numpy as np

from tracekit import units
from tracekit.detectors._limits import wire_segment_bytes
from tracekit.detectors._measure import (
    STALL_RTTS,
    findings_per_direction,
    reader_rhythm_s,
    rtt_phases,
    turnaround_s,
    window_transitions,
)
from tracekit.detectors.base import AnalysisContext, Detector, Evidence
from tracekit.findings import DIRECTIONS, Finding, Severity
from tracekit.series import kind_mask


class ZeroWindowStall(Detector):
    kind = "zero_window_stall"
    per_connection = True
    title = "The receive window stayed shut for many round trips"
    severity = Severity.WARNING
    measures = frozenset({"rtt_steps"})
    evidence = (
        Evidence("stalls_count", "", "stalls of the direction"),
        Evidence("stall_starts_s", "s", "when each began"),
        Evidence("stall_ends_s", "s", "when each ended"),
        Evidence("longest_stall_s", "s", "the longest"),
        Evidence("longest_stall_rtts", "RTTs", "the longest, in round trips of rtt_s"),
        Evidence("stalled_s", "s", "their total"),
        Evidence("stalled_fraction", "", "its share of the direction's time"),
        Evidence("zero_window_probes_count", "", "zero-window probes sent during them"),
        Evidence("rtt_s", "s", "the round trip"),
        Evidence("window_scale_known", "", "whether windows are byte counts"),
    )

    @dataclass(frozen=True)
    class Config:
        # Four round trips (STALL_RTTS): the ACK clock has stopped for good (a window that
        # closes and reopens within a round trip or two is the start/stop mode of a slow
        # reader), and the sender has left the ACK-clocked regime for its persist timer, whose
        # first probe waits one RTO, at least 200 ms on Linux (RFC 6298 2.4 asks for one
        # second).
        min_stall_rtts: float = STALL_RTTS

    config: Config

    def detect(self, ctx: AnalysisContext) -> Iterator[Finding]:
        return findings_per_direction(ctx, self._direction)

    def _direction(self, ctx: AnalysisContext, conn: int, direction: int, d: Any) -> Finding | None:
        # No zero window among the ACKs, no stall: told before the tables are sliced further.
        if ctx.series.rows("acks", conn, direction) == 0:
            return None
        acks = d.acks
        win = acks["win_bytes"].to_numpy()
        # A segment's room: the MSS on the wire, not a super-segment offload handed the capture.
        mss = wire_segment_bytes(d.segments["len"].to_numpy(), d.peer_mss)
        known = bool(ctx.series.window_known.get((conn, direction), False))
        # Shut: no room for a segment (zero, or the remainder of the last window under one
        # segment); reopened: room for one. Unscaled: zero, and any non-zero raw window.
        shut = win < mss if known else win == 0
        if not shut.any():
            return None
        phases = rtt_phases(ctx, d)
        if phases is None or mss == 0:
            return None
        t = acks["t_s"].to_numpy()
        reopened = ~shut
        begin, ends = _stalls(t, shut, reopened)
        # Only those that reached a zero window, each from where the receiver had taken its
        # last full segment before that zero: under-a-segment windows while whole segments
        # still arrived (a flight landing in a buffer its reader drains) were no stall.
        zero = np.flatnonzero(win == 0)
        first_zero = np.searchsorted(zero, begin)
        reached = first_zero < zero.size
        reached[reached] = t[zero[first_zero[reached]]] <= ends[reached]
        begin, ends, zero_at = begin[reached], ends[reached], zero[first_zero[reached]]
        line = np.maximum.accumulate(acks["ack_rel"].to_numpy())
        last_full = np.searchsorted(line, line[zero_at] - mss, side="right")
        starts = t[np.maximum(begin, np.minimum(last_full, zero_at))]
        # Each stall in round trips of the path phase it began in, a round trip never shorter
        # than the host's own answer to an ACK (its turnaround): on a LAN of microseconds a
        # window shut for a few of those is the reader being scheduled, the ACK clock still
        # running at the hosts' pace.
        turn = turnaround_s(d)
        long = (ends - starts) >= self.config.min_stall_rtts * np.maximum(phases.at(starts), turn)
        if long.any():
            # Closings that come on a rhythm are a slow reader's start/stop, each read
            # reopening the window within its cycle: only a closing that outlasts the rhythm is
            # a stall. Read only where a closing was long enough to be one, as
            # window_oscillation reads its closings (every ACK and data segment).
            long &= (ends - starts) > reader_rhythm_s(window_transitions(d, mss, known).shut_t)
        if not long.any():
            return None
        # Probes inside each stall: its [start, end] holds those between two searches.
        probe_t = d.segments["t_s"].to_numpy()[kind_mask(d.segments, "window_probe")]
        probed = np.searchsorted(probe_t, ends, side="right") - np.searchsorted(
            probe_t, starts, side="left"
        )
        # The sender itself says when its ACK clock has stopped: with no ACK to send on, it
        # probes the shut window when its persist timer fires, one retransmission timeout after
        # the window shut (RFC 9293 3.8.6.1; RFC 6298 2.4, at least 200 ms on Linux). A window
        # its receiver reopens before that is a reader the sender waited on within its own
        # patience: on a LAN a reader descheduled for a few milliseconds shuts the window for
        # hundreds of microsecond round trips, every read cycle a little differently, and
        # that is start/stop at the hosts' pace (window_oscillation), not a stopped
        # application. The timeout is the sender's own, whatever the path: RTT plus four
        # deviations, so on a satellite path of 600 ms the first probe still comes within a
        # few round trips of a stall.
        long &= probed > 0
        if not long.any():
            return None
        starts, ends, probed = starts[long], ends[long], probed[long]
        durations = ends - starts
        rtt = float(phases.at(starts[int(np.argmax(durations))]))
        data = d.data
        probes = int(probed.sum())
        longest = int(np.argmax(durations))
        name = DIRECTIONS[direction]
        total = float(durations.sum())
        span = float(max(data["t_s"].iloc[-1], t[-1]) - data["t_s"].iloc[0]) if len(data) else 0.0
        share = total / span if span > 0 else 1.0
        count = int(durations.size)
        longest_text = units.duration(float(durations[longest]))
        summary = (
            f"{name} the receiver's window stayed shut for {longest_text}"
            f" ({durations[longest] / rtt:,.0f} RTTs)"
            + (f", {count} stalls, {units.duration(total)} in all" if count > 1 else "")
            + f"; {probes} zero-window probes; the transfer stood still {share:.0%} of its time"
        )
        explanation = (
            "The receiver's window shut (zero, or the last bytes of its old window, too few "
            "for a segment) and stayed shut: its application stopped reading, its receive "
            "buffer filled, and the sender could send nothing. "
            f"The longest stall lasted {units.duration(float(durations[longest]))}, "
            f"{durations[longest] / rtt:,.0f} round trips of {units.duration(rtt)}; the sender "
            f"probed the shut window {probes} times on its persist timer (RFC 9293 3.8.6.1) "
            "until a window update reopened it. Not the network: the path was idle, waiting "
            "on the receiving application."
        )
        advice = (
            "Find what kept the receiving application from reading (a blocking call, a full "
            "disk, a slow consumer downstream, a stop-the-world pause) and let it read "
            "continuously, on a thread of its own if need be; a larger receive buffer only "
            "delays the stall."
        )
        return self.finding(
            conn=conn,
            direction=name,
            start_s=float(starts[0]),
            end_s=float(ends[-1]),
            evidence={
                "stalls_count": count,
                "longest_stall_s": float(durations[longest]),
                "longest_stall_rtts": float(durations[longest] / rtt),
                "stalled_s": total,
                "stalled_fraction": share,
                "zero_window_probes_count": probes,
                "stall_starts_s": starts,
                "stall_ends_s": ends,
                "rtt_s": rtt,
                "window_scale_known": known,
            },
            summary=summary,
            explanation=explanation,
            advice=advice,
        )


def _stalls(t: np.ndarray, shut: np.ndarray, reopened: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(first ACK index, end time) of each run from a shut window to the first reopening ACK
    after it."""
    # Each ACK's state: +1 shut, -1 reopened, 0 neither (a small window, still closed).
    state = np.where(shut, 1, np.where(reopened, -1, 0))
    changes = np.flatnonzero(state != 0)
    if changes.size == 0:
        return np.zeros(0, dtype=np.int64), np.zeros(0)
    s = state[changes]
    # A stall starts at a shut ACK after a reopening (or the first), ends at the next reopening.
    begin = changes[(s == 1) & np.r_[True, s[:-1] == -1]]
    end_at = changes[(s == -1) & np.r_[False, s[:-1] == 1]]
    ends = t[end_at]
    if begin.size > end_at.size:  # still shut when the capture ends: it lasts until then
        ends = np.r_[ends, t[-1]]
    return begin, ends
