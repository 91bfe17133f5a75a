"""The synthetic transfer behaves as its scenario says: the ground truth is the scenario."""

from __future__ import annotations

import numpy as np

from tracekit.report.model import Kind
from tracekit.report.synthetic import Scenario, simulate, synthetic_report


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


def test_report_has_the_tcptrace_traces_and_findings() -> None:
    report = synthetic_report(2_000, n_connections=2)
    assert len(report.connections) == 2 and len(report.findings.rows) == 4
    tsg = report.connections[0].plots[0]
    names = [t.name for t in tsg.traces]
    for name in ("data", "retransmission", "ACK", "window edge", "SACK block", "window probe"):
        assert name in names
    retx = tsg.traces[names.index("retransmission")]
    assert retx.kind is Kind.SEGMENTS and retx.keep is not None and retx.keep.all()
    assert [s.label for s in tsg.shades] == ["slow-start overrun", "receive window closed"]
