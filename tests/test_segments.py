"""connections.segments.classify_data against the rule it states, written out packet by packet."""

from __future__ import annotations

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from tracekit.connections.segments import KIND_CODE, classify_data
from tracekit.schema import PROTO_TCP


def rule(
    conn: list[int], pdir: list[int], seq: list[int], pay: list[int], proto: list[int]
) -> tuple[list[int], dict[int, int]]:
    """The module docstring's rule, one packet at a time with a list of holes per group."""
    high: dict[int, int] = {}
    holes: dict[int, list[tuple[int, int]]] = {}
    filled: set[tuple[int, int]] = set()
    kinds, resent = [], {}
    for c, d, s, p, pr in zip(conn, pdir, seq, pay, proto, strict=True):
        if pr != PROTO_TCP or p == 0:
            kinds.append(-1)
            continue
        g = 2 * c + d
        hb = high.get(g, -1)
        if s >= hb:
            kinds.append(KIND_CODE["new"])
            if hb >= 0 and s > hb:
                holes.setdefault(g, []).append((hb, s))
        else:
            kind = "partial_retransmission" if s + p > hb else "retransmission"
            if any(lo <= s < hi for lo, hi in holes.get(g, [])) and (g, s) not in filled:
                filled.add((g, s))
                kind = "out_of_order"
            else:
                resent[g] = resent.get(g, 0) + 1
            kinds.append(KIND_CODE[kind])
        high[g] = max(hb, s + p)
    return kinds, resent


@settings(max_examples=200, deadline=None)
@given(
    st.lists(
        st.tuples(
            st.integers(0, 2),  # connection
            st.integers(0, 1),  # direction
            st.integers(0, 40),  # sequence number, in units of 100 bytes: plenty of overlap
            st.sampled_from([0, 50, 100, 100, 100, 250]),  # payload
            st.sampled_from([PROTO_TCP, PROTO_TCP, PROTO_TCP, 17]),
        ),
        max_size=120,
    )
)
def test_classify_follows_the_rule(packets: list[tuple[int, int, int, int, int]]) -> None:
    conn = [p[0] for p in packets]
    pdir = [p[1] for p in packets]
    seq = [100 * p[2] for p in packets]
    pay = [p[3] for p in packets]
    proto = [p[4] for p in packets]
    kinds, resent = classify_data(
        np.array(conn, np.int32),
        np.array(pdir, np.uint8),
        np.array(seq, np.int64),
        np.array(pay, np.uint16),
        np.array(proto, np.uint8),
    )
    want_kinds, want_resent = rule(conn, pdir, seq, pay, proto)
    assert kinds.tolist() == want_kinds
    got = {g: int(n) for g, n in enumerate(resent) if n}
    assert got == want_resent


def test_a_resend_into_an_early_hole_after_many_later_ones() -> None:
    """Holes are looked up by offset: the first copy into the oldest of many holes is out of
    order, the second copy is resent."""
    # New data every 100 bytes, skipping every third segment: 300 holes, then the copies.
    sent = [s for s in range(0, 90_000, 100) if s % 300 != 100]
    late = [100, 100, 60_100]
    seq = np.array(sent + late, np.int64)
    n = seq.size
    kinds, resent = classify_data(
        np.zeros(n, np.int32),
        np.zeros(n, np.uint8),
        seq,
        np.full(n, 100, np.uint16),
        np.full(n, PROTO_TCP, np.uint8),
    )
    assert kinds[-3:].tolist() == [
        KIND_CODE["out_of_order"],
        KIND_CODE["retransmission"],
        KIND_CODE["out_of_order"],
    ]
    assert resent.tolist()[:1] == [1]
