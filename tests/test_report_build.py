"""Analysis -> report: the traces a user sees match the crafted transfer's known events."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
from click.testing import CliRunner
from tracekit.cli.main import cli

from tests.helpers.browser import Browser, png_pixels
from tests.helpers.crafting import CLIENT, SERVER, tcp, transfer, write
from tracekit.findings import Severity
from tracekit.pipeline import analyze_files
from tracekit.report.build import ReportConfig, build_report
from tracekit.report.html import Budget, render
from tracekit.report.model import Deferred, Report


@pytest.fixture(scope="module")
def capture(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return write(tmp_path_factory.mktemp("report") / "t.pcap", transfer())


def _traces(capture: Path) -> dict[str, object]:
    report = build_report(analyze_files(capture), (str(capture),))
    (view,) = report.connections
    tsg = view.plots[0]
    # Each trace's points alone: a trace may hold its table's columns and a mask of its rows.
    return {t.name: t.whole() for t in tsg.traces}


def test_tsg_marks_every_event_of_the_transfer(capture: Path) -> None:
    traces = _traces(capture)
    # By construction: C resent and G partly resent; one probe, one keepalive; three SACK
    # blocks and one D-SACK; three duplicate ACKs; two zero-window ACKs.
    counts = {name: len(t) for name, t in traces.items()}  # type: ignore[arg-type]
    assert counts["data"] == 6
    assert counts["retransmitted"] == 2
    assert counts["window probe"] == 1
    assert counts["keepalive"] == 1
    assert counts["SACK"] == 3
    assert counts["D-SACK"] == 1
    assert counts["duplicate ACK"] == 3
    assert counts["zero window"] == 2
    resent = traces["retransmitted"]
    np.testing.assert_array_equal(resent.y, [2001, 5501])
    np.testing.assert_array_equal(resent.y_end, [3001, 6501])
    # Markers the decimation must never drop.
    assert resent.keep is not None and resent.keep.all()


def test_overview_and_config(capture: Path) -> None:
    report = build_report(analyze_files(capture), ("t.pcap",), ReportConfig(rate_window_s=0.5))
    (row,) = report.overview.rows
    columns = report.overview.columns
    assert row[columns.index("bytes a->b")] == 8000
    assert row[columns.index("retransmitted a->b")] == 2
    assert report.overview.links == (0,)
    rate = report.connections[0].plots[1]
    assert rate.traces[0].name == "sent, 500.0 ms avg"
    with pytest.raises(ValueError):
        ReportConfig(rate_window_s=0)


def test_file_names_are_escaped(tmp_path: Path) -> None:
    hostile = tmp_path / "x<script>alert(1)<!--.pcap"
    hostile.write_bytes(write(tmp_path / "plain.pcap", transfer()).read_bytes())
    out = tmp_path / "r.html"
    result = CliRunner().invoke(cli, ["report", str(hostile), "-o", str(out)])
    assert result.exit_code == 0, result.output
    html = out.read_text()
    assert "<script>alert(1)" not in html
    assert "alert(1)" in html  # shown, escaped


@pytest.mark.browser
def test_report_of_a_real_transfer_opens_in_chromium(capture: Path, tmp_path: Path) -> None:
    out = tmp_path / "r.html"
    result = CliRunner().invoke(cli, ["report", str(capture), "-o", str(out)])
    assert result.exit_code == 0, result.output
    with Browser() as browser:
        page = browser.open(
            out,
            "window.tracekitStatus && window.tracekitStatus.ready",
            "JSON.stringify(window.tracekitStatus)",
        )
    status = json.loads(page.value)
    assert page.console_errors == [] and page.exceptions == [] and status["errors"] == []
    assert page.requests == []  # nothing fetched: the page is self-contained
    # Four plots for the one connection, each with its traces drawn.
    assert len(status["plots"]) == 4
    assert all(n > 0 for n in status["plots"].values())
    _, _, pixels = png_pixels(page.screenshot_png)
    assert len(set(pixels[i : i + 3] for i in range(0, len(pixels), 3 * 97))) > 20


LAB = Path(__file__).resolve().parent.parent / "fixtures" / "captures"


def _lab_report(scenario: str) -> Report:
    from tracekit.capture import read_capture
    from tracekit.pipeline import analyze

    folder = LAB / scenario
    # The lab numbers UDP datagrams as UDPmon does, which is the default layout.
    analysis = analyze(read_capture(folder / "sender.pcap"), read_capture(folder / "receiver.pcap"))
    return build_report(analysis, (scenario,))


def test_two_vantage_views_mark_the_receiver_drops() -> None:
    truth = json.loads((LAB / "receiver_drops" / "truth.json").read_text())
    report = _lab_report("receiver_drops")
    (view,) = report.connections
    titles = [p.title for p in view.plots]
    assert "Departures and arrivals, sender and receiver captures merged" in titles
    combined = view.plots[
        titles.index("Departures and arrivals, sender and receiver captures merged")
    ]
    marks = {t.name: len(t) for t in combined.traces}
    assert marks["receiver drop"] == truth["drops"]["receiver"]
    assert "network drop" not in marks
    # The receiver's TSG is drawn beside the sender's, on the sender's clock.
    (receiver_tsg,) = view.receiver_plots
    assert "receiver's view" in receiver_tsg.title
    delay = view.plots[titles.index("One-way delay and queueing delay above its minimum")]
    # The path's one-way delay (truth: the relay's fixed delay) is the floor of the curve.
    owd_ms = delay.traces[0].y
    assert abs(np.min(owd_ms) - truth["path"]["one_way_delay_fwd_ms"]) < 1.0


def test_udp_stream_view_marks_the_lost_numbers() -> None:
    truth = json.loads((LAB / "udp_loss" / "truth.json").read_text())
    report = _lab_report("udp_loss")
    (view,) = report.connections
    lost = {t.name: t for t in view.plots[0].traces}["lost"]
    # Lost between the two capture points: exactly the bottleneck's drops.
    assert len(lost) == truth["drops"]["network"]


def test_plots_open_on_the_connection_and_its_data(capture: Path) -> None:
    report = build_report(analyze_files(capture), ("t.pcap",))
    (view,) = report.connections
    # The crafted connection runs from 0 to 10.1 s; every plot opens on that span.
    for plot in view.plots:
        assert plot.x_range is not None
        assert plot.x_range[0] < 0 < 10.1 < plot.x_range[1] < 10.5
    # Data reach byte 6,501; the window edge (about 72 kB) is far above: off the chart.
    low, high = view.plots[0].y_range
    assert low < 1 and 6501 < high < 7000


def test_receiver_view_follows_the_nat_map(tmp_path: Path) -> None:
    from scapy.layers.inet import IP

    from tracekit.capture import read_capture
    from tracekit.pipeline import analyze

    sender = write(tmp_path / "s.pcap", transfer())
    # The receiver sees the client behind a NAT, as 192.0.2.9.
    natted = []
    for p in transfer():
        q = p.copy()
        if q[IP].src == CLIENT:
            q[IP].src = "192.0.2.9"
        if q[IP].dst == CLIENT:
            q[IP].dst = "192.0.2.9"
        del q[IP].chksum
        natted.append(q)
    receiver = write(tmp_path / "r.pcap", natted)
    analysis = analyze(read_capture(sender), read_capture(receiver), addr_map={CLIENT: "192.0.2.9"})
    (view,) = build_report(analysis, ("s", "r")).connections
    (tsg,) = view.receiver_plots
    # The receiver saw every segment the sender sent: the same six data bars.
    assert len({t.name: t for t in tsg.traces}["data"]) == 6


def _many_connections(path: Path, sizes: tuple[int, ...]) -> Path:
    """Connection 0: 5,000 bytes a->b and findings (a resend); then one connection per size,
    that many bytes a->b in one segment."""
    packets = list(transfer())
    for i, size in enumerate(sizes):
        port, t = 41000 + i, 5.0 + i
        packets += [
            tcp(t, CLIENT, SERVER, port, 80, "S", 0),
            tcp(t + 0.01, SERVER, CLIENT, 80, port, "SA", 0, 1),
            tcp(t + 0.02, CLIENT, SERVER, port, 80, "A", 1, 1, size),
            tcp(t + 0.03, SERVER, CLIENT, 80, port, "A", 1, 1 + size),
        ]
    return write(path, sorted(packets, key=lambda p: float(p.time)))


def test_overview_lists_the_drawn_the_found_and_the_busiest(capture: Path, tmp_path: Path) -> None:
    """A load test's capture lists a bounded number of connections: the drawn one, then the
    one with findings, then the busiest; the note says how many more `tracekit flows` has."""
    path = _many_connections(tmp_path / "many.pcap", (20_000, 3_000, 1_000, 2_000))
    analysis = analyze_files(path)
    assert {f.conn for f in analysis.findings} == {0}
    config = ReportConfig(max_connections=1, max_listed_connections=3)
    report = build_report(analysis, ("many.pcap",), config)
    assert [row[0] for row in report.overview.rows] == [0, 1, 2]  # found, drawn, next busiest
    assert report.overview.links == (None, 0, None)
    assert any(note.startswith("2 more connections") for note in report.notes)
    everything = build_report(analysis, ("many.pcap",), ReportConfig(max_connections=1))
    assert len(everything.overview.rows) == 5
    assert not any("more connections" in note for note in everything.notes)
    with pytest.raises(ValueError):
        ReportConfig(max_connections=5, max_listed_connections=2)


def test_a_udp_stream_only_the_receiver_capture_holds_is_drawn() -> None:
    # Another host's numbered UDP stream through the same bottleneck: it is in the receiver's
    # capture only, numbered by that capture's connections. Its view names its own endpoints,
    # from the relay's record of the flow, not a sender connection of the same number.
    sweep = Path(__file__).resolve().parents[1] / "fixtures" / "sweep" / "cross_udp_tcp_20m"
    truth = json.loads((sweep / "truth.json").read_text())
    udp = truth["cross_traffic"]["flows"]["cross_udp"]["bottleneck"]
    analysis = analyze_files(sweep / "sender.pcap.zst", sweep / "receiver.pcap.zst")
    titles = [v.title for v in build_report(analysis, ("s", "r")).connections]
    assert f"UDP stream 1 (receiver capture): {udp['src']} -> {udp['dst']}" in titles


def test_min_severity_lists_only_findings_at_or_above_it() -> None:
    root = Path(__file__).resolve().parent.parent / "fixtures/captures/slow_start_overrun"
    analysis = analyze_files(root / "sender.pcap")
    info = [f for f in analysis.findings if f.severity.value == "info"]
    above = [f for f in analysis.findings if f.severity.value != "info"]
    assert info and above, "the capture has findings of both kinds"
    report = build_report(analysis, ("x",), ReportConfig(min_severity=Severity.WARNING))
    assert [row[1] for row in report.findings.rows] == [f.kind for f in above]
    assert any(f"{len(info)} finding" in n and "below warning" in n for n in report.notes)
    # The verdict reads every finding: rate_limit_cause is info, and still leads.
    assert report.verdicts and all(v.held_back for v in report.verdicts)
    whole = build_report(analysis, ("x",))
    assert len(whole.findings.rows) == len(analysis.findings)
    assert not any("below" in n for n in whole.notes)


def test_plots_built_as_the_page_encodes_them_make_the_same_page(tmp_path: Path) -> None:
    """Deferred plots, built one at a time as the page encodes them, give the page that plots
    built beforehand give: with a receiver capture, with several connections (whose overview
    stacks their throughput), and over a data limit that thins traces (a plot built again)."""
    many = _many_connections(tmp_path / "many.pcap", (20_000, 3_000))
    pair = LAB / "clean"  # 6,249 segments: traces a 20 kB limit thins
    for analysis, thinned in (
        (analyze_files(pair / "sender.pcap", pair / "receiver.pcap"), True),
        (analyze_files(many), False),
    ):
        eager = build_report(analysis, ("x",))
        deferred = build_report(analysis, ("x",), deferred=True)
        # Each plot is built as the page encodes it, but the throughput plot of a connection
        # whose throughput the overview stacks: built once, for both.
        stacked = deferred.overview_plot is not None
        for v in deferred.connections:
            assert all(
                isinstance(p, Deferred) != (stacked and i == 1) for i, p in enumerate(v.plots)
            )
        for budget in (Budget(), Budget(max_bytes=20_000)):
            page = render(deferred, budget)
            assert page == render(eager, budget)
        assert ("carried thinned" in page) is thinned


@pytest.mark.parametrize("limit", [None, 20_000])
def test_plots_encoded_while_the_analysis_runs_make_the_same_page(limit: int | None) -> None:
    """The receiver's TSG and the delay plot, encoded as soon as the receiver's series and the
    merge are made (their tables then let go: no detector reads them), give the page that the
    analysis holding every table gives; over a data limit too, which thins their traces. The
    whole analysis keeps every table of the receiver's series: the ones the report asks for
    (RECEIVER_TABLES) are all its page reads."""
    from tracekit.report.build import RECEIVER_TABLES
    from tracekit.report.early import EarlyPlots
    from tracekit.report.model import Encoded

    pair = (LAB / "clean" / "sender.pcap", LAB / "clean" / "receiver.pcap")
    budget = Budget() if limit is None else Budget(max_bytes=limit)
    whole = analyze_files(*pair)
    assert whole.receiver is not None and not whole.receiver.series.rtt.empty
    encoded: list[int] = []
    early = EarlyPlots(
        budget=budget,
        min_packets=0,
        after_plot=lambda: encoded.append(len(early.delay) + len(early.receiver)),
    )
    lean = analyze_files(*pair, receiver_series=RECEIVER_TABLES, early=early)
    # What the page draws of them was encoded, and the tables are gone; the command's step
    # (it gives memory back) came as the plots were encoded, and once each was.
    assert early.delay and early.receiver
    assert encoded == sorted(encoded)
    assert set(range(1, len(early.delay) + len(early.receiver) + 1)) <= set(encoded)
    assert lean.merge is not None and lean.merge.delay.empty and not whole.merge.delay.empty
    assert lean.receiver is not None and lean.receiver.series.segments.empty
    report = build_report(lean, ("x",), deferred=True, early=early)
    (view,) = report.connections
    assert isinstance(view.receiver_plots[0], Encoded) and isinstance(view.plots[-1], Encoded)
    page = render(report, budget)
    assert page == render(build_report(whole, ("x",), deferred=True), budget)
    assert ("carried thinned" in page) is (limit is not None)
