"""Which data segments are new, resent or out of order: one rule for connections and series.

A segment resends bytes when it starts below the highest byte its direction already carried,
unless those bytes fall in a hole the sequence jumped over: the first copy to fill a hole was
never seen before at this capture point (reordered, or dropped before it, as at a receiver or
behind a sender's own qdisc), so it is out of order. tcptrace counts the same way ("rexmt data
pkts" against "outoforder pkts").
"""

from __future__ import annotations

import numpy as np

from tracekit.groups import segment_starts, segmented_cummax_prev

# Segment classes, in the order the report's legend lists them.
KINDS = (
    "new",
    "retransmission",
    "partial_retransmission",
    "out_of_order",
    "window_probe",
    "keepalive",
)
KIND_CODE = {k: i for i, k in enumerate(KINDS)}
RESENT = (KIND_CODE["retransmission"], KIND_CODE["partial_retransmission"])

# Values are placed in disjoint bands per group for grouped searches: 2**41 bytes is 2 TiB of
# sequence space per direction, far beyond any capture.
_BAND = np.int64(1 << 41)


def band(group: np.ndarray, value: np.ndarray) -> np.ndarray:
    """Encode (group, value) so that sorting or searching respects groups first."""
    return group.astype(np.int64) * _BAND + np.clip(value, -(_BAND // 2) + 1, _BAND // 2 - 1)


def classify_data(
    key: np.ndarray, seq: np.ndarray, pay: np.ndarray, data: np.ndarray
) -> tuple[np.ndarray, np.ndarray]:
    """Kind codes of data segments (-1 elsewhere) and the highest byte sent before each.

    `key` is the (connection, direction) group, sorted, in capture order within a group;
    `data` marks the segments that carry payload.
    """
    starts = segment_starts(key)
    high_before = segmented_cummax_prev(np.where(data, seq + pay, -1), starts)
    kind = np.full(key.size, -1, dtype=np.int8)
    new = data & (seq >= high_before)
    resend = data & ~new
    kind[new] = KIND_CODE["new"]
    kind[resend & (seq + pay > high_before)] = KIND_CODE["partial_retransmission"]
    kind[resend & (seq + pay <= high_before)] = KIND_CODE["retransmission"]

    # Holes: where a segment started above the highest byte before it. A resend that starts
    # inside one is out of order the first time that offset is seen.
    gap = data & (high_before >= 0) & (seq > high_before)
    g_lo = band(key[gap], high_before[gap])
    g_hi = band(key[gap], seq[gap])
    cand = np.flatnonzero(resend)
    if g_lo.size and cand.size:
        c_enc = band(key[cand], seq[cand])
        k = np.searchsorted(g_lo, c_enc, side="right") - 1
        inside = (k >= 0) & (c_enc < g_hi[np.maximum(k, 0)])
        first = np.zeros(cand.size, dtype=bool)
        if inside.any():
            _, first_idx = np.unique(c_enc[inside], return_index=True)
            first[np.flatnonzero(inside)[first_idx]] = True
        kind[cand[first]] = KIND_CODE["out_of_order"]
    return kind, high_before
