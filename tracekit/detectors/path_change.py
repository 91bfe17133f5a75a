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

Where neither finds a step, the way back may still have stepped under a standing queue that
held the round trip (a window larger than the path's bandwidth-delay product): the ACKs' one-way
delay, read against the receiving host's own TCP clock (its timestamps), tells it from either
capture's clock stepping (`tracekit.detectors._way_back`).
"""

from __future__ import annotations

from collections.abc import Iterator

import numpy as np

from tracekit import units
from tracekit.detectors._measure import (
    data_directions,
    min_rtt_s,
    path_phases,
    rtt_phases,
    rtt_steps_of,
)
from tracekit.detectors._way_back import way_back_steps
from tracekit.detectors.base import AnalysisContext, Detector, Evidence
from tracekit.findings import DIRECTIONS, Finding, Severity
from tracekit.series import Direction

TWO_CAPTURES = "both directions' delays (two captures)"
SENDER_ONLY = "the RTT floor at the sender (one capture)"
WAY_BACK = "the ACKs' one-way delay against the receiving host's TCP clock (timestamps)"


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
        Evidence(
            "phase_rtts_s",
            "s",
            "each phase's base RTT, the first phase's first (not where the way back's delay "
            "told the steps: a standing queue held the round trip)",
        ),
        Evidence(
            "way_back_changes_s",
            "s",
            "where the way back's delay told the steps: how far the ACKs' one-way delay moved "
            "at each",
        ),
        Evidence(
            "round_trip_floors_s",
            "s",
            "where the way back's delay told the steps: the RTT samples' floor just before and "
            "just after each step",
        ),
        Evidence(
            "measured_where",
            "",
            "what the steps were read from",
            values=(TWO_CAPTURES, SENDER_ONLY, WAY_BACK),
        ),
    )

    def detect(self, ctx: AnalysisContext) -> Iterator[Finding]:
        # The timestamp values, read once for every direction's way back.
        tsval = ctx.packets.column("tsval").to_numpy(zero_copy_only=False)
        for conn, direction, d in data_directions(ctx):
            finding = self._direction(ctx, conn, direction, d)
            if finding is None:
                finding = self._way_back(conn, direction, d, tsval)
            if finding is not None:
                yield finding

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

    def _way_back(
        self, conn: int, direction: int, d: Direction, tsval: np.ndarray
    ) -> Finding | None:
        """The steps of the way back's delay that the round trip's floor did not show
        (`way_back_steps`), where the ACKs and the data carry timestamps."""
        base = min_rtt_s(d)
        data, acks = d.data, d.acks
        if base is None or len(acks) < 2 or len(data) < 2:
            return None
        data_t = data["t_s"].to_numpy()
        steps = way_back_steps(
            acks["t_s"].to_numpy(),
            acks["row"].to_numpy(),
            data_t,
            data["row"].to_numpy(),
            tsval,
            base,
        )
        # Only the steps the direction sent across.
        steps = tuple(s for s in steps if data_t[0] < s.at_s < data_t[-1])
        if not steps:
            return None
        at = np.array([s.at_s for s in steps])
        change = np.array([s.change_s for s in steps])
        # The round trip's floor on each side of each step, over the span its way back's
        # floors were read over: (before, after) per step.
        rtt_t, rtt = d.rtt["t_s"].to_numpy(), d.rtt["rtt_s"].to_numpy()
        floors = np.full((at.size, 2), np.nan)
        for k, s in enumerate(steps):
            for side, (a, b) in enumerate(
                ((s.at_s - s.span_s, s.at_s), (s.at_s, s.at_s + s.span_s))
            ):
                inside = rtt[(rtt_t >= a) & (rtt_t < b) & (rtt > 0)]
                if inside.size:
                    floors[k, side] = inside.min()
        name = DIRECTIONS[direction]

        def rtt_text(x: float) -> str:
            return units.duration(float(x)) if np.isfinite(x) else "unknown"

        moves = ", then ".join(
            f"{'+' if c > 0 else '-'}{units.duration(abs(float(c)))} at {t:.2f} s (round trip "
            f"floor {rtt_text(f[0])} before, {rtt_text(f[1])} after)"
            for c, t, f in zip(change, at, floors, strict=True)
        )
        summary = f"{name} the path's way back stepped: {moves}"
        explanation = (
            "The ACKs' one-way delay, read at the sender's capture against the receiving "
            "host's own TCP clock (its timestamps, RFC 7323, a counter that is never stepped), "
            "moved and held for many round trips, while the sending host's timestamps against "
            "the same capture did not: the capture's clock did not step, the receiving host's "
            "TCP clock never does, and the way back's delay changed (a reroute, a handover, a "
            "link whose delay moved). The round trip's "
            "floor did not show it as a step of the path: where a window larger than the "
            "path's bandwidth-delay product keeps a standing queue at the bottleneck, the round "
            "trip is the window over the rate, and the queue takes up the change. Each phase's "
            "base RTT is then not in the capture, and tracekit does not give it; nor the way "
            "out's change (its delay carries the transfer's own queue). Another flow's queue on "
            "the way back moves the ACKs' delay as a longer path would."
        )
        advice = (
            "Compare runs phase by phase, not as wholes. If the test should run on one path, "
            "find what moved it (a route flap, a failover, a satellite or radio handover) and "
            "rerun. A standing queue that hides the path's round trip is a window larger than "
            "the path needs: a smaller one shows the path and its changes."
        )
        return self.finding(
            conn=conn,
            direction=name,
            start_s=float(at[0]),
            end_s=float(at[-1]),
            evidence={
                "steps_count": int(at.size),
                "step_times_s": at,
                "way_back_changes_s": change,
                "round_trip_floors_s": floors.ravel(),
                "measured_where": WAY_BACK,
            },
            summary=summary,
            explanation=explanation,
            advice=advice,
        )
