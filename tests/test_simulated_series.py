"""The simulated transfer of tests/helpers: it behaves as its scenario says (the ground truth is
the scenario), its tables are the series stage's, and its pcap reads back as those tables."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from tests.helpers.simulated_capture import WSCALE, write_pcap
from tests.helpers.simulated_series import Scenario, direction, simulate, simulated_report, view
from tracekit.capture import read_capture
from tracekit.pipeline import analyze
from tracekit.report import marks
from tracekit.report.model import Kind
from tracekit.series import build_series
from tracekit.series.stage import TABLES

LAB = Path(__file__).resolve().parent.parent / "fixtures" / "captures"


def test_slow_start_doubles_until_the_burst_outgrows_the_buffer() -> None:
    path = Scenario()
    tr = simulate(3_000, path)
    rounds = np.floor(tr.send_t / path.rtt_s + 1e-9).astype(int)
    sizes = np.bincount(rounds[~tr.retx & ~tr.probe])
    # IW 10, then 20, 40, ..., 640: the 640-segment burst overruns 400 packets of buffer.
    assert sizes[:7].tolist() == [10, 20, 40, 80, 160, 320, 640]
    first_loss = rounds[tr.lost].min()
    assert first_loss == 6
    # In the overrun burst, drop-tail keeps the first 444 and then one in ten (10G into 1G).
    burst_lost = int(tr.lost[rounds == 6].sum())
    assert burst_lost == (640 - 444) - len(range(450, 640, 10))


def test_every_loss_is_retransmitted_and_everything_is_acknowledged() -> None:
    tr = simulate(3_000)
    assert int(tr.retx.sum()) == int(tr.lost.sum()) > 0
    lost_segs = np.sort(tr.seg[tr.lost])
    assert np.array_equal(np.sort(tr.seg[tr.retx]), lost_segs)
    assert int(tr.ack_seg[-1]) == 3_000
    assert np.all(np.diff(tr.ack_seg) >= 0) and np.all(np.diff(tr.ack_t) >= 0)


def test_zero_window_is_probed_until_it_reopens() -> None:
    path = Scenario()
    tr = simulate(3_000, path)
    probes = tr.send_t[tr.probe]
    # Persist timer: 0.2 s, then doubling, within the 0.9 s stall.
    assert np.allclose(np.diff(probes), [0.2, 0.4])
    zero = tr.edge_seg == tr.ack_seg
    assert zero.any()
    assert np.all(tr.ack_t[zero] <= tr.stall[1] + 1e-9)
    assert np.all(tr.ack_t[zero] >= tr.stall[0] - 1e-9)


def test_sack_blocks_lie_above_the_ack_line_over_data_that_arrived() -> None:
    path = Scenario()
    tr = simulate(3_000, path)
    has = tr.sack_hi_seg > 0
    assert has.any()
    lo, hi, ack = tr.sack_lo_seg[has], tr.sack_hi_seg[has], tr.ack_seg[has]
    assert np.all(lo >= ack) and np.all(hi > lo)
    # Every segment a block covers had arrived by the time the ACK left.
    arrival = np.full(int(tr.seg.max()) + 1, np.inf)
    got = ~np.isnan(tr.recv_t) & ~tr.probe
    np.minimum.at(arrival, tr.seg[got], tr.recv_t[got])
    for left, right, t in zip(lo, hi, tr.ack_recv_t[has], strict=True):
        assert np.all(arrival[left:right] <= t)


def test_tables_have_the_columns_and_dtypes_of_a_real_capture() -> None:
    from tracekit.connections import build_connections

    real = build_series(build_connections(read_capture(LAB / "slow_start_overrun" / "sender.pcap")))
    path = Scenario()
    for at_receiver in (False, True):
        simulated = direction(view(simulate(2_000, path), path, at_receiver))
        for name in TABLES:
            expected, got = getattr(real, name), simulated.table(name)
            assert list(got.columns) == list(expected.columns), name
            assert got.dtypes.to_dict() == expected.dtypes.to_dict(), name


def test_its_pcap_reads_back_as_its_tables(tmp_path: Path) -> None:
    """The real reader and series stage, on the pcap of the sender's view, give the tables the
    simulation gives directly: the two are independent ways to the same numbers."""
    path = Scenario()
    v = view(simulate(3_000, path), path)
    capture = tmp_path / "sim.pcap"
    frames = write_pcap(v, capture, path)
    analysis = analyze(read_capture(capture))
    (conn,) = analysis.sender.connections.frame().itertuples()
    assert conn.packets_a2b + conn.packets_b2a == frames
    assert conn.ws_state == "known" and conn.sack_ok
    real = analysis.sender.series.of(0, 0)
    simulated = direction(v)
    # The capture starts with the SYN, one RTT before the simulation's time 0; its frames count
    # the SYN before the SYN-ACK (the simulation's first frame) and the handshake's last ACK
    # after it. Windows are on the wire in units of 2**WSCALE bytes.
    for name in TABLES:
        got, want = real.table(name), simulated.table(name)
        assert len(got) == len(want), name
        for column in want.columns:
            a, b = got[column].to_numpy(), want[column].to_numpy()
            if column == "t_s":
                np.testing.assert_allclose(a, b + path.rtt_s, atol=1e-6, err_msg=name)
            elif column == "rtt_s":
                np.testing.assert_allclose(a, b, atol=2e-6, err_msg=name)
            elif column == "frame":
                np.testing.assert_array_equal(a, b + np.where(b == 1, 1, 2), err_msg=name)
            elif column == "row":
                np.testing.assert_array_equal(a, b + np.where(b == 0, 1, 2), err_msg=name)
            elif column in ("win_bytes", "rwnd_bytes", "edge_rel"):
                line = want["ack_rel"].to_numpy() if column == "edge_rel" else 0
                window = b - line
                on_wire = window >> WSCALE << WSCALE
                # The SYN-ACK's window is never scaled (RFC 7323 2.2): it holds until the
                # second ACK.
                syn_ack = want["t_s"].to_numpy() < simulated.acks["t_s"].iat[1]
                on_wire = np.where(syn_ack, np.minimum(window, 65535), on_wire)
                np.testing.assert_array_equal(a, on_wire + line, err_msg=f"{name}.{column}")
            elif isinstance(want[column].dtype, pd.CategoricalDtype):
                assert got[column].astype(str).tolist() == want[column].astype(str).tolist()
            else:
                np.testing.assert_array_equal(a, b, err_msg=f"{name}.{column}")


def test_the_report_builders_draw_it_with_the_declared_marks() -> None:
    report = simulated_report(2_000, n_connections=2)
    assert len(report.connections) == 2
    view_ = report.connections[0]
    tsg = view_.plots[0]
    names = [t.name for t in tsg.traces]
    tr = simulate(2_000)
    traces = {t.name: t for t in tsg.traces}
    assert len(traces[marks.RETRANSMITTED.name]) == int(tr.retx.sum())
    assert len(traces[marks.WINDOW_PROBE.name]) == int(tr.probe.sum())
    assert len(traces[marks.DATA.name]) == int((~tr.retx & ~tr.probe).sum())
    for name in (marks.ACK_LINE.name, marks.WINDOW_EDGE.name, marks.SACK.name):
        assert name in names
    retx = traces[marks.RETRANSMITTED.name]
    assert retx.kind is Kind.SEGMENTS and retx.keep is not None and retx.keep.all()
    assert [s.label for s in tsg.shades] == ["slow-start overrun", "receive window closed"]
    # The receiver's TSG: a resend that arrives is the first copy there, out of order when it
    # fills a hole below data that came before it (a resent tail is new), never a resend.
    (receiver,) = view_.receiver_plots
    assert receiver is not None
    arrived = {t.name: len(t) for t in receiver.traces}
    resends_arrived = int((tr.retx & ~tr.lost).sum())
    assert 0 < arrived[marks.OUT_OF_ORDER.name] <= resends_arrived
    assert arrived[marks.RETRANSMITTED.name] == 0
    assert arrived[marks.DATA.name] + arrived[marks.OUT_OF_ORDER.name] == int(
        (~tr.lost & ~tr.probe).sum()
    )


@pytest.mark.parametrize("n", [1, 25])
def test_tiny_transfers_make_tables(n: int) -> None:
    path = Scenario()
    d = direction(view(simulate(n, path), path))
    assert d.segments["len"].sum() == n * path.mss_bytes
