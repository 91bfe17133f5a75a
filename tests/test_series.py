"""Series on crafted captures whose classes, ACKs, SACKs and RTTs are known by construction."""

from __future__ import annotations

import shutil
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from scapy.layers.inet import IP, UDP
from scapy.packet import Raw

from fixtures.crafted import amsdu
from tests.helpers.crafting import (
    CLIENT,
    OPTS,
    SERVER,
    c2s,
    s2c,
    tcp,
    transfer,
    write,
)
from tests.helpers.independent import LINKTYPE_LINUX_SLL2, real_captures, tcptrace_rexmt
from tracekit.capture import read_capture
from tracekit.connections import build_connections, records
from tracekit.series import Direction, build_series, rate, resent, rounds, trains
from tracekit.series.measures import _bin_of, _distinct
from tracekit.series.stage import packet_columns_read, walk_series


@pytest.fixture(scope="module")
def series(tmp_path_factory: pytest.TempPathFactory):
    path = write(tmp_path_factory.mktemp("series") / "t.pcap", transfer())
    return build_series(build_connections(read_capture(path))).of(0, 0)


def test_segment_classes(series) -> None:
    seg = series.segments
    assert seg["kind"].tolist() == [
        *["new"] * 5,
        "retransmission",
        "window_probe",
        "new",
        "partial_retransmission",
        "keepalive",
    ]
    assert seg["seq_rel"].tolist() == [1, 1001, 2001, 3001, 4001, 2001, 5000, 5001, 5501, 6500]
    assert seg["len"].tolist() == [1000] * 6 + [0, 1000, 1000, 0]


@pytest.mark.parametrize("left_out", ["flight", "rtt"])
def test_a_series_without_a_table_keeps_the_others_whole(tmp_path: Path, left_out: str) -> None:
    # The report's receiver TSG asks for neither the flight table nor the RTT samples: the one
    # left out is empty (the transfer gives both rows), the segments keep their kinds (made
    # from the walk's codes whether or not the flight table is), and the other tables are
    # those of the whole build. The expected kinds are the transfer's own (as above).
    path = write(tmp_path / "t.pcap", transfer())
    whole = build_series(build_connections(read_capture(path)))
    kept = tuple(
        name for name in ("segments", "acks", "sacks", "rtt", "flight") if name != left_out
    )
    some = build_series(build_connections(read_capture(path)), tables=kept)
    assert getattr(some, left_out).empty and not getattr(whole, left_out).empty
    assert list(getattr(some, left_out).columns) == list(getattr(whole, left_out).columns)
    assert some.of(0, 0).segments["kind"].tolist() == [
        *["new"] * 5,
        "retransmission",
        "window_probe",
        "new",
        "partial_retransmission",
        "keepalive",
    ]
    for name in kept:
        pd.testing.assert_frame_equal(getattr(some, name), getattr(whole, name))


def test_a_series_without_rtt_samples_reads_no_timestamp_columns(tmp_path: Path) -> None:
    # The report's receiver TSG draws no RTT samples: its packets need not hold the TCP
    # timestamp columns, and the tables it draws are those of the whole build. A walk made so
    # cannot make an RTT table afterwards: it says so rather than read columns it lacks.
    path = write(tmp_path / "t.pcap", transfer())
    tables = ("segments", "acks", "sacks")
    lean = build_connections(read_capture(path)).keeping(packet_columns_read(tables))
    assert not {"opts", "tsval", "tsecr"} & set(lean.packets.column_names)
    some = walk_series(lean, tables).finish(tables=tables)
    whole = build_series(build_connections(read_capture(path)))
    for name in tables:
        pd.testing.assert_frame_equal(getattr(some, name), getattr(whole, name))
    with pytest.raises(ValueError, match="RTT"):
        walk_series(lean, tables).finish()


def test_duplicate_acks_and_their_runs(series) -> None:
    acks = series.acks
    dup = acks[acks["dupack"]]
    assert dup["t_s"].round(3).tolist() == [1.103, 1.104, 1.105]
    assert dup["dupack_run"].tolist() == [1, 2, 3]
    # The zero-window ACKs repeat the ACK number but change the window: not duplicates.
    assert not acks[acks["win_bytes"] == 0]["dupack"].any()
    assert acks[acks["t_s"].round(3) == 2.0]["edge_rel"].tolist() == [5001]


def test_sack_and_dsack_blocks(series) -> None:
    sk = series.sacks
    assert list(zip(sk["left_rel"], sk["right_rel"], strict=True)) == [
        (3001, 4001),
        (3001, 5001),
        (3001, 5001),
        (5501, 6001),
    ]
    assert sk["dsack"].tolist() == [False, False, False, True]


def test_rtt_samples_follow_karn_and_timestamps(series) -> None:
    rtt = series.rtt
    by_seq = rtt[rtt["source"] == "seq"]
    # A, B, E (exactly acknowledged by 5001) and F; C and its resend give none (Karn), D is
    # only covered by a later cumulative ACK.
    assert by_seq["t_s"].round(3).tolist() == [1.1, 1.101, 1.21, 2.8]
    np.testing.assert_allclose(by_seq["rtt_s"], [0.1, 0.1, 0.206, 0.1], atol=1e-6)
    by_ts = rtt[rtt["source"] == "ts"]
    # Every ACK that advanced the line echoes a TSval sent 100 ms before, the resend's too.
    assert by_ts["t_s"].round(3).tolist() == [1.1, 1.101, 1.21, 2.8, 3.0]
    np.testing.assert_allclose(by_ts["rtt_s"], 0.1, atol=1e-6)


def test_flight_size_against_window(series) -> None:
    fl = series.flight
    assert fl["flight_bytes"].tolist() == [1000, 2000, 3000, 4000, 5000, 3000, 1000, 500]
    assert fl["rwnd_bytes"].tolist() == [65535] * 8


def test_flight_counts_sequence_space_no_data_segment_holds(tmp_path: Path) -> None:
    # In flight: the highest sequence number sent less the ACK line (RFC 9293 3.3.1, SND.NXT -
    # SND.UNA). A pure ACK numbered past the data, and a FIN (one sequence number of its own),
    # raise the highest sent though no data segment shows it.
    pkts = [
        *transfer()[:3],  # the SYN-ACK acknowledges the SYN: the line at 1
        c2s(1.0, "A", 1, 1000),  # 1..1001 in flight: 1000
        s2c(1.1, 1001),
        c2s(1.2, "A", 3001),  # a pure ACK numbered 2000 past the data: sent up to 3001
        c2s(1.3, "A", 1001, 1000),  # 1001..2001, with 3001 - 1001 in flight
        c2s(1.4, "FA", 3001),  # the FIN takes 3001: sent up to 3002
        s2c(1.5, 2001),
        c2s(1.6, "A", 2001, 500),  # 2001..2501, with 3002 - 2001 in flight
    ]
    path = write(tmp_path / "f.pcap", pkts)
    fl = build_series(build_connections(read_capture(path))).of(0, 0).flight
    assert fl["flight_bytes"].tolist() == [1000, 2000, 1001]
    assert fl["t_s"].round(3).tolist() == [1.0, 1.3, 1.6]


def test_out_of_order_arrival_at_the_receiver(tmp_path: Path) -> None:
    pkts = [
        *transfer()[:3],
        c2s(1.0, "A", 1, 1000, 1),
        c2s(1.1, "A", 2001, 1000, 3),  # jumps over 1001..2001
        c2s(1.2, "A", 1001, 1000, 2),  # fills the hole: out of order
        c2s(1.3, "A", 1001, 1000, 2),  # the same bytes again: a retransmission
    ]
    seg = build_series(build_connections(read_capture(write(tmp_path / "o.pcap", pkts)))).of(0, 0)
    assert seg.segments["kind"].tolist() == ["new", "new", "out_of_order", "retransmission"]


def test_trains_give_instantaneous_rates(tmp_path: Path) -> None:
    pkts = transfer()[:3]
    pkts += [c2s(1.0 + i * 10e-6, "A", 1 + i * 1000, 1000) for i in range(10)]
    pkts += [c2s(1.05 + i * 100e-6, "A", 10001 + i * 1000, 1000) for i in range(20)]
    ser = build_series(build_connections(read_capture(write(tmp_path / "tr.pcap", pkts)))).of(0, 0)
    tr = trains(ser.segments, gap_s=0.01)
    assert tr["packets"].tolist() == [10, 20]
    # 9 gaps of 10 us carry 9000 bytes: 800 Mbit/s; 19 gaps of 100 us: 80 Mbit/s.
    np.testing.assert_allclose(tr["rate_bps"], [800e6, 80e6], rtol=1e-3)
    r = rate(ser.segments, ser.acks, window_s=0.5)
    assert r["sent_bps"].sum() * 0.5 / 8 == pytest.approx(30 * 1000)


@pytest.mark.parametrize("block_rows", [7, 1 << 18])
def test_rates_are_histograms_of_the_bytes_a_block_at_a_time(
    block_rows: int, monkeypatch: pytest.MonkeyPatch
) -> None:
    from tracekit.series import measures

    # Windows found a few rows at a time add up to np.histogram's over the whole transfer.
    monkeypatch.setattr(measures, "_RATE_BLOCK_ROWS", block_rows)
    capture = Path(__file__).resolve().parent.parent / "fixtures/captures/clean/sender.pcap"
    d = build_series(build_connections(read_capture(capture))).of(0, 0)
    window = 0.05
    r = rate(d.segments, d.acks, window_s=window)
    seg_t, ack_t = d.segments["t_s"].to_numpy(), d.acks["t_s"].to_numpy()
    lo = min(seg_t.min(), ack_t.min())
    last = int(np.ceil((max(seg_t.max(), ack_t.max()) - lo) / window))
    edges = lo + window * np.arange(last + 2)
    sent, _ = np.histogram(seg_t, bins=edges, weights=d.segments["len"].to_numpy())
    line = np.maximum.accumulate(d.acks["ack_rel"].to_numpy())
    acked, _ = np.histogram(ack_t, bins=edges, weights=np.diff(line, prepend=line[0]))
    shown = np.round((r["t_s"].to_numpy() - lo - window / 2) / window).astype(int)
    assert len(r) > 10
    assert (r["sent_bps"].to_numpy() == sent[shown] * 8 / window).all()
    assert (r["acked_bps"].to_numpy() == acked[shown] * 8 / window).all()
    # The windows left out carry nothing.
    assert sent.sum() == sent[shown].sum() and acked.sum() == acked[shown].sum()


def slow_start(iw: int, rounds_n: int, rtt_s: float = 0.1, gap_s: float = 1e-4) -> list[object]:
    """Textbook slow start: each ACK of one segment releases two, so round r holds iw * 2**r."""
    pkts = transfer()[:3]
    send_t = [1.0 + i * gap_s for i in range(iw)]
    nxt = 1
    events = []
    for i, t in enumerate(send_t):
        events.append((t, 0, c2s(t, "A", nxt + i * 1000, 1000)))
    nxt += iw * 1000
    acked = 1
    for _ in range(rounds_n - 1):
        released = []
        for t in send_t:
            acked += 1000
            t_ack = t + rtt_s
            events.append((t_ack, 1, s2c(t_ack, acked)))
            for j in (1, 2):
                t_send = t_ack + j * 1e-5
                events.append((t_send, 2, c2s(t_send, "A", nxt, 1000)))
                released.append(t_send)
                nxt += 1000
        send_t = released
    return pkts + [p for _, _, p in sorted(events, key=lambda e: (e[0], e[1]))]


def test_rounds_double_in_slow_start(tmp_path: Path) -> None:
    pkts = slow_start(iw=4, rounds_n=4)
    ser = build_series(build_connections(read_capture(write(tmp_path / "ss.pcap", pkts)))).of(0, 0)
    r = rounds(ser.segments, ser.acks)
    # Round 0 is the initial window of 4; each ACK of a segment releases two (crafted so).
    assert r["packets"].tolist() == [4, 8, 16, 32]
    assert r["bytes"].tolist() == [4000, 8000, 16000, 32000]
    # A round starts at the first ACK beyond what was sent when the last one started: round 1
    # at the ACK of the first segment (1.0 + 0.1), round 2 at the ACK of round 1's first
    # segment, sent 10 us after round 1 started.
    np.testing.assert_allclose(r["start_s"][:3], [1.0, 1.1, 1.1 + 1e-5 + 0.1], atol=1e-9)
    assert r["mark_rel"].tolist()[:3] == [1, 4001, 12001]


@pytest.mark.parametrize("name", ["slow_start_overrun", "window_limited", "bursty_sender"])
def test_each_round_marks_every_byte_sent_before_it_started(name: str) -> None:
    # The definition, segment by segment: round r's mark is the highest byte sent before it
    # started (HyStart's end_seq), over transfers of thousands of segments.
    capture = Path(__file__).resolve().parent.parent / "fixtures/captures" / name / "sender.pcap"
    d = build_series(build_connections(read_capture(capture))).of(0, 0)
    r = rounds(d.segments, d.acks)
    data = d.data
    t, end = data["t_s"].to_numpy(), data["end_rel"].to_numpy()
    assert len(r) > 5 and len(data) > 1000
    for start, mark in zip(r["start_s"].to_numpy()[1:], r["mark_rel"].to_numpy()[1:], strict=True):
        before = t < start
        assert mark == (end[before].max() if before.any() else r["mark_rel"].iloc[0])


def test_rounds_of_an_empty_direction(series) -> None:
    assert rounds(series.segments.iloc[0:0], series.acks).empty


def test_resent_marks_lost_and_spurious_first_copies(series) -> None:
    r = resent(series.segments, series.sacks)
    # C (2001) was lost and resent; F (5001) is half covered by G's resend, and the D-SACK of
    # 5501-6001 says that half arrived twice.
    assert r["resent"].tolist() == [False, False, True, False, False, False, False, True, False,
                                    False]  # fmt: skip
    assert r["dsacked"].tolist() == [False] * 7 + [True, True, False]


@pytest.mark.skipif(shutil.which("tcptrace") is None, reason="tcptrace is not installed")
@pytest.mark.parametrize("path", real_captures(), ids=lambda p: f"{p.parent.name}/{p.name}")
def test_resent_segments_agree_with_tcptrace(path: Path) -> None:
    capture = read_capture(path)
    if LINKTYPE_LINUX_SLL2 in capture.link_types:
        pytest.skip("tcptrace 6.6.7 (2004) cannot read Linux cooked v2 captures")
    conns = build_connections(capture)
    seg = build_series(conns).segments
    resent = seg[seg["kind"].isin(["retransmission", "partial_retransmission"])]
    counts = resent.groupby(["conn", "dir"], observed=True).size()
    theirs = tcptrace_rexmt(path)
    rows = records(conns.table)
    for r in rows:
        if r["proto"] != "tcp":
            continue
        a2b, b2a = (int(counts.get((r["conn"], d), 0)) for d in (0, 1))
        key = (r["a"], r["b"])
        expected = theirs[key] if key in theirs else theirs[(r["b"], r["a"])][::-1]
        assert (a2b, b2a) == expected, key


def test_rate_bins_as_numpy_histogram_does() -> None:
    # The compiled binning must place every value, edges included, where np.histogram does.
    rng = np.random.default_rng(5)
    for _ in range(500):
        n = int(rng.integers(1, 300))
        width = float(rng.choice([0.001, 0.05, 0.3, 1.0, 2.0]))
        t = np.sort(np.round(rng.random(n) * rng.choice([1, 10, 100]), int(rng.integers(1, 7))))
        last = int(np.ceil((t.max() - t.min()) / width))
        edges = t.min() + width * np.arange(last + 2)
        weight = rng.integers(0, 1500, n)
        expected, _ = np.histogram(t, bins=edges, weights=weight.astype(float))
        got = np.bincount(_bin_of(t, t.min(), width, last), weight, minlength=last + 1)
        assert np.array_equal(got, expected)


def test_counts_without_slicing_agree_with_the_slices() -> None:
    """Series.data_segments and Series.rows (what detectors skip short directions by) equal
    the lengths of the tables Series.of slices, on a lab capture of both directions."""
    lab = Path(__file__).resolve().parent.parent / "fixtures" / "captures" / "receiver_drops"
    ser = build_series(build_connections(read_capture(lab / "receiver.pcap")))
    checked = 0
    for conn in range(2):  # the lab's capture has one connection: 1 is absent, all zeros
        for direction in (0, 1):
            d = ser.of(conn, direction)
            assert ser.data_segments(conn, direction) == len(d.data)
            for name in ("segments", "acks", "sacks", "rtt", "flight"):
                assert ser.rows(name, conn, direction) == len(d.table(name))
                assert d.table(name).index.equals(pd.RangeIndex(len(d.table(name))))
                checked += len(d.table(name))
    assert ser.data_segments(0, 0) > 1000 and checked > 0


def test_a_direction_slices_a_table_when_asked() -> None:
    asked: list[str] = []

    def source(name: str) -> pd.DataFrame:
        asked.append(name)
        return pd.DataFrame({"len": [1, 0, 2]})

    d = Direction(0, 1, source=source)
    assert asked == []
    assert len(d.data) == 2 and d.segments is d.segments
    assert asked == ["segments"]
    with pytest.raises(TypeError):
        Direction(0, 0, segments=pd.DataFrame())


def test_each_row_names_its_own_packet_where_frames_hold_several(tmp_path: Path) -> None:
    # 802.11 A-MSDUs: a frame number names several packets (several segments of one
    # connection, another connection's segment, a UDP datagram), so the series name each
    # segment's and each ACK's packet by its row of the packet table.
    other = 41000

    def ip(p: object) -> bytes:
        return bytes(p[IP])  # type: ignore[index]

    udp = bytes(IP(src=CLIENT, dst=SERVER) / UDP(sport=5000, dport=5001) / Raw(b"u" * 20))
    syn = tcp(0.0, CLIENT, SERVER, other, 80, "S", 7, 0, 0, OPTS)
    foreign = tcp(0.0, CLIENT, SERVER, other, 80, "A", 8, 1, 300)
    frames = [
        (0.0, [ip(x) for x in transfer()[:2]]),
        (0.1, [ip(syn)]),
        (0.2, [udp, ip(c2s(0.2, "A", 1, 1000, 5)), ip(c2s(0.2, "A", 1001, 1000, 6))]),
        (0.3, [ip(foreign), ip(s2c(0.3, 1001, 5)), udp, ip(s2c(0.3, 2001, 6))]),
    ]
    path = tmp_path / "amsdu.pcap"
    path.write_bytes(amsdu.timed_pcap(frames))
    conns = build_connections(read_capture(path))
    series = build_series(conns)
    pk = conns.packets
    frame = pk.column("frame").to_numpy()
    assert np.bincount(frame).max() == 4  # the premise: rows share frame numbers
    seg = series.segments[series.segments["len"] > 0]
    ack = series.acks
    for table, value in ((seg, "seq_rel"), (ack, "ack_rel")):
        row = table["row"].to_numpy()
        assert (pk.column("conn").to_numpy()[row] == table["conn"].to_numpy()).all()
        assert (pk.column(value).to_numpy()[row] == table[value].to_numpy()).all()
        assert (frame[row] == table["frame"].to_numpy()).all()
    # As built: the two segments, then the ACKs of each, with the echoes of their TSvals.
    assert seg[seg["conn"] == 0]["seq_rel"].tolist() == [1, 1001]
    acked = ack[(ack["frame"] == 4) & (ack["conn"] == 0)]
    assert acked["ack_rel"].tolist() == [1001, 2001]
    assert pk.column("tsecr").to_numpy()[acked["row"].to_numpy()].tolist() == [5, 6]


def test_a_rates_windows_are_numpys_unique_values() -> None:
    # Windows come in sorted runs (blocks of packets in time order, seg then ACK blocks), with
    # a few out of order where a clock stepped back: each window once, sorted, as np.unique.
    rng = np.random.default_rng(4)
    for k in range(500):
        runs = [np.sort(rng.integers(-3, 60, int(rng.integers(0, 80)))) for _ in range(3)]
        b = np.concatenate(runs).astype(np.int64)
        if k % 5 == 0 and b.size:
            rng.shuffle(b)
        assert np.array_equal(_distinct(b), np.unique(b))
