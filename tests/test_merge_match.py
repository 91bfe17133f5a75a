"""Matching connections and transmissions across a sender and a receiver capture."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tests.helpers.exchange import CLIENT, DELAY_S, NAT, Ack, Seg, exchange
from tests.helpers.exchange import clean as _clean
from tracekit.capture import read_capture
from tracekit.connections import build_connections
from tracekit.errors import TracekitError
from tracekit.merge import merge, parse_map
from tracekit.merge.match import BYTES, Side, _shifted, map_endpoint, match_packets


def _merge(sp: Path, rp: Path, addr_map: dict[str, str] | None = None):  # type: ignore[no-untyped-def]
    return merge(build_connections(read_capture(sp)), build_connections(read_capture(rp)), addr_map)


def test_every_transmission_pairs_with_its_arrival(tmp_path: Path) -> None:
    segs, acks = _clean()
    m = _merge(*exchange(tmp_path, segs, acks))
    assert len(m.connections.pairs) == 1
    tx = m.transmissions
    assert len(tx) == 6
    assert (tx["fate"] == "delivered").all()
    assert tx["sender_frame"].tolist() == [4, 5, 6, 7, 8, 9]  # after SYN, SYN-ACK, ACK
    # Every packet was captured at both ends: the receiver's fate column is filled for data.
    assert (m.receiver_fate[m.receiver_fate != 255] == 0).sum() == 6


def test_retransmission_is_a_new_transmission(tmp_path: Path) -> None:
    # The first copy of bytes 1001-2000 is lost; the copy resent later (new IP ID) arrives.
    segs, acks = _clean(3)
    segs[1] = Seg(segs[1].t, 1001, 1000, 11, at_receiver=False)
    segs.append(Seg(0.3, 1001, 1000, 20))
    acks = [Ack(0.1 + DELAY_S + 0.0005, 1001, 100), Ack(0.3 + DELAY_S + 0.0005, 3001, 101)]
    m = _merge(*exchange(tmp_path, segs, acks))
    tx = m.transmissions.sort_values("sender_t_s")
    assert tx["fate"].tolist() == ["delivered", "network_drop", "delivered", "delivered"]
    assert tx["seq_rel"].tolist() == [1, 1001, 2001, 1001]


def test_nat_needs_a_map(tmp_path: Path) -> None:
    segs, acks = _clean(2)
    sp, rp = exchange(tmp_path, segs, acks, client_at_receiver=NAT)
    alone = _merge(sp, rp)
    assert alone.connections.pairs.empty
    assert (alone.connections.sender_only, alone.connections.receiver_only) == ((0,), (0,))
    mapped = _merge(sp, rp, parse_map([f"{CLIENT}={NAT}"]))
    assert len(mapped.connections.pairs) == 1
    assert (mapped.transmissions["fate"] == "delivered").sum() == 2


def test_tso_segment_matches_by_byte_range(tmp_path: Path) -> None:
    # One 2,896-byte segment leaves the sender; the receiver's capture shows two halves.
    segs = [Seg(0.1, 1, 2896, 10, pieces=2), Seg(0.101, 2897, 1000, 11)]
    acks = [Ack(0.1 + DELAY_S + 0.001, 3897, 100)]
    m = _merge(*exchange(tmp_path, segs, acks))
    assert m.transmissions["fate"].tolist() == ["delivered", "delivered"]
    assert m.transmissions["len"].tolist() == [2896, 1000]


def test_parse_map_and_endpoints() -> None:
    assert parse_map(["10.0.0.1=192.0.2.1", "10.0.0.2:80=192.0.2.2:8080"]) == {
        "10.0.0.1": "192.0.2.1",
        "10.0.0.2:80": "192.0.2.2:8080",
    }
    rules = {"10.0.0.1": "192.0.2.1", "10.0.0.2:80": "192.0.2.2:8080", "2001:db8::1": "2001:db8::9"}
    assert map_endpoint("10.0.0.1:5000", rules) == "192.0.2.1:5000"
    assert map_endpoint("10.0.0.2:80", rules) == "192.0.2.2:8080"
    assert map_endpoint("10.0.0.2:81", rules) == "10.0.0.2:81"
    assert map_endpoint("[2001:db8::1]:443", rules) == "[2001:db8::9]:443"
    with pytest.raises(TracekitError):
        parse_map(["10.0.0.1"])


def test_offset_and_skew_of_crafted_clocks(tmp_path: Path) -> None:
    segs, acks = _clean(40)
    m = _merge(*exchange(tmp_path, segs, acks, offset_s=3.7, skew_ppm=50.0))
    assert m.clock is not None
    # Microsecond pcap timestamps: the constructed offset and skew, to a few microseconds.
    assert m.clock.offset_s == pytest.approx(3.7, abs=5e-6)
    assert m.clock.skew_ppm == pytest.approx(50.0, abs=1.0)
    assert np.allclose(m.delay["owd_s"], DELAY_S, atol=5e-6)


def test_without_its_delay_table_the_merge_judges_and_fits_the_same(tmp_path: Path) -> None:
    # The delay table only a view draws; left unmade, it is empty with its declared columns,
    # and every fate, transmission and the clock are as with it.
    import pandas as pd

    from tracekit.schema import DELAY_COLUMNS

    segs, acks = _clean(40)
    sp, rp = exchange(tmp_path, segs, acks, offset_s=3.7, skew_ppm=50.0)
    whole = _merge(sp, rp)
    lean = merge(
        build_connections(read_capture(sp)), build_connections(read_capture(rp)), delay=False
    )
    assert len(whole.delay) > 0 and len(lean.delay) == 0
    assert list(lean.delay.columns) == [c.name for c in DELAY_COLUMNS]
    pd.testing.assert_frame_equal(lean.transmissions, whole.transmissions)
    np.testing.assert_array_equal(lean.sender_fate, whole.sender_fate)
    np.testing.assert_array_equal(lean.receiver_fate, whole.receiver_fate)
    assert lean.clock == whole.clock


def test_ingest_takes_the_nat_map_and_refuses_it_alone(tmp_path: Path) -> None:
    import pandas as pd
    from click.testing import CliRunner
    from tracekit.cli.main import cli

    from tracekit.schema import FATE_NONE, FATES

    segs, acks = _clean(2)
    sp, rp = exchange(tmp_path, segs, acks, client_at_receiver=NAT)
    out = tmp_path / "t.parquet"
    base = ["ingest", str(sp), "-o", str(out)]
    unmapped = CliRunner().invoke(cli, [*base, "--receiver", str(rp)])
    assert unmapped.exit_code == 0, unmapped.output
    # Without the map the receiver's connection is another one: nothing is judged.
    assert (pd.read_parquet(out)["fate"] == FATE_NONE).all()
    mapped = CliRunner().invoke(cli, [*base, "--receiver", str(rp), "--map", f"{CLIENT}={NAT}"])
    assert mapped.exit_code == 0, mapped.output
    assert (pd.read_parquet(out)["fate"] == FATES.index("delivered")).sum() == 2
    alone = CliRunner().invoke(cli, [*base, "--map", f"{CLIENT}={NAT}"])
    assert alone.exit_code == 2
    assert "--receiver" in alone.output
    bad = CliRunner().invoke(cli, [*base, "--receiver", str(rp), "--map", "nonsense"])
    assert bad.exit_code == 2
    assert "SENDER_ADDR=RECEIVER_ADDR" in bad.output


def test_check_takes_the_nat_map_from_a_manifest(tmp_path: Path) -> None:
    import json

    from click.testing import CliRunner
    from tracekit.cli.main import cli

    # Bytes 2001-3000 reach the receiver's capture at 0.1 s, are never acknowledged (the ACKs
    # stay at 2001), and are resent at 0.3 s: a receiver drop, which check can count only once
    # it has matched the receiver's connection.
    segs, _ = _clean(4)
    segs.append(Seg(0.3, 2001, 1000, 30))
    back = DELAY_S + 0.0005
    acks = [Ack(0.100 + back, 1001, 100), Ack(0.101 + back, 2001, 101)]
    acks += [Ack(0.102 + back, 2001, 102), Ack(0.103 + back, 2001, 103)]  # duplicates
    acks.append(Ack(0.3 + back, 4001, 104))
    sp, rp = exchange(tmp_path, segs, acks, client_at_receiver=NAT)
    manifest = tmp_path / "pairs.toml"
    drops = {}
    for rules in ("", f'map = ["{CLIENT}={NAT}"]\n'):
        manifest.write_text(
            f'[[capture]]\nname = "nat"\nsender = "{sp.name}"\nreceiver = "{rp.name}"\n{rules}'
        )
        out = tmp_path / "check.json"
        result = CliRunner().invoke(cli, ["check", str(manifest), "--json", str(out)])
        assert result.exit_code in (0, 1), result.output
        (entry,) = json.loads(out.read_text())["captures"]
        (metrics,) = entry["metrics"]
        assert metrics["retrans_segments"] == 1
        drops[bool(rules)] = metrics["receiver_drops"]
    assert drops == {False: None, True: 1}


def test_batch_applies_the_nat_map_to_every_pair_and_redoes_pairs_for_new_rules(
    tmp_path: Path,
) -> None:
    import shutil

    import pandas as pd
    from click.testing import CliRunner
    from tracekit.cli.main import cli

    # The first copy of bytes 1001-2000 is lost between the capture points: a network drop,
    # which only the merge of the two captures can tell.
    segs, acks = _clean(3)
    segs[1] = Seg(segs[1].t, 1001, 1000, 11, at_receiver=False)
    segs.append(Seg(0.3, 1001, 1000, 20))
    acks = [Ack(0.1 + DELAY_S + 0.0005, 1001, 100), Ack(0.3 + DELAY_S + 0.0005, 3001, 101)]
    sp, rp = exchange(tmp_path, segs, acks, client_at_receiver=NAT)
    runs = tmp_path / "runs"
    runs.mkdir()
    shutil.copy(sp, runs / "nat.sender.pcap")
    shutil.copy(rp, runs / "nat.receiver.pcap")
    out = tmp_path / "out"
    kinds = {}
    for maps in ([], ["--map", f"{CLIENT}={NAT}"]):
        result = CliRunner().invoke(cli, ["batch", str(runs), "-o", str(out), "-j", "1", *maps])
        assert result.exit_code == 0, result.output
        # The second run is not skipped as finished: its rules differ from the first's.
        assert "already done" not in result.output
        findings = pd.read_parquet(out / "findings")
        kinds[bool(maps)] = set(findings["kind"])
    assert "network_drop" not in kinds[False]
    assert "network_drop" in kinds[True]
    again = CliRunner().invoke(
        cli, ["batch", str(runs), "-o", str(out), "--map", f"{CLIENT}={NAT}"]
    )
    assert "1 inputs already done" in again.output
    bad = CliRunner().invoke(cli, ["batch", str(runs), "-o", str(out), "--map", "nonsense"])
    assert bad.exit_code == 2
    assert "SENDER_ADDR=RECEIVER_ADDR" in bad.output


@settings(max_examples=200, deadline=None)
@given(
    st.integers(1, 6).flatmap(
        lambda n_conn: st.tuples(
            st.just(n_conn),
            st.lists(
                st.tuples(st.integers(0, n_conn - 1), st.integers(0, 1), st.integers(0, 2**40)),
                min_size=1,
                max_size=40,
            ),
            st.lists(st.integers(-(2**33), 2**33), min_size=2 * n_conn, max_size=2 * n_conn),
            st.data(),
        )
    )
)
def test_a_sides_sequence_numbers_are_its_own_moved_by_its_connections_shift(case) -> None:
    # Side.seq and Side.ack, made without a temporary per row, are the relative numbers of the
    # rows asked for plus their (connection, direction)'s shift, in the rows' order, repeats and
    # all: numpy's fancy indexing says so independently.
    n_conn, packets, shifts, data = case
    conn = np.array([p[0] for p in packets], dtype=np.int32)
    direction = np.array([p[1] for p in packets], dtype=np.uint8)
    rel = np.array([p[2] for p in packets], dtype=np.int64)
    shift = np.array(shifts, dtype=np.int64).reshape(n_conn, 2)
    rows = np.array(
        data.draw(st.lists(st.integers(0, len(packets) - 1), max_size=60)), dtype=np.int64
    )
    want = rel[rows] + shift[conn[rows], direction[rows]]
    got = _shifted(rel, shift, conn, direction, rows)
    assert got.dtype == np.int64
    np.testing.assert_array_equal(got, want)


def test_a_row_or_connection_outside_a_side_is_refused_not_read() -> None:
    # Rows come from the merge's own tables; were one ever outside the packets, or a packet's
    # connection outside the shifts, the loop that reads them would read past its arrays.
    rel = np.arange(4, dtype=np.int64)
    conn = np.array([0, 1, 0, 2], dtype=np.int32)  # connection 2 has no shifts
    direction = np.zeros(4, dtype=np.uint8)
    shift = np.zeros((2, 2), dtype=np.int64)
    for rows in ([4], [-1]):
        with pytest.raises(IndexError):
            _shifted(rel, shift, conn, direction, np.array(rows, dtype=np.int64))
    with pytest.raises(IndexError):
        _shifted(rel, shift, conn, direction, np.array([0, 3], dtype=np.int64))
    np.testing.assert_array_equal(
        _shifted(rel, shift, conn, direction, np.array([2, 1], dtype=np.int64)), [2, 1]
    )


def _random_side(data, n_conn: int, shifted: bool, with_head: bool) -> Side:  # type: ignore[no-untyped-def]
    # Few distinct values per field, so keys repeat, tie and differ in one field only; times
    # that tie and run back along the rows, as a capture's clock may.
    n = data.draw(st.integers(1, 40))

    def column(lo: int, hi: int, dtype: type) -> np.ndarray:
        return np.array(data.draw(st.lists(st.integers(lo, hi), min_size=n, max_size=n)), dtype)

    conn = column(0, n_conn - 1, np.int32)
    direction = column(0, 1, np.uint8)
    to_conn = np.array(data.draw(st.permutations(range(n_conn))), dtype=np.int64)
    flip = column(0, 1, np.uint8)[:n_conn] if n >= n_conn else np.zeros(n_conn, np.uint8)
    if not shifted:
        to_conn, flip = np.arange(n_conn, dtype=np.int64), np.zeros(n_conn, np.uint8)
    shifts = [
        np.array(
            data.draw(st.lists(st.integers(-3, 3), min_size=2 * n_conn, max_size=2 * n_conn))
            if shifted
            else [0] * (2 * n_conn),
            dtype=np.int64,
        ).reshape(n_conn, 2)
        for _ in range(2)
    ]
    cd = np.where(to_conn[conn] >= 0, 2 * to_conn[conn] + (direction ^ flip[conn]), -1)
    return Side(
        ts_ns=column(0, 12, np.int64),
        frame=np.arange(n, dtype=np.int64),
        conn=conn,
        dir=direction,
        proto=np.full(n, 6, dtype=np.uint8),
        seq_rel=column(0, 6, np.int64),
        ack_rel=column(0, 3, np.int64),
        length=column(0, 2, np.uint32) * np.uint32(1000),
        flags=column(16, 18, np.uint8),
        ip_id=column(0, 2, np.uint16),
        tsval=column(0, 2, np.uint32),
        head=column(0, 1, np.uint64) if with_head else np.zeros(0, dtype=np.uint64),
        cd=cd.astype(np.int64),
        seq_shift=shifts[0],
        ack_shift=shifts[1],
        to_conn=to_conn,
        flip=flip,
    )


def _pairs_by_key(snd: Side, rcv: Side) -> list[tuple[int, int, int]]:
    """The key passes as their definition reads, one packet at a time: in each pass, among the
    rows the stricter passes left, the k-th row to arrive with a key (time, then row) at the
    sender pairs with the k-th at the receiver; a pass's pairs in the sender's time order."""

    def key(s: Side, i: int, level: int) -> tuple[int, ...]:
        c, d = s.conn[i], s.dir[i]
        k = [s.cd[i], s.seq_rel[i] + s.seq_shift[c, d]]
        if level < 2:
            k.append(s.ack_rel[i] + s.ack_shift[c, d])
        k.append(s.length[i])
        if level != 2:
            k += [s.flags[i], *([s.ip_id[i]] if level == 0 else []), s.tsval[i]]
            k.append(s.head[i] if s.head.size else 0)
        return tuple(int(x) for x in k)

    left = [set(np.flatnonzero(s.cd >= 0).tolist()) for s in (snd, rcv)]
    out: list[tuple[int, int, int]] = []
    for level in range(3):
        groups: list[dict[tuple[int, ...], list[int]]] = [{}, {}]
        for side_, rows, group in zip((snd, rcv), left, groups, strict=True):
            for i in sorted(rows, key=lambda i, s=side_: (s.ts_ns[i], i)):
                if level < 2 or side_.length[i] > 0:
                    group.setdefault(key(side_, i, level), []).append(i)
        found = [
            (a, b)
            for k, rows in groups[0].items()
            for a, b in zip(rows, groups[1].get(k, []), strict=False)
        ]
        found.sort(key=lambda p: (snd.ts_ns[p[0]], p[0]))
        for a, b in found:
            left[0].discard(a)
            left[1].discard(b)
            out.append((a, b, level))
    return out


@settings(max_examples=300, deadline=None)
@given(st.integers(1, 3), st.booleans(), st.data())
def test_the_key_passes_pair_the_kth_arrival_of_each_key_at_both_ends(
    n_conn: int, with_head: bool, data
) -> None:  # type: ignore[no-untyped-def]
    # Keys that repeat, tie in time, differ in one field, arrive with times that run back along
    # the rows, and numbers the receiver's shifts move: the merge's sorted walk pairs them as
    # the passes' definition, read one packet at a time, does.
    snd = _random_side(data, n_conn, False, with_head)
    rcv = _random_side(data, n_conn, True, with_head)
    found = match_packets(snd, rcv)
    keyed = found.how < BYTES
    got = list(
        zip(
            found.s_row[keyed].tolist(),
            found.r_row[keyed].tolist(),
            found.how[keyed].tolist(),
            strict=True,
        )
    )
    assert got == _pairs_by_key(snd, rcv)
