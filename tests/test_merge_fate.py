"""The fate of each transmission: delivered, dropped in the network or by the receiving host,
missed by a capture, duplicated, reordered. Expected fates are how the captures were built."""

from __future__ import annotations

from pathlib import Path

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from tests.helpers.exchange import DELAY_S, Ack, Seg, exchange
from tracekit.capture import read_capture
from tracekit.connections import build_connections
from tracekit.merge import fate_is, merge
from tracekit.merge.fate import (
    ACKED,
    LOOKAHEAD_EVENTS,
    NEVER_ACKED,
    RESENT_UNACKED,
    UNTOLD,
    _reordered,
    receiver_verdicts,
)
from tracekit.schema import FATES

A = DELAY_S + 0.0005  # the receiver acknowledges half a millisecond after an arrival


def test_every_fate(tmp_path: Path) -> None:
    segs = [
        Seg(0.100, 1, 1000, 10),
        Seg(0.101, 1001, 1000, 11),
        Seg(0.102, 2001, 1000, 12, at_receiver=False),  # lost between the capture points
        Seg(0.103, 3001, 1000, 13),
        Seg(0.104, 4001, 1000, 14),  # arrives; the receiving host discards it: no ACK
        Seg(0.105, 5001, 1000, 15),
        Seg(0.200, 2001, 1000, 30),  # resent
        Seg(0.250, 4001, 1000, 31),  # resent
        Seg(0.300, 6001, 1000, 32, at_receiver=False),  # the receiver's capture misses it
        Seg(0.310, 7001, 1000, 33, at_sender=False),  # the sender's capture misses it
        Seg(0.350, 1, 1000, 34),  # a spurious copy: already acknowledged
        Seg(0.400, 8001, 1000, 35, late=0.002),  # overtaken by the next one
        Seg(0.401, 9001, 1000, 36),
    ]
    acks = [
        Ack(0.100 + A, 1001, 100),
        Ack(0.101 + A, 2001, 101),
        Ack(0.103 + A, 2001, 102, ((3001, 4001),)),
        Ack(0.105 + A, 2001, 103, ((5001, 6001), (3001, 4001))),
        Ack(0.200 + A, 4001, 104, ((5001, 6001),)),
        Ack(0.250 + A, 6001, 105),
        Ack(0.300 + A, 7001, 106),
        Ack(0.310 + A, 8001, 107),
        Ack(0.350 + A, 8001, 108, ((1, 1001),)),  # D-SACK of the spurious copy
        Ack(0.401 + A, 8001, 109, ((9001, 10001),)),
        Ack(0.402 + A, 10001, 110),
    ]
    m = merge(*(build_connections(read_capture(p)) for p in exchange(tmp_path, segs, acks)))
    tx = m.transmissions
    assert tx["fate"].tolist() == [
        "delivered",
        "delivered",
        "network_drop",
        "delivered",
        "receiver_drop",
        "delivered",
        "delivered",
        "delivered",
        "receiver_capture_gap",
        "duplicate",
        "reordered",
        "delivered",
        "sender_capture_gap",
    ]
    gap = tx.iloc[-1]
    assert (gap["seq_rel"], gap["sender_frame"], np.isnan(gap["sender_t_s"])) == (7001, 0, True)
    # Arrivals on the sender's clock: the 2 s offset removed.
    delivered = tx[tx["fate"] == "delivered"]
    assert np.allclose(delivered["receiver_t_s"] - delivered["sender_t_s"], DELAY_S, atol=2e-6)
    counts = m.counts()
    assert (counts["network_drop"], counts["receiver_drop"]) == (1, 1)
    # The packet tables' fate column agrees with the transmissions table.
    codes = m.sender_fate[m.sender_fate != 255]
    assert sorted(FATES[c] for c in codes) == sorted(tx["fate"].tolist()[:-1])


def test_receiver_verdicts_scan() -> None:
    # Events of one connection: data [0,10), ACK 10, data [10,20), data [20,30), ACK 10 with
    # SACK [20,30), data [10,20) again, ACK 30; then [30,40) and the capture ends.
    group = np.zeros(8, dtype=np.int64)
    is_data = np.array([1, 0, 1, 1, 0, 1, 0, 1], dtype=bool)
    left = np.array([0, 0, 10, 20, 0, 10, 0, 30])
    right = np.array([10, 0, 20, 30, 0, 20, 0, 40])
    ack = np.array([0, 10, 0, 0, 10, 0, 30, 0])
    verdict, dup = receiver_verdicts(
        group, is_data, left, right, ack, np.array([4]), np.array([20]), np.array([30])
    )
    assert verdict.tolist() == [ACKED, -1, RESENT_UNACKED, ACKED, -1, ACKED, -1, NEVER_ACKED]
    assert not dup.any()


def test_a_super_segment_resent_in_pieces_was_dropped() -> None:
    # Data [0,30) arrives (one GRO'd super-segment), then new data [30,40), which the host
    # answers with two ACKs of 0 (RFC 5681 4.2: a duplicate ACK for an arrival past a hole):
    # it took [30,40) without [0,30). The sender resends [0,30) as [0,10), [10,20), [20,30);
    # the pieces are new to the receiver and acknowledged.
    group = np.zeros(10, dtype=np.int64)
    is_data = np.array([1, 1, 0, 0, 1, 0, 1, 0, 1, 0], dtype=bool)
    left = np.array([0, 30, 0, 0, 0, 0, 10, 0, 20, 0])
    right = np.array([30, 40, 0, 0, 10, 0, 20, 0, 30, 0])
    ack = np.array([0, 0, 0, 0, 0, 10, 0, 20, 0, 40])
    none = np.zeros(0, dtype=np.int64)
    verdict, _ = receiver_verdicts(group, is_data, left, right, ack, none, none, none)
    assert verdict.tolist() == [RESENT_UNACKED, ACKED, -1, -1, ACKED, -1, ACKED, -1, ACKED, -1]
    # With one ACK of 0 only, that ACK may have answered what came before [0,30): the host's
    # ACKs never showed it took [30,40), and they cannot tell what became of [0,30).
    is_data = np.array([1, 1, 0, 1, 0, 1, 0, 1, 0], dtype=bool)
    left = np.array([0, 30, 0, 0, 0, 10, 0, 20, 0])
    right = np.array([30, 40, 0, 10, 0, 20, 0, 30, 0])
    ack = np.array([0, 0, 0, 0, 10, 0, 20, 0, 40])
    verdict, _ = receiver_verdicts(group[:9], is_data, left, right, ack, none, none, none)
    assert verdict[0] == UNTOLD


def test_a_copy_the_receiver_reports_as_a_duplicate_was_kept() -> None:
    # Data [0,10) arrives and its ACK is held back; the sender's probe resends [0,10), and
    # the receiver answers with ACK 10 and a D-SACK [0,10) (RFC 2883: below the ACK): it had
    # the first copy all along.
    group = np.zeros(3, dtype=np.int64)
    is_data = np.array([1, 1, 0], dtype=bool)
    left = np.array([0, 0, 0])
    right = np.array([10, 10, 0])
    ack = np.array([0, 0, 10])
    verdict, _ = receiver_verdicts(
        group, is_data, left, right, ack, np.array([2]), np.array([0]), np.array([10])
    )
    assert verdict.tolist() == [ACKED, ACKED, -1]


def test_a_capture_of_one_direction_judges_no_arrival() -> None:
    # A tap on one direction: data only, no ACK. No arrival has a verdict: [10,20), whose
    # bytes came again, was resent with no ACK to say what the host did with it. A second
    # group's ACK must not answer the first group's data.
    group = np.array([0, 0, 0, 0, 0, 1, 1])
    is_data = np.array([1, 1, 1, 1, 1, 1, 0], dtype=bool)
    left = np.array([0, 10, 20, 10, 30, 0, 0])
    right = np.array([10, 20, 30, 20, 40, 10, 0])
    ack = np.array([0, 0, 0, 0, 0, 0, 10])
    none = np.zeros(0, dtype=np.int64)
    verdict, dup = receiver_verdicts(group, is_data, left, right, ack, none, none, none)
    assert verdict.tolist() == [
        NEVER_ACKED,
        UNTOLD,
        NEVER_ACKED,
        NEVER_ACKED,
        NEVER_ACKED,
        ACKED,
        -1,
    ]
    assert not dup.any()


def _second_ack_of_10(window: int, payload: int) -> int:
    """The verdict on data [10,20) that came after an ACK of 10 (window 100) and before a
    second ACK of 10 with this window and this much data of its own, then its copy."""
    is_data = np.array([0, 1, 0, 1, 0], dtype=bool)
    left = np.array([0, 10, 0, 10, 0])
    right = np.array([0, 20, payload, 20, 0])
    ack = np.array([10, 0, 10, 0, 20])
    none = np.zeros(0, dtype=np.int64)
    verdict, _ = receiver_verdicts(
        np.zeros(5, dtype=np.int64),
        is_data,
        left,
        right,
        ack,
        none,
        none,
        none,
        window=np.array([100, 0, window, 0, 100]),
    )
    return int(verdict[1])


def test_only_a_duplicate_ack_says_the_host_lacked_the_bytes() -> None:
    # RFC 5681 2: a duplicate ACK carries no data and the window of the ACK before it. It
    # answers an arrival after [10,20) that the host took without it: a drop.
    assert _second_ack_of_10(window=100, payload=0) == RESENT_UNACKED
    # A window update (an application's read) or an ACK riding on data repeats the ACK number
    # whatever the host did with [10,20): nothing tells.
    assert _second_ack_of_10(window=200, payload=0) == UNTOLD
    assert _second_ack_of_10(window=100, payload=5) == UNTOLD


def _copy_after_dup_acks(acks: int) -> int:
    """The verdict on data [10,20) that the host answers with `acks` ACKs of 10 (it took what
    came after without it, RFC 5681 4.2) before its copy arrives."""
    n = acks + 2
    is_data = np.zeros(n, dtype=bool)
    is_data[[0, -1]] = True
    left = np.zeros(n, dtype=np.int64)
    right = np.zeros(n, dtype=np.int64)
    left[[0, -1]], right[[0, -1]] = 10, 20
    ack = np.full(n, 10, dtype=np.int64)
    none = np.zeros(0, dtype=np.int64)
    verdict, _ = receiver_verdicts(
        np.zeros(n, dtype=np.int64), is_data, left, right, ack, none, none, none
    )
    return int(verdict[0])


def test_a_copy_past_the_look_ahead_is_untold_not_judged() -> None:
    # Within the look-ahead the duplicate ACKs say the host dropped the first copy; a copy
    # further away than the scan looks is one it cannot tell about, and says so.
    assert _copy_after_dup_acks(LOOKAHEAD_EVENTS - 100) == RESENT_UNACKED
    assert _copy_after_dup_acks(LOOKAHEAD_EVENTS + 100) == UNTOLD


def _lagging(sack_left: list[int], sack_right: list[int], owners: list[int], **events: list[int]):  # type: ignore[no-untyped-def]
    n = len(events["left"])
    return receiver_verdicts(
        np.zeros(n, dtype=np.int64),
        np.array(events["is_data"], dtype=bool),
        np.array(events["left"]),
        np.array(events["right"]),
        np.array(events["ack"]),
        np.array(owners, dtype=np.int64),
        np.array(sack_left, dtype=np.int64),
        np.array(sack_right, dtype=np.int64),
    )


def test_a_host_whose_acks_trail_its_arrivals_kept_what_it_acknowledged_first() -> None:
    # A hole filler [100,110) arrives, new data [200,210) after it, then the sender's copy of
    # [100,110), all before the host's ACKs catch up. Its next ACK covers [100,110) (ACK 110,
    # its SACK blocks in the capture) before any ACK of [200,210): it took [100,110) first.
    verdict, _ = _lagging(
        [150, 150, 200],
        [160, 160, 210],
        [3, 4, 4],
        is_data=[1, 1, 1, 0, 0],
        left=[100, 200, 100, 0, 0],
        right=[110, 210, 110, 0, 0],
        ack=[0, 0, 0, 110, 110],
    )
    assert verdict[0] == ACKED
    # Had it dropped [100,110), it would have taken [200,210) next without it: a SACK block
    # of [200,210) first, and [100,110) only with the copy.
    verdict, _ = _lagging(
        [200, 200],
        [210, 210],
        [3, 4],
        is_data=[1, 1, 1, 0, 0],
        left=[100, 200, 100, 0, 0],
        right=[110, 210, 110, 0, 0],
        ack=[0, 0, 0, 100, 110],
    )
    assert verdict[0] == RESENT_UNACKED


def test_without_sack_blocks_only_an_ack_of_the_first_alone_says_it_was_kept() -> None:
    # [0,10), then [10,20), then a copy of [0,10); no SACK block in the capture. ACK 10 and
    # then ACK 20: the host took [0,10) before [10,20), so before the copy. One ACK 20 of both
    # is what a dropped [0,10) refilled by the copy gives too: it cannot tell. Two ACKs of 0
    # can only answer [10,20) taken without [0,10) (a duplicate ACK, RFC 5681 4.2).
    none: list[int] = []
    events = {"is_data": [1, 1, 1, 0, 0], "left": [0, 10, 0, 0, 0], "right": [10, 20, 10, 0, 0]}
    verdict, _ = _lagging(none, none, none, ack=[0, 0, 0, 10, 20], **events)
    assert verdict[0] == ACKED
    verdict, _ = _lagging(none, none, none, ack=[0, 0, 0, 20, 20], **events)
    assert verdict[0] == UNTOLD
    events = {k: [*v[:3], 0, 0, 0] for k, v in events.items()}
    verdict, _ = _lagging(none, none, none, ack=[0, 0, 0, 0, 0, 20], **events)
    assert verdict[0] == RESENT_UNACKED


def test_a_copy_sent_before_a_lagging_host_acknowledged_the_first_is_no_receiver_drop(
    tmp_path: Path,
) -> None:
    # The same through real captures: the sender resends [1,1001) 2 ms after it first left,
    # before any ACK came back. The host acknowledges 1001, then 2001: it took the first copy
    # first. It acknowledges 1 with a SACK block of [1001,2001): it took the new data without
    # the first copy, which it dropped. It acknowledges only 2001, once the copy came: either.
    segs = [Seg(0.100, 1, 1000, 10), Seg(0.101, 1001, 1000, 11), Seg(0.102, 1, 1000, 12)]
    kept = [Ack(0.103 + DELAY_S, 1001, 100), Ack(0.104 + DELAY_S, 2001, 101)]
    dropped = [Ack(0.1025 + DELAY_S, 1, 100, ((1001, 2001),)), Ack(0.103 + DELAY_S, 2001, 101)]
    untold = [Ack(0.103 + DELAY_S, 2001, 100)]
    counts = []
    for name, acks in (("kept", kept), ("dropped", dropped), ("untold", untold)):
        folder = tmp_path / name
        folder.mkdir()
        m = merge(*(build_connections(read_capture(p)) for p in exchange(folder, segs, acks)))
        counts.append((m.counts()["receiver_drop"], m.counts()["receiver_untold"]))
    assert counts == [(0, 0), (1, 0), (0, 1)]


def test_a_duplicate_reported_after_the_ack_the_copy_filled_says_the_first_was_kept() -> None:
    # [0,10), then new data [10,12); the host answers [10,12) first (a SACK block without
    # [0,10): it took them a little out of capture order), the copy of [0,10) arrives, ACK 12,
    # and then a D-SACK of [0,10) (RFC 2883): of the two copies one was a duplicate, so none
    # was lost. Without the D-SACK, the SACK block of [10,12) first says the first was dropped.
    events = {
        "is_data": [1, 1, 0, 1, 0, 0],
        "left": [0, 10, 0, 0, 0, 0],
        "right": [10, 12, 0, 10, 0, 0],
        "ack": [0, 0, 0, 0, 12, 12],
    }
    verdict, _ = _lagging([10, 0], [12, 10], [2, 5], **events)
    assert verdict[0] == ACKED
    verdict, _ = _lagging([10], [12], [2], **events)
    assert verdict[0] == RESENT_UNACKED


def test_an_ack_of_older_bytes_says_nothing_of_a_later_arrival() -> None:
    # [10,20) arrives, then the hole filler [0,10), then a second copy of [10,20), then the
    # host's ACK 0 with a SACK block of [10,20), then the copy of [0,10) and ACK 20. The SACK
    # block may answer the first [10,20), taken before [0,10): the ACKs cannot tell whether
    # the host kept the first [0,10).
    verdict, _ = _lagging(
        [10],
        [20],
        [3],
        is_data=[1, 1, 1, 0, 1, 0],
        left=[10, 0, 10, 0, 0, 0],
        right=[20, 10, 20, 0, 10, 0],
        ack=[0, 0, 0, 0, 0, 20],
    )
    assert verdict[1] == UNTOLD


@settings(max_examples=300, deadline=None)
@given(
    n=st.integers(1, 60),
    seed=st.integers(0, 2**16),
    conns=st.integers(1, 3),
)
def test_reordering_is_a_later_departure_arriving_first(n: int, seed: int, conns: int) -> None:
    # Against the definition, pair by pair: a transmission was reordered when one of its own
    # connection's direction that left strictly later arrived strictly earlier. Coarse clocks
    # make ties in departure and in arrival; some transmissions never arrived.
    rng = np.random.default_rng(seed)
    sent = np.sort(rng.integers(0, 8, n)).astype(np.int64)
    cd = (2 * rng.integers(0, conns, n)).astype(np.int64)
    got_at = rng.integers(0, 12, n).astype(np.int64)
    first = np.where(rng.random(n) < 0.8, np.arange(n), -1).astype(np.int64)
    rows = np.arange(n, dtype=np.int64)
    expected = [
        first[t] >= 0
        and any(
            first[u] >= 0 and cd[u] == cd[t] and sent[u] > sent[t] and got_at[u] < got_at[t]
            for u in range(n)
        )
        for t in range(n)
    ]
    assert _reordered(first, rows, cd, sent, got_at).tolist() == expected


def test_fate_is_reads_the_merges_codes_as_pandas_reads_the_names(tmp_path: Path) -> None:
    segs = [
        Seg(0.100, 1, 1000, 10),
        Seg(0.101, 1001, 1000, 11, at_receiver=False),  # lost between the capture points
        Seg(0.102, 2001, 1000, 12),
        Seg(0.200, 1001, 1000, 30),  # resent
    ]
    acks = [
        Ack(0.100 + A, 1001, 100),
        Ack(0.102 + A, 1001, 101, ((2001, 3001),)),
        Ack(0.200 + A, 3001, 102),
    ]
    m = merge(*(build_connections(read_capture(p)) for p in exchange(tmp_path, segs, acks)))
    tx = m.transmissions
    names = tx["fate"].astype(str)
    assert {"delivered", "network_drop"} <= set(names)
    for fates in (("delivered",), ("delivered", "reordered"), ("network_drop",), ("no_such",)):
        expected = names.isin(list(fates)).to_numpy()
        assert fate_is(tx, *fates).tolist() == expected.tolist()
        # A table made by hand, its fates plain strings, is asked as it is.
        plain = tx.assign(fate=names)
        assert fate_is(plain, *fates).tolist() == expected.tolist()
