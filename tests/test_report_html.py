"""The rendered page is one self-contained, escaped document that carries the data faithfully."""

from __future__ import annotations

import base64
import html
import json
import re
import shutil
import subprocess
import zlib
from dataclasses import replace
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tracekit.report import html as report_html
from tracekit.report.decimate import decimate, never_back
from tracekit.report.html import DRAW_COST, PLOTLY_JS, Budget, render, write
from tracekit.report.model import (
    ConnectionView,
    Encoded,
    Kind,
    Plot,
    Report,
    ReportError,
    Shade,
    Table,
    Trace,
)

ROOT = Path(__file__).resolve().parents[1]
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
    """The page's data, each column's bytes in it: those of an opening view in the data element,
    every point of a trace with an opening level in an element of its own after the scripts."""
    match = re.search(r'<script type="application/json" id="tk-data">(.*?)</script>', page, re.S)
    assert match is not None
    data: dict[str, Any] = json.loads(match.group(1))
    later = dict(
        re.findall(r'<script type="application/octet-stream" id="([^"]+)">([^<]*)</script>', page)
    )
    # plotly.js and the script that starts it first; the data, the page's script, the rest.
    app = page.index("<script>", page.index('id="tk-data"'))
    assert (
        page.index('id="tk-plotly"')
        < page.index("<script>")
        < page.index('id="tk-data"')
        < app
        < min((page.index(f'id="{el}"') for el in later), default=len(page))
    )
    for plot in data["plots"]:
        for column in plot["columns"]:
            assert ("b64" in column) != ("el" in column)
            if "el" in column:
                column["b64"] = later.pop(column["el"])
    assert later == {}
    return data


def decode(enc: dict[str, Any]) -> np.ndarray:
    """A column as the page's format defines it, decoded with numpy (not report.js)."""
    size, n = np.dtype("<" + enc["dtype"]).itemsize, enc["n"]
    planes = np.frombuffer(zlib.decompress(base64.b64decode(enc["b64"])), np.uint8)
    # Shuffled a piece of enc["piece"] values at a time: each piece's first bytes, then its
    # second bytes, and so on.
    pieces = [
        planes[a * size : b * size].reshape(size, b - a).T
        for a, b in ((a, min(a + enc["piece"], n)) for a in range(0, n, enc["piece"]))
    ]
    raw = (
        np.concatenate(pieces).copy().view("<" + enc["dtype"]).ravel()
        if pieces
        else np.empty(0, "<" + enc["dtype"])
    )
    if enc["delta"]:
        z = raw.astype(np.int64)
        raw = np.cumsum((z >> 1) ^ -(z & 1))
    return np.asarray(enc["base"] + raw.astype(np.float64) * enc["scale"])


def arrays(plot: dict[str, Any], trace: dict[str, Any]) -> dict[str, np.ndarray]:
    """A trace's x, y and (bars) y_end as the page carries them."""
    out = {k: decode(plot["columns"][trace[k]]) for k in ("x", "y")}
    if trace["y_end"] is not None:
        enc = plot["columns"][trace["y_end"]]
        out["y_end"] = decode(enc) + (out["y"] if enc.get("plus_other") else 0)
    return out


def test_plotly_is_inlined_once_and_nothing_is_fetched() -> None:
    page = render(small_report())
    assert page.count("plotly.js (basic - minified)") == 1
    # V8 compiles all of it off the main thread when the hint is its first line.
    assert '<script type="text/plain" id="tk-plotly">//# allFunctionsCalledOnLoad\n/*' in page
    assert "<script src" not in page and "<link" not in page
    assert "default-src 'none'" in page  # the CSP forbids every fetch


def test_hostile_strings_are_escaped_everywhere() -> None:
    page = render(small_report(HOSTILE))
    assert HOSTILE not in page
    # Exactly the page's own four script elements close: the hostile text closes none.
    assert page.count("</script>") == 4
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
    got = arrays(sender, segments)
    np.testing.assert_allclose(got["x"], truth.x, atol=0.6e-6)
    np.testing.assert_array_equal(got["y"], truth.y)
    assert truth.y_end is not None
    np.testing.assert_array_equal(got["y_end"], truth.y_end)
    assert sender["shades"] == [
        {"x0": 0.2, "x1": 0.4, "label": "finding 10.0.0.1:5001", "color": Shade(0, 1, "").color}
    ]


def test_big_sequence_numbers_stay_exact() -> None:
    t = np.arange(4.0)
    seq = np.array([0, 5_000_000_000, 7_000_000_001, 2**40], dtype=np.int64)
    plot = Plot("p", "time (s)", "sequence (bytes)", (Trace("a", Kind.STEP, t, seq),))
    view = ConnectionView("c", (), (plot,))
    report = Report("r", Table((), ()), Table((), ()), (view,), (), "0")
    plot = embedded_data(render(report))["plots"][0]
    np.testing.assert_array_equal(arrays(plot, plot["traces"][0])["y"], seq)


def test_every_point_is_carried_sorted_by_time_and_shared_columns_once() -> None:
    # Times out of order (a capture clock stepping back) come sorted, each y with its own x.
    rng = np.random.default_rng(5)
    n = 200_000
    t = np.sort(rng.uniform(0, 30, n))
    t[1000:1010] = t[1000:1010][::-1]
    seq = np.arange(n, dtype=np.int64) * 1448
    ack = Trace("ACK line", Kind.STEP, t, seq)
    edge = Trace("window edge", Kind.STEP, t, seq + 65535, fit=False)
    bars = Trace("data", Kind.SEGMENTS, t, seq, y_end=seq + 1448)
    plot = Plot("p", "time (s)", "seq", (bars, ack, edge))
    report = Report("r", Table((), ()), Table((), ()), (ConnectionView("c", (), (plot,)),), (), "0")
    out = embedded_data(render(report))["plots"][0]
    order = np.argsort(t, kind="stable")
    for trace in out["traces"]:
        assert trace["n"] == trace["n_raw"] == n
        got = arrays(out, trace)
        np.testing.assert_allclose(got["x"], t[order], atol=0.6e-6)
    np.testing.assert_array_equal(arrays(out, out["traces"][0])["y_end"], seq[order] + 1448)
    np.testing.assert_array_equal(arrays(out, out["traces"][2])["y"], seq[order] + 65535)
    assert [tr["fit"] for tr in out["traces"]] == [True, True, False]
    # The three traces share one time column; a full-sized bar's height costs nothing.
    assert out["traces"][0]["x"] == out["traces"][1]["x"] == out["traces"][2]["x"]
    assert sum(len(c["b64"]) for c in out["columns"]) < 0.1 * n * 8 * 4


def stepping_back(rng: np.random.Generator, n: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """n packets' times, sorted but for 40 runs of 20 reversed (a clock that steps back), their
    growing sequence numbers and their frame numbers."""
    t = np.sort(rng.uniform(0, 30, n))
    for at in rng.integers(0, n - 50, 40):
        t[at : at + 20] = t[at : at + 20][::-1]
    seq = np.cumsum(rng.integers(1, 3000, n))
    return t, seq, np.arange(1, n + 1, dtype=np.uint32)


def test_a_trace_out_of_time_order_is_carried_as_its_sorted_copy(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # A trace whose clock steps back is carried exactly as the same points sorted beforehand:
    # its columns (encoded a piece at a time, many pieces here) and its opening level.
    monkeypatch.setattr(report_html, "PIECE", 1000)
    rng = np.random.default_rng(11)
    n = 30_000
    t, seq, frame = stepping_back(rng, n)

    def carried(order: np.ndarray) -> dict[str, Any]:
        bars = Trace(
            "data", Kind.SEGMENTS, t[order], seq[order], y_end=seq[order] + 1448, frame=frame[order]
        )
        view = ConnectionView("c", (), (Plot("p", "time (s)", "seq", (bars,)),))
        report = Report("r", Table((), ()), Table((), ()), (view,), (), "0")
        plot: dict[str, Any] = embedded_data(render(report))["plots"][0]
        return plot

    as_captured = carried(np.arange(n))
    assert as_captured["traces"][0]["level"] is not None
    assert as_captured == carried(np.argsort(t, kind="stable"))


@pytest.mark.parametrize("limit", [None, 60_000])
def test_a_trace_of_masked_rows_is_carried_as_those_rows_alone(
    monkeypatch: pytest.MonkeyPatch, limit: int | None
) -> None:
    # A trace given as a table's columns and a mask of its rows (`Trace.rows`) is carried as
    # the same points copied out beforehand: every point in many pieces, each view's level, and
    # over a size limit the same thinning. The clock steps back in places, so the carried
    # points are a sort of the masked rows; some rows are marked to keep.
    monkeypatch.setattr(report_html, "PIECE", 1000)
    rng = np.random.default_rng(5)
    n = 40_000
    t, seq, frame = stepping_back(rng, n)
    keep = rng.random(n) < 0.001
    rows = rng.random(n) < 0.9

    def carried(trace: Trace) -> dict[str, Any]:
        view = ConnectionView("c", (), (Plot("p", "time (s)", "seq", (trace,)),))
        report = Report("r", Table((), ()), Table((), ()), (view,), (), "0")
        budget = Budget() if limit is None else Budget(max_bytes=limit)
        plot: dict[str, Any] = embedded_data(render(report, budget))["plots"][0]
        return plot

    masked = Trace(
        "data", Kind.SEGMENTS, t, seq, y_end=seq + 1448, keep=keep, frame=frame, rows=rows
    )
    alone = Trace(
        "data",
        Kind.SEGMENTS,
        t[rows],
        seq[rows],
        y_end=seq[rows] + 1448,
        keep=keep[rows],
        frame=frame[rows],
    )
    assert len(masked) == len(alone) == int(rows.sum())
    got = carried(masked)
    assert got["traces"][0]["level"] is not None
    if limit is not None:
        assert got["traces"][0]["n"] < len(alone)
    assert got == carried(alone)
    # The same in time order, where the masked rows are read where they lie, unsorted.
    o = np.argsort(t, kind="stable")
    t, seq, keep, frame, rows = t[o], seq[o], keep[o], frame[o], rows[o]
    in_order = Trace("data", Kind.SEGMENTS, t, seq, seq + 1448, keep=keep, frame=frame, rows=rows)
    assert carried(in_order) == carried(in_order.whole())


@pytest.mark.parametrize("limit", [None, 120_000, 30_000])
def test_a_plot_encoded_beforehand_makes_the_same_page(
    monkeypatch: pytest.MonkeyPatch, limit: int | None
) -> None:
    # A plot encoded before the page is made (its tables let go meanwhile) gives the page the
    # plot itself gives: every point, or over a size limit the same halvings of the same
    # traces, beside a plot that is drawn as the page is made.
    monkeypatch.setattr(report_html, "PIECE", 1000)
    rng = np.random.default_rng(8)
    t, seq, frame = stepping_back(rng, 40_000)
    keep = rng.random(t.size) < 0.001
    rows = rng.random(t.size) < 0.9
    tsg = Plot(
        "TSG",
        "time (s)",
        "seq",
        (
            Trace("data", Kind.SEGMENTS, t, seq, seq + 1448, keep=keep, frame=frame, rows=rows),
            Trace("ACK", Kind.STEP, np.sort(t), seq - 5000),
        ),
    )
    delay = Plot("delay", "time (s)", "ms", (Trace("owd", Kind.LINE, np.sort(t), 20 + t / 7),))
    budget = Budget() if limit is None else Budget(max_bytes=limit)

    def page(plots: tuple[Plot | Encoded, ...]) -> str:
        view = ConnectionView("c", (), plots)
        return render(Report("r", Table((), ()), Table((), ()), (view,), (), "0"), budget)

    drawn = page((tsg, delay))
    if limit is not None:
        assert "carried thinned" in drawn
    early = report_html.encode(tsg, budget)
    assert page((early, delay)) == drawn
    assert page((early, report_html.encode(delay, budget))) == drawn
    # Under a limit, the encodings made ahead that exceed it alone hold no text: the page,
    # the same, never carries them. The whole TSG's data marks exceed even 120 kB.
    texts = [c["b64"] for level in early.levels for _, cols in level.values() for c in cols]
    withheld = [t for t in texts if isinstance(t, report_html._Withheld)]
    assert bool(withheld) is (limit is not None)
    assert all(str(t).startswith("withheld:") for t in withheld)


def test_over_the_size_limit_big_traces_are_carried_thinned_keeping_marks() -> None:
    rng = np.random.default_rng(2)
    n = 400_000
    t = np.sort(rng.uniform(0, 100, n))  # noisy gaps: about two bytes a point compressed
    seq = np.cumsum(rng.integers(1, 3000, n))
    keep = np.zeros(n, bool)
    keep[::997] = True
    trace = Trace("data", Kind.SEGMENTS, t, seq, y_end=seq + 1, keep=keep)
    view = ConnectionView("c", (), (Plot("p", "time (s)", "seq", (trace,)),))
    report = Report("r", Table((), ()), Table((), ()), (view,), (), "0")
    whole = embedded_data(render(report))["plots"][0]
    assert whole["traces"][0]["n"] == n
    limit = 300_000
    assert sum(len(c["b64"]) for c in whole["columns"]) > limit
    page = render(report, Budget(max_bytes=limit))
    plot = embedded_data(page)["plots"][0]
    out = plot["traces"][0]
    assert sum(len(c["b64"]) for c in plot["columns"]) <= limit
    assert out["n_raw"] == n and out["n"] < n
    drawn = set(arrays(plot, out)["y"].astype(np.int64).tolist())
    assert set(seq[keep].tolist()) <= drawn  # every kept point is still there
    assert "carried thinned" in page and "data" in page.split("carried thinned")[1]
    assert DRAW_COST[Kind.SEGMENTS] == 10


def test_each_halving_is_m4_of_the_one_before() -> None:
    # A trace thinned several times carries, at its last count, M4's choice among the points
    # of the count before, and so on up to M4's of every point: decimate, run on copies of
    # each halving's points, gives the same points.
    rng = np.random.default_rng(5)
    n = 200_000
    t = np.sort(rng.uniform(0, 100, n))
    seq = np.cumsum(rng.integers(1, 3000, n))
    noisy = seq + rng.integers(-40_000, 40_000, n)  # extremes that move between halvings
    keep = np.zeros(n, bool)
    keep[::4_999] = True
    trace = Trace("data", Kind.SEGMENTS, t, noisy, y_end=noisy + 1, keep=keep)
    view = ConnectionView("c", (), (Plot("p", "time (s)", "seq", (trace,)),))
    report = Report("r", Table((), ()), Table((), ()), (view,), (), "0")
    plot = embedded_data(render(report, Budget(max_bytes=60_000)))["plots"][0]
    out = plot["traces"][0]
    carried = arrays(plot, out)
    at, target, chain = np.arange(n), n // 2, {}
    while target > report_html.FEWEST_THINNED // 2:
        at = at[decimate(t[at], noisy[at], max(target, 4), keep[at], noisy[at] + 1)]
        chain[len(at)] = at
        target //= 2
    assert out["n"] < n // 8  # thinned three times or more
    assert out["n"] in chain
    assert carried["x"].tolist() == pytest.approx(t[chain[out["n"]]].tolist(), abs=1e-6)
    assert carried["y"].astype(np.int64).tolist() == noisy[chain[out["n"]]].tolist()


def test_after_plot_is_called_once_each_plot_is_encoded() -> None:
    report = small_report()
    calls: list[int] = []
    page = render(report, after_plot=lambda: calls.append(1))
    # The sender's TSG and RTT plots and the receiver's TSG: the page is the same.
    assert len(calls) == 3
    assert page == render(report)


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
    sections = page.count('<details class="connection"')
    assert sections == 3 and page.count('class="connection" id="conn-0" open>') == 1
    assert page.count('id="conn-1" open>') == 1 and page.count('id="conn-2">') == 1


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
    out = embedded_data(render(report))["plots"][0]
    rtt_out, empty_out = out["traces"]
    np.testing.assert_allclose(arrays(out, rtt_out)["y"], rtt)  # NaN stays a gap, not a zero
    assert empty_out["n"] == 0 and len(arrays(out, empty_out)["x"]) == 0


def test_a_finding_row_names_its_connection_and_time_range() -> None:
    base = small_report()
    findings = Table(
        ("#", "finding"), ((1, "x"), (2, "y")), links=(0, None), ranges=((0.2, 0.4), None)
    )
    report = Report(base.title, base.overview, findings, base.connections, base.inputs, "0")
    page = render(report)
    assert '<tr class="zoom" data-conn="0" data-range="0.2,0.4">' in page
    assert page.count('class="zoom"') == 1  # a finding of no drawn connection zooms nowhere


def test_frames_survive_encoding_aligned_with_their_points() -> None:
    # Frame numbers of interleaved data and ACKs (gaps of 1 or 2), times out of order in one
    # place, and a limit that thins the trace: each carried point keeps its own frame.
    rng = np.random.default_rng(11)
    n = 300_000
    t = np.sort(rng.uniform(0, 60, n))
    t[500:510] = t[500:510][::-1]
    seq = np.cumsum(rng.integers(1, 3000, n))
    frames = (np.cumsum(rng.integers(1, 3, n)) + 3).astype(np.uint32)
    frames[7] = 0  # a point with no frame known
    keep = np.zeros(n, bool)
    keep[::991] = True
    bars = Trace("data", Kind.SEGMENTS, t, seq, y_end=seq + 1448, keep=keep, frame=frames)
    line = Trace("rate", Kind.LINE, t, seq / 1e3)
    view = ConnectionView("c", (), (Plot("p", "time (s)", "seq", (bars, line)),))
    report = Report("r", Table((), ()), Table((), ()), (view,), (), "0")
    by_seq = dict(zip(seq.tolist(), frames.tolist(), strict=True))
    for budget in (Budget(), Budget(max_bytes=600_000)):
        plot = embedded_data(render(report, budget))["plots"][0]
        out, rate = plot["traces"]
        assert rate["frame"] is None  # a line's points are not packets
        got = decode(plot["columns"][out["frame"]]).astype(np.int64)
        ys = arrays(plot, out)["y"].astype(np.int64)
        assert len(got) == len(ys) == out["n"]
        assert got.tolist() == [by_seq[y] for y in ys.tolist()]
        assert set(frames[keep].tolist()) <= set(got.tolist())
    assert out["n"] < n  # the second page carried the trace thinned, frames with it


def test_a_frame_array_must_match_its_points() -> None:
    t = np.arange(3.0)
    with pytest.raises(ReportError, match="frame"):
        Trace("a", Kind.MARKERS, t, t, frame=np.array([1, 2], np.uint32))
    with pytest.raises(ReportError, match="frame"):
        Trace("a", Kind.MARKERS, t, t, frame=np.array([1.0, 2.0, 3.0]))
    with pytest.raises(ReportError, match="frame"):
        Trace("a", Kind.MARKERS, t, t, frame=np.array([1, -1, 3]))


def tshark_segments(path: Path) -> dict[str, np.ndarray]:
    """The data segments of a capture as tshark reads them: frame numbers, times, relative
    sequence numbers and payload lengths."""
    fields = ("frame.number", "frame.time_relative", "tcp.seq", "tcp.len")
    out = subprocess.run(
        ["tshark", "-r", str(path), "-Y", "tcp.len > 0", "-T", "fields", "-E", "separator=,"]
        + [arg for field in fields for arg in ("-e", field)],
        check=True,
        capture_output=True,
        text=True,
    ).stdout
    rows = [line.split(",") for line in out.splitlines()]
    return {
        "frame": np.array([int(r[0]) for r in rows], np.uint32),
        "t_s": np.array([float(r[1]) for r in rows]),
        "seq": np.array([int(r[2]) for r in rows], np.int64),
        "len": np.array([int(r[3]) for r in rows], np.int64),
    }


@pytest.mark.skipif(shutil.which("tshark") is None, reason="needs tshark")
def test_columns_encoded_in_pieces_decode_to_the_capture_s_values(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A capture's columns, encoded in one piece and in many (none of them aligned to
    anything), decode to tshark's values."""
    capture = ROOT / "fixtures" / "captures" / "slow_start_overrun" / "sender.pcap"
    seg = tshark_segments(capture)
    n = len(seg["t_s"])
    assert n > 6000
    seq, end = seg["seq"], seg["seq"] + seg["len"]
    plot = Plot(
        "TSG",
        "time (s)",
        "sequence (bytes)",
        (
            # Integers, and a bar's top carried as its height.
            Trace("data", Kind.SEGMENTS, seg["t_s"], seq, y_end=end, frame=seg["frame"]),
            # kB to the byte: fixed-point with 3 digits.
            Trace("kB", Kind.LINE, seg["t_s"], seq / 1e3),
            # Not fixed-point at any digits: carried as f4.
            Trace("rate", Kind.LINE, seg["t_s"], seg["len"] / (seg["t_s"] + np.pi)),
        ),
    )
    view = ConnectionView("c", (), (plot,))
    report = replace(small_report(), connections=(view,), overview_plot=None)
    for piece in (report_html.PIECE, 997):
        monkeypatch.setattr(report_html, "PIECE", piece)
        data = embedded_data(render(report))["plots"][0]
        assert {c["piece"] for c in data["columns"]} == {piece}
        traces = {t["name"]: t for t in data["traces"]}
        bars = arrays(data, traces["data"])
        # Times to the page's microsecond, every other value exactly.
        assert np.abs(bars["x"] - seg["t_s"]).max() <= 0.5e-6 + 1e-9
        assert np.array_equal(bars["y"], seq) and np.array_equal(bars["y_end"], end)
        frames = decode(data["columns"][traces["data"]["frame"]])
        assert np.array_equal(frames, seg["frame"])
        assert np.allclose(arrays(data, traces["kB"])["y"], seq / 1e3, rtol=1e-12, atol=0)
        rate = seg["len"] / (seg["t_s"] + np.pi)
        assert np.array_equal(arrays(data, traces["rate"])["y"], rate.astype(np.float32))


@settings(max_examples=150, deadline=None)
@given(
    st.lists(st.booleans(), min_size=0, max_size=200),
    st.integers(1, 7),
    st.data(),
)
def test_a_marked_column_reads_as_the_marked_rows_copied_out(
    marks: list[bool], piece: int, data: st.DataObject
) -> None:
    # The encoder reads every point of a masked trace in order through the mask alone: any run
    # it asks for (a piece's, or one that starts or stops inside a piece) holds the values the
    # marked rows copied out hold there. The pieces are a few rows here, so runs cross many.
    mask = np.array(marks, dtype=np.bool_)
    values = np.arange(len(mask), dtype=np.float64) * 1.5
    alone = values[mask]
    old = report_html.PIECE
    report_html.PIECE = piece
    try:
        starts = report_html._piece_starts(mask)
        np.testing.assert_array_equal(starts, np.flatnonzero(mask)[::piece])
        marked = report_html._Marked(values, mask, len(alone), starts)
        assert len(marked) == len(alone)
        for _ in range(5):
            a = data.draw(st.integers(0, len(alone)))
            b = data.draw(st.integers(a, len(alone) + 3))
            np.testing.assert_array_equal(marked[a:b], alone[a:b])
    finally:
        report_html.PIECE = old


@settings(max_examples=200, deadline=None)
@given(
    st.lists(st.sampled_from([0.0, 1.0, 2.0, 2.0, 3.0, float("nan")]), max_size=30),
    st.data(),
)
def test_a_column_never_steps_back_at_its_marked_rows_as_their_copy_does(
    xs: list[float], data: st.DataObject
) -> None:
    # Whether the marked rows are in time order, read in place, is what numpy says of their
    # copy: a NaN is out of order, as np.all(x[1:] >= x[:-1]) finds it.
    x = np.array(xs, dtype=np.float64)
    rows = np.array(data.draw(st.lists(st.booleans(), min_size=len(x), max_size=len(x))), bool)
    copy = x[rows]
    assert never_back(x, rows) is bool(np.all(copy[1:] >= copy[:-1]))
    assert never_back(x) is bool(np.all(x[1:] >= x[:-1]))
