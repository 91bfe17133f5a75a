"""The report in a real headless Chromium: it loads cleanly, draws every plot, links zoom."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from browser import Browser, PageResult, chromium_available, png_pixels
from test_report_html import HOSTILE, small_report

from tracekit.report.html import Budget, write
from tracekit.report.model import ConnectionView, Kind, Plot, Report, Table, Trace
from tracekit.report.synthetic import synthetic_report

pytestmark = [
    pytest.mark.browser,
    pytest.mark.skipif(not chromium_available(), reason="needs /usr/bin/chromium"),
]

READY = "window.tracekitStatus && window.tracekitStatus.ready"
STATUS = "JSON.stringify(window.tracekitStatus)"
EXPECTED = (
    "JSON.stringify(Array.from(document.querySelectorAll('details[open] .plot'),"
    " d => [d.id, +d.dataset.traces]))"
)


@pytest.fixture(scope="module")
def browser() -> Any:
    with Browser() as b:
        yield b


def load(browser: Browser, path: Path, value: str = STATUS) -> PageResult:
    # Tall enough that every plot of the first connection is on screen, so all of them draw.
    return browser.open(path, READY, value, timeout=30, scale=0.25, height=2400)


def test_synthetic_report_loads_draws_every_plot_and_is_not_blank(
    browser: Browser, tmp_path: Path
) -> None:
    path = write(synthetic_report(3_000), tmp_path / "report.html")
    result = load(browser, path, f"[{STATUS}, {EXPECTED}]")
    assert result.console_errors == [] and result.exceptions == []
    assert result.requests == []
    status, expected = json.loads(result.value[0]), json.loads(result.value[1])
    assert status["errors"] == []
    assert len(expected) == 5  # sender TSG, receiver TSG, throughput, RTT, flight
    assert status["plots"] == {plot_id: n for plot_id, n in expected}
    width, height, pixels = png_pixels(result.screenshot_png)
    grey = np.frombuffer(pixels, np.uint8).reshape(height, width, 3).mean(axis=2)
    assert (width, height) == (
        350,
        600,
    ) and grey.std() > 10  # text, lines and plots, not a blank page
    # Plenty of distinct shades: a blank or single-colour page has a handful at most.
    assert len(np.unique(grey.astype(np.uint8))) > 40


def test_hostile_strings_do_not_run(browser: Browser, tmp_path: Path) -> None:
    path = write(small_report(HOSTILE), tmp_path / "hostile.html")
    result = load(browser, path, f"[window.pwned === undefined, document.title, {STATUS}]")
    assert result.console_errors == [] and result.exceptions == []
    safe, title, status = result.value
    assert safe is True
    assert title == f"report {HOSTILE}"  # shown as text, exactly
    assert json.loads(status)["plots"] == {
        "plot-0-0-sender": 4,
        "plot-0-0-receiver": 4,
        "plot-0-1-sender": 1,
    }


def test_zoom_on_one_plot_moves_the_others(browser: Browser, tmp_path: Path) -> None:
    path = write(synthetic_report(3_000), tmp_path / "report.html")
    probe = """new Promise(done => {
      const tsg = document.getElementById('plot-0-0-sender');
      Plotly.relayout(tsg, {'xaxis.range': [0.4, 0.7]}).then(() => setTimeout(() => done(
        JSON.stringify(Array.from(document.querySelectorAll('#conn-0 .plot'),
          d => d._fullLayout.xaxis.range.map(v => +v.toFixed(3))))), 100));
    })"""
    ranges = json.loads(browser.open(path, READY, probe, scale=0.1, height=2400).value)
    assert len(ranges) == 5
    assert all(r == [0.4, 0.7] for r in ranges)


def test_a_plot_drawn_after_a_zoom_opens_zoomed(browser: Browser, tmp_path: Path) -> None:
    path = write(synthetic_report(3_000), tmp_path / "report.html")
    probe = """new Promise(done => {
      const tsg = document.getElementById('plot-0-0-sender');
      const flight = document.getElementById('plot-0-3-sender');
      const drawn = !!flight._fullLayout;
      Plotly.relayout(tsg, {'xaxis.range': [0.4, 0.7]}).then(() => {
        flight.scrollIntoView();
        setTimeout(() => done([drawn, flight._fullLayout.xaxis.range.map(v => +v.toFixed(3))]),
                   1500);
      });
    })"""
    drawn_before, flight_range = browser.open(path, READY, probe, scale=0.1, height=700).value
    assert drawn_before is False
    assert flight_range == [0.4, 0.7]


def test_table_sorts_by_number_when_a_header_is_clicked(browser: Browser, tmp_path: Path) -> None:
    base = small_report()
    # As text "1,000" < "200" < "30,000"; as numbers 200 < 1000 < 30000.
    rows = ((1, "b", 1000), (2, "a", 200), (3, "c", 30000))
    table = Table(("#", "peer", "bytes"), rows)
    report = Report(base.title, table, base.findings, base.connections, (), "0")
    path = write(report, tmp_path / "table.html")
    click = """(() => {
      const table = document.querySelector('table.overview');
      const column = (c) => Array.from(table.tBodies[0].rows, r => r.cells[c].textContent);
      const bytes = table.querySelectorAll('th')[2], peer = table.querySelectorAll('th')[1];
      bytes.click(); const up = column(2);
      bytes.click(); const down = column(2);
      peer.click(); const names = column(1);
      return JSON.stringify([up, down, names, peer.getAttribute('aria-sort'),
                             bytes.getAttribute('aria-sort')]);
    })()"""
    up, down, names, peer_sort, bytes_sort = json.loads(
        browser.open(path, READY, click, scale=0.1).value
    )
    assert up == ["200", "1,000", "30,000"]
    assert down == ["30,000", "1,000", "200"]
    assert names == ["a", "b", "c"]
    assert (peer_sort, bytes_sort) == ("ascending", "none")


def test_plots_below_the_screen_draw_when_scrolled_to(browser: Browser, tmp_path: Path) -> None:
    path = write(synthetic_report(400), tmp_path / "report.html")
    script = """new Promise(done => {
      const before = Object.keys(window.tracekitStatus.plots).sort();
      window.scrollTo(0, document.body.scrollHeight);
      setTimeout(() => done([before, Object.keys(window.tracekitStatus.plots).sort()]), 2000);
    })"""
    before, after = browser.open(path, READY, script, scale=0.1, height=700).value
    assert "plot-0-0-sender" in before and "plot-0-3-sender" not in before
    assert after == ["plot-0-0-receiver"] + [f"plot-0-{i}-sender" for i in range(4)]


def test_closed_section_draws_when_opened(browser: Browser, tmp_path: Path) -> None:
    path = write(
        synthetic_report(400, n_connections=2), tmp_path / "two.html", Budget(open_connections=1)
    )
    script = """new Promise(done => {
      const before = Object.keys(window.tracekitStatus.plots).length;
      document.getElementById('conn-1').open = true;
      setTimeout(() => done([before, Object.keys(window.tracekitStatus.plots).length]), 1500);
    })"""
    before, after = browser.open(path, READY, script, scale=0.1, height=5000).value
    assert (before, after) == (5, 10)


def test_empty_and_gappy_traces_draw_without_errors(browser: Browser, tmp_path: Path) -> None:
    t = np.array([0.0, 1.0, 2.0])
    plot = Plot(
        "RTT",
        "time (s)",
        "RTT (ms)",
        (
            Trace("RTT", Kind.MARKERS, t, np.array([80.0, np.nan, 81.5])),
            Trace("none", Kind.SEGMENTS, np.zeros(0), np.zeros(0), y_end=np.zeros(0)),
            Trace("steps", Kind.STEP, t, np.array([1.0, np.nan, 3.0])),
        ),
    )
    view = ConnectionView("c", (), (plot,))
    report = Report("r", Table((), ()), Table((), ()), (view,), (), "0")
    result = load(browser, write(report, tmp_path / "gaps.html"))
    assert result.console_errors == [] and result.exceptions == []
    assert json.loads(result.value)["plots"] == {"plot-0-0-sender": 3}


@pytest.mark.slow
def test_five_million_packet_report_fits_the_budget(tmp_path: Path) -> None:
    # A 5 M-packet capture gives a report under 25 MB that finishes loading, every plot of its
    # connection painted, in headless Chromium. How long that takes is the machine's and is
    # measured in bench/report.py (median and range of its turns), not asserted here.
    report = synthetic_report(5_000_000)
    n_raw = sum(len(t) for v in report.connections for p in v.plots for t in p.traces)
    assert n_raw > 5_000_000
    path = write(report, tmp_path / "big.html")
    assert path.stat().st_size < 25_000_000
    with Browser() as browser:
        result = browser.open(path, READY, STATUS, timeout=60, scale=0.25)
    assert result.console_errors == [] and result.exceptions == []
    status = json.loads(result.value)
    assert len(status["plots"]) == 5
    assert status["readyMs"] > 0
