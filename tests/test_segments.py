"""connections.segments.classify_data against the rule it states, written out packet by packet."""

from __future__ import annotations

import itertools

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


def unzip(packets: list[tuple[int, ...]], width: int) -> list[list[int]]:
    """The packets' fields, one list per field."""
    return [[p[k] for p in packets] for k in range(width)]


# The stream's column types: connection, direction, sequence number, payload, protocol.
DTYPES = (np.int32, np.uint8, np.int64, np.uint32, np.uint8)


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
    conn, pdir, seq, pay, proto = unzip(packets, 5)
    seq = [100 * s for s in seq]
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


def stream_resent(
    conn: np.ndarray,
    pdir: np.ndarray,
    seq: np.ndarray,
    pay: np.ndarray,
    proto: np.ndarray,
    cuts: list[int],
) -> np.ndarray:
    """The resent counts of `tracekit ingest`'s stream, the packets handed over in chunks
    split at `cuts`, with the connections numbered so far growing as they come."""
    from tracekit.connections.stream import _DataSegments

    kept = _DataSegments()
    bounds = [0, *sorted(c for c in cuts if 0 < c < conn.size), conn.size]
    for a, b in itertools.pairwise(bounds):
        chunk = {
            "conn": conn[a:b],
            "dir": pdir[a:b],
            "proto": proto[a:b],
            "seq_rel": seq[a:b],
            "payload_bytes": pay[a:b],
        }
        n_conn = int(conn[:b].max()) + 1 if b else 0
        tcp = kept.add(chunk, n_conn)
        assert tcp == int(np.count_nonzero(proto[a:b] == PROTO_TCP))
    return kept.resent()


@settings(max_examples=200, deadline=None)
@given(
    st.lists(
        st.tuples(
            st.integers(0, 2),
            st.integers(0, 1),
            st.integers(0, 40),
            st.sampled_from([0, 50, 100, 100, 100, 250]),
            st.sampled_from([PROTO_TCP, PROTO_TCP, PROTO_TCP, 17]),
        ),
        max_size=120,
    ),
    st.lists(st.integers(0, 120), max_size=5),
)
def test_a_stream_read_in_chunks_counts_resends_by_the_rule(
    packets: list[tuple[int, int, int, int, int]], cuts: list[int]
) -> None:
    """Each chunk keeps only the segments below the high and the holes: a hole filled chunks
    after it opened, or a copy resent in a later chunk, counts as in one pass."""
    conn, pdir, seq, pay, proto = unzip(packets, 5)
    seq = [100 * s for s in seq]
    columns = (np.array(c, t) for c, t in zip((conn, pdir, seq, pay, proto), DTYPES, strict=True))
    resent = stream_resent(*columns, cuts)
    got = {g: int(n) for g, n in enumerate(resent) if n}
    assert got == rule(conn, pdir, seq, pay, proto)[1]


@settings(max_examples=100, deadline=None)
@given(
    st.lists(
        st.tuples(
            st.integers(0, 3),
            st.integers(0, 1),
            # Sequence numbers a hostile capture may give: below zero, and past the 2**41 band
            # that keys (group, offset), where groups' keys meet.
            st.sampled_from([-300, -100, 0, 100, 200, 400, 1 << 41, (1 << 41) + 100, 1 << 62]),
            st.sampled_from([0, 100, 100, 300]),
        ),
        max_size=80,
    ),
    st.lists(st.integers(0, 80), max_size=3),
)
def test_a_stream_counts_what_one_pass_counts_on_any_sequence_numbers(
    packets: list[tuple[int, int, int, int]], cuts: list[int]
) -> None:
    conn, pdir, seq, pay = (np.array(c, t) for c, t in zip(unzip(packets, 4), DTYPES, strict=False))
    proto = np.full(conn.size, PROTO_TCP, np.uint8)
    whole = classify_data(conn, pdir, seq, pay, proto)[1]
    streamed = stream_resent(conn, pdir, seq, pay, proto, cuts)
    n = max(whole.size, streamed.size)
    assert np.array_equal(
        np.pad(whole, (0, n - whole.size)), np.pad(streamed, (0, n - streamed.size))
    )
