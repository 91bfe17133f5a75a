"""The TSG marks table: the report draws each mark as declared; the docs' legend is the table."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from tests.helpers.crafting import transfer, write
from tracekit.capture import read_capture
from tracekit.pipeline import analyze
from tracekit.report import marks
from tracekit.report.build import build_report
from tracekit.report.model import Kind, Plot, Report
from tracekit.schema import FATES

ROOT = Path(__file__).resolve().parent.parent
DOCS = ROOT / "docs" / "report.md"
LAB = ROOT / "fixtures" / "captures"
BEGIN = "<!-- legend: generated from tracekit/report/marks.py"
END = "<!-- end of legend -->"


def test_docs_legend_is_the_declared_table() -> None:
    text = DOCS.read_text(encoding="utf-8")
    match = re.search(re.escape(BEGIN) + r"[^\n]*-->\n\n(.*?)" + re.escape(END), text, re.S)
    assert match is not None, f"docs/report.md has no section between {BEGIN!r} and {END!r}"
    assert match.group(1) == marks.legend_markdown()


def test_names_are_unique_and_every_colour_and_symbol_is_described() -> None:
    names = [m.name for m in marks.MARKS]
    assert len(names) == len(set(names))
    for mark in marks.MARKS:
        assert mark.color in marks.COLOUR_NAMES, mark.name
        assert mark.shape  # a glyph or a shape for every symbol and kind drawn
    assert {m.fate for m in marks.FATE_MARKS} <= set(FATES)


def test_a_mark_needs_a_symbol_exactly_when_it_is_a_marker() -> None:
    with pytest.raises(ValueError):
        marks.Mark("x", marks.TSG, Kind.MARKERS, "#000000", "here", "nothing")
    with pytest.raises(ValueError):
        marks.Mark("x", marks.TSG, Kind.STEP, "#000000", "here", "nothing", symbol="x")


def _marked_plots(report: Report) -> list[Plot]:
    """The plots drawn from the marks table: TSGs (sender's and receiver's) and the merged one."""
    plots: list[Plot] = []
    for view in report.connections:
        for plot in (*view.plots, *view.receiver_plots):
            if plot is not None and (
                plot.title.startswith("Time-sequence graph") or plot.title.startswith("Departures")
            ):
                plots.append(plot)
    return plots


@pytest.fixture(scope="module")
def reports(tmp_path_factory: pytest.TempPathFactory) -> list[Report]:
    # The crafted transfer has every TSG event (resends, a probe, a keepalive, SACK and D-SACK,
    # duplicate ACKs, zero windows); the lab pairs add the receiver's view and the fates.
    crafted = write(tmp_path_factory.mktemp("marks") / "t.pcap", transfer())
    out = [build_report(analyze(read_capture(crafted)), ("t.pcap",))]
    for scenario in ("slow_start_overrun", "receiver_drops"):
        pair = (read_capture(LAB / scenario / name) for name in ("sender.pcap", "receiver.pcap"))
        out.append(build_report(analyze(*pair), (scenario,)))
    return out


def test_the_report_draws_each_mark_as_declared(reports: list[Report]) -> None:
    declared = {m.name: m for m in marks.MARKS}
    seen = set()
    for report in reports:
        for plot in _marked_plots(report):
            for trace in plot.traces:
                mark = declared[trace.name]
                seen.add(mark.name)
                assert (trace.kind, trace.color) == (mark.kind, mark.color), trace.name
                if mark.symbol is not None:
                    assert trace.symbol == mark.symbol, trace.name
                if mark.keep:
                    assert trace.keep is not None and trace.keep.all(), trace.name
                else:
                    assert trace.keep is None, trace.name
    # Every mark but the capture gaps, which no bundled pair has, is drawn somewhere.
    gaps = {marks.SENDER_CAPTURE_GAP.name, marks.RECEIVER_CAPTURE_GAP.name}
    assert seen == set(declared) - gaps
