"""The report and the terminal open on the problem: verdicts first, findings by severity with
their explanations, every drawn connection on one plot, a population summary for many.

Expected values come from the lab's truth.json, from tshark, or from how a capture was crafted;
never from tracekit's own output.
"""

from __future__ import annotations

import json
import re
import subprocess
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from click.testing import CliRunner
from tracekit.cli.main import cli

from tests.helpers.browser import Browser
from tests.helpers.crafting import CLIENT, SERVER, tcp, transfer, write
from tests.helpers.independent import tshark_directions
from tracekit.findings import Finding, Severity
from tracekit.pipeline import analyze_files
from tracekit.report.build import ReportConfig, build_report
from tracekit.report.html import render
from tracekit.report.verdict import evidence_value, verdicts

LAB = Path(__file__).resolve().parent.parent / "fixtures" / "captures"
PAIR = LAB / "slow_start_overrun"
READY = "window.tracekitStatus && window.tracekitStatus.ready"


@pytest.fixture(scope="module")
def pair_report(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("front") / "pair.html"
    result = CliRunner().invoke(
        cli,
        [
            "report",
            str(PAIR / "sender.pcap"),
            "--receiver",
            str(PAIR / "receiver.pcap"),
            "-o",
            str(out),
        ],
    )
    assert result.exit_code == 0, result.output
    return out


@pytest.fixture(scope="module")
def several(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Three real lab transfers merged into one capture, after a small control connection that
    opens first (as iperf3's does): connection order is not the order of their sizes."""
    folder = tmp_path_factory.mktemp("several")
    parts = [LAB / s / "sender.pcap" for s in ("receiver_drops", "window_oscillation")]
    parts.append(LAB / "window_limited" / "sender.pcap")
    # 2026-11-22 00:59:37 UTC: a second before the first transfer of the three starts.
    t0, port = 1795309177.0, 40999
    control = write(
        folder / "control.pcap",
        [
            tcp(t0, CLIENT, SERVER, port, 5201, "S", 0),
            tcp(t0 + 0.01, SERVER, CLIENT, 5201, port, "SA", 0, 1),
            tcp(t0 + 0.02, CLIENT, SERVER, port, 5201, "A", 1, 1, 37),
            tcp(t0 + 0.03, SERVER, CLIENT, 5201, port, "A", 1, 38, 1),
        ],
    )
    out = folder / "several.pcap"
    subprocess.run(
        ["mergecap", "-F", "pcap", "-w", str(out), str(control), *map(str, parts)], check=True
    )
    return out


def _tshark_busiest(path: Path) -> list[tuple[str, str]]:
    """TCP streams by payload bytes both ways, the busiest first, as (client, server)."""
    per = tshark_directions(path).reset_index()
    ends = per.groupby("stream").first()[["src", "dst"]]
    total = per.groupby("stream")["bytes"].sum().sort_values(ascending=False, kind="stable")
    return [(ends.at[s, "src"], ends.at[s, "dst"]) for s in total.index]


# --- the terminal -----------------------------------------------------------------------------


def _analyze(*args: str) -> Any:
    return CliRunner().invoke(
        cli,
        ["analyze", str(PAIR / "sender.pcap"), "--receiver", str(PAIR / "receiver.pcap"), *args],
    )


def test_analyze_opens_on_the_verdict_and_folds_info() -> None:
    truth = json.loads((PAIR / "truth.json").read_text())
    result = _analyze()
    assert result.exit_code == 0, result.output
    lines = result.output.splitlines()
    flow = truth["flow"]
    assert lines[0].startswith(f"connection 0: {flow['sender']} -> {flow['receiver']}")
    assert re.match(r"  a2b limited by \w", lines[1])
    # The worst finding: the truth's first label, slow start overrunning the bottleneck buffer.
    assert lines[2].startswith("  worst: [warning] slow_start_overrun (")
    assert lines[3].startswith("  change: ")
    # Warnings follow, and every info finding is folded into one count line.
    assert not any(line.startswith("[info]") for line in lines)
    assert any(line.startswith("[warning] network_drop") for line in lines)
    assert lines[-1] == "1 info finding hidden: -v shows them, or --min-severity info"


def test_analyze_verbose_explains_each_finding() -> None:
    truth = json.loads((PAIR / "truth.json").read_text())
    result = _analyze("-v")
    assert result.exit_code == 0, result.output
    text = result.output
    assert "[info] rate_limit_cause" in text and "hidden" not in text
    block = text.split("[warning] network_drop", 1)[1].split("\n[", 1)[0]
    # Explanation, evidence and advice, the evidence holding the bottleneck's drop counter.
    assert "    evidence:" in block and "    change: " in block
    drops = re.search(r"^\s+network_drops_packets\s+(\d+)$", block, re.M)
    assert drops is not None and int(drops.group(1)) == truth["drops"]["network"]


def test_min_severity_lists_and_counts() -> None:
    result = _analyze("--min-severity", "error")
    assert result.exit_code == 0, result.output
    assert not any(line.startswith("[") for line in result.output.splitlines())
    assert result.output.splitlines()[-1].endswith(
        "hidden: --min-severity info shows them"
    ) and re.search(r"^\d+ warning findings and 1 info finding hidden", result.output, re.M)
    shown = _analyze("--min-severity", "info")
    assert "[info] rate_limit_cause" in shown.output and "hidden" not in shown.output


def test_a_bad_min_severity_is_one_line_and_exit_2() -> None:
    result = _analyze("--min-severity", "loud")
    assert result.exit_code == 2
    assert len(result.stderr.strip().splitlines()) == 1
    assert "--min-severity" in result.stderr


def test_analyze_lists_the_busiest_connection_before_the_control_one(several: Path) -> None:
    result = CliRunner().invoke(cli, ["analyze", str(several)])
    assert result.exit_code == 0, result.output
    listed = re.findall(r"^connection \d+: (\S+) -> (\S+) ", result.output, re.M)
    # Troubled connections first, then the busiest: the control connection comes last.
    assert listed[-1] == _tshark_busiest(several)[-1]
    assert sorted(listed) == sorted(_tshark_busiest(several))


# --- the view model ---------------------------------------------------------------------------


def test_the_worst_finding_is_the_most_severe_and_then_the_earliest() -> None:
    def f(kind: str, severity: Severity, start: float) -> Finding:
        return Finding(kind, severity, 3, "a2b", start, start + 1, {}, "s", "e", f"do {kind}")

    verdict = f("rate_limit_cause", Severity.INFO, 0.0)
    v = verdicts([f("late", Severity.WARNING, 5.0), verdict, f("early", Severity.WARNING, 1.0),
                  f("note", Severity.INFO, 0.5)])[3]  # fmt: skip
    assert v.worst is not None and v.worst.kind == "early"
    # A warning outranks an info verdict: the overrun or drop is the thing to fix.
    assert v.change == "do early"
    calm = verdicts([verdict, f("note", Severity.INFO, 0.5)])[3]
    assert calm.change == "do rate_limit_cause"  # nothing worse: the verdict's advice
    # Where the application held the transfer, a loss did not set its rate: the verdict's
    # advice first; an error still outranks it.
    app = Finding(
        "rate_limit_cause", Severity.INFO, 3, "a2b", 0.0, 1.0,
        {"limit_class": "application"}, "s", "e", "do rate_limit_cause",
    )  # fmt: skip
    assert verdicts([app, f("early", Severity.WARNING, 1.0)])[3].change == "do rate_limit_cause"
    assert verdicts([app, f("broken", Severity.ERROR, 1.0)])[3].change == "do broken"
    graver = f("rate_limit_cause", Severity.WARNING, 0.0)
    assert verdicts([graver, f("early", Severity.WARNING, 1.0)])[3].change == "do rate_limit_cause"
    assert evidence_value("rate_bps", 26_400_000.0) == "26.4 Mbit/s"
    assert evidence_value("buffer_bytes", 74842) == "74,842 bytes"
    assert evidence_value("loss_fraction", 0.25) == "25.0%"
    assert evidence_value("times_s", tuple(float(i) for i in range(10))).endswith("(10 in all)")


def test_a_multi_connection_report_draws_the_busiest_first(several: Path) -> None:
    analysis = analyze_files(several)
    report = build_report(analysis, ("several",))
    busiest = _tshark_busiest(several)
    assert [re.search(r": (\S+) -> (\S+)$", v.title).groups() for v in report.connections] == [  # type: ignore[union-attr]
        tuple(ends) for ends in busiest
    ]
    # One verdict per drawn connection, in the same order.
    assert [v.link for v in report.verdicts] == list(range(len(busiest)))
    plot = report.overview_plot
    assert plot is not None
    stacked = [t for t in plot.traces if t.stack]
    assert len(stacked) == len(busiest)
    total = next(t for t in plot.traces if t.name == "sum")
    np.testing.assert_allclose(total.y, np.sum([t.y for t in stacked], axis=0))
    # --max-connections picks the busiest and draws them in that order too.
    two = build_report(analysis, ("several",), ReportConfig(max_connections=2))
    assert [v.title for v in two.connections] == [v.title for v in report.connections[:2]]
    assert report.population is None  # four connections: no population summary


# The one-segment connections of `many`: too little to judge what held them back.
ONE_SEGMENT = (300, 1200, 50, 7000, 20, 900, 4000, 10, 60, 2500, 80)


def many(tmp_path: Path) -> Path:
    """A troubled transfer (a resend and a zero-window stall) from port 40000, then one
    connection of one data segment from each port 41000 + i, ONE_SEGMENT[i] bytes."""
    packets = list(transfer())
    for i, size in enumerate(ONE_SEGMENT):
        port, t = 41000 + i, 11.0 + 0.1 * i
        packets += [
            tcp(t, CLIENT, SERVER, port, 80, "S", 0),
            tcp(t + 0.01, SERVER, CLIENT, 80, port, "SA", 0, 1),
            tcp(t + 0.02, CLIENT, SERVER, port, 80, "A", 1, 1, size),
            tcp(t + 0.03, SERVER, CLIENT, 80, port, "A", 1, 1 + size),
        ]
    return write(tmp_path / "many.pcap", sorted(packets, key=lambda p: float(p.time)))


def test_many_connections_get_a_population_summary(tmp_path: Path) -> None:
    sizes = ONE_SEGMENT
    path = many(tmp_path)
    report = build_report(analyze_files(path), ("many.pcap",))
    population = report.population
    assert population is not None
    per = tshark_directions(path).groupby("stream")["bytes"].sum()
    rows = {row[0]: row[1:] for row in population.distributions.rows}
    low, _, median, _, high = rows["bytes, both ways"]
    assert (low, median, high) == (per.min(), float(np.median(per)), per.max())
    assert population.summary.startswith(f"{len(per)} connections ({len(per)} TCP")
    # The crafted transfer is the one troubled connection, listed with its worst finding.
    ((_, a, b, *_),) = population.troubled.rows
    assert (a, b) == (f"{CLIENT}:40000", f"{SERVER}:80")
    kinds = {row[0]: row for row in population.kinds.rows}
    assert {"retransmissions", "zero_window_stall"} <= kinds.keys()
    page = render(report)
    # The population comes before the folded connections table.
    assert page.index('class="population"') < page.index('class="connections-table"')
    # The troubled transfer has a verdict card; the one-segment connections, which carry too
    # little to judge and found nothing, share one line above the population instead of a
    # card each, so the first screen reaches the population.
    cards = re.findall(r'<div class="verdict [^"]*"><p class="who">(.*?)</p>', page)
    assert len(cards) == 1 and f"{CLIENT}:40000" in cards[0]
    (line,) = re.findall(r'<p class="unjudged">(.*?)</p>', page)
    assert line.startswith(f"And {len(sizes)} connections with too little data")
    assert page.index('class="unjudged"') < page.index('class="population"')


def test_the_first_screen_says_what_held_back_every_connection_drawn_or_not(
    tmp_path: Path,
) -> None:
    path = many(tmp_path)
    report = build_report(analyze_files(path), ("many.pcap",), ReportConfig(max_connections=3))
    assert len(report.connections) == 3
    # Every connection tshark sees is counted under one cause, drawn or not.
    streams = tshark_directions(path).groupby("stream")
    assert sum(c.connections for c in report.causes) == len(streams)
    # The one-segment connections carry too little for a verdict; the crafted transfer is the
    # one troubled connection: its cause comes first, it first in it, linked to its plots
    # (the busiest, it is drawn).
    unjudged = next(c for c in report.causes if c.cause == "too little data to tell")
    assert unjudged.connections >= len(ONE_SEGMENT)
    first = report.causes[0]
    assert first.troubled == 1 and sum(c.troubled for c in report.causes) == 1
    troubled = first.listed[0]
    assert troubled.severity in ("warning", "error") and troubled.link == 0
    # Each listed connection is a link: to its plots when drawn, else to its worst finding
    # when it has one; the page opens on the causes, above the cards and the population.
    page = render(report)
    table = page[page.index('<table class="causes">') : page.index("</table>", page.index(
        '<table class="causes">'))]  # fmt: skip
    assert '<a href="#conn-0" data-open="conn-0">' in table
    assert page.index('class="causes"') < page.index('class="unjudged"')
    assert page.index('class="causes"') < page.index('class="population"')
    # Everything drawn: each connection has its own verdict, no summary.
    everything = build_report(analyze_files(path), ("many.pcap",), ReportConfig(max_connections=99))
    assert everything.causes == ()


def test_a_hostile_name_in_a_verdict_is_escaped(tmp_path: Path) -> None:
    hostile = tmp_path / "x<script>alert(1)<!--.pcap"
    hostile.write_bytes(write(tmp_path / "plain.pcap", transfer()).read_bytes())
    analysis = analyze_files(hostile)
    report = build_report(analysis, (str(hostile),))
    page = render(report)
    assert "<script>alert(1)" not in page
    assert "&lt;script&gt;alert(1)&lt;!--" in page
    assert page.count("</script>") == 4


# --- in a real browser ------------------------------------------------------------------------

FIRST_SCREEN = """(() => {
  const top = (el) => el ? el.getBoundingClientRect().top + scrollY : null;
  const verdicts = Array.from(document.querySelectorAll('.verdict'));
  const tables = Array.from(document.querySelectorAll('table')).filter(t => t.offsetParent);
  const info = document.querySelector('details.info-findings');
  const warning = document.querySelector('details.finding.sev-warning');
  const before = warning.querySelector('.finding-body').checkVisibility();
  warning.querySelector('summary').click();
  const body = warning.querySelector('.finding-body');
  return JSON.stringify({
    verdicts: verdicts.map(v => [top(v), v.getBoundingClientRect().bottom, v.innerText]),
    firstTable: Math.min(...tables.map(top)),
    screen: innerHeight,
    infoOpen: info.open,
    infoVisible: Array.from(info.querySelectorAll('details.finding'), d => d.checkVisibility()),
    infoCount: info.querySelectorAll('details.finding').length,
    before: before,
    expanded: warning.open,
    kind: warning.querySelector('summary b').textContent,
    explanation: body.querySelector('.explanation').innerText,
    evidence: Array.from(body.querySelectorAll('table.evidence tr'),
                         r => [r.cells[0] ? r.querySelector('th').innerText : '',
                               r.querySelector('td').innerText]),
    advice: body.querySelector('.advice').innerText,
    visible: body.checkVisibility(),
    height: body.getBoundingClientRect().height,
  });
})()"""


@pytest.mark.browser
def test_the_first_screen_shows_the_verdict_above_any_table(pair_report: Path) -> None:
    truth = json.loads((PAIR / "truth.json").read_text())
    with Browser(width=1400, height=900) as browser:
        page = browser.open(pair_report, READY, FIRST_SCREEN)
    assert page.console_errors == [] and page.exceptions == [] and page.requests == []
    seen = json.loads(page.value)
    ((_, bottom, text),) = seen["verdicts"]
    assert bottom <= seen["screen"]  # on the first screen
    assert bottom <= seen["firstTable"]  # above any table
    assert f"{truth['flow']['sender']} -> {truth['flow']['receiver']}" in text
    assert "limited by" in text and "slow_start_overrun" in text and "Change:" in text
    # Info findings are folded: present, closed, nothing of them drawn.
    assert seen["infoOpen"] is False and seen["infoCount"] >= 1
    assert not any(seen["infoVisible"])
    # Expanding a warning shows its explanation, its evidence as a table, and its advice.
    assert seen["before"] is False and seen["expanded"] is True
    assert seen["visible"] is True and seen["height"] > 0
    assert seen["explanation"] and seen["advice"].startswith("What to change:")
    evidence = dict(seen["evidence"])
    if seen["kind"] == "network_drop":
        assert evidence["network_drops_packets"] == str(truth["drops"]["network"])
    else:  # slow_start_overrun: its lost packets are among the bottleneck's drops
        assert seen["kind"] == "slow_start_overrun"
        assert 0 < int(evidence["lost_packets"]) <= truth["drops"]["network"]


@pytest.mark.browser
def test_a_multi_connection_report_shows_the_overview_busiest_first(
    several: Path, tmp_path: Path
) -> None:
    out = tmp_path / "several.html"
    result = CliRunner().invoke(cli, ["report", str(several), "-o", str(out)])
    assert result.exit_code == 0, result.output
    probe = """new Promise(done => {
      const wait = () => (window.tracekitStatus.plots['plot-overview']
        ? done(JSON.stringify({
            overview: window.tracekitStatus.plots['plot-overview'],
            stacked: document.getElementById('plot-overview').data.filter(t => t.stackgroup).length,
            verdicts: Array.from(document.querySelectorAll('.verdict .who'), v => v.innerText),
            unjudged: Array.from(document.querySelectorAll('.unjudged'), v => v.innerText),
            sections: Array.from(
              document.querySelectorAll('details.connection[id^="conn-"] summary'),
              s => s.innerText),
            overviewTop: document.getElementById('overview').getBoundingClientRect().top,
            tableTop: document.querySelector('table.overview').getBoundingClientRect().top,
            errors: window.tracekitStatus.errors}))
        : setTimeout(wait, 50));
      wait();
    })"""
    with Browser(width=1400, height=1600) as browser:
        page = browser.open(out, READY, probe, timeout=60)
    assert page.console_errors == [] and page.exceptions == []
    seen = json.loads(page.value)
    busiest = _tshark_busiest(several)
    assert seen["errors"] == []
    assert seen["stacked"] == len(busiest)
    assert seen["overview"] >= len(busiest) + 1  # the stacked connections and their sum
    for got, (a, b) in zip(seen["sections"], busiest, strict=True):
        assert f"{a} -> {b}" in got
    # The three lab transfers have a card each, busiest first; the control connection's 37
    # bytes are too little to judge, and it is named in one line after them.
    for got, (a, b) in zip(seen["verdicts"], busiest[:-1], strict=True):
        assert f"{a} -> {b}" in got
    (line,) = seen["unjudged"]
    assert line.startswith("And 1 connection with too little data to tell what held it back")
    assert seen["overviewTop"] < seen["tableTop"]
