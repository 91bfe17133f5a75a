"""The notebook API (`tracekit.open`) and docs/notebook.ipynb, on the bundled lab pair: counts
come from the lab's truth.json and from tshark."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

import tracekit
from tracekit.errors import TracekitError

ROOT = Path(__file__).resolve().parent.parent
PAIR = ROOT / "fixtures" / "captures" / "slow_start_overrun"
TRUTH = json.loads((PAIR / "truth.json").read_text())


def _tshark_count(path: Path, display_filter: str) -> int:
    out = subprocess.run(
        ["tshark", "-r", str(path), "-Y", display_filter, "-T", "fields", "-e", "frame.number"],
        check=True,
        capture_output=True,
        text=True,
    ).stdout
    return len(out.split())


@pytest.fixture(scope="module")
def run() -> tracekit.Run:
    return tracekit.open(PAIR / "sender.pcap", receiver=PAIR / "receiver.pcap")


def _sender_port() -> int:
    return int(TRUTH["flow"]["sender"].rsplit(":", 1)[1])


def test_import_tracekit_stays_cheap() -> None:
    code = "import sys, tracekit; print('pandas' in sys.modules, 'tracekit.api' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.split() == ["False", "False"]


def test_tables(run: tracekit.Run) -> None:
    (conn,) = run.connections.itertuples()
    assert f"{conn.a}" == TRUTH["flow"]["sender"] and f"{conn.b}" == TRUTH["flow"]["receiver"]
    assert set(run.findings["kind"]) >= set(TRUTH["labels"]) - {"network_drops"}
    segments = run.series(0, "a2b").segments
    sent = _tshark_count(PAIR / "sender.pcap", f"tcp.len > 0 && tcp.srcport == {_sender_port()}")
    assert len(segments) == sent
    resent = segments["kind"].astype(str).str.contains("retransmission").sum()
    assert resent == TRUTH["retransmissions"]["segments"]
    received = run.series(0, "a2b", vantage="receiver").segments
    got = _tshark_count(PAIR / "receiver.pcap", f"tcp.len > 0 && tcp.srcport == {_sender_port()}")
    assert len(received) == got
    fates = run.transmissions["fate"].value_counts()
    assert fates["network_drop"] == TRUTH["drops"]["network"]
    assert fates.get("receiver_drop", 0) == TRUTH["drops"]["receiver"]
    assert len(run.delay) and (run.delay["owd_s"] > 0).all()
    # The tables are copies: a notebook may change them.
    segments.loc[0, "len"] = 0
    assert run.series(0, "a2b").segments.loc[0, "len"] > 0


def test_figure_is_the_report_plot(run: tracekit.Run) -> None:
    plot = run.plot(0, "tsg")
    fig = run.figure(0, "tsg")
    assert [t.name for t in fig.data] == [t.name for t in plot.traces]
    by_name = {t.name: t for t in fig.data}
    # Each segment bar is three points (bottom, top, gap): one bar per data segment.
    new = len(by_name["data"].x) // 3
    resent = len(by_name["retransmitted"].x) // 3
    sent = _tshark_count(PAIR / "sender.pcap", f"tcp.len > 0 && tcp.srcport == {_sender_port()}")
    assert new + resent == sent
    assert resent == TRUTH["retransmissions"]["segments"]
    assert by_name["ACK line"].line.shape == "hv"
    assert fig.layout.xaxis.title.text == plot.x_label
    merged = {t.name: t for t in run.figure(0, "merged").data}
    assert len(merged["network drop"].x) == TRUTH["drops"]["network"]


def test_figure_bands_a_finding_across_most_of_the_view(run: tracekit.Run) -> None:
    # The overrun's findings are places in the transfer: shaded from the axis to the top.
    overrun = run.figure(0, "tsg").layout.shapes
    assert len(overrun) >= 2 and all(s.y0 == 0 and s.y1 == 1 for s in overrun)
    # The lab's receiver drops ran through most of the transfer: their findings are bands a
    # few pixels high along the time axis, one row each.
    drops = ROOT / "fixtures" / "captures" / "receiver_drops"
    wide = tracekit.open(drops / "sender.pcap", receiver=drops / "receiver.pcap")
    shapes = wide.figure(0, "tsg").layout.shapes
    (lo, hi) = wide.plot(0, "tsg").x_range
    assert len(shapes) == 2
    for s in shapes:
        assert s.x1 - s.x0 >= 0.5 * (hi - lo)
    assert [(s.ysizemode, s.y0, s.y1) for s in shapes] == [("pixel", 0, 5), ("pixel", 6, 11)]


def test_bad_requests_are_bad_input(run: tracekit.Run) -> None:
    with pytest.raises(TracekitError, match="no connection 5"):
        run.series(5)
    with pytest.raises(TracekitError, match="unknown figure"):
        run.figure(0, "pie")
    alone = tracekit.open(PAIR / "sender.pcap")
    with pytest.raises(TracekitError, match="receiver"):
        _ = alone.transmissions
    with pytest.raises(TracekitError, match="receiver"):
        alone.figure(0, "merged")


def test_notebook_runs(monkeypatch: pytest.MonkeyPatch) -> None:
    notebook = json.loads((ROOT / "docs" / "notebook.ipynb").read_text())
    monkeypatch.chdir(ROOT)  # the notebook opens the fixtures by their path from the root
    namespace: dict[str, object] = {}
    cells = [c for c in notebook["cells"] if c["cell_type"] == "code"]
    assert cells
    for i, cell in enumerate(cells):
        exec(compile("".join(cell["source"]), f"notebook cell {i}", "exec"), namespace)
    tsg = namespace["tsg"]
    names = [t.name for t in tsg.data]  # type: ignore[attr-defined]
    for expected in ("data", "retransmitted", "ACK line", "window edge", "SACK"):
        assert expected in names
    fates = namespace["fates"]
    assert fates["network_drop"] == TRUTH["drops"]["network"]  # type: ignore[index]
