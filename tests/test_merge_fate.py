"""The fate of each transmission: delivered, dropped in the network or by the receiving host,
missed by a capture, duplicated, reordered. Expected fates are how the captures were built."""

from __future__ import annotations

from pathlib import Path

import numpy as np

from tests.helpers.exchange import DELAY_S, Ack, Seg, exchange
from tracekit.capture import read_capture
from tracekit.connections import build_connections
from tracekit.merge import merge
from tracekit.merge.fate import ACKED, NEVER_ACKED, RESENT_UNACKED, receiver_verdicts
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
    assert (gap["seq_rel"], gap["sender_frame"], np.isnan(gap["sender_t_s"])) == (7001, -1, True)
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
    # Data [0,30) arrives (one GRO'd super-segment), the sender resends it as [0,10), [10,20),
    # [20,30) before any ACK covers it: the host dropped the first copy. The pieces are new
    # to the receiver and acknowledged.
    group = np.zeros(7, dtype=np.int64)
    is_data = np.array([1, 1, 0, 1, 0, 1, 0], dtype=bool)
    left = np.array([0, 0, 0, 10, 0, 20, 0])
    right = np.array([30, 10, 0, 20, 0, 30, 0])
    ack = np.array([0, 0, 10, 0, 20, 0, 30])
    none = np.zeros(0, dtype=np.int64)
    verdict, _ = receiver_verdicts(group, is_data, left, right, ack, none, none, none)
    assert verdict.tolist() == [RESENT_UNACKED, ACKED, -1, ACKED, -1, ACKED, -1]


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


def test_a_capture_of_one_direction_leaves_every_arrival_unjudged_but_the_resent() -> None:
    # A tap on one direction: data only, no ACK. Each arrival has no verdict (the capture
    # holds no ACK), except [10,20), whose bytes came again: dropped in the host. A second
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
        RESENT_UNACKED,
        NEVER_ACKED,
        NEVER_ACKED,
        NEVER_ACKED,
        ACKED,
        -1,
    ]
    assert not dup.any()


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
    # is what a dropped [0,10) refilled by the copy gives too: it cannot tell, and the copy
    # decides.
    none: list[int] = []
    events = {"is_data": [1, 1, 1, 0, 0], "left": [0, 10, 0, 0, 0], "right": [10, 20, 10, 0, 0]}
    verdict, _ = _lagging(none, none, none, ack=[0, 0, 0, 10, 20], **events)
    assert verdict[0] == ACKED
    verdict, _ = _lagging(none, none, none, ack=[0, 0, 0, 20, 20], **events)
    assert verdict[0] == RESENT_UNACKED


def test_a_copy_sent_before_a_lagging_host_acknowledged_the_first_is_no_receiver_drop(
    tmp_path: Path,
) -> None:
    # The same through real captures: the sender resends [1,1001) 2 ms after it first left,
    # before any ACK came back; the host acknowledges 1001, then 2001 (it took the first copy
    # first), or only 2001 once the copy came (it dropped the first).
    segs = [Seg(0.100, 1, 1000, 10), Seg(0.101, 1001, 1000, 11), Seg(0.102, 1, 1000, 12)]
    kept = [Ack(0.103 + DELAY_S, 1001, 100), Ack(0.104 + DELAY_S, 2001, 101)]
    dropped = [Ack(0.103 + DELAY_S, 2001, 100)]
    counts = []
    for name, acks in (("kept", kept), ("dropped", dropped)):
        folder = tmp_path / name
        folder.mkdir()
        m = merge(*(build_connections(read_capture(p)) for p in exchange(folder, segs, acks)))
        counts.append(m.counts()["receiver_drop"])
    assert counts == [0, 1]
