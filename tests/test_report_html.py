"""The rendered page is one self-contained, escaped document that carries the data faithfully."""

from __future__ import annotations

import base64
import html
import json
import re
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from tracekit.report.html import DRAW_COST, PLOTLY_JS, Budget, render, write
from tracekit.report.model import ConnectionView, Kind, Plot, Report, Shade, Table, Trace

HOSTILE = '</script><script>window.pwned=1</script><!-- "quoted" & <b>bold</b>'


def small_report(name: str = "10.0.0.1:5001", n: int = 50) -> Report:
    t = np.linspace(0.0, 1.0, n)
    seq = np.arange(n, dtype=np.int64) * 1448
    retx = np.zeros(n, bool)
    retx[[7, 30]] = True
    tsg = Plot(
        f"TSG {name}",
        "time (s)",
        "sequence (bytes)",
        (
            Trace(f"data {name}", Kind.SEGMENTS, t, seq, y_end=seq + 1448),
            Trace("retransmission", Kind.SEGMENTS, t[retx], seq[retx], seq[retx] + 1448),
            Trace("ACK", Kind.STEP, t + 0.04, seq),
            Trace("probe", Kind.MARKERS, t[:2], seq[:2], symbol="diamond"),
        ),
        (Shade(0.2, 0.4, f"finding {name}"),),
    )
    rtt = Plot("RTT", "time (s)", "RTT (ms)", (Trace("RTT", Kind.LINE, t, 80 + t),))
    view = ConnectionView(name, (("peer", name),), (tsg, rtt), (tsg,))
    return Report(
        title=f"report {name}",
        overview=Table(("#", "peer", "bytes"), ((1, name, 1000),), links=(0,)),
        findings=Table(("#", "finding"), ((1, name),), links=(0,)),
        connections=(view,),
        inputs=(f"/captures/{name}.pcap",),
        version="0.1.0",
    )


def embedded_data(page: str) -> dict[str, Any]:
    match = re.search(r'<script type="application/json" id="tk-data">(.*?)</script>', page, re.S)
    assert match is not None
    data: dict[str, Any] = json.loads(match.group(1))
    return data


def decode(enc: dict[str, Any]) -> np.ndarray:
    raw = np.frombuffer(base64.b64decode(enc["b64"]), dtype="<" + enc["dtype"])
    return enc["base"] + raw.astype(np.float64) * enc["scale"]


def test_plotly_is_inlined_once_and_nothing_is_fetched() -> None:
    page = render(small_report())
    assert page.count("plotly.js (gl2d - minified)") == 1
    assert "<script src" not in page and "<link" not in page
    assert "default-src 'none'" in page  # the CSP forbids every fetch


def test_hostile_strings_are_escaped_everywhere() -> None:
    page = render(small_report(HOSTILE))
    assert HOSTILE not in page
    # Exactly the page's own three script elements close: the hostile text closes none.
    assert page.count("</script>") == 3
    assert "<!--" not in page
    assert "&lt;/script&gt;&lt;script&gt;window.pwned=1" in page  # shown as text
    data = embedded_data(page)
    names = [t["name"] for p in data["plots"] for t in p["traces"]]
    # Text that plotly renders as HTML arrives entity-escaped, so it reads as the original.
    assert names[0] == html.escape(f"data {HOSTILE}", quote=True)
    assert html.unescape(names[0]) == f"data {HOSTILE}"


def test_data_round_trips_exactly_enough() -> None:
    report = small_report(n=500)
    data = embedded_data(render(report))
    sender = data["plots"][0]
    segments = sender["traces"][0]
    assert segments["kind"] == "segments" and segments["n"] == 500
    truth = report.connections[0].plots[0].traces[0]
    np.testing.assert_allclose(decode(segments["x"]), truth.x, atol=0.6e-6)
    np.testing.assert_array_equal(decode(segments["y"]), truth.y)
    assert truth.y_end is not None
    np.testing.assert_array_equal(decode(segments["y_end"]), truth.y_end)
    assert sender["shades"] == [
        {"x0": 0.2, "x1": 0.4, "label": "finding 10.0.0.1:5001", "color": Shade(0, 1, "").color}
    ]


def test_big_sequence_numbers_stay_exact() -> None:
    t = np.arange(4.0)
    seq = np.array([0, 5_000_000_000, 7_000_000_001, 2**40], dtype=np.int64)
    plot = Plot("p", "time (s)", "sequence (bytes)", (Trace("a", Kind.STEP, t, seq),))
    view = ConnectionView("c", (), (plot,))
    report = Report("r", Table((), ()), Table((), ()), (view,), (), "0")
    enc = embedded_data(render(report))["plots"][0]["traces"][0]["y"]
    np.testing.assert_array_equal(decode(enc), seq)


def test_decimation_keeps_marked_points_and_respects_the_budget() -> None:
    n = 100_000
    t = np.linspace(0, 10, n)
    seq = np.arange(n, dtype=np.float64)
    keep = np.zeros(n, bool)
    keep[::997] = True
    trace = Trace("data", Kind.SEGMENTS, t, seq, y_end=seq + 1, keep=keep)
    view = ConnectionView("c", (), (Plot("p", "time (s)", "seq", (trace,)),))
    report = Report("r", Table((), ()), Table((), ()), (view,), (), "0")
    # A segment costs DRAW_COST[SEGMENTS] line points: 40 000 buys at most 4 000 segments.
    budget = Budget(total_cost=40_000, floor_points=100)
    assert DRAW_COST[Kind.SEGMENTS] == 10
    enc = embedded_data(render(report, budget))
    out = enc["plots"][0]["traces"][0]
    assert out["n_raw"] == n
    assert out["n"] <= 4_000 + keep.sum()
    drawn = set(np.rint(decode(out["y"])).astype(int).tolist())
    assert set(np.flatnonzero(keep).tolist()) <= drawn
    assert out["gl"] is False  # under webgl_from_points after thinning


def test_tables_escape_cells_and_mark_numbers() -> None:
    page = render(small_report(HOSTILE))
    assert '<td class="num" data-n="1000.0">1,000</td>' in page
    assert '<a href="#conn-0" data-open="conn-0">1</a>' in page


def test_sections_beyond_the_budget_start_closed() -> None:
    base = small_report()
    views = base.connections * 3
    report = Report(base.title, base.overview, base.findings, views, base.inputs, "0")
    page = render(report, Budget(open_connections=2))
    assert page.count('class="connection" id="conn-') == 3
    assert page.count("<details") == 3 and page.count(" open>") == 2


def test_write_is_atomic_and_leaves_no_temporary(tmp_path: Path) -> None:
    out = write(small_report(), tmp_path / "report.html")
    assert out.read_text(encoding="utf-8").endswith("</html>\n")
    assert [p.name for p in tmp_path.iterdir()] == ["report.html"]


def test_write_into_a_missing_directory_fails_cleanly(tmp_path: Path) -> None:
    with pytest.raises(FileNotFoundError):
        write(small_report(), tmp_path / "no" / "report.html")


def test_vendored_plotly_is_packaged() -> None:
    here = Path(__file__).parent.parent / "tracekit" / "report" / PLOTLY_JS
    assert here.stat().st_size > 1_000_000


def test_empty_traces_and_missing_values_render() -> None:
    t = np.array([0.0, 1.0, 2.0])
    rtt = np.array([80.0, np.nan, 81.5])
    plot = Plot(
        "RTT",
        "time (s)",
        "RTT (ms)",
        (
            Trace("RTT", Kind.MARKERS, t, rtt),
            Trace("none", Kind.SEGMENTS, np.zeros(0), np.zeros(0), y_end=np.zeros(0)),
        ),
    )
    report = Report("r", Table((), ()), Table((), ()), (ConnectionView("c", (), (plot,)),), (), "0")
    rtt_out, empty_out = embedded_data(render(report))["plots"][0]["traces"]
    np.testing.assert_allclose(decode(rtt_out["y"]), rtt)  # NaN stays a gap, not a zero
    assert empty_out["n"] == 0 and len(decode(empty_out["x"])) == 0
