"""capture_gaps: bytes the other end acknowledged that the capture never saw.

A receiver acknowledges only bytes it holds (RFC 9293 3.4: the cumulative ACK names the next
byte expected), so every byte below an ACK was sent and delivered. Where a capture holds no
segment that carried some of those bytes, at any time, the capture missed the packets that did:
tcpdump's own drops ("packets dropped by kernel", a buffer too small for the rate), a mirror
port or capture appliance that dropped, or a filter that let part of the connection through.
That holds at any vantage point and any path scale, and it is not a network loss: a loss on the
path is resent, and the resend fills the range.

What the capture did not see, no finding can count: resends, bursts and round trips near the
gaps are undercounted. With the receiver's capture, the merge names each sender transmission
that was acknowledged yet is absent from it (fate `receiver_capture_gap`): that capture's own
misses, counted here too.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass

import numpy as np

from tracekit import units
from tracekit.core.kernels import jit
from tracekit.detectors._measure import data_directions
from tracekit.detectors._two_vantage import by_connection, times
from tracekit.detectors.base import AnalysisContext, Detector, Evidence
from tracekit.findings import DIRECTIONS, Finding, Severity
from tracekit.series import Direction

# RFC 9293 3.4: a FIN occupies one sequence number after the last data byte; the ACK of it
# passes the last byte seen by one without any byte having been missed.
FIN_BYTES = 1


@jit
def _jumps_and_fills(
    seq: np.ndarray, end: np.ndarray, count_only: bool, gaps: np.ndarray, fills: np.ndarray
) -> tuple[int, int]:  # pragma: no cover - compiled
    """One pass in capture order. A sender sends new bytes in order, so the bytes a capture
    missed open a jump above the highest byte seen so far (a gap, [high, seq)); only a segment
    that starts below that highest byte (a resend, a reordered one) can cover part of a gap
    (a fill). Counts both, and with `count_only` false writes them, gaps in order as they are
    opened (which is sequence order) and fills as met, into arrays sized from the counts."""
    n_gaps = 0
    n_fills = 0
    low = seq[0]
    for i in range(seq.size):
        low = min(low, seq[i])
    high = seq[0]
    if low < high:  # bytes below the first segment seen: open until something covers them
        if not count_only:
            gaps[0, 0] = low
            gaps[0, 1] = high
        n_gaps += 1
    for i in range(seq.size):
        if seq[i] > high:
            if not count_only:
                gaps[n_gaps, 0] = high
                gaps[n_gaps, 1] = seq[i]
            n_gaps += 1
        elif seq[i] < high:
            if not count_only:
                fills[n_fills, 0] = seq[i]
                fills[n_fills, 1] = end[i]
            n_fills += 1
        high = max(high, end[i])
    return n_gaps, n_fills


@jit
def _uncovered(
    gaps: np.ndarray, fills: np.ndarray, out: np.ndarray, count_only: bool
) -> int:  # pragma: no cover - compiled
    """The parts of the sorted, disjoint `gaps` no interval of the sorted `fills` covers:
    counted, and with `count_only` false written to `out` (sized from the count)."""
    n = 0
    j = 0
    reach = np.int64(-(2**62))  # the end of the fills' union so far
    for g in range(gaps.shape[0]):
        a = gaps[g, 0]
        b = gaps[g, 1]
        while a < b:
            # Fills that start at or before a extend the union's reach.
            while j < fills.shape[0] and fills[j, 0] <= a:
                reach = max(reach, fills[j, 1])
                j += 1
            if reach > a:
                a = min(reach, b)
                continue
            stop = b if j >= fills.shape[0] else min(b, fills[j, 0])
            if not count_only:
                out[n, 0] = a
                out[n, 1] = stop
            n += 1
            a = stop
    return n


def unseen_ranges(seq: np.ndarray, end: np.ndarray, acked: int) -> tuple[np.ndarray, np.ndarray]:
    """The byte ranges [start, stop) below `acked` and above the first byte seen that no
    segment [seq, end) covers, in sequence order. Segments in capture order; what is made is
    sized by the gaps and the fills (resends, reordering), not by the segments."""
    seq = seq.astype(np.int64, copy=False)
    end = end.astype(np.int64, copy=False)
    empty = np.zeros((0, 2), np.int64)
    if seq.size == 0:
        return empty[:, 0], empty[:, 1]
    n_gaps, n_fills = _jumps_and_fills(seq, end, True, empty, empty)
    gaps = np.empty((n_gaps, 2), np.int64)
    fills = np.empty((n_fills, 2), np.int64)
    _jumps_and_fills(seq, end, False, gaps, fills)
    fills = fills[np.argsort(fills[:, 0], kind="stable")]
    n = _uncovered(gaps, fills, empty, True)
    out = np.empty((n, 2), np.int64)
    _uncovered(gaps, fills, out, False)
    # The tail up to the ACK line, above every byte seen: a FIN's sequence number is no byte.
    high = int(np.max(end)) if end.size else 0
    if acked - high > FIN_BYTES:
        out = np.concatenate([out, np.array([[high, acked]], np.int64)])
    start, stop = out[:, 0], np.minimum(out[:, 1], acked)
    keep = stop > start
    return start[keep], stop[keep]


class CaptureGaps(Detector):
    kind = "capture_gaps"
    per_connection = True
    title = "The capture missed packets: bytes acknowledged that it never saw"
    severity = Severity.WARNING
    evidence = (
        Evidence("unseen_bytes", "bytes", "bytes acknowledged that no captured segment carried"),
        Evidence("unseen_ranges_count", "", "contiguous ranges of them"),
        Evidence("acked_bytes", "bytes", "bytes acknowledged from the first byte seen on"),
        Evidence("unseen_fraction", "", "unseen bytes over acknowledged bytes"),
        Evidence(
            "receiver_capture_missed_packets",
            "packets",
            "with the receiver's capture: the sender's transmissions acknowledged yet absent "
            "from it",
        ),
    )

    @dataclass(frozen=True)
    class Config:
        # One unseen byte below the ACK line is a fact, not a sample: the capture missed it.
        min_unseen_bytes: int = 1

    config: Config

    def detect(self, ctx: AnalysisContext) -> Iterator[Finding]:
        missed: dict[tuple[int, int], np.ndarray] = {}
        if ctx.merge is not None:
            for conn, direction, rows, _ in by_connection(ctx.merge, "receiver_capture_gap"):
                missed[(conn, direction)] = np.sort(times(rows))
        for conn, direction, d in data_directions(ctx):
            found = self._direction(conn, direction, d, missed.pop((conn, direction), None))
            if found is not None:
                yield found

    def _direction(
        self, conn: int, direction: int, d: Direction, missed: np.ndarray | None
    ) -> Finding | None:
        data, acks = d.data, d.acks
        payload = data["len"].to_numpy() > 0
        if not payload.any() or acks.empty:
            return None
        # `data` holds only segments with payload but for a table made by hand: then no copies.
        every = bool(payload.all())
        seq = data["seq_rel"].to_numpy() if every else data["seq_rel"].to_numpy()[payload]
        end = data["end_rel"].to_numpy() if every else data["end_rel"].to_numpy()[payload]
        ack = acks["ack_rel"].to_numpy()
        acked = int(ack.max())
        first = int(seq.min())
        start, stop = unseen_ranges(seq, end, acked)
        unseen = int((stop - start).sum())
        if unseen < self.config.min_unseen_bytes:
            start = stop = np.zeros(0, np.int64)
            unseen = 0
        n_missed = 0 if missed is None else int(missed.size)
        if unseen == 0 and n_missed == 0:
            return None
        # When the ACK line first passed each range: the capture's time of the evidence.
        line = np.maximum.accumulate(ack)
        ack_t = acks["t_s"].to_numpy()
        at = ack_t[np.minimum(np.searchsorted(line, stop, side="left"), ack_t.size - 1)]
        when = np.concatenate([at, missed if missed is not None else np.zeros(0)])
        span = max(acked - first, 1)
        evidence: dict[str, object] = {
            "unseen_bytes": unseen,
            "unseen_ranges_count": int(start.size),
            "acked_bytes": span,
            "unseen_fraction": unseen / span,
        }
        parts = []
        if unseen:
            parts.append(
                f"{units.size(unseen)} acknowledged in {start.size} ranges never appear in this "
                f"capture ({unseen / span:.2%} of the bytes acknowledged)"
            )
        if n_missed:
            evidence["receiver_capture_missed_packets"] = n_missed
            parts.append(
                f"the receiver's capture misses {n_missed} of the sender's segments that were "
                "acknowledged"
            )
        return self.finding(
            conn=conn,
            direction=DIRECTIONS[direction],
            start_s=float(when.min()),
            end_s=float(when.max()),
            evidence=evidence,
            summary="The capture missed packets: " + "; ".join(parts),
            explanation=(
                "The other end acknowledged bytes that no segment in the capture carried. A "
                "receiver acknowledges only bytes it holds (RFC 9293 3.4), so those bytes were "
                "sent and delivered, and the capture missed the packets that carried them: "
                "tcpdump's own drops (its closing line counts them as \"packets dropped by "
                'kernel"), a mirror port or capture appliance that dropped, or a filter that '
                "let part of the connection through. This is not a loss on the path: a loss "
                "is resent, and the resend would have filled the range. Findings that count "
                "segments (resends, bursts, round trips) undercount near these ranges."
            ),
            advice=(
                "Capture again with a larger kernel buffer (tcpdump -B 65536 or more), a short "
                "snapshot length (-s 128 keeps every TCP header), to a fast local disk, and "
                "check tcpdump's closing line for dropped packets; on a mirror port, check the "
                "switch's mirror drops."
            ),
        )
