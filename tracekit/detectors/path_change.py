"""path_change: the path's base round trip stepped during the transfer.

Routes change mid-test, satellite links hand over, and a mobile path's delay moves with its
radio. A transfer that crossed such a step ran on two paths: its window, its rate and its
losses each belong to one phase, and a figure averaged over both describes neither. tracekit's
other findings count their rounds and quote their RTT in the phase they fall in
(`RttPhases`); this finding says where the phases are.

Two vantages give two strengths of evidence:

- With the receiver's capture the merge compares the round trip's minimal delay and the ACKs'
  minimal one-way delay: a step of both is the path (`tracekit.merge.clock.path_steps`), where
  the transfer's queue is in the data's direction only and clock skew moves the two directions
  apart by a slope.
- With the sender's capture alone, a step of the RTT floor counts when the transfer's own bytes
  in flight could not have made it (`tracekit.detectors._rtt_steps`). Another flow's standing
  queue at the bottleneck makes the same step, and the text says that it may be either.
"""

from __future__ import annotations

from collections.abc import Iterator

import numpy as np

from tracekit import units
from tracekit.detectors._measure import (
    findings_per_direction,
    path_phases,
    rtt_phases,
    rtt_steps_of,
)
from tracekit.detectors.base import AnalysisContext, Detector, Evidence
from tracekit.findings import DIRECTIONS, Finding, Severity
from tracekit.series import Direction

TWO_CAPTURES = "both directions' delays (two captures)"
SENDER_ONLY = "the RTT floor at the sender (one capture)"


class PathChange(Detector):
    kind = "path_change"
    per_connection = True
    title = "The path's round trip stepped during the transfer"
    # A condition of the test, not what held the transfer back: the verdict quotes each
    # phase's RTT, and this finding says where the phases are.
    severity = Severity.INFO
    measures = frozenset({"path_rate", "rtt_steps"})
    evidence = (
        Evidence("steps_count", "", "steps of the path's base RTT while the direction sent"),
        Evidence("step_times_s", "s", "when each step began"),
        Evidence("phase_rtts_s", "s", "each phase's base RTT, the first phase's first"),
        Evidence(
            "measured_where",
            "",
            "what the steps were read from",
            values=(TWO_CAPTURES, SENDER_ONLY),
        ),
    )

    def detect(self, ctx: AnalysisContext) -> Iterator[Finding]:
        return findings_per_direction(ctx, self._direction)

    def _direction(
        self, ctx: AnalysisContext, conn: int, direction: int, d: Direction
    ) -> Finding | None:
        # Without a clock fit the phases come from this direction's own RTT floor: asking for
        # its steps first keeps directions without one from building their phases at all.
        two = ctx.merge is not None and ctx.merge.clock is not None
        clock_phases = path_phases(ctx, d) if two else ()
        if two:
            if len(clock_phases) < 2:
                return None
        elif not rtt_steps_of(d):
            return None
        phases = rtt_phases(ctx, d)
        if phases is None or phases.count < 2:
            return None
        data_t = d.data["t_s"].to_numpy()
        if data_t.size < 2:
            return None
        # Only the steps the direction sent across: a connection that ended before a step of
        # the merge's (which is the capture's, not the connection's) did not see it.
        inside = (phases.starts_s > data_t[0]) & (phases.starts_s < data_t[-1])
        if not inside.any():
            return None
        starts = phases.starts_s[inside]
        # Each phase's base RTT: from two captures the path's own, its least forward plus least
        # reverse one-way delay over the phase; the sender's samples can all sit above it by a
        # queue that stood for the whole phase (a window sized for a longer path, standing in
        # the buffer once the path shortened). From one capture, its RTT floor.
        base = np.array([p.rtt_s for p in clock_phases]) if two else phases.rtt_s
        # The phase before each step and after the last one kept.
        first = int(np.flatnonzero(inside)[0])
        rtts = np.r_[base[first], base[1:][inside]]
        name = DIRECTIONS[direction]
        moves = ", then ".join(
            f"{units.duration(float(a))} -> {units.duration(float(b))} at {t:.2f} s"
            for a, b, t in zip(rtts[:-1], rtts[1:], starts, strict=True)
        )
        summary = f"{name} the path's base RTT stepped: {moves}"
        if two:
            where = TWO_CAPTURES
            cause = (
                "The round trip's least delay and the ACKs' least one-way delay stepped together "
                "at each step: the path itself changed (a reroute, a handover, a link whose "
                "delay moved), not the clocks, which move the two directions apart by a slope, "
                "and not the transfer's queue, which the ACKs do not cross."
            )
        else:
            where = SENDER_ONLY
            cause = (
                "The floor of the sender's RTT samples moved and held for many round trips, "
                "and the bytes the transfer had in flight could not have filled a round trip "
                "that long at the path's rate (Little's law), so it was not this transfer's "
                "own queue. From the sender's capture alone it is either a change of the path "
                "(a reroute, a handover) or another flow's standing queue at the bottleneck; "
                "the receiver's capture tells them apart."
            )
        explanation = (
            f"{cause} The transfer ran on {starts.size + 1} paths in turn, and each of "
            "tracekit's findings counts its round trips in the RTT of the phase it falls "
            "in. A figure averaged over the whole transfer (its rate, the window it needed) "
            "belongs to no single phase."
        )
        advice = (
            "Compare runs phase by phase, not as wholes. If the test should run on one path, "
            "find what moved it (a route flap, a failover, a satellite or radio handover) and "
            "rerun; if the path moves by design, size windows and buffers for the longest "
            "phase's bandwidth-delay product."
        )
        return self.finding(
            conn=conn,
            direction=name,
            start_s=float(starts[0]),
            end_s=float(starts[-1]),
            evidence={
                "steps_count": int(starts.size),
                "step_times_s": starts,
                "phase_rtts_s": rtts,
                "measured_where": where,
            },
            summary=summary,
            explanation=explanation,
            advice=advice,
        )
