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
