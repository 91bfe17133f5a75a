"""--connection, --from/--to and the Wireshark display filters, checked against tshark.

Every expected count is tshark's, read with a filter of our own (tcp.stream, frame numbers and
frame.time_relative), never tracekit's output pasted back.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
from click.testing import CliRunner
from tracekit.cli.main import cli

from tests.helpers.crafting import CLIENT, SERVER, tcp, write
from tests.helpers.independent import ROOT
from tracekit.analysis import Selection
from tracekit.pipeline import analyze_files

OVERRUN = ROOT / "fixtures" / "captures" / "slow_start_overrun" / "sender.pcap"
TRACEKIT = str(Path(sys.executable).parent / "tracekit")

pytestmark = pytest.mark.skipif(
    subprocess.run(["which", "tshark"], capture_output=True).returncode != 0,
    reason="needs tshark",
)


def tshark_frames(path: Path, display_filter: str) -> list[int]:
    """The frame numbers tshark's display filter selects."""
    out = subprocess.run(
        ["tshark", "-n", "-r", str(path), "-Y", display_filter, "-T", "fields", "-e",
         "frame.number"],
        check=True, capture_output=True, text=True,
    ).stdout  # fmt: skip
    return [int(x) for x in out.split()]


def run(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([TRACEKIT, *args], capture_output=True, text=True, timeout=300)


def run_in_process(*args: str) -> subprocess.CompletedProcess[str]:
    """As run(), through click's CliRunner: for checks of the message and the exit status,
    where the process adds nothing (each command is run as the console script above too)."""
    result = CliRunner().invoke(cli, list(args), prog_name="tracekit")
    return subprocess.CompletedProcess(args, result.exit_code, result.stdout, result.stderr)


def two_connections(tmp: Path) -> Path:
    """Two connections between the same hosts: 40000 -> 80 at 0 s, then 40001 -> 80 at 1 s."""
    packets = []
    for k, (t, port) in enumerate(((0.0, 40000), (1.0, 40001))):
        packets += [
            tcp(t, CLIENT, SERVER, port, 80, "S", 100, 0),
            tcp(t + 0.1, SERVER, CLIENT, 80, port, "SA", 900, 101),
            tcp(t + 0.2, CLIENT, SERVER, port, 80, "A", 101, 901, 300 * (k + 1)),
            tcp(t + 0.3, SERVER, CLIENT, 80, port, "A", 901, 101 + 300 * (k + 1)),
        ]
    packets.append(tcp(1.4, CLIENT, SERVER, 40001, 80, "A", 701, 901, 100))
    return write(tmp / "two.pcap", packets)


def test_a_findings_filter_selects_exactly_its_packets_in_tshark() -> None:
    analysis = analyze_files(OVERRUN)
    doc = analysis.to_dict()
    (finding,) = [f for f in doc["findings"] if f["kind"] == "slow_start_overrun"]
    ours = tshark_frames(OVERRUN, finding["wireshark_filter"])
    # Independently: tshark's own stream number (one connection in this capture) and the
    # finding's range, widened by under a microsecond (the capture's resolution).
    lo, hi = finding["start_s"] - 5e-7, finding["end_s"] + 5e-7
    theirs = tshark_frames(
        OVERRUN, f"tcp.stream == 0 && frame.time_relative >= {lo} && frame.time_relative <= {hi}"
    )
    assert len(theirs) > 100
    assert ours == theirs


def test_a_connections_filter_selects_that_connection_only(tmp_path: Path) -> None:
    path = two_connections(tmp_path)
    doc = analyze_files(path).to_dict()
    for conn in doc["connections"]:
        ours = tshark_frames(path, conn["wireshark_filter"])
        port = 40000 + conn["conn"]
        assert ours == tshark_frames(path, f"tcp.port == {port}")


@pytest.mark.parametrize(("lo", "hi"), [(0.25, 0.3), (0.0, 0.1), (1.5, 2.0)])
def test_a_time_window_keeps_the_packets_tshark_counts_in_it(lo: float, hi: float) -> None:
    analysis = analyze_files(OVERRUN, selection=Selection(from_s=lo, to_s=hi))
    frames = analysis.sender.connections.packets.column("frame").to_pylist()
    expected = tshark_frames(OVERRUN, f"frame.time_relative >= {lo} && frame.time_relative <= {hi}")
    assert frames == expected
    # The series count from the capture's first packet still, not from the window's.
    t = analysis.sender.series.segments["t_s"]
    assert t.min() >= lo and t.max() <= hi


def test_tsg_window_exports_the_window_only(tmp_path: Path) -> None:
    done = run("tsg", str(OVERRUN), "--from", "0.25", "--to", "0.3", "--export", str(tmp_path))
    assert done.returncode == 0, done.stderr
    segments = (tmp_path / "conn0_a2b_segments.csv").read_text().splitlines()
    header = segments[0].split(",")
    frames = [int(row.split(",")[header.index("frame")]) for row in segments[1:]]
    data = tshark_frames(
        OVERRUN,
        "tcp.srcport == 56536 && frame.time_relative >= 0.25 && frame.time_relative <= 0.3",
    )
    assert frames == data


def test_connection_option_analyzes_that_connection_only(tmp_path: Path) -> None:
    path = two_connections(tmp_path)
    done = run("analyze", str(path), "--connection", "1", "--json")
    assert done.returncode == 0, done.stderr
    doc = json.loads(done.stdout)
    (conn,) = doc["connections"]
    assert conn["conn"] == 1
    assert conn["a"] == f"{CLIENT}:40001"
    # tshark numbers these two connections as tracekit does; its stream 1 is the second.
    assert conn["packets_a2b"] + conn["packets_b2a"] == len(tshark_frames(path, "tcp.stream == 1"))
    assert all(f["conn"] == 1 for f in doc["findings"])


@pytest.mark.parametrize(
    ("args", "option"),
    [
        (("--connection", "7"), "--connection"),
        (("--connection", "-1"), "--connection"),
        (("--from", "-0.5"), "--from"),
        (("--to", "-1"), "--to"),
        (("--from", "0.5", "--to", "0.5"), "--from"),
        (("--from", "nan"), "--from"),
    ],
)
@pytest.mark.parametrize("command", ["analyze", "report", "tsg"])
def test_bad_values_are_one_line_and_exit_2(
    command: str, args: tuple[str, ...], option: str, tmp_path: Path
) -> None:
    out = {"analyze": [], "report": ["-o", str(tmp_path / "r.html")],
           "tsg": ["--export", str(tmp_path / "t")]}[command]  # fmt: skip
    done = run_in_process(command, str(OVERRUN), *args, *out)
    assert done.returncode == 2, done.stderr
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1 and option in lines[0], done.stderr
    assert not (tmp_path / "r.html").exists()
